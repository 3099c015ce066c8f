package forward

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// Resumable handlers: a handler's Oncehook-Step is stored with Complete/Fail
// and sent back as Oncehook-Last-Step on every later attempt.

func TestStepSentBackOnRetry(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1: // charged the card, then failed
			w.Header().Set(HeaderStep, "charged")
			w.WriteHeader(http.StatusInternalServerError)
		case 2: // failed again before reaching a new step: no step header
			w.WriteHeader(http.StatusServiceUnavailable)
		default: // resumed after "charged" and finished
			w.Header().Set(HeaderStep, "shipped")
		}
	}}
	srv := serve(t, h)
	l.claim("src:steps", "src", "{}",
		engine.Header{Name: "Oncehook-Last-Step", Value: "forged by the sender"}) // never forwarded as ours
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond, MaxAttempts: 5})})

	waitFor(t, "done", stateIs(l, "src:steps", engine.StateDone))
	if h.n() != 3 {
		t.Fatalf("handler got %d requests, want 3", h.n())
	}
	for i, want := range []string{"", "charged", "charged"} {
		hd := h.hit(i).header
		if got := hd.Values(HeaderLastStep); want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("attempt %d: %s = %q, want %q", i+1, HeaderLastStep, got, want)
		}
	}
	fails := l.failLog()
	if len(fails) != 2 || fails[0].Step != "charged" || fails[1].Step != "" {
		t.Fatalf("Fail commands carried steps %+v", fails)
	}
	if ev := l.get("src:steps"); ev.Step != "shipped" {
		t.Fatalf("stored step %q, want shipped", ev.Step)
	}
}

// A step the engine would refuse is dropped by the forwarder, so the
// handler's answer is still recorded.
func TestInvalidStepIsIgnored(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderStep, strings.Repeat("s", engine.MaxStepLen+1))
	}}
	srv := serve(t, h)
	l.claim("src:long", "src", "{}")
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL})})
	waitFor(t, "done", stateIs(l, "src:long", engine.StateDone))
	if ev := l.get("src:long"); ev.Step != "" {
		t.Fatalf("an over-long step was stored: %d bytes", len(ev.Step))
	}
	for _, s := range []string{"", "a\x01", "caf\u00e9", strings.Repeat("x", engine.MaxStepLen+1)} {
		if validStep(s) {
			t.Errorf("validStep(%q) = true", s)
		}
	}
	for _, s := range []string{"1", "charged", "step 3/5: ~done~", strings.Repeat("x", engine.MaxStepLen)} {
		if !validStep(s) {
			t.Errorf("validStep(%q) = false", s)
		}
	}
}

// A worker that dies reports no step: after its lease is reclaimed, the next
// attempt carries the last stored step.
func TestStepAfterReclaim(t *testing.T) {
	l := newLeader(t)
	ctx := context.Background()
	l.claimLease("src:dies", "src", "{}", time.Second)
	evs, err := l.Lease(ctx, 1, time.Second)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	if err := l.Fail(ctx, "src:dies", evs[0].Token, 0, 5, "status 500", "reserved", 0, nil); err != nil {
		t.Fatal(err)
	}
	// A worker leases it again and dies: no Complete, no Fail.
	if evs, err = l.Lease(ctx, 1, time.Second); err != nil || len(evs) != 1 || evs[0].Step != "reserved" {
		t.Fatalf("second lease: %+v %v", evs, err)
	}
	l.advance(2 * time.Second) // the lease ends

	h := &sink{}
	srv := serve(t, h)
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL})})
	waitFor(t, "done", stateIs(l, "src:dies", engine.StateDone))
	if h.n() != 1 {
		t.Fatalf("handler got %d requests, want 1", h.n())
	}
	hd := h.hit(0).header
	if got := hd.Get(HeaderLastStep); got != "reserved" {
		t.Fatalf("after a reclaim: %s = %q, want reserved", HeaderLastStep, got)
	}
	if got := hd.Get(HeaderAttempt); got != "3" {
		t.Fatalf("attempt %q, want 3", got)
	}
	if ev := l.get("src:dies"); ev.Step != "reserved" {
		t.Fatalf("a completion without a step changed it to %q", ev.Step)
	}
}
