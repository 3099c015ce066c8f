package intake

import (
	"context"
	"fmt"
	"testing"
	"time"

	"oncehook/engine"
)

// TestClaimDeadlinesBounds: whenever a claim starts, the context it gets
// ends no earlier than the timeout after that and no later than the timeout
// plus one step; claims of one step share a context, and a later step gets a
// new one.
func TestClaimDeadlinesBounds(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, timeout := range []time.Duration{time.Millisecond, 50 * time.Millisecond, 10 * time.Second, time.Hour} {
		t.Run(timeout.String(), func(t *testing.T) {
			d := newClaimDeadlines(timeout)
			if d.step <= 0 || d.step > maxDeadlineStep {
				t.Fatalf("step %v", d.step)
			}
			var prev context.Context
			shared := 0
			for i := 0; i < 200; i++ {
				now := t0.Add(time.Duration(i) * d.step / 7)
				ctx := d.get(now)
				dl, ok := ctx.Deadline()
				if !ok {
					t.Fatal("no deadline")
				}
				if left := dl.Sub(now); left < timeout || left > timeout+d.step {
					t.Fatalf("claim at +%v: deadline in %v, want %v..%v", now.Sub(t0), left, timeout, timeout+d.step)
				}
				if ctx == prev {
					shared++
				}
				prev = ctx
			}
			// 7 claims a step: 6 of every 7 reuse the step's context.
			if shared < 150 {
				t.Fatalf("%d of 200 claims shared a context, want most", shared)
			}
		})
	}
}

// blockingStore never commits a claim: Claim waits for its context, as the
// cluster's proposer does for a commit that does not come.
type blockingStore struct {
	*memStore
	entered  time.Time
	deadline time.Time
}

func (s *blockingStore) Claim(ctx context.Context, c engine.Command) (engine.Result, error) {
	s.entered = time.Now()
	s.deadline, _ = ctx.Deadline()
	<-ctx.Done()
	return engine.Result{}, fmt.Errorf("wait for commit: %w", ctx.Err())
}

// TestIntakeClaimTimesOut: a claim whose commit does not come is answered
// 503 with Retry-After once Options.Timeout has passed, and not before; the
// event is not stored.
func TestIntakeClaimTimesOut(t *testing.T) {
	f := newIntakeFixture(t)
	store := &blockingStore{memStore: f.store}
	const timeout = 200 * time.Millisecond
	f.in = New(Options{Store: store, Sources: f.in.sources.Load(), Timeout: timeout})
	sent := time.Now()
	a := f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_slow"})
	if a.status != 503 || a.header["Retry-After"] != "1" {
		t.Fatalf("answer %d %q (Retry-After %q), want 503 with Retry-After 1", a.status, a.body, a.header["Retry-After"])
	}
	if store.deadline.IsZero() {
		t.Fatal("the claim had no deadline")
	}
	if waited := time.Since(sent); waited < timeout {
		t.Fatalf("answered after %v, before the %v timeout", waited, timeout)
	}
	if left := store.deadline.Sub(store.entered); left > timeout+timeout/16 {
		t.Fatalf("deadline %v after the claim started, want at most %v", left, timeout+timeout/16)
	}
	if _, ok, _ := f.store.Lookup("orders:msg_slow"); ok {
		t.Fatal("a claim that timed out stored the event")
	}
}
