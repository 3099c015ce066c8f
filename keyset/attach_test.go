package keyset

import (
	"testing"
	"time"

	"oncehook/config"
	"oncehook/providers"
)

// sourceSet records what Attach installs for each source.
type sourceSet struct {
	v map[string]providers.Verifier
	h map[string]providers.Handshaker
}

func (s *sourceSet) Has(name string) bool { return true }
func (s *sourceSet) UseVerifier(name string, v providers.Verifier, h providers.Handshaker) {
	s.v[name], s.h[name] = v, h
}

// TestHandshakeOfKeysFetchedAfterAttach: a zoom source whose keys server
// was down when the node attached it (no key in force then) answers the
// provider's URL validation once the keys come, without a reload: its
// handshake was decided from the keys held at Attach, so the validation was
// stored and forwarded as an event and the webhook could not be enabled.
func TestHandshakeOfKeysFetchedAfterAttach(t *testing.T) {
	srv := newKeysServer(t, "")
	srv.down.Store(true)
	km := NewManager(t.TempDir(), nil, nil, "test")
	defer km.Close()
	cfg := &config.Config{Sources: []config.Source{{Name: "zm", Provider: "zoom", KeysURL: srv.url(),
		KeysRefresh: config.Duration(time.Hour)}}}
	set := &sourceSet{v: map[string]providers.Verifier{}, h: map[string]providers.Handshaker{}}
	if err := km.Attach(set, cfg); err != nil {
		t.Fatal(err)
	}
	const secret = "zoom-secret-token-0123456789"
	srv.set(keysJSON(t, Key{Kid: "k1", Alg: AlgHMACSHA256, Key: secret}))
	srv.down.Store(false)

	body := []byte(`{"event":"endpoint.url_validation","payload":{"plainToken":"abc"},"event_ts":1}`)
	now := time.Now()
	zoom, _ := providers.Lookup("zoom")
	hs, err := zoom.Sign(body, []byte(secret), now, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHeaders{}
	for _, x := range hs {
		h.m = append(h.m, [2]string{x.Name, x.Value})
	}
	req := &providers.Request{Body: body, Header: h, Now: now}
	if err := set.v["zm"].Verify(req); err != nil { // fetches the keys early
		t.Fatalf("verify after the keys came: %v", err)
	}
	if set.h["zm"] == nil {
		t.Fatal("the source has no handshaker: its URL validation would be stored as an event")
	}
	if status, out, _, ok := set.h["zm"].Handshake(req); !ok || status != 200 || len(out) == 0 {
		t.Fatalf("handshake: ok=%v status=%d %s, want the validation's answer", ok, status, out)
	}
}
