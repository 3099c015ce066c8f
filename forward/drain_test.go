package forward

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"oncehook/engine"
)

// TestDrain: a draining leader leases nothing more, lets the delivery in
// flight finish and records its outcome, and only then reports idle; the
// event that arrived meanwhile waits, and the next Run delivers it.
func TestDrain(t *testing.T) {
	l := newLeader(t)
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		if n == 1 {
			<-release
		}
	}}
	srv := serve(t, h)
	rec := &recorder{}
	opts := Options{Targets: only(Target{URL: srv.URL, Timeout: time.Minute})}
	r := start(t, l, rec, opts)
	l.claim("src:a", "src", "a")
	<-entered // a's handler is answering

	drained := make(chan error, 1)
	go func() { drained <- r.f.Drain(context.Background()) }()
	// The drain is seen by claims at once or soon: wait for it, not for time.
	waitFor(t, "claims refused a worker", func() bool {
		_, ticket, ok, _ := r.f.ReserveSlot("src")
		if ok {
			r.f.ReleaseSlot(ticket)
		}
		return !ok
	})
	// A lease that started before the drain may still be in flight: what
	// it leases is delivered and waited for. Claim b after it ended.
	waitFor(t, "no lease in flight", func() bool {
		r.f.slots.mu.Lock()
		defer r.f.slots.mu.Unlock()
		return r.f.slots.leasing == 0
	})
	leases := l.leases.Load()
	l.claim("src:b", "src", "b")
	ticks(t, l, 3) // the dispatcher polls as often as the sweeper ticks
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v while a handler was answering", err)
	default:
	}

	close(release)
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// Idle means recorded: a's outcome is in the store when Drain returns.
	if ev := l.get("src:a"); ev.State != engine.StateDone {
		t.Errorf("a is %v after Drain, want done", ev.State)
	}
	if got := l.leases.Load(); got != leases {
		t.Errorf("%d leases while draining, want none", got-leases)
	}
	if ev := l.get("src:b"); ev.State != engine.StatePending || h.n() != 1 {
		t.Errorf("b is %v, handler called %d times, want pending and 1", ev.State, h.n())
	}

	// The next term starts without the drain.
	r.stop()
	r2 := start(t, l, rec, opts)
	waitFor(t, "b delivered by the next run", stateIs(l, "src:b", engine.StateDone))
	waitFor(t, "the next run giving claims a worker", func() bool {
		_, ticket, ok, _ := r2.f.ReserveSlot("src")
		if ok {
			r2.f.ReleaseSlot(ticket)
		}
		return ok
	})
}

// TestDrainStops: Drain gives up when its context ends, and returns at once
// when nothing is in flight or the Forwarder is not running.
func TestDrainStops(t *testing.T) {
	l := newLeader(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	srv := serve(t, &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}})
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL, Timeout: time.Minute})})
	if err := f.Drain(context.Background()); err != nil {
		t.Errorf("Drain before Run: %v", err)
	}
	r := start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, Timeout: time.Minute})})
	l.claim("src:a", "src", "a")
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.f.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Drain with an ended context and a handler answering = %v, want context.Canceled", err)
	}
	close(release)
	if err := r.f.Drain(context.Background()); err != nil {
		t.Errorf("Drain after the handler answered: %v", err)
	}
	r.stop()
	if err := r.f.Drain(context.Background()); err != nil {
		t.Errorf("Drain after Run returned: %v", err)
	}
}

// TestUndrain: a leader whose hand-over failed leases and delivers again.
func TestUndrain(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	r := start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, Timeout: time.Minute})})
	waitFor(t, "the forwarder running", func() bool {
		_, ticket, ok, _ := r.f.ReserveSlot("src")
		if ok {
			r.f.ReleaseSlot(ticket)
		}
		return ok
	})
	if err := r.f.Drain(context.Background()); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	waitFor(t, "no lease in flight", func() bool {
		r.f.slots.mu.Lock()
		defer r.f.slots.mu.Unlock()
		return r.f.slots.leasing == 0
	})
	l.claim("src:a", "src", "a")
	ticks(t, l, 3)
	if ev := l.get("src:a"); ev.State != engine.StatePending {
		t.Fatalf("a is %v while drained, want pending", ev.State)
	}
	r.f.Undrain()
	waitFor(t, "a delivered after Undrain", stateIs(l, "src:a", engine.StateDone))
	if _, ticket, ok, _ := r.f.ReserveSlot("src"); !ok {
		t.Errorf("claims get no worker after Undrain")
	} else {
		r.f.ReleaseSlot(ticket)
	}
}

// TestDrainWaitsForReservations: a claim that reserved a worker before the
// drain may still commit with its lease and hand its event over: the drain
// is not idle until that reservation ended, so no leased event is left for
// a lease to run out after the hand-over of leadership.
func TestDrainWaitsForReservations(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	r := start(t, l, &recorder{}, Options{Targets: only(Target{URL: srv.URL})})
	var lf time.Duration
	var ticket uint64
	waitFor(t, "a reservation", func() bool {
		var ok bool
		lf, ticket, ok, _ = r.f.ReserveSlot("src")
		return ok
	})

	drained := make(chan error, 1)
	go func() { drained <- r.f.Drain(context.Background()) }()
	waitFor(t, "the drain seen", r.f.slots.isDraining)
	ticks(t, l, 3)
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v while a claim held a reservation", err)
	default:
	}

	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: "src:a", Source: "src", Payload: []byte("a"),
		Retention: int64(24 * time.Hour), LeaseFor: int64(lf), LeaseNow: int64(lf)})
	if err != nil || len(res.Events) != 1 {
		t.Fatalf("claim: %+v %v", res, err)
	}
	r.f.DeliverLeased(ticket, res.Events[0])
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if ev := l.get("src:a"); ev.State != engine.StateDone || h.n() != 1 {
		t.Errorf("a is %v, handler called %d times, want done and 1", ev.State, h.n())
	}
}
