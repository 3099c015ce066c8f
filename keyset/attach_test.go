package keyset

import (
	"crypto/sha256"
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

// TestKeyedVerifierPassesOnAbilities: a keys_url source's verifier has the
// optional abilities of its scheme's own: twilio's canonical replay form (a
// captured callback re-encoded is still found by the replay guard), slack's
// notices; a scheme that signs the raw body has no canonical form.
func TestKeyedVerifierPassesOnAbilities(t *testing.T) {
	const token = "twilio-auth-token-0123456789abcdef"
	srv := newKeysServer(t, keysJSON(t, Key{Kid: "k1", Alg: AlgHMACSHA256, Key: token}))
	km := NewManager(t.TempDir(), nil, nil, "test")
	defer km.Close()
	cfg := &config.Config{Sources: []config.Source{
		{Name: "tw", Provider: "twilio", KeysURL: srv.url(), KeysRefresh: config.Duration(time.Hour)},
		{Name: "sl", Provider: "slack", KeysURL: srv.url(), KeysRefresh: config.Duration(time.Hour)},
		{Name: "gh", Provider: "github", KeysURL: srv.url(), KeysRefresh: config.Duration(time.Hour)},
	}}
	set := &sourceSet{v: map[string]providers.Verifier{}, h: map[string]providers.Handshaker{}}
	if err := km.Attach(set, cfg); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const url = "https://hooks.example.com/in/tw"
	twilio, _ := providers.Lookup("twilio")
	request := func(body string) *providers.Request {
		hs, err := providers.SignURL(twilio, url, []byte("MessageSid=SM1&Body=hello+world"), []byte(token), now, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		h := &fakeHeaders{m: [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}}
		for _, x := range hs {
			h.m = append(h.m, [2]string{x.Name, x.Value})
		}
		return &providers.Request{Body: []byte(body), Header: h, URL: url, Now: now}
	}
	canonical := func(r *providers.Request) string {
		if err := set.v["tw"].Verify(r); err != nil {
			t.Fatalf("verify %s: %v", r.Body, err)
		}
		rb, ok := set.v["tw"].(providers.ReplayBodier)
		if !ok {
			t.Fatal("the keys_url twilio verifier has no canonical replay form: a re-encoded callback is a new event")
		}
		h := sha256.New()
		if err := rb.WriteReplayBody(h, r); err != nil {
			t.Fatal(err)
		}
		return string(h.Sum(nil))
	}
	if a, b := canonical(request("MessageSid=SM1&Body=hello+world")), canonical(request("Body=hello%20world&MessageSid=SM1")); a != b {
		t.Fatal("a re-encoded callback writes another canonical form")
	}
	if rb, ok := set.v["gh"].(providers.ReplayBodier); !ok || rb.WriteReplayBody(sha256.New(), &providers.Request{Now: now}) == nil {
		t.Fatal("a raw-body scheme behind keys_url claims a canonical form")
	}
	n, ok := set.h["sl"].(providers.Noticer)
	if !ok {
		t.Fatal("the keys_url slack handshaker passes no notices on")
	}
	limited := []byte(`{"token":"x","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}`)
	if msg, _ := n.Notice(&providers.Request{Body: limited, Header: &fakeHeaders{}, Now: now}); msg == "" {
		t.Fatal("the keys_url slack source says nothing of app_rate_limited")
	}
}
