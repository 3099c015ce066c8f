package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/keyset"
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

func keysJSON(t testing.TB, keys ...keyset.Key) string {
	b, err := json.Marshal(keyset.Document{Keys: keys})
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
	keyA := keyset.Key{Kid: "a", Alg: keyset.AlgEd25519, Key: pubA, Nbf: now - 3600, Exp: now + 3600}
	keyB := keyset.Key{Kid: "b", Alg: keyset.AlgEd25519, Key: pubB, Nbf: now - 1, Exp: now + 7200}
	expired := keyset.Key{Kid: "c", Alg: keyset.AlgEd25519, Key: pubC, Nbf: now - 7200, Exp: now - 3600}
	future := keyset.Key{Kid: "d", Alg: keyset.AlgEd25519, Key: pubD, Nbf: now + 3600}
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

// A reload that shortens keys_refresh takes effect from the last fetch, not
// after the old interval has run out (an hour here).
func TestKeysRefreshReloaded(t *testing.T) {
	h := newHandler(t)
	_, pub := keyPair(t)
	now := time.Now().Unix()
	ksrv := newKeysServer(t, keysJSON(t, keyset.Key{Kid: "a", Alg: keyset.AlgEd25519, Key: pub, Nbf: now - 3600, Exp: now + 3600}))
	dir := t.TempDir()
	extra := fmt.Sprintf(publishedSourceTOML, ksrv.url())
	tn := startNodeWithSources(t, dir, h.url, extra)
	if n := ksrv.hits.Load(); n != 1 {
		t.Fatalf("keys fetched %d times at start, want 1", n)
	}
	mustWrite(t, tn.cfgPath, testConfig(dir, h.url, strings.Replace(extra, `keys_refresh = "1h"`, `keys_refresh = "10s"`, 1)))
	tn.n.reload(tn.cfgPath)
	// The shortest refresh there is (config.MinKeysRefresh), measured from
	// the fetch at start: due about 10 s from now, an hour under the old one.
	deadline := time.Now().Add(40 * time.Second)
	for ksrv.hits.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no fetch at the new keys_refresh within 40 s (the old one: an hour)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
