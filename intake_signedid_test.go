package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/providers"
)

// A captured delivery resent with its webhook-* headers plus a forged svix-id
// is never a new event: the key's id is the signed one, and a request whose
// svix-id and webhook-id differ is refused (401) before it is keyed.
func TestIntakeForgedSvixIDReplayIsOneEvent(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "svix"
provider = "svix"
secret_files = ["orders.secret"]
forward = "%[1]s/svix"
`)
	body := orderBody("evt_svix", "obj_svix", 100)
	captured := tn.signed(body, "msg_svix_1") // webhook-id, webhook-timestamp, webhook-signature
	first := tn.post("svix", body, captured)
	if first.Status != http.StatusAccepted || first.Body["key"] != "svix:msg_svix_1" {
		t.Fatalf("first delivery: %d %s", first.Status, first.Raw)
	}
	for i := range 3 {
		forged := append(append([]providers.Header(nil), captured...), providers.Header{Name: "svix-id", Value: fmt.Sprintf("forged-%d", i)})
		a := tn.post("svix", body, forged)
		if a.Status != http.StatusUnauthorized {
			t.Fatalf("replay with svix-id forged-%d: %d %s, want 401", i, a.Status, a.Raw)
		}
		if _, err := tn.event(fmt.Sprintf("svix:forged-%d", i)); err == nil {
			t.Fatalf("replay with svix-id forged-%d stored an event", i)
		}
	}
	// Both sets present, each validly signed, with different ids: 401.
	s, _ := providers.Lookup("svix")
	svixSet, err := s.Sign(body, []byte(tn.secret), time.Now(), "msg_svix_2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := tn.post("svix", body, append(svixSet, captured...)); a.Status != http.StatusUnauthorized {
		t.Fatalf("svix-* and webhook-* sets with different ids: %d %s, want 401", a.Status, a.Raw)
	}
	// The plain replay is a duplicate; a matching svix-id changes nothing.
	same := append(append([]providers.Header(nil), captured...), providers.Header{Name: "svix-id", Value: "msg_svix_1"})
	for _, hs := range [][]providers.Header{captured, same} {
		if a := tn.post("svix", body, hs); a.Status != http.StatusOK || a.Body["status"] != "duplicate" || a.Body["key"] != "svix:msg_svix_1" {
			t.Fatalf("replay: %d %s, want 200 duplicate", a.Status, a.Raw)
		}
	}
	tn.waitState("svix:msg_svix_1", engine.StateDone)
	time.Sleep(100 * time.Millisecond)
	if got := len(h.deliveries("svix:msg_svix_1")); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
}
