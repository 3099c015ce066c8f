package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"oncehook/admin"

	"oncehook/engine"
	"oncehook/providers"
)

const githubTestSecret = "github-test-secret-0123456789abcdef"

// githubSources are two GitHub sources, the replay guard on (the default) and
// off, so a test can show what the guard changes.
const githubSources = `
[[source]]
name = "gh"
provider = "github"
secrets = ["` + githubTestSecret + `"]
forward = "%[1]s/gh"

[[source]]
name = "gh-open"
provider = "github"
secrets = ["` + githubTestSecret + `"]
forward = "%[1]s/gh-open"
replay_guard = "off"
`

// githubSigned signs body the way GitHub does, as delivery id.
func githubSigned(t *testing.T, body []byte, delivery string) []providers.Header {
	t.Helper()
	s, _ := providers.Lookup("github")
	h, err := s.Sign(body, []byte(githubTestSecret), time.Now(), delivery, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// withHeader returns hs with name set to value (replacing or adding it).
func withHeader(hs []providers.Header, name, value string) []providers.Header {
	out := make([]providers.Header, 0, len(hs)+1)
	for _, h := range hs {
		if !strings.EqualFold(h.Name, name) {
			out = append(out, h)
		}
	}
	return append(out, providers.Header{Name: name, Value: value})
}

// TestCapturedBodyUnderANewDeliveryIDIsADuplicate: GitHub signs the body
// only, so a captured delivery resent with a new X-GitHub-Delivery verifies.
// The replay guard answers it as a duplicate of the original event, stores
// nothing and counts it; without the guard each resend is a new event.
func TestCapturedBodyUnderANewDeliveryIDIsADuplicate(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, githubSources)
	body := []byte(`{"action":"opened","number":7}`)
	captured := githubSigned(t, body, "d-1")

	if a := tn.post("gh", body, captured); a.Status != http.StatusAccepted || a.Body["key"] != "gh:d-1" {
		t.Fatalf("original delivery: %d %s", a.Status, a.Raw)
	}
	for _, forged := range []string{"d-2", "d-3"} {
		a := tn.post("gh", body, withHeader(captured, "X-GitHub-Delivery", forged))
		if a.Status != http.StatusOK || a.Body["status"] != "duplicate" || a.Body["key"] != "gh:d-1" {
			t.Fatalf("replay as %s: %d %s, want 200 duplicate naming gh:d-1", forged, a.Status, a.Raw)
		}
		if _, err := tn.event("gh:" + forged); err == nil {
			t.Fatalf("replay as %s stored an event", forged)
		}
	}
	// Another body is another event, even under a reused id's neighbour.
	other := []byte(`{"action":"closed","number":7}`)
	if a := tn.post("gh", other, githubSigned(t, other, "d-2")); a.Status != http.StatusAccepted || a.Body["key"] != "gh:d-2" {
		t.Fatalf("a new body: %d %s", a.Status, a.Raw)
	}
	tn.waitState("gh:d-1", engine.StateDone)
	tn.waitState("gh:d-2", engine.StateDone)
	if n := len(h.deliveries("gh:d-1")); n != 1 {
		t.Fatalf("handler ran %d times for gh:d-1, want 1", n)
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	if m := tn.do(req).Raw; !strings.Contains(m, `oncehook_replay_suspected_total{source="gh"} 2`) {
		t.Fatal("the two replays were not counted in oncehook_replay_suspected_total")
	}

	// The same replay on a source with the guard off is a new event each
	// time: the guard, not the key, is what stops it.
	if a := tn.post("gh-open", body, captured); a.Status != http.StatusAccepted {
		t.Fatalf("guard off, original: %d %s", a.Status, a.Raw)
	}
	if a := tn.post("gh-open", body, withHeader(captured, "X-GitHub-Delivery", "d-9")); a.Status != http.StatusAccepted {
		t.Fatalf("guard off, replay: %d %s, want 202 (a new event)", a.Status, a.Raw)
	}
}

// TestSyncDuplicateWithAnotherBodyGetsConflict: a validly signed body sent
// under an existing sync event's id must not read that event's cached answer
// or learn its state.
func TestSyncDuplicateWithAnotherBodyGetsConflict(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(d delivery) (int, string) { return 201, `{"handled":1}` })
	tn := startTestNode(t, "", h.url)
	body := []byte(`{"id":"secret-order"}`)
	if a := tn.post("sync", body, tn.signed(body, "msg_x")); a.Status != 201 || a.Raw != `{"handled":1}` {
		t.Fatalf("sync answer: %d %q", a.Status, a.Raw)
	}
	probe := []byte(`{"id":"probe"}`)
	a := tn.post("sync", probe, tn.signed(probe, "msg_x"))
	if a.Status != http.StatusConflict || a.Body["status"] != "conflict" || a.Body["key"] != "sync:msg_x" {
		t.Fatalf("other body under msg_x: %d %s, want 409 conflict", a.Status, a.Raw)
	}
	if strings.Contains(a.Raw, "handled") || a.Body["state"] != nil {
		t.Fatalf("the conflict answer leaks the event: %s", a.Raw)
	}
	// The same body still gets the cached answer.
	if a := tn.post("sync", body, tn.signed(body, "msg_x")); a.Status != 201 || a.Raw != `{"handled":1}` {
		t.Fatalf("same body again: %d %q", a.Status, a.Raw)
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	if m := tn.do(req).Raw; !strings.Contains(m, `oncehook_sync_conflicts_total{source="sync"} 1`) {
		t.Fatal("the conflict was not counted in oncehook_sync_conflicts_total")
	}
}

// TestReplayByStateNamesDroppedPayloads: done events whose payload was
// dropped after payload_retention are not replayed. `oncehook replay
// -state` names them in "skipped" and exits 1, as a replay of their keys
// does, instead of answering "replayed": 0 and exiting 0; and a dry run, by
// state or of keys, does not count them in would_replay but names them the
// same way, so that its count is what the replay then does.
func TestReplayByStateNamesDroppedPayloads(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, retentionSources)
	for _, p := range []struct{ source, id string }{{"brief", "b_1"}, {"brief", "b_2"}, {"orders", "ok_1"}} {
		body := orderBody("evt_"+p.id, "obj_"+p.id, 1)
		if a := tn.post(p.source, body, tn.signed(body, p.id)); a.Status != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", p.id, a.Status, a.Raw)
		}
	}
	for _, k := range []string{"brief:b_1", "brief:b_2", "orders:ok_1"} {
		tn.waitState(k, engine.StateDone)
	}
	// The sweeper sends this every ExpireInterval; send it now.
	waitUntil(t, "payloads dropped", func() bool {
		if _, err := tn.n.cluster.DropPayloads(ctxTimeout(t, 5*time.Second), 0, 0); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"brief:b_1", "brief:b_2"} {
			if ev, err := tn.n.cluster.Get(k, true); err != nil || ev.Payload != nil {
				return false
			}
		}
		return true
	})
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(tn.dir, "admin.token"))
	dropped := []admin.ReplaySkip{
		{Key: "brief:b_1", Error: "its payload was dropped after its source's payload_retention; there is nothing to deliver again"},
		{Key: "brief:b_2", Error: "its payload was dropped after its source's payload_retention; there is nothing to deliver again"},
	}
	keys := []string{"-key", "brief:b_1", "-key", "brief:b_2", "-key", "orders:ok_1"}
	// In order, on the same events: the dry runs, then the replays.
	cases := []struct {
		name     string
		args     []string
		moved    int // would_replay or replayed
		keys     []string
		exitCode int
		exitMsg  string
	}{
		{"dry run by state", []string{"-state", "done", "-source", "brief", "-dry-run"}, 0, []string{}, 1, "2 of the keys would not be replayed (see skipped)"},
		{"dry run of keys", append([]string{"-dry-run"}, keys...), 1, []string{"orders:ok_1"}, 1, "2 of the keys would not be replayed (see skipped)"},
		{"replay by state", []string{"-state", "done"}, 1, []string{"orders:ok_1"}, 1, "2 of the keys not replayed (see skipped)"},
		{"replay of keys", keys[:4], 0, []string{}, 1, "2 of the keys not replayed (see skipped)"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		args := append([]string{"replay", "-addr", tn.admin, "-reason", "bulk"}, c.args...)
		err := run(ctxTimeout(t, 30*time.Second), args, &out, &errOut)
		if msg, code := exitStatus(err); code != c.exitCode || msg != c.exitMsg {
			t.Fatalf("%s: exit %d %q, want %d %q\n%s%s", c.name, code, msg, c.exitCode, c.exitMsg, out.String(), errOut.String())
		}
		var ans struct {
			WouldReplay  *int               `json:"would_replay"`
			Replayed     *int               `json:"replayed"`
			Keys         []string           `json:"keys"`
			Skipped      []admin.ReplaySkip `json:"skipped"`
			SkippedCount int                `json:"skipped_count"`
		}
		if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
			t.Fatalf("%s printed %s: %v", c.name, out.String(), err)
		}
		moved := ans.Replayed
		if strings.HasPrefix(c.name, "dry run") {
			moved = ans.WouldReplay
		}
		if moved == nil || *moved != c.moved || !slices.Equal(ans.Keys, c.keys) || !slices.Equal(ans.Skipped, dropped) || ans.SkippedCount != 2 {
			t.Fatalf("%s printed %s\nwant %d moved (%v), %+v skipped", c.name, out.String(), c.moved, c.keys, dropped)
		}
	}
	// orders:ok_1 went again, once; the others stayed done, undelivered.
	tn.waitState("orders:ok_1", engine.StateDone)
	waitUntil(t, "orders:ok_1 delivered again", func() bool { return len(h.deliveries("orders:ok_1")) == 2 })
	for _, k := range []string{"brief:b_1", "brief:b_2"} {
		if ev, err := tn.event(k); err != nil || ev.State != engine.StateDone || len(h.deliveries(k)) != 1 {
			t.Fatalf("%s: %+v %v, %d deliveries, want done, delivered once", k, ev, err, len(h.deliveries(k)))
		}
	}
}

// TestKeyOnAnUnsignedHeaderGetsTheGuard: a standard source keyed on a header
// the sender writes (not the signed webhook-id): one captured delivery
// resent with other values there is a duplicate of the first, not a new
// event each time, because such a source gets the replay guard.
func TestKeyOnAnUnsignedHeaderGetsTheGuard(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "custom"
provider = "standard"
secret_files = ["orders.secret"]
key = ["header:X-Custom-Id"]
forward = "%[1]s/custom"
`)
	body := []byte(`{"type":"invoice.paid","data":{"id":"in_1"}}`)
	signed := tn.signed(body, "msg_signed_1")
	first := tn.post("custom", body, withHeader(signed, "X-Custom-Id", "a"))
	if first.Status != 202 {
		t.Fatalf("first delivery: %d %s", first.Status, first.Raw)
	}
	for _, v := range []string{"b", "c"} {
		a := tn.post("custom", body, withHeader(signed, "X-Custom-Id", v))
		if a.Status != 200 || !strings.Contains(a.Raw, `"duplicate"`) || !strings.Contains(a.Raw, "custom:a") {
			t.Errorf("the captured delivery resent with X-Custom-Id %s: %d %s, want 200 duplicate of custom:a", v, a.Status, a.Raw)
		}
	}
}
