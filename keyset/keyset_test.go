package keyset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/config"
	"oncehook/providers"
)

// keysServer serves a keys document that the test changes, and can be
// taken down (503) and brought back.
type keysServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	doc  string
	down atomic.Bool
	hits atomic.Int64
}

func newKeysServer(t testing.TB, doc string) *keysServer {
	ks := &keysServer{doc: doc}
	ks.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ks.hits.Add(1)
		if ks.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		ks.mu.Lock()
		doc := ks.doc
		ks.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, doc)
	}))
	t.Cleanup(ks.srv.Close)
	return ks
}

func (ks *keysServer) set(doc string) {
	ks.mu.Lock()
	ks.doc = doc
	ks.mu.Unlock()
}

func (ks *keysServer) url() string { return ks.srv.URL + "/keys.json" }

func keysJSON(t testing.TB, keys ...Key) string {
	b, err := json.Marshal(Document{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func keyPair(t testing.TB) (priv, pub string) {
	priv, pub, err := providers.GenerateKeyPair("standard")
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func TestParseKeysDoc(t *testing.T) {
	_, pub := keyPair(t)
	whsec, _ := providers.GenerateSecret("standard")
	good := fmt.Sprintf(`{"keys":[
		{"kid":"a","alg":"ed25519","key":%q,"nbf":1700000000,"exp":1800000000,"use":"sig"},
		{"kid":"b","alg":"hmac-sha256","key":%q},
		{"kid":"c","alg":"es256","key":"whatever"}],"extra":true}`, pub, whsec)
	keys, skipped, err := parseKeysDoc([]byte(good), "standard", providers.Options{}, 1750000000)
	if err != nil || len(keys) != 2 || keys[0].Kid != "a" || keys[0].Exp != 1800000000 || len(skipped) != 1 || skipped[0] != "c" {
		t.Fatalf("good document: %+v %v %v", keys, skipped, err)
	}
	if keys, _, err := parseKeysDoc([]byte(`{"keys":[]}`), "standard", providers.Options{}, 1750000000); err != nil || len(keys) != 0 {
		t.Fatalf("empty key list: %v %v", keys, err)
	}
	bad := map[string]string{
		"not JSON":            `{"keys":`,
		"no keys array":       `{"jwks":[]}`,
		"keys not an array":   `{"keys":{}}`,
		"no kid":              fmt.Sprintf(`{"keys":[{"alg":"ed25519","key":%q}]}`, pub),
		"kid twice":           fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q},{"kid":"a","alg":"ed25519","key":%q}]}`, pub, pub),
		"ed25519 with whsec":  fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q}]}`, whsec),
		"hmac with whpk":      fmt.Sprintf(`{"keys":[{"kid":"a","alg":"hmac-sha256","key":%q}]}`, pub),
		"short public key":    `{"keys":[{"kid":"a","alg":"ed25519","key":"whpk_AAAA"}]}`,
		"bad whsec":           `{"keys":[{"kid":"a","alg":"hmac-sha256","key":"whsec_!!!"}]}`,
		"empty hmac key":      `{"keys":[{"kid":"a","alg":"hmac-sha256","key":""}]}`,
		"exp before nbf":      fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q,"nbf":20,"exp":10}]}`, pub),
		"nbf as a string":     fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q,"nbf":"2026-01-01"}]}`, pub),
		"kid with a newline":  fmt.Sprintf(`{"keys":[{"kid":"a\nb","alg":"ed25519","key":%q}]}`, pub),
		"too many keys":       `{"keys":[` + strings.Repeat(`{"kid":"x","alg":"none"},`, maxKeysInDoc) + `{"kid":"y","alg":"none"}]}`,
		"private key in hmac": `{"keys":[{"kid":"a","alg":"hmac-sha256","key":"whsk_AAAA"}]}`,
	}
	for name, doc := range bad {
		if _, _, err := parseKeysDoc([]byte(doc), "standard", providers.Options{}, 1750000000); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), strings.TrimPrefix(whsec, "whsec_")) || strings.Contains(err.Error(), strings.TrimPrefix(pub, "whpk_")) {
			t.Errorf("%s: error quotes key material: %v", name, err)
		}
	}
	// ed25519 keys only make sense for standard and svix.
	if _, _, err := parseKeysDoc([]byte(fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q}]}`, pub)), "stripe", providers.Options{}, 1750000000); err == nil {
		t.Error("an ed25519 key for a stripe source was accepted")
	}
	if keys, _, err := parseKeysDoc([]byte(`{"keys":[{"kid":"a","alg":"hmac-sha256","key":"whsec_stripe"}]}`), "stripe", providers.Options{}, 1750000000); err != nil || len(keys) != 1 {
		t.Errorf("a stripe hmac key: %v", err)
	}
	// An hmac source's keys are checked with its own table: the scheme
	// builds no verifier without one.
	hmacDoc := []byte(`{"keys":[{"kid":"a","alg":"hmac-sha256","key":"0123456789abcdef0123456789abcdef"}]}`)
	if keys, _, err := parseKeysDoc(hmacDoc, "hmac", providers.Options{HMAC: &providers.HMACSpec{Header: "X-Signature"}}, 1750000000); err != nil || len(keys) != 1 {
		t.Errorf("an hmac source's key: %v", err)
	}
}

// TestKeysInForceCap: a forged delivery is checked against every key in
// force, so a document may not put more than maxKeysInForce of them in force
// at one time, now or at a later key's nbf; keys already expired do not count.
func TestKeysInForceCap(t *testing.T) {
	const now = 1750000000
	_, pub := keyPair(t)
	doc := func(windows ...[2]int64) string {
		var b strings.Builder
		b.WriteString(`{"keys":[`)
		for i, w := range windows {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"kid":"k%d","alg":"ed25519","key":%q,"nbf":%d,"exp":%d}`, i, pub, w[0], w[1])
		}
		b.WriteString(`]}`)
		return b.String()
	}
	always := [2]int64{0, 0}
	expired := [2]int64{0, now - 1}
	later := [2]int64{now + 100, 0}
	repeat := func(w [2]int64, n int) [][2]int64 { return slices.Repeat([][2]int64{w}, n) }
	for _, tc := range []struct {
		name    string
		windows [][2]int64
		ok      bool
	}{
		{"the cap in force now", repeat(always, maxKeysInForce), true},
		{"one over the cap now", repeat(always, maxKeysInForce+1), false},
		{"expired keys do not count", append(repeat(always, maxKeysInForce), repeat(expired, 20)...), true},
		{"one over the cap at a later nbf", append(repeat(always, maxKeysInForce), later), false},
		{"a later key replaces one that expires first", append(repeat(always, maxKeysInForce-1), [2]int64{0, now + 100}, later), true},
		{"later keys over the cap together", repeat(later, maxKeysInForce+1), false},
	} {
		_, _, err := parseKeysDoc([]byte(doc(tc.windows...)), "standard", providers.Options{}, now)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "in force at once") {
			t.Errorf("%s: the error does not say why: %v", tc.name, err)
		}
	}
}

// testKeyset builds a keyset for a standard source outside a node.
func testKeyset(t *testing.T, url string, secrets ...string) *sourceKeys {
	t.Helper()
	ks := &sourceKeys{source: "pub", url: url, cache: filepath.Join(t.TempDir(), "keys", "pub.json"),
		client: NewManager(t.TempDir(), nil, nil, "test").client, log: slog.New(slog.DiscardHandler), m: &countingMetrics{},
		earlyEvery: time.Hour, earlyWait: 5 * time.Second}
	ks.ctx, ks.cancel = context.WithCancel(context.Background())
	t.Cleanup(ks.stop)
	src := &config.Source{Provider: "standard", KeysRefresh: config.Duration(time.Hour)}
	for _, s := range secrets {
		src.Secrets = append(src.Secrets, config.Secret(s))
	}
	if err := ks.configure(src); err != nil {
		t.Fatal(err)
	}
	return ks
}

func signedReq(t testing.TB, priv string, body []byte, at time.Time) *providers.Request {
	s, _ := providers.Lookup("standard")
	hs, err := s.Sign(body, []byte(priv), at, "msg_k", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHeaders{}
	for _, x := range hs {
		h.m = append(h.m, [2]string{x.Name, x.Value})
	}
	return &providers.Request{Body: body, Header: h, Now: at}
}

type fakeHeaders struct{ m [][2]string }

func (f *fakeHeaders) Peek(name string) []byte {
	for _, kv := range f.m {
		if strings.EqualFold(kv[0], name) {
			return []byte(kv[1])
		}
	}
	return nil
}

// Keys verify from nbf (inclusive) until exp (exclusive), judged by the
// delivery's time; static secrets verify beside them.
func TestKeysetValidityWindow(t *testing.T) {
	privA, pubA := keyPair(t)
	privB, pubB := keyPair(t)
	whsec, _ := providers.GenerateSecret("standard")
	const t1, t2, t3 = 1_800_000_000, 1_800_003_600, 1_800_007_200
	srv := newKeysServer(t, keysJSON(t,
		Key{Kid: "a", Alg: AlgEd25519, Key: pubA, Exp: t2},
		Key{Kid: "b", Alg: AlgEd25519, Key: pubB, Nbf: t1 + 1800, Exp: t3},
	))
	ks := testKeyset(t, srv.url(), whsec)
	if changed, err := ks.fetch(ks.ctx, "test"); err != nil || !changed {
		t.Fatalf("fetch: %v %v", changed, err)
	}
	body := []byte(`{"id":1}`)
	cases := []struct {
		name string
		priv string
		at   int64
		ok   bool
	}{
		{"a in force", privA, t1, true},
		{"b before nbf", privB, t1, false},
		{"b at nbf", privB, t1 + 1800, true},
		{"a, overlap", privA, t1 + 1800, true},
		{"a one second before exp", privA, t2 - 1, true},
		{"a at exp", privA, t2, false},
		{"b after a expired", privB, t2 + 1, true},
		{"b at exp", privB, t3, false},
		{"a again, clock moved back", privA, t1, true},
		{"static secret beside the keys", whsec, t3 + 100, true},
	}
	for _, c := range cases {
		err := ks.verify(signedReq(t, c.priv, body, time.Unix(c.at, 0)))
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if srv.hits.Load() != 1 {
		t.Errorf("verification fetched: %d hits", srv.hits.Load())
	}
}

func TestKeysFetchLimits(t *testing.T) {
	_, pub := keyPair(t)
	good := keysJSON(t, Key{Kid: "a", Alg: AlgEd25519, Key: pub})
	var mode atomic.Value
	mode.Store("ok")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "big":
			io.WriteString(w, `{"keys":[],"pad":"`+strings.Repeat("x", maxKeysDoc)+`"}`)
		case "404":
			http.NotFound(w, r)
		case "redirect-http":
			http.Redirect(w, r, "http://keys.example.com/keys.json", http.StatusFound)
		case "redirect-loopback":
			if r.URL.Path == "/keys.json" {
				http.Redirect(w, r, "/other.json", http.StatusFound)
				return
			}
			io.WriteString(w, good)
		case "bad":
			io.WriteString(w, `{"keys":[{"kid":"a","alg":"ed25519","key":"whpk_short"}]}`)
		default:
			io.WriteString(w, good)
		}
	}))
	defer srv.Close()
	ks := testKeyset(t, srv.URL+"/keys.json?token=s3cret")
	for _, m := range []string{"big", "404", "redirect-http", "bad"} {
		mode.Store(m)
		if _, err := ks.fetch(ks.ctx, "test"); err == nil {
			t.Errorf("%s: fetch succeeded", m)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error shows the URL's query: %v", m, err)
		}
		if len(ks.keys) != 0 {
			t.Fatalf("%s: keys installed from a refused fetch", m)
		}
	}
	mode.Store("redirect-loopback")
	if changed, err := ks.fetch(ks.ctx, "test"); err != nil || !changed {
		t.Fatalf("redirect on loopback: %v %v", changed, err)
	}
	// A refused fetch keeps the keys held.
	mode.Store("404")
	ks.fetch(ks.ctx, "test")
	if len(ks.keys) != 1 {
		t.Fatal("a failed fetch dropped the keys")
	}
	if got := ks.m.(*countingMetrics).failures.Load(); got != 5 {
		t.Errorf("fetch failures counted %v, want 5", got)
	}
	if u := safeURL("https://user:pw@keys.example.com/k.json?token=x"); u != "https://keys.example.com/k.json" {
		t.Errorf("safeURL = %q", u)
	}
}

// countingMetrics counts the fetch failures a key set reports, and keeps
// the last count of keys in force.
type countingMetrics struct{ failures, active atomic.Int64 }

func (c *countingMetrics) FetchFailure(string)    { c.failures.Add(1) }
func (c *countingMetrics) Active(_ string, n int) { c.active.Store(int64(n)) }

// TestKeysActiveFollowsExpiry: the count of keys in force drops when a key's
// exp passes, with no delivery to notice it (an alert on the gauge sees the
// expiry before deliveries fail).
func TestKeysActiveFollowsExpiry(t *testing.T) {
	_, pub := keyPair(t)
	exp := time.Now().Unix() + 2
	srv := newKeysServer(t, keysJSON(t, Key{Kid: "a", Alg: AlgEd25519, Key: pub, Exp: exp}))
	ks := testKeyset(t, srv.url())
	if _, err := ks.fetch(ks.ctx, "test"); err != nil {
		t.Fatal(err)
	}
	m := ks.m.(*countingMetrics)
	ks.wg.Add(1)
	go ks.run(time.Hour)
	for _, want := range []int64{1, 0} {
		deadline := time.Now().Add(10 * time.Second)
		for m.active.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("keys in force %d, want %d (exp %d, now %d)", m.active.Load(), want, exp, time.Now().Unix())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if time.Now().Unix() < exp {
		t.Fatalf("the key counted out of force before its exp")
	}
}

// TestFetchFailureHidesTheURLsCredentials: a keys_url may carry a
// credential (user and password, a token in the query); a fetch that
// fails on the connection neither returns nor logs it.
func TestFetchFailureHidesTheURLsCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: the fetch fails on the connection
	var buf bytes.Buffer
	var mu sync.Mutex
	ks := &sourceKeys{source: "pub", url: "http://keyuser:keypass@" + addr + "/k.json?token=s3cret",
		cache:  filepath.Join(t.TempDir(), "keys", "pub.json"),
		client: NewManager(t.TempDir(), nil, nil, "test").client, m: &countingMetrics{},
		log:        slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil)),
		earlyEvery: time.Hour, earlyWait: 5 * time.Second}
	ks.ctx, ks.cancel = context.WithCancel(context.Background())
	t.Cleanup(ks.stop)
	if err := ks.configure(&config.Source{Provider: "standard", KeysRefresh: config.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	_, err = ks.fetch(ks.ctx, "test")
	if err == nil {
		t.Fatal("a fetch from a closed port succeeded")
	}
	mu.Lock()
	logged := buf.String()
	mu.Unlock()
	if !strings.Contains(logged, "keys_url fetch failed") {
		t.Fatalf("no log line for the failed fetch: %q", logged)
	}
	for _, secret := range []string{"keyuser", "keypass", "s3cret", "token="} {
		if strings.Contains(err.Error(), secret) || strings.Contains(logged, secret) {
			t.Errorf("%q shown: error %q, log %q", secret, err, logged)
		}
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
