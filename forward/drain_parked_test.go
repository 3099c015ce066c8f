package forward

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/engine"
)

// handBackGate holds every HandBack at gate, after noting whether the
// forwarder's drain had already reported idle when it was called.
type handBackGate struct {
	*leader
	f          atomic.Pointer[Forwarder]
	called     chan struct{}
	gate       chan struct{}
	idleBefore atomic.Bool
}

func (g *handBackGate) HandBack(ctx context.Context, key string, token uint64, retryIn time.Duration, reason string) error {
	if f := g.f.Load(); f != nil {
		f.slots.mu.Lock()
		idle := f.slots.idle
		f.slots.mu.Unlock()
		if idle != nil {
			select {
			case <-idle:
				g.idleBefore.Store(true)
			default:
			}
		}
	}
	select {
	case g.called <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.leader.HandBack(ctx, key, token, retryIn, reason)
}

// TestDrainWaitsForAParkedEventsHandBack: a claim that reserved a worker
// before a drain hands over an event of a rate-limited source whose slot is
// ahead. The dispatcher parks it, and the worker it held goes to the parked
// count in the same step: Drain must not read idle between the two, since
// its promise is that parked events are handed back first (a hand-over
// racing that hand-back would leave the event processing until its lease
// ends, an attempt spent).
func TestDrainWaitsForAParkedEventsHandBack(t *testing.T) {
	l := newLeader(t)
	s := &sink{}
	srv := serve(t, s)
	g := &handBackGate{leader: l, called: make(chan struct{}, 1), gate: make(chan struct{})}
	tgt := Target{URL: srv.URL, MaxRate: 1, Burst: 1}
	f := New(Options{Store: g, Targets: only(tgt), Workers: 2, PollInterval: time.Hour, SweepInterval: time.Hour})
	g.f.Store(f)
	runF(t, f)
	t.Cleanup(func() {
		select {
		case <-g.gate:
		default:
			close(g.gate)
		}
	})
	waitFor(t, "the first lease ended", func() bool {
		f.slots.mu.Lock()
		defer f.slots.mu.Unlock()
		return l.leases.Load() == 1 && f.slots.leasing == 0
	})
	// e1 takes the bucket's only token.
	l.leasingClaim(f, "src:e1")
	waitFor(t, "e1 done and recorded", func() bool {
		f.slots.mu.Lock()
		defer f.slots.mu.Unlock()
		return stateIs(l, "src:e1", engine.StateDone)() && f.slots.recording == 0 && f.slots.busy == 0
	})
	// e2's claim reserves a worker, then the drain starts.
	lf, ticket := reserveSlot(t, f, "a reservation")
	drained := make(chan error, 1)
	go func() { drained <- f.Drain(context.Background()) }()
	waitFor(t, "the drain seen", f.slots.isDraining)
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: "src:e2", Source: "src", Payload: []byte("e2"),
		Retention: int64(24 * time.Hour), LeaseFor: int64(lf), LeaseNow: int64(lf)})
	if err != nil || len(res.Events) != 1 {
		t.Fatalf("claim: %+v %v", res, err)
	}
	f.DeliverLeased(ticket, res.Events[0])
	<-g.called // e2 parked for its slot, and handed back because of the drain
	if g.idleBefore.Load() {
		t.Errorf("Drain reported idle before the parked event's hand-back was even proposed")
	}
	returned := false
	select {
	case err := <-drained:
		returned = true
		t.Errorf("Drain returned (%v) while the parked event's hand-back was still in flight", err)
	default:
	}
	close(g.gate)
	if !returned {
		if err := <-drained; err != nil {
			t.Fatalf("Drain: %v", err)
		}
	}
	waitFor(t, "e2 pending again", stateIs(l, "src:e2", engine.StatePending))
	if s.n() != 1 {
		t.Errorf("handler called %d times, want 1", s.n())
	}
}
