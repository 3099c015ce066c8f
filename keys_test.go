package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/config"
	"oncehook/engine"
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

func keysJSON(t testing.TB, keys ...keyEntry) string {
	b, err := json.Marshal(keysDoc{Keys: keys})
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
	keys, skipped, err := parseKeysDoc([]byte(good), "standard")
	if err != nil || len(keys) != 2 || keys[0].Kid != "a" || keys[0].Exp != 1800000000 || len(skipped) != 1 || skipped[0] != "c" {
		t.Fatalf("good document: %+v %v %v", keys, skipped, err)
	}
	if keys, _, err := parseKeysDoc([]byte(`{"keys":[]}`), "standard"); err != nil || len(keys) != 0 {
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
		if _, _, err := parseKeysDoc([]byte(doc), "standard"); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), strings.TrimPrefix(whsec, "whsec_")) || strings.Contains(err.Error(), strings.TrimPrefix(pub, "whpk_")) {
			t.Errorf("%s: error quotes key material: %v", name, err)
		}
	}
	// ed25519 keys only make sense for standard and svix.
	if _, _, err := parseKeysDoc([]byte(fmt.Sprintf(`{"keys":[{"kid":"a","alg":"ed25519","key":%q}]}`, pub)), "stripe"); err == nil {
		t.Error("an ed25519 key for a stripe source was accepted")
	}
	if keys, _, err := parseKeysDoc([]byte(`{"keys":[{"kid":"a","alg":"hmac-sha256","key":"whsec_stripe"}]}`), "stripe"); err != nil || len(keys) != 1 {
		t.Errorf("a stripe hmac key: %v", err)
	}
}

// testKeyset builds a keyset for a standard source outside a node.
func testKeyset(t *testing.T, url string, secrets ...string) *keyset {
	t.Helper()
	ks := &keyset{source: "pub", url: url, cache: filepath.Join(t.TempDir(), "keys", "pub.json"),
		client: newKeyManager(t.TempDir(), nil, nil).client, log: slog.New(slog.DiscardHandler), m: newMetrics(),
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
		keyEntry{Kid: "a", Alg: algEd25519, Key: pubA, Exp: t2},
		keyEntry{Kid: "b", Alg: algEd25519, Key: pubB, Nbf: t1 + 1800, Exp: t3},
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
	good := keysJSON(t, keyEntry{Kid: "a", Alg: algEd25519, Key: pub})
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
	if got := countMetric(t, ks.m, "oncehook_keys_fetch_failures_total"); got != 5 {
		t.Errorf("fetch failures counted %v, want 5", got)
	}
	if u := safeURL("https://user:pw@keys.example.com/k.json?token=x"); u != "https://keys.example.com/k.json" {
		t.Errorf("safeURL = %q", u)
	}
}

func countMetric(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.Metric {
			if c := x.GetCounter(); c != nil {
				total += c.GetValue()
			}
			if g := x.GetGauge(); g != nil {
				total += g.GetValue()
			}
		}
	}
	return total
}

const publishedSourceTOML = `
[[source]]
name = "published"
provider = "standard"
keys_url = %q
keys_refresh = "1h"
forward = "%%[1]s/published"
`

// Key rotation end to end with a local keys server: the old key, an overlap,
// a new key fetched on demand (and the rate limit on that), an expired key, a
// key not yet valid, the server down with a warm cache, and restarts with the
// server down.
func TestKeysURLEndToEnd(t *testing.T) {
	h := newHandler(t)
	privA, pubA := keyPair(t)
	privB, pubB := keyPair(t)
	privC, pubC := keyPair(t)
	privD, pubD := keyPair(t)
	now := time.Now().Unix()
	keyA := keyEntry{Kid: "a", Alg: algEd25519, Key: pubA, Nbf: now - 3600, Exp: now + 3600}
	keyB := keyEntry{Kid: "b", Alg: algEd25519, Key: pubB, Nbf: now - 1, Exp: now + 7200}
	expired := keyEntry{Kid: "c", Alg: algEd25519, Key: pubC, Nbf: now - 7200, Exp: now - 3600}
	future := keyEntry{Kid: "d", Alg: algEd25519, Key: pubD, Nbf: now + 3600}
	ksrv := newKeysServer(t, keysJSON(t, keyA, expired, future))

	dir := t.TempDir()
	extra := fmt.Sprintf(publishedSourceTOML, ksrv.url())
	tn := startNodeWithSources(t, dir, h.url, extra)
	if n := ksrv.hits.Load(); n != 1 {
		t.Fatalf("keys fetched %d times at start, want 1", n)
	}
	post := func(tn *testNode, priv, id string) answer {
		body := []byte(fmt.Sprintf(`{"id":%q}`, id))
		return tn.post("published", body, signWith(t, priv, body, id))
	}

	// The published key verifies.
	if a := post(tn, privA, "msg_a1"); a.Status != http.StatusAccepted {
		t.Fatalf("key a: %d %s", a.Status, a.Raw)
	}
	// The sender rotates: b is published and used at once; the unknown
	// signature makes oncehook fetch early, and the delivery is accepted.
	ksrv.set(keysJSON(t, keyA, keyB, expired, future))
	if a := post(tn, privB, "msg_b1"); a.Status != http.StatusAccepted {
		t.Fatalf("new key b, fetched on demand: %d %s", a.Status, a.Raw)
	}
	if n := ksrv.hits.Load(); n != 2 {
		t.Fatalf("keys fetched %d times, want 2 (start, on demand)", n)
	}
	// Overlap: both keys verify.
	if a := post(tn, privA, "msg_a2"); a.Status != http.StatusAccepted {
		t.Fatalf("old key during the overlap: %d %s", a.Status, a.Raw)
	}
	// An expired key and a key not yet valid are refused; the early fetch
	// they would cause is rate-limited (one ran for b moments ago).
	if a := post(tn, privC, "msg_c1"); a.Status != http.StatusUnauthorized {
		t.Fatalf("expired key: %d %s", a.Status, a.Raw)
	}
	if a := post(tn, privD, "msg_d1"); a.Status != http.StatusUnauthorized {
		t.Fatalf("key before its nbf: %d %s", a.Status, a.Raw)
	}
	if n := ksrv.hits.Load(); n != 2 {
		t.Fatalf("keys fetched %d times, want still 2 (early fetches rate-limited)", n)
	}
	if m := tn.metricsText(); !strings.Contains(m, `oncehook_keys_active{source="published"} 2`) {
		t.Errorf("active keys:\n%s", grepLines(m, "oncehook_keys"))
	}
	tn.waitState("published:msg_b1", engine.StateDone)
	for _, k := range []string{"published:msg_c1", "published:msg_d1"} {
		if _, err := tn.event(k); err == nil {
			t.Errorf("%s was stored", k)
		}
	}
	cache := filepath.Join(dir, "data", "keys", "published.json")
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi, err)
	}

	// The server goes down; a restart works from the warm cache.
	ksrv.down.Store(true)
	tn.stop()
	tn = startNodeWithSources(t, dir, h.url, extra)
	if a := post(tn, privB, "msg_b2"); a.Status != http.StatusAccepted {
		t.Fatalf("restart with the server down, warm cache: %d %s", a.Status, a.Raw)
	}
	waitUntil(t, "the failed fetch counted", func() bool {
		return strings.Contains(tn.metricsText(), `oncehook_keys_fetch_failures_total{source="published"}`)
	})
	if !strings.Contains(tn.logs(), "keys_url fetch failed; keeping the keys held") {
		t.Error("the failed fetch was not logged")
	}
	if strings.Contains(tn.logs(), strings.TrimPrefix(pubA, "whpk_")) {
		t.Error("the logs show key material")
	}

	// Without a cache and with the server down, the node still starts; the
	// source has no key until the server is back, and then the next delivery
	// fetches early.
	tn.stop()
	if err := os.RemoveAll(filepath.Join(dir, "data", "keys")); err != nil {
		t.Fatal(err)
	}
	tn = startNodeWithSources(t, dir, h.url, extra)
	if m := tn.metricsText(); !strings.Contains(m, `oncehook_keys_active{source="published"} 0`) {
		t.Errorf("keys in force with no cache and no server:\n%s", grepLines(m, "oncehook_keys"))
	}
	ksrv.down.Store(false)
	if a := post(tn, privA, "msg_a3"); a.Status != http.StatusAccepted {
		t.Fatalf("after the server came back: %d %s", a.Status, a.Raw)
	}

	// A reload that drops keys_url from the source stops its fetcher; one that
	// brings it back starts a new one.
	hits := ksrv.hits.Load()
	mustWrite(t, tn.cfgPath, testConfig(dir, h.url, strings.Replace(extra, "keys_url", "secrets = [\""+pubA+"\"]\n# keys_url", 1)))
	tn.n.reload(tn.cfgPath)
	if a := post(tn, privA, "msg_a4"); a.Status != http.StatusAccepted {
		t.Fatalf("after reload to a static key: %d %s", a.Status, a.Raw)
	}
	if a := post(tn, privB, "msg_b3"); a.Status != http.StatusUnauthorized {
		t.Fatalf("key b after keys_url was removed: %d %s", a.Status, a.Raw)
	}
	if ksrv.hits.Load() != hits {
		t.Fatal("a source without keys_url fetched keys")
	}
}
