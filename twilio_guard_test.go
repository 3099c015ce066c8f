package main

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/providers"
)

// TestTwilioReplayReencodedIsADuplicate: Twilio signs the URL and the
// decoded, sorted form parameters, not the raw bytes, so a captured callback
// re-ordered or re-encoded verifies with the captured signature. Sent under a
// new I-Twilio-Idempotency-Token (unsigned) it is answered 200 duplicate
// naming the original key, stores nothing and is counted; the handler runs
// once. A callback with another parameter value is a new event.
func TestTwilioReplayReencodedIsADuplicate(t *testing.T) {
	const token = "twilio-auth-token"
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "tw"
provider = "twilio"
secrets = ["`+token+`"]
forward = "%[1]s/tw"
`)
	s, _ := providers.Lookup("twilio")
	url := tn.intake + "/in/tw" // the Host header the client sends: what Twilio signed
	sign := func(body string) string {
		hs, err := providers.SignURL(s, url, []byte(body), []byte(token), time.Now(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Name == "X-Twilio-Signature" {
				return h.Value
			}
		}
		t.Fatal("no X-Twilio-Signature")
		return ""
	}
	post := func(body, sig, id string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Twilio-Signature", sig)
		req.Header.Set("I-Twilio-Idempotency-Token", id)
		return tn.do(req)
	}

	const original = "MessageSid=SM1&Body=hello+world&From=%2B15551234567"
	captured := sign(original)
	if a := post(original, captured, "tok1"); a.Status != http.StatusAccepted || a.Body["key"] != "tw:tok1" {
		t.Fatalf("original callback: %d %s", a.Status, a.Raw)
	}
	replays := []struct{ name, body, id string }{
		{"re-ordered", "From=%2B15551234567&MessageSid=SM1&Body=hello+world", "tok10"},
		{"space as %20", "MessageSid=SM1&Body=hello%20world&From=%2B15551234567", "tok11"},
		{"%2b for %2B", "MessageSid=SM1&Body=hello+world&From=%2b15551234567", "tok12"},
		{"re-ordered and re-encoded", "Body=hello%20world&From=%2b15551234567&MessageSid=SM1", "tok13"},
	}
	for _, r := range replays {
		a := post(r.body, captured, r.id)
		if a.Status != http.StatusOK || a.Body["status"] != "duplicate" || a.Body["key"] != "tw:tok1" {
			t.Errorf("%s as %s: %d %s, want 200 duplicate naming tw:tok1", r.name, r.id, a.Status, a.Raw)
		}
		if _, err := tn.event("tw:" + r.id); err == nil {
			t.Errorf("%s as %s stored an event", r.name, r.id)
		}
	}

	// Another parameter value is another callback: a new event.
	other := "MessageSid=SM2&Body=hello+world&From=%2B15551234567"
	if a := post(other, sign(other), "tok2"); a.Status != http.StatusAccepted || a.Body["key"] != "tw:tok2" {
		t.Fatalf("another callback: %d %s, want 202 accepted as tw:tok2", a.Status, a.Raw)
	}
	tn.waitState("tw:tok1", engine.StateDone)
	tn.waitState("tw:tok2", engine.StateDone)
	if n := len(h.deliveries("tw:tok1")); n != 1 {
		t.Errorf("handler ran %d times for tw:tok1, want 1", n)
	}
	if n := len(h.deliveries("")); n != 2 {
		t.Errorf("handler ran %d times, want 2 (tw:tok1, tw:tok2)", n)
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	m := tn.do(req).Raw
	if !strings.Contains(m, `oncehook_replay_suspected_total{source="tw"} 4`) {
		t.Error("the four replays were not counted in oncehook_replay_suspected_total")
	}
	// A replay came under a key of its own: it is no different body under
	// the original's key, which that counter is for.
	if !strings.Contains(m, `oncehook_duplicate_body_mismatch_total{source="tw"} 0`) {
		t.Error("the replays were counted as duplicates with a different body too")
	}
}
