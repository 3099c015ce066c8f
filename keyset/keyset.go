package keyset

// Published, rotating keys: a source's keys_url names a JSON
// document of its sender's active keys. Each source with one has a keyset that
// fetches the document at start and every keys_refresh, keeps the last good
// copy on disk under data_dir/keys/ (so a restart works while the URL is down),
// honours each key's not-before and expiry, and fetches early (at most once per
// keysEarlyEvery) when a delivery's signature matches no key in force. A fetch
// that fails is logged and counted and changes nothing: the keys already held
// keep verifying until they expire.
//
// The document (docs/sources.md, "Published keys"):
//
//	{"keys": [
//	  {"kid": "2026-05", "alg": "ed25519", "key": "whpk_...", "nbf": 1777593600, "exp": 1780272000},
//	  {"kid": "legacy", "alg": "hmac-sha256", "key": "whsec_..."}
//	]}
//
// kid: 1-128 printable ASCII, unique; alg: "ed25519" (key "whpk_...", for
// standard and svix sources: v1a) or "hmac-sha256" (key a secret in the
// source provider's format, as `secrets` takes it: "whsec_..." for standard);
// nbf, exp: optional unix seconds, the key verifies from nbf (inclusive) until
// exp (exclusive). Keys of another alg are skipped (and logged), so a sender
// can publish new kinds without breaking this receiver; any other mistake
// rejects the whole document and keeps the previous one.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"oncehook/config"
	"oncehook/providers"
)

// Limits and timings of keys_url fetches.
const (
	maxKeysDoc     = 1 << 20          // a document over 1 MiB is refused
	maxKeysInDoc   = 256              // keys per document
	maxKeysInForce = 8                // document keys in force at once, now or later
	keysFetchLimit = 10 * time.Second // one fetch, connect to last byte
	keysRetryAfter = 30 * time.Second // after a failed periodic fetch (or keys_refresh if shorter)
	keysEarlyEvery = 10 * time.Second // at most one early fetch per this long, per source
	keysEarlyWait  = 3 * time.Second  // how long a delivery waits for its early fetch
	maxKidLen      = 128
)

// Key algorithms in a keys document (Key.Alg).
const (
	AlgEd25519    = "ed25519"
	AlgHMACSHA256 = "hmac-sha256"
)

var errNoKeyInForce = fmt.Errorf("%w: no key in force (keys_url)", providers.ErrBadSignature)

// Document is the published document, as read.
type Document struct {
	Keys []Key `json:"keys"`
}

// Key is one key of a Document.
type Key struct {
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Key string `json:"key"`
	Nbf int64  `json:"nbf"` // unix seconds; 0: valid from the start
	Exp int64  `json:"exp"` // unix seconds; 0: no expiry
}

// inForce reports whether k verifies at unix second now.
func (k *Key) inForce(now int64) bool {
	return (k.Nbf == 0 || k.Nbf <= now) && (k.Exp == 0 || now < k.Exp)
}

// parseKeysDoc reads and checks a keys document for a source of provider,
// whose verifiers are built from base with the keys as secrets (an hmac
// source's table, a twilio source's kind of body), at unix second now. It
// returns the usable keys and the kids skipped for an unknown alg. Errors
// never quote key material.
func parseKeysDoc(b []byte, provider string, base providers.Options, now int64) (keys []Key, skipped []string, err error) {
	var doc Document
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("keys document is not JSON of the expected shape: %w", err)
	}
	if doc.Keys == nil {
		return nil, nil, errors.New(`keys document has no "keys" array`)
	}
	if len(doc.Keys) > maxKeysInDoc {
		return nil, nil, fmt.Errorf("keys document has %d keys, over %d", len(doc.Keys), maxKeysInDoc)
	}
	scheme, ok := providers.Lookup(provider)
	if !ok {
		return nil, nil, fmt.Errorf("unknown provider %q", provider)
	}
	seen := make(map[string]bool, len(doc.Keys))
	for i, k := range doc.Keys {
		if !validKid(k.Kid) {
			return nil, nil, fmt.Errorf("key #%d: kid must be 1 to %d printable ASCII bytes", i+1, maxKidLen)
		}
		if seen[k.Kid] {
			return nil, nil, fmt.Errorf("key %q: kid given twice", k.Kid)
		}
		seen[k.Kid] = true
		switch k.Alg {
		case AlgEd25519:
			if provider != "standard" && provider != "svix" {
				return nil, nil, fmt.Errorf("key %q: ed25519 keys are for standard and svix sources only", k.Kid)
			}
			if !strings.HasPrefix(k.Key, providers.PublicKeyPrefix) {
				return nil, nil, fmt.Errorf("key %q: an ed25519 key is whpk_ followed by base64", k.Kid)
			}
		case AlgHMACSHA256:
			if strings.HasPrefix(k.Key, providers.PublicKeyPrefix) || strings.HasPrefix(k.Key, providers.PrivateKeyPrefix) {
				return nil, nil, fmt.Errorf("key %q: alg hmac-sha256 with an ed25519 key", k.Kid)
			}
		default:
			skipped = append(skipped, k.Kid)
			continue
		}
		if k.Key == "" {
			return nil, nil, fmt.Errorf("key %q: no key material", k.Kid)
		}
		if k.Nbf < 0 || k.Exp < 0 || k.Nbf != 0 && k.Exp != 0 && k.Exp <= k.Nbf {
			return nil, nil, fmt.Errorf("key %q: want 0 <= nbf < exp (unix seconds)", k.Kid)
		}
		// The scheme decides whether the material is usable (a whsec_ that is
		// not base64, a public key of the wrong length); its errors never
		// quote the key.
		o := base
		o.Secrets = [][]byte{[]byte(k.Key)}
		if _, err := scheme.NewVerifier(o); err != nil {
			return nil, nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		keys = append(keys, k)
	}
	if n := mostInForce(keys, now); n > maxKeysInForce {
		return nil, nil, fmt.Errorf("keys document puts %d keys in force at once, over %d", n, maxKeysInForce)
	}
	return keys, skipped, nil
}

// mostInForce is the largest number of keys in force together at any second
// from now on. A delivery whose signature matches none is checked against
// every key in force (a Standard Webhooks signature names no key), so this
// bounds what a forged delivery costs: each v1a entry is one ed25519
// verification per key, each over the whole body. Keys already expired do
// not count; the count can only fall as time passes, so a document accepted
// once stays within the bound when read back from the cache later.
func mostInForce(keys []Key, now int64) int {
	most := 0
	count := func(t int64) {
		n := 0
		for i := range keys {
			if keys[i].inForce(t) {
				n++
			}
		}
		most = max(most, n)
	}
	count(now)
	for i := range keys {
		if keys[i].Nbf > now {
			count(keys[i].Nbf)
		}
	}
	return most
}

func validKid(s string) bool {
	if s == "" || len(s) > maxKidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// keysFetchURLOK is the fetch policy, applied to the configured URL and to
// every redirect: https, or http to a loopback host.
func keysFetchURLOK(u *url.URL) bool {
	return u.Scheme == "https" || u.Scheme == "http" && config.IsLoopbackHost(u.Hostname())
}

// safeURL is a URL for logs: scheme, host and path, without user info or
// query (either may carry a credential).
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// builtVerifier is a source's verifier for the keys in force between from and
// until (unix seconds, until exclusive). v is nil when no key is in force.
type builtVerifier struct {
	v           providers.Verifier
	from, until int64
	active      int // document keys in force
}

// keyset is one keys_url source's keys and its fetcher.
type sourceKeys struct {
	source string
	url    string
	cache  string // data_dir/keys/<source>.json
	client *http.Client
	log    *slog.Logger
	m      Metrics
	// userAgent is sent with every fetch ("oncehook/<version>").
	userAgent string

	earlyEvery time.Duration
	earlyWait  time.Duration

	mu       sync.Mutex // guards the fields below
	provider string
	scheme   providers.Scheme
	opts     providers.Options // the source's static secrets, tolerance, hmac spec
	refresh  time.Duration
	// refreshed wakes run when a reload changed refresh, so that the new
	// interval counts from the last fetch instead of after the old one.
	refreshed chan struct{}
	keys      []Key  // the document's usable keys (fetched or cached)
	raw       []byte // the document they came from
	lastEarly time.Time
	inflight  bool

	built   atomic.Pointer[builtVerifier] // nil: rebuild on next use
	fetchMu sync.Mutex                    // one fetch at a time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// keyedVerifier verifies a keys_url source's deliveries with the keys in
// force at the delivery's time, fetching early once when none matches.
type keyedVerifier struct{ ks *sourceKeys }

// It passes on every optional ability a scheme's verifier has (the intake
// asks for them by type assertion): without them, a keys_url source would
// quietly lose what the same source with secrets has, the twilio replay
// guard's canonical form above all.
var (
	_ providers.Verifier     = keyedVerifier{}
	_ providers.Handshaker   = keyedVerifier{}
	_ providers.Noticer      = keyedVerifier{}
	_ providers.ReplayBodier = keyedVerifier{}
)

// errNoCanonicalForm: the scheme signs the raw body, whose hash the replay
// guard takes then.
var errNoCanonicalForm = errors.New("keyset: the scheme signs the raw body")

func (kv keyedVerifier) Verify(r *providers.Request) error {
	err := kv.ks.verify(r)
	if err == nil || !errors.Is(err, providers.ErrBadSignature) {
		return err
	}
	// No key in force matched: the sender may already sign with a key
	// published after our last fetch.
	if kv.ks.fetchEarly() {
		return kv.ks.verify(r)
	}
	return err
}

// Handshake delegates to the current verifier when its scheme has one.
func (kv keyedVerifier) Handshake(r *providers.Request) (int, []byte, string, bool) {
	if h, ok := kv.ks.current(r.Now).v.(providers.Handshaker); ok {
		return h.Handshake(r)
	}
	return 0, nil, "", false
}

// Notice delegates to the current verifier when its scheme has one.
func (kv keyedVerifier) Notice(r *providers.Request) (string, []any) {
	if n, ok := kv.ks.current(r.Now).v.(providers.Noticer); ok {
		return n.Notice(r)
	}
	return "", nil
}

// WriteReplayBody delegates to the current verifier when its scheme signs
// a canonical form rather than the raw bytes; otherwise it fails, and the
// replay guard hashes the raw body, as for a source with secrets.
func (kv keyedVerifier) WriteReplayBody(h hash.Hash, r *providers.Request) error {
	if rb, ok := kv.ks.current(r.Now).v.(providers.ReplayBodier); ok {
		return rb.WriteReplayBody(h, r)
	}
	return errNoCanonicalForm
}

func (ks *sourceKeys) verify(r *providers.Request) error {
	b := ks.current(r.Now)
	if b.v == nil {
		return errNoKeyInForce
	}
	return b.v.Verify(r)
}

// current returns the verifier for the keys in force at now, rebuilding it
// when now has crossed a key's nbf or exp or the keys changed.
func (ks *sourceKeys) current(now time.Time) *builtVerifier {
	sec := now.Unix()
	if b := ks.built.Load(); b != nil && sec >= b.from && sec < b.until {
		return b
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if b := ks.built.Load(); b != nil && sec >= b.from && sec < b.until {
		return b
	}
	b := &builtVerifier{from: minUnix, until: maxUnix}
	secrets := slices.Clone(ks.opts.Secrets)
	for i := range ks.keys {
		k := &ks.keys[i]
		for _, t := range []int64{k.Nbf, k.Exp} {
			switch {
			case t == 0:
			case t <= sec:
				b.from = max(b.from, t)
			default:
				b.until = min(b.until, t)
			}
		}
		if k.inForce(sec) {
			secrets = append(secrets, []byte(k.Key))
			b.active++
		}
	}
	if len(secrets) > 0 && ks.scheme != nil {
		o := ks.opts
		o.Secrets = secrets
		v, err := ks.scheme.NewVerifier(o)
		if err != nil {
			// parseKeysDoc checked each key and config the static secrets.
			ks.log.Error("keys_url: cannot build a verifier; refusing deliveries", "source", ks.source, "err", err)
		} else {
			b.v = v
		}
	}
	ks.built.Store(b)
	ks.m.Active(ks.source, b.active)
	return b
}

const (
	minUnix = -1 << 62
	maxUnix = 1 << 62
)

// configure sets what the source's config says (on start and every reload).
func (ks *sourceKeys) configure(s *config.Source) error {
	scheme, ok := providers.Lookup(s.Provider)
	if !ok {
		return fmt.Errorf("unknown provider %q", s.Provider)
	}
	// The static secrets, tolerance and hmac table, as the source's own
	// verifier is built from them (intake.CompileSource).
	o := s.VerifierOptions()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if ks.provider != "" && ks.provider != s.Provider {
		// The held keys were checked for the old provider.
		ks.keys, ks.raw = nil, nil
	}
	ks.provider, ks.scheme, ks.opts = s.Provider, scheme, o
	if r, prev := time.Duration(s.KeysRefresh), ks.refresh; r != prev {
		ks.refresh = r
		if prev != 0 { // not the first configure, before run starts
			select {
			case ks.refreshed <- struct{}{}:
			default:
			}
		}
	}
	ks.built.Store(nil)
	return nil
}

// fetchEarly fetches the document now unless an early fetch ran less than
// earlyEvery ago or one is running, and waits up to earlyWait for it. It
// reports whether the keys changed.
func (ks *sourceKeys) fetchEarly() bool {
	ks.mu.Lock()
	if ks.inflight || (!ks.lastEarly.IsZero() && time.Since(ks.lastEarly) < ks.earlyEvery) || ks.ctx.Err() != nil {
		ks.mu.Unlock()
		return false
	}
	ks.inflight, ks.lastEarly = true, time.Now()
	ks.mu.Unlock()
	done := make(chan bool, 1)
	ks.wg.Add(1)
	go func() {
		defer ks.wg.Done()
		changed, _ := ks.fetch(ks.ctx, "early")
		ks.mu.Lock()
		ks.inflight = false
		ks.mu.Unlock()
		done <- changed
	}()
	t := time.NewTimer(ks.earlyWait)
	defer t.Stop()
	select {
	case changed := <-done:
		return changed
	case <-t.C:
		return false
	}
}

// fetch gets, checks and installs the document, and caches it on disk. It
// reports whether the keys changed. A failure is logged and counted, and
// leaves the keys as they were.
func (ks *sourceKeys) fetch(ctx context.Context, why string) (changed bool, err error) {
	ks.fetchMu.Lock()
	defer ks.fetchMu.Unlock()
	raw, err := ks.get(ctx)
	var keys []Key
	var skipped []string
	if err == nil {
		ks.mu.Lock()
		provider, opts := ks.provider, ks.opts
		ks.mu.Unlock()
		keys, skipped, err = parseKeysDoc(raw, provider, opts, time.Now().Unix())
	}
	if err != nil {
		ks.m.FetchFailure(ks.source)
		ks.log.Warn("keys_url fetch failed; keeping the keys held", "source", ks.source, "url", safeURL(ks.url), "why", why, "err", err)
		return false, err
	}
	ks.mu.Lock()
	changed = !bytes.Equal(raw, ks.raw)
	if changed {
		ks.keys, ks.raw = keys, raw
		ks.built.Store(nil)
	}
	ks.mu.Unlock()
	if changed {
		ks.log.Info("keys_url fetched", "source", ks.source, "why", why, "kids", kids(keys), "skipped_unknown_alg", skipped)
		if err := ks.saveCache(raw); err != nil {
			ks.log.Warn("keys_url: cannot write the cache; a restart while the URL is down will have no keys", "source", ks.source, "err", err)
		}
	}
	return changed, nil
}

func kids(keys []Key) []string {
	out := make([]string, len(keys))
	for i := range keys {
		out[i] = keys[i].Kid
	}
	return out
}

// get downloads the document: 200 only, at most maxKeysDoc bytes, within
// keysFetchLimit.
func (ks *sourceKeys) get(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, keysFetchLimit)
	defer cancel()
	ctx = withKeysDialPolicy(ctx, ks.url)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ks.url, nil)
	if err != nil {
		return nil, errors.New("bad keys_url")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", ks.userAgent)
	resp, err := ks.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may carry a credential
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxKeysDoc+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(b) > maxKeysDoc {
		return nil, fmt.Errorf("document over %d bytes", maxKeysDoc)
	}
	return b, nil
}

// keysCache is the on-disk copy of the last good document.
type keysCache struct {
	URL       string          `json:"url"`
	FetchedAt time.Time       `json:"fetched_at"`
	Document  json.RawMessage `json:"document"`
}

func (ks *sourceKeys) saveCache(raw []byte) error {
	b, err := json.Marshal(keysCache{URL: ks.url, FetchedAt: time.Now().UTC(), Document: raw})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(ks.cache), 0o700); err != nil {
		return err
	}
	tmp := ks.cache + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, ks.cache)
}

// loadCache installs the cached document, if there is one for this URL. It
// reports whether keys were loaded.
func (ks *sourceKeys) loadCache() bool {
	b, err := os.ReadFile(ks.cache)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			ks.log.Warn("keys_url: cannot read the cache", "source", ks.source, "err", err)
		}
		return false
	}
	var c keysCache
	if err := json.Unmarshal(b, &c); err != nil {
		ks.log.Warn("keys_url: cache unreadable; ignored", "source", ks.source, "err", err)
		return false
	}
	if c.URL != ks.url {
		ks.log.Info("keys_url: cache is for another URL; ignored", "source", ks.source)
		return false
	}
	ks.mu.Lock()
	provider, opts := ks.provider, ks.opts
	ks.mu.Unlock()
	keys, _, err := parseKeysDoc(c.Document, provider, opts, time.Now().Unix())
	if err != nil {
		ks.log.Warn("keys_url: cached document refused; ignored", "source", ks.source, "err", err)
		return false
	}
	ks.mu.Lock()
	ks.keys, ks.raw = keys, []byte(c.Document)
	ks.built.Store(nil)
	ks.mu.Unlock()
	ks.log.Info("keys_url: using the cached document", "source", ks.source, "fetched_at", c.FetchedAt, "kids", kids(keys))
	return true
}

// run refetches every keys_refresh (sooner after a failure) until stopped.
// first is the delay before the first fetch.
//
// It also wakes when a held key's nbf or exp passes, so that the count of
// keys in force (oncehook_keys_active) follows them without waiting for a
// delivery: an alert on it sees a key expire before deliveries fail.
func (ks *sourceKeys) run(first time.Duration) {
	defer ks.wg.Done()
	t := time.NewTimer(first)
	defer t.Stop()
	edge := time.NewTimer(time.Hour)
	defer edge.Stop()
	armEdge := func() {
		edge.Stop()
		if b := ks.current(time.Now()); b.until < maxUnix {
			edge.Reset(max(time.Until(time.Unix(b.until, 0)), 0))
		}
	}
	armEdge()
	last := time.Now() // of the last fetch, or of the start
	for {
		select {
		case <-ks.ctx.Done():
			return
		case <-ks.refreshed:
			ks.mu.Lock()
			next := ks.refresh - time.Since(last)
			ks.mu.Unlock()
			t.Reset(max(next, 0))
			continue
		case <-edge.C:
			armEdge()
			continue
		case <-t.C:
		}
		ks.mu.Lock()
		next := ks.refresh
		ks.mu.Unlock()
		_, err := ks.fetch(ks.ctx, "refresh")
		last = time.Now()
		if err != nil {
			next = min(next, keysRetryAfter)
		}
		t.Reset(next)
		armEdge()
	}
}

func (ks *sourceKeys) stop() {
	ks.cancel()
	ks.wg.Wait()
}

// Manager owns the keysets of a node's keys_url sources, across reloads.
type Manager struct {
	dir       string // data_dir/keys
	log       *slog.Logger
	m         Metrics
	client    *http.Client
	userAgent string

	mu   sync.Mutex
	sets map[string]*sourceKeys // by source name
}

// Metrics counts what the key sets see. Package metrics implements it over its
// collectors (oncehook_keys_fetch_failures_total, oncehook_keys_active).
type Metrics interface {
	// FetchFailure counts a failed fetch (network, status, size, bad
	// document) of source's keys_url.
	FetchFailure(source string)
	// Active reports how many of source's published keys are in force.
	Active(source string, n int)
}

// noMetrics counts nothing: a nil Metrics.
type noMetrics struct{}

func (noMetrics) FetchFailure(string) {}
func (noMetrics) Active(string, int)  {}

// Sources is what the key sets need from the intake's compiled sources
// (*intake.Set): whether a source is there, and a way to give it a verifier.
type Sources interface {
	// Has reports whether the set holds a source called name.
	Has(name string) bool
	// UseVerifier makes the source called name verify with v, and answer
	// handshakes with h (nil: none).
	UseVerifier(name string, v providers.Verifier, h providers.Handshaker)
}

// NewManager returns a Manager keeping its caches under dataDir/keys; m may
// be nil (nothing counted), version goes in the fetches' User-Agent
// ("oncehook/<version>").
func NewManager(dataDir string, log *slog.Logger, m Metrics, version string) *Manager {
	if m == nil {
		m = noMetrics{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client := newKeysClient() // the redirect policy: redirect.go
	return &Manager{dir: filepath.Join(dataDir, "keys"), log: log, m: m, client: client, userAgent: "oncehook/" + version,
		sets: map[string]*sourceKeys{}}
}

// Attach gives every keys_url source of set a keyedVerifier over its keyset:
// an existing one (same source and URL) is reconfigured, a new one loads its
// cache, and fetches at once (waiting for the fetch only when there is no
// cache). Keysets of sources that are gone or lost their keys_url stop.
func (km *Manager) Attach(set Sources, cfg *config.Config) error {
	km.mu.Lock()
	defer km.mu.Unlock()
	keep := map[string]bool{}
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		if s.KeysURL == "" || !set.Has(s.Name) {
			continue
		}
		u, err := url.Parse(s.KeysURL)
		if err != nil || !keysFetchURLOK(u) {
			return fmt.Errorf("source %s: keys_url must be https:// (http:// only to a loopback address)", s.Name)
		}
		keep[s.Name] = true
		ks := km.sets[s.Name]
		if ks != nil && ks.url != s.KeysURL {
			ks.stop()
			ks = nil
		}
		fresh := ks == nil
		if fresh {
			ks = &sourceKeys{source: s.Name, url: s.KeysURL, cache: filepath.Join(km.dir, s.Name+".json"),
				client: km.client, log: km.log, m: km.m, userAgent: km.userAgent, earlyEvery: keysEarlyEvery, earlyWait: keysEarlyWait,
				refreshed: make(chan struct{}, 1)}
			ks.ctx, ks.cancel = context.WithCancel(context.Background())
		}
		if err := ks.configure(s); err != nil {
			return fmt.Errorf("source %s: %w", s.Name, err)
		}
		if fresh {
			first := time.Duration(0)
			if !ks.loadCache() {
				// No cache: fetch before serving, so that the source can
				// verify from its first delivery; a failure is not fatal.
				first = ks.refresh
				if _, err := ks.fetch(ks.ctx, "start"); err != nil {
					first = min(first, keysRetryAfter) // as after any failed fetch
				}
			}
			ks.wg.Add(1)
			go ks.run(first)
			km.sets[s.Name] = ks
		}
		// The handshaker is the keyed verifier whatever keys are held now:
		// it answers with the keys in force at each request (none yet, at a
		// start whose first fetch failed: "not a handshake" until they come).
		kv := keyedVerifier{ks}
		set.UseVerifier(s.Name, kv, kv)
	}
	for name, ks := range km.sets {
		if !keep[name] {
			ks.stop()
			delete(km.sets, name)
		}
	}
	return nil
}

// Close stops every fetcher.
func (km *Manager) Close() {
	if km == nil {
		return
	}
	km.mu.Lock()
	defer km.mu.Unlock()
	for name, ks := range km.sets {
		ks.stop()
		delete(km.sets, name)
	}
}
