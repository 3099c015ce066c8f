package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"oncehook/engine"
)

// syncRearmTOML: sync sources whose events die after two attempts
// ("syncdead") or wait an hour between attempts ("synchold").
const syncRearmTOML = `
[[source]]
name = "syncdead"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/syncdead"
mode = "sync"
forward_timeout = "2s"
lease = "5s"
max_attempts = 2
backoff_min = "10ms"
backoff_max = "20ms"

[[source]]
name = "synchold"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/synchold"
mode = "sync"
forward_timeout = "2s"
lease = "5s"
max_attempts = 5
backoff_min = "1h"
backoff_max = "1h"
`

// TestSyncRetryOfADeadEventRearmsIt: on a sync source a provider's retry of
// a dead event re-arms it (dead -> pending, audited as the provider's) and
// gets the handler's answer; while the handler still fails the retry is
// never 2xx; a different body under the key re-arms nothing.
func TestSyncRetryOfADeadEventRearmsIt(t *testing.T) {
	h := newHandler(t)
	var healthy atomic.Bool
	h.setAnswer(func(d delivery) (int, string) {
		if healthy.Load() {
			return 201, `{"made":true}`
		}
		return 500, "down"
	})
	tn := startNodeWithSources(t, "", h.url, syncRearmTOML)
	const key = "syncdead:msg_dead"
	body := []byte(`{"id":"evt_dead"}`)

	if a := tn.post("syncdead", body, tn.signed(body, "msg_dead")); a.Status != http.StatusBadGateway {
		t.Fatalf("first delivery, handler down: %d %s, want 502", a.Status, a.Raw)
	}
	tn.waitState(key, engine.StateDead)

	// Another body under the key: 409 conflict, nothing re-armed.
	other := []byte(`{"id":"evt_other"}`)
	if a := tn.post("syncdead", other, tn.signed(other, "msg_dead")); a.Status != http.StatusConflict || a.Body["status"] != "conflict" {
		t.Fatalf("other body: %d %s, want 409 conflict", a.Status, a.Raw)
	}
	if ev, _ := tn.event(key); ev.State != engine.StateDead || len(ev.Audit) != 0 {
		t.Fatalf("after a conflicting body: state %s, audit %+v; want dead, no audit", ev.State.String(), ev.Audit)
	}

	// The provider retries while the handler still fails: re-armed, tried,
	// and answered 502, never 2xx.
	before := len(h.deliveries(key))
	if a := tn.post("syncdead", body, tn.signed(body, "msg_dead")); a.Status != http.StatusBadGateway {
		t.Fatalf("retry, handler down: %d %s, want 502", a.Status, a.Raw)
	}
	if n := len(h.deliveries(key)); n <= before {
		t.Fatalf("the retry re-armed nothing: %d deliveries, %d before", n, before)
	}
	ev := tn.waitState(key, engine.StateDead)
	if len(ev.Audit) != 1 {
		t.Fatalf("audit %+v, want one re-arm", ev.Audit)
	}
	if e := ev.Audit[0]; e.Who != "provider" || e.Reason != "provider retry" || e.Action != "replay" || e.From != engine.StateDead {
		t.Fatalf("audit entry %+v, want a replay from dead by provider, reason provider retry", e)
	}

	// The handler is fixed: the next retry gets its answer, and a retry
	// after that the cached one.
	healthy.Store(true)
	for i, what := range []string{"retry, handler fixed", "duplicate of the done event"} {
		if a := tn.post("syncdead", body, tn.signed(body, "msg_dead")); a.Status != 201 || a.Raw != `{"made":true}` {
			t.Fatalf("%s: %d %s, want 201 from the handler", what, a.Status, a.Raw)
		}
		if ev, _ := tn.event(key); ev.State != engine.StateDone || len(ev.Audit) != 2 {
			t.Fatalf("%s (%d): state %s, audit %+v; want done after two re-arms", what, i, ev.State.String(), ev.Audit)
		}
	}
}

// TestSyncRetryOfAFailedPendingEventIsInProgress: a sync event whose handler
// failed and that waits for its next attempt answers a provider's retry 409
// in_progress, never 2xx, and is not tried early.
func TestSyncRetryOfAFailedPendingEventIsInProgress(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(d delivery) (int, string) { return 503, "busy" })
	tn := startNodeWithSources(t, "", h.url, syncRearmTOML)
	body := []byte(`{"id":"evt_hold"}`)
	if a := tn.post("synchold", body, tn.signed(body, "msg_hold")); a.Status != http.StatusBadGateway {
		t.Fatalf("first delivery: %d %s, want 502", a.Status, a.Raw)
	}
	for range 3 {
		a := tn.post("synchold", body, tn.signed(body, "msg_hold"))
		if a.Status != http.StatusConflict || a.Body["status"] != "in_progress" || !strings.Contains(a.Raw, `"state":"pending"`) {
			t.Fatalf("retry of a failed pending event: %d %s, want 409 in_progress", a.Status, a.Raw)
		}
	}
	if n := len(h.deliveries("synchold:msg_hold")); n != 1 {
		t.Fatalf("%d deliveries, want 1 (the next attempt is an hour away)", n)
	}
}

// TestSyncDeadEventReachedByTheReplayGuardIsNotRearmed: on a sync source a
// body the replay guard matches to a dead event (another delivery id) is
// answered 502, never 2xx, and does not re-arm the event: only a retry under
// the event's own key asks again.
func TestSyncDeadEventReachedByTheReplayGuardIsNotRearmed(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(d delivery) (int, string) { return 500, "down" })
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "ghsync"
provider = "github"
secrets = ["`+githubTestSecret+`"]
forward = "%[1]s/ghsync"
mode = "sync"
forward_timeout = "2s"
lease = "5s"
max_attempts = 1
`)
	body := []byte(`{"action":"opened","number":7}`)
	if a := tn.post("ghsync", body, githubSigned(t, body, "d-1")); a.Status != http.StatusBadGateway {
		t.Fatalf("first delivery: %d %s, want 502", a.Status, a.Raw)
	}
	tn.waitState("ghsync:d-1", engine.StateDead)
	a := tn.post("ghsync", body, githubSigned(t, body, "d-2"))
	if a.Status != http.StatusBadGateway || a.Body["key"] != "ghsync:d-1" || a.Body["state"] != "dead" {
		t.Fatalf("same body under a new delivery id: %d %s, want 502 naming ghsync:d-1, dead", a.Status, a.Raw)
	}
	if ev, _ := tn.event("ghsync:d-1"); ev.State != engine.StateDead || len(ev.Audit) != 0 {
		t.Fatalf("state %s, audit %+v: want dead, not re-armed", ev.State.String(), ev.Audit)
	}
	if _, err := tn.event("ghsync:d-2"); err == nil {
		t.Fatal("the replayed body was stored under its new key")
	}
}

// TestConcurrentRetriesOfADeadSyncEvent: two retries at once re-arm the
// event once; the handler runs once, and each retry gets its answer or 409
// in_progress, never a 2xx before the handler's.
func TestConcurrentRetriesOfADeadSyncEvent(t *testing.T) {
	h := newHandler(t)
	release := make(chan struct{})
	var healthy atomic.Bool
	h.setAnswer(func(d delivery) (int, string) {
		if !healthy.Load() {
			return 500, "down"
		}
		<-release
		return 201, `{"made":true}`
	})
	tn := startNodeWithSources(t, "", h.url, syncRearmTOML)
	const key = "syncdead:msg_both"
	body := []byte(`{"id":"evt_both"}`)
	if a := tn.post("syncdead", body, tn.signed(body, "msg_both")); a.Status != http.StatusBadGateway {
		t.Fatalf("first delivery: %d %s, want 502", a.Status, a.Raw)
	}
	tn.waitState(key, engine.StateDead)
	before := len(h.deliveries(key))
	healthy.Store(true)

	answers := make(chan answer, 2)
	for range 2 {
		go func() { answers <- tn.post("syncdead", body, tn.signed(body, "msg_both")) }()
	}
	waitUntil(t, "the re-armed event at the handler", func() bool { return len(h.deliveries(key)) > before })
	select {
	case a := <-answers:
		if a.Status != http.StatusConflict || a.Body["status"] != "in_progress" {
			t.Fatalf("a retry answered before the handler: %d %s", a.Status, a.Raw)
		}
		close(release)
		if a := <-answers; a.Status != 201 {
			t.Fatalf("the other retry: %d %s, want 201", a.Status, a.Raw)
		}
	default:
		close(release)
		for range 2 {
			if a := <-answers; a.Status != 201 && a.Status != http.StatusConflict {
				t.Fatalf("retry: %d %s, want 201 or 409", a.Status, a.Raw)
			}
		}
	}
	ev := tn.waitState(key, engine.StateDone)
	if n := len(h.deliveries(key)) - before; n != 1 || len(ev.Audit) != 1 {
		t.Fatalf("%d deliveries and audit %+v after two concurrent retries, want one of each", n, ev.Audit)
	}
}
