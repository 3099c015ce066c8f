package forward

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
)

// runF runs f until the returned stop is called (also at cleanup).
func runF(t *testing.T, f *Forwarder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// leasingClaim claims key the way the cluster's proposer does when a worker
// is free: it reserves one of f's workers, stamps the claim with LeaseNow,
// and hands the leased event over (or gives the worker back). It reports the
// claim's result.
func (l *leader) leasingClaim(f *Forwarder, key string) engine.Result {
	l.t.Helper()
	// The forwarder's lease in flight holds every free worker for a moment.
	lf, ticket := reserveSlot(l.t.(*testing.T), f, "a free worker")
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: []byte("body of " + key),
		Retention: int64(24 * time.Hour), LeaseFor: int64(lf), LeaseNow: int64(lf)})
	if err != nil || !res.Created {
		l.t.Fatalf("claim %q: %+v %v", key, res, err)
	}
	if len(res.Events) == 1 {
		f.DeliverLeased(ticket, res.Events[0])
	} else {
		f.ReleaseSlot(ticket)
	}
	return res
}

// TestClaimLeaseDelivers: an event its claim leased goes to the handler with
// no lease command, and completes under the claim's token.
func TestClaimLeaseDelivers(t *testing.T) {
	l := newLeader(t)
	s := &sink{}
	srv := serve(t, s)
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL}), Workers: 4, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })
	res := l.leasingClaim(f, "src:a")
	if len(res.Events) != 1 || res.State != engine.StateProcessing {
		t.Fatalf("claim leased %d events, state %d", len(res.Events), res.State)
	}
	waitFor(t, "done", stateIs(l, "src:a", engine.StateDone))
	if got := string(s.hit(0).body); got != "body of src:a" {
		t.Errorf("handler got %q", got)
	}
	if ev := l.get("src:a"); ev.Token != res.Events[0].Token || ev.Attempts != 1 {
		t.Errorf("token %d attempts %d, want %d and 1", ev.Token, ev.Attempts, res.Events[0].Token)
	}
	if n := l.leases.Load(); n != 1 {
		t.Errorf("%d lease commands, want only the first", n)
	}
}

// TestClaimLeaseSharesWorkers: reservations and deliveries share the
// workers: with every worker delivering, no claim gets one, and a worker
// that finishes can be reserved again.
func TestClaimLeaseSharesWorkers(t *testing.T) {
	l := newLeader(t)
	release := make(chan struct{})
	s := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) { <-release }}
	srv := serve(t, s)
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL}), Workers: 2, PollInterval: time.Hour, SweepInterval: time.Hour})
	stop := runF(t, f)
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })
	l.leasingClaim(f, "src:a")
	l.leasingClaim(f, "src:b")
	waitFor(t, "both at the handler", func() bool { return s.n() == 2 })
	if _, _, ok, _ := f.ReserveSlot("src"); ok {
		t.Fatal("reserved a worker while every worker delivers")
	}
	close(release)
	waitFor(t, "both done", func() bool {
		return stateIs(l, "src:a", engine.StateDone)() && stateIs(l, "src:b", engine.StateDone)()
	})
	l.leasingClaim(f, "src:c") // fails the test when no worker comes free
	waitFor(t, "c done", stateIs(l, "src:c", engine.StateDone))
	stop()
	if _, _, ok, _ := f.ReserveSlot("src"); ok {
		t.Fatal("reserved a worker of a stopped forwarder")
	}
}

// TestClaimLeaseWithoutWorker: an event whose claim leased it for a
// forwarder that stopped before it got it stays processing until its lease
// ends, and is then reclaimed and delivered by the next run.
func TestClaimLeaseWithoutWorker(t *testing.T) {
	l := newLeader(t)
	s := &sink{}
	srv := serve(t, s)
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL}), Workers: 2, PollInterval: time.Hour,
		SweepInterval: 5 * time.Millisecond, DefaultLease: time.Minute})
	stop := runF(t, f)
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })
	lf, ticket := reserveSlot(t, f, "a free worker")
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: "src:a", Source: "src", Payload: []byte("x"),
		Retention: int64(24 * time.Hour), LeaseNow: int64(lf)})
	if err != nil || len(res.Events) != 1 {
		t.Fatalf("claim: %+v %v", res, err)
	}
	stop() // leadership ends between the commit and the hand-over
	f.DeliverLeased(ticket, res.Events[0])

	runF(t, f)
	ticks(t, l, 2)
	if s.n() != 0 || !stateIs(l, "src:a", engine.StateProcessing)() {
		t.Fatalf("delivered %d times, state %d, before the lease ended", s.n(), l.get("src:a").State)
	}
	l.advance(2 * time.Minute)
	waitFor(t, "reclaimed and done", stateIs(l, "src:a", engine.StateDone))
	if ev := l.get("src:a"); ev.Attempts != 2 || s.n() != 1 {
		t.Errorf("attempts %d, deliveries %d; want 2 and 1", ev.Attempts, s.n())
	}
}

// gatedLeases holds every Lease call at gate after reporting it on in (when
// nobody took the last report, the new one is dropped).
type gatedLeases struct {
	*leader
	in   chan struct{}
	gate chan struct{}
}

func (g *gatedLeases) LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) ([]engine.Event, []string, error) {
	select {
	case g.in <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done(): // the forwarder stops: a failed test must not hang
		return nil, nil, ctx.Err()
	}
	return g.leader.LeaseFrom(ctx, max, leaseFor, leases, quotas, share, spare)
}

// TestClaimLeaseDuringLease: while a lease is in flight (it took every free
// worker), claims still reserve workers, and their events go to the handler
// at once; with both workers delivering, no claim reserves one; when the
// lease then returns as many events as it asked for, every event is
// delivered, at most Workers at once.
func TestClaimLeaseDuringLease(t *testing.T) {
	l := newLeader(t)
	l.claim("src:due1", "src", "x")
	l.claim("src:due2", "src", "x")
	var mu sync.Mutex
	active, most := 0, 0
	hold := make(chan struct{})
	s := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		active++
		most = max(most, active)
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		<-hold
	}}
	srv := serve(t, s)
	g := &gatedLeases{leader: l, in: make(chan struct{}, 1), gate: make(chan struct{})}
	f := New(Options{Store: g, Targets: only(Target{URL: srv.URL}), Workers: 2, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	var once sync.Once
	release := func() { once.Do(func() { close(hold); close(g.gate) }) }
	t.Cleanup(release) // before the forwarder stops, should the test fail
	<-g.in             // the first lease is in flight and holds both workers
	l.leasingClaim(f, "src:a")
	l.leasingClaim(f, "src:b")
	waitFor(t, "a and b at the handler during the lease", func() bool { return s.n() == 2 })
	if _, _, ok, _ := f.ReserveSlot("src"); ok {
		t.Fatal("a third reservation with two workers delivering")
	}
	release() // the handler answers; this lease and later ones pass
	for _, k := range []string{"src:due1", "src:due2", "src:a", "src:b"} {
		waitFor(t, k+" done", stateIs(l, k, engine.StateDone))
	}
	mu.Lock()
	defer mu.Unlock()
	if most > 2 {
		t.Errorf("%d deliveries at once with 2 workers", most)
	}
}

// TestReservedSlotTakesTheSourcesLease: a worker reserved for a claim comes
// with the source's lease as the running config says it, which the
// proposer stamps on the claim, so that a claim taken by an intake with an
// older config is leased for the length this forwarder's forward_timeout
// fits in; a source without one gets the default.
func TestReservedSlotTakesTheSourcesLease(t *testing.T) {
	l := newLeader(t)
	targets := func(source string) (Target, bool) {
		switch source {
		case "src":
			return Target{URL: "http://127.0.0.1:1/", Lease: 2 * time.Minute}, true
		case "plain":
			return Target{URL: "http://127.0.0.1:1/"}, true
		}
		return Target{}, false
	}
	r := start(t, l, nil, Options{Targets: targets, DefaultLease: 30 * time.Second})
	for source, want := range map[string]time.Duration{"src": 2 * time.Minute, "plain": 30 * time.Second, "gone": 30 * time.Second} {
		var lf time.Duration
		var ticket uint64
		waitFor(t, "a free worker", func() bool {
			var ok bool
			lf, ticket, ok, _ = r.f.ReserveSlot(source)
			return ok
		})
		r.f.ReleaseSlot(ticket)
		if lf != want {
			t.Errorf("%s: reserved with a lease of %v, want %v", source, lf, want)
		}
	}
}

// TestReservationsAreNotWorkers: workers reserved for claims still on their
// way through Raft do not keep the dispatcher from leasing: with every
// reservation of the pool taken, a pending event is leased and delivered, and
// a further claim gets no reservation. Counted as workers, reservations
// held the whole pool for the commits' time under load, and the events that
// found no worker waited for leases that could take none.
func TestReservationsAreNotWorkers(t *testing.T) {
	l := newLeader(t)
	h := &concurrencySink{latency: func(int) time.Duration { return time.Millisecond }}
	srv := serve(t, h)
	wake := make(chan struct{}, 1)
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL}), Workers: 2, Wake: wake, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })

	// Two claims in flight, each with a reservation.
	type reservation struct {
		lf     time.Duration
		ticket uint64
	}
	var rs []reservation
	for range 2 {
		waitFor(t, "a reservation", func() bool {
			lf, ticket, ok, _ := f.ReserveSlot("src")
			if ok {
				rs = append(rs, reservation{lf, ticket})
			}
			return ok
		})
	}
	if _, _, ok, _ := f.ReserveSlot("src"); ok {
		t.Fatal("a third reservation with a pool of 2")
	}

	// An event the dispatcher must lease goes meanwhile.
	l.claim("src:due", "src", "x")
	wake <- struct{}{}
	waitFor(t, "the pending event delivered while the claims commit", stateIs(l, "src:due", engine.StateDone))

	// The claims commit and hand their events over.
	for i, r := range rs {
		key := []string{"src:a", "src:b"}[i]
		res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: []byte("x"),
			Retention: int64(24 * time.Hour), LeaseFor: int64(r.lf), LeaseNow: int64(r.lf)})
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
		f.DeliverLeased(r.ticket, res.Events[0])
	}
	for _, k := range []string{"src:a", "src:b"} {
		waitFor(t, k+" done", stateIs(l, k, engine.StateDone))
	}
	if _, most := h.stats(); most > 2 {
		t.Errorf("%d deliveries at once with 2 workers", most)
	}
}

// TestReserveCap: beyond the free workers, claims in flight may reserve up
// to reserveFactor times the pool while the events they would hand over fit
// in the pool's bytes beside the pool's own and a lease's; none before a
// body was seen.
func TestReserveCap(t *testing.T) {
	const pool = 256 << 20
	for _, c := range []struct {
		n       int
		avgBody int64
		want    int
	}{
		{256, 0, 0},           // no body seen yet
		{256, 1, 1024},        // empty bodies
		{256, 1 << 10, 1024},  // 1 KiB: reserveFactor × n
		{256, 300 << 10, 361}, // 873 bodies fit, 512 are the pool's and a lease's
		{256, 342 << 10, 254}, // 766 fit
		{256, 1 << 20, 0},     // 256 fit: none beyond the free workers
		{1024, 1 << 10, 4096}, // a grown pool
		{1024, 64 << 10, 2048},
		{16, 4 << 10, 64},
		{16, 5 << 20, 19}, // 51 fit
		{16, 9 << 20, 0},  // 28 fit
	} {
		if got := reserveCap(c.n, c.avgBody, pool); got != c.want {
			t.Errorf("reserveCap(%d, %d B) = %d, want %d", c.n, c.avgBody, got, c.want)
		}
	}
}

// TestReservationsBeyondTheFreeWorkers: once every free worker is reserved,
// more reservations go to a source without a rate limit while no other
// source is active, up to reserveCap; not to one with a rate limit, nor while
// another source is active, whose events would wait behind them.
func TestReservationsBeyondTheFreeWorkers(t *testing.T) {
	l := newLeader(t)
	srv := serve(t, &sink{})
	targets := func(src string) (Target, bool) {
		if src == "limited" {
			return Target{URL: srv.URL, MaxRate: 1000}, true
		}
		return Target{URL: srv.URL}, true
	}
	f := New(Options{Store: l, Targets: targets, Workers: 2, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })
	f.slots.setAvgBody(1 << 10) // as a tick after 1 KiB deliveries sets it
	f.slots.setPace(1e5)        // and a fast handler's pace
	f.lim.mu.Lock()
	f.lim.bucketLocked("limited", Target{MaxRate: 1000}, time.Now())
	f.lim.mu.Unlock()

	reserve := func(src string) bool {
		_, _, ok, _ := f.ReserveSlot(src)
		return ok
	}
	waitFor(t, "the free workers reserved", func() bool { return reserve("src") })
	if !reserve("limited") {
		t.Fatal("a rate-limited source got no free worker")
	}
	// No worker is free now: only src goes beyond, up to 4 × 2 in all.
	if reserve("limited") {
		t.Error("a rate-limited source reserved beyond the free workers")
	}
	for i := range 6 {
		if !reserve("src") {
			t.Fatalf("reservation %d beyond the free workers refused", i+1)
		}
	}
	if reserve("src") {
		t.Error("more reservations than reserveCap")
	}
	// Another source active: nothing beyond the free workers.
	f.slots.mu.Lock()
	f.slots.reserved = 2
	f.slots.recent["other"] = time.Now()
	f.slots.mu.Unlock()
	if reserve("src") {
		t.Error("reserved beyond the free workers while another source is active")
	}
}

// TestBeyondFits: one more event beyond the free workers goes only while
// the reservations ahead of it drain, at the last tick's pace, within half
// of what the lease leaves beside the request timeout.
func TestBeyondFits(t *testing.T) {
	for _, c := range []struct {
		reserved       int
		pace           float64
		lease, timeout time.Duration
		want           bool
	}{
		{256, 7000, 5 * time.Minute, 30 * time.Second, true}, // a fast handler: 2,100 s of margin
		{1023, 7000, 5 * time.Minute, 30 * time.Second, true},
		{256, 128, 60 * time.Second, 30 * time.Second, true}, // 256 workers, 2 s each: 1,920 fit in 15 s
		{1920, 128, 60 * time.Second, 30 * time.Second, false},
		{2, 4, 1500 * time.Millisecond, 400 * time.Millisecond, false}, // 2 workers, 500 ms each: 2.2 fit
		{1, 4, 1500 * time.Millisecond, 400 * time.Millisecond, true},
		{0, 0, time.Minute, 10 * time.Second, false},         // nothing delivered in the last tick
		{0, 1000, 10 * time.Second, 10 * time.Second, false}, // no margin
	} {
		if got := beyondFits(c.reserved, c.pace, c.lease, c.timeout); got != c.want {
			t.Errorf("beyondFits(%d reserved, %.0f/s, lease %v, timeout %v) = %v, want %v", c.reserved, c.pace, c.lease, c.timeout, got, c.want)
		}
	}
}

// TestTickPace: a tick that attempted or delivered sets the pace (0 when
// every attempt failed); a quiet one keeps the last, so that a burst after
// a quiet second is not refused the reservations its handler's pace allows.
func TestTickPace(t *testing.T) {
	for _, c := range []struct {
		attempts, delivered int64
		d                   time.Duration
		pace                float64
		ok                  bool
	}{
		{300, 301, time.Second, 301, true},
		{10, 5, 500 * time.Millisecond, 10, true},
		{50, 0, time.Second, 0, true}, // a failing handler
		{0, 3, time.Second, 3, true},  // slow requests ending
		{0, 0, time.Second, 0, false}, // quiet: keep the last
		{5, 5, 0, 0, false},
	} {
		if p, ok := tickPace(c.attempts, c.delivered, c.d); p != c.pace || ok != c.ok {
			t.Errorf("tickPace(%d, %d, %v) = %v, %v; want %v, %v", c.attempts, c.delivered, c.d, p, ok, c.pace, c.ok)
		}
	}
}

// TestSlowHandlerGetsNoReservationsBeyondItsPace: with a handler whose pace
// would start the events handed over beyond the free workers past their
// lease's usable part, claims reserve only the free workers; their events
// are delivered and none is handed back for a lease that ran out in the
// queue. A fast pace gives the same source the reservations beyond.
func TestSlowHandlerGetsNoReservationsBeyondItsPace(t *testing.T) {
	l := newLeader(t)
	h := &concurrencySink{latency: func(int) time.Duration { return 500 * time.Millisecond }}
	srv := serve(t, h)
	f := New(Options{Store: l, Targets: only(Target{URL: srv.URL, Timeout: 400 * time.Millisecond}), Workers: 2,
		DefaultLease: 1500 * time.Millisecond, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	waitFor(t, "the first lease ended", func() bool {
		f.slots.mu.Lock()
		defer f.slots.mu.Unlock()
		return l.leases.Load() == 1 && f.slots.leasing == 0
	})
	f.slots.setAvgBody(1 << 10)
	f.slots.setPace(4) // two workers, 500 ms a delivery

	type reservation struct {
		lf     time.Duration
		ticket uint64
	}
	var rs []reservation
	for {
		lf, ticket, ok, more := f.ReserveSlot("src")
		if !ok {
			if !more {
				// The pace is per source's lease: the claims after it in
				// the batch, another source's with a longer lease, may fit.
				t.Error("a refusal for the pace stopped the batch's other claims (more = false)")
			}
			break
		}
		rs = append(rs, reservation{lf, ticket})
	}
	if len(rs) != 2 {
		t.Fatalf("%d reservations at the slow pace, want the 2 free workers", len(rs))
	}
	for i, r := range rs {
		key := fmt.Sprintf("src:%d", i)
		res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: []byte("x"),
			Retention: int64(24 * time.Hour), LeaseFor: int64(r.lf), LeaseNow: int64(r.lf)})
		if err != nil || len(res.Events) != 1 {
			t.Fatalf("claim %s: %+v %v", key, res, err)
		}
		f.DeliverLeased(r.ticket, res.Events[0])
	}
	waitFor(t, "both delivered", func() bool { n, _ := h.stats(); return n == len(rs) })
	l.mu.Lock()
	for _, c := range l.fails {
		if c.Refund && c.Reason == ReasonLeaseEnded {
			t.Errorf("%s handed back: its lease ran out waiting for a worker", c.Key)
		}
	}
	l.mu.Unlock()

	// At a fast handler's pace the same source goes beyond the free
	// workers, up to reserveCap (4 x 2).
	waitFor(t, "the workers free", func() bool {
		f.slots.mu.Lock()
		defer f.slots.mu.Unlock()
		return f.slots.busy == 0 && f.slots.recording == 0
	})
	f.slots.setPace(1e4)
	n := 0
	for {
		_, ticket, ok, more := f.ReserveSlot("src")
		if !ok {
			if more {
				t.Error("reserveCap reached, but the batch's other claims are told to go on trying")
			}
			break
		}
		defer f.ReleaseSlot(ticket)
		n++
	}
	if n != reserveFactor*2 {
		t.Errorf("%d reservations at a fast pace, want reserveFactor x the pool (%d)", n, reserveFactor*2)
	}
}

// heldLeases runs every Lease call at once and holds its result at gate
// after reporting it on in (when nobody took the last report, the new one
// is dropped): a lease whose commit is slow.
type heldLeases struct {
	*leader
	in   chan struct{}
	gate chan struct{}
}

func (h *heldLeases) LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) ([]engine.Event, []string, error) {
	evs, waiting, err := h.leader.LeaseFrom(ctx, max, leaseFor, leases, quotas, share, spare)
	select {
	case h.in <- struct{}{}:
	default:
	}
	select {
	case <-h.gate:
	case <-ctx.Done(): // the forwarder stops: a failed test must not hang
	}
	return evs, waiting, err
}

// TestClaimLeasedEventsGoDuringALease: while a lease commits, the events
// claims leased go to their workers at once. The dispatcher waited for its
// lease's commit before it placed them, and under load, with a lease
// proposed whenever a claim found no worker, most events waited a commit
// more, seconds when the disk was slow.
func TestClaimLeasedEventsGoDuringALease(t *testing.T) {
	l := newLeader(t)
	s := &sink{}
	srv := serve(t, s)
	g := &gatedLeases{leader: l, in: make(chan struct{}, 1), gate: make(chan struct{})}
	f := New(Options{Store: g, Targets: only(Target{URL: srv.URL}), Workers: 2, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	var once sync.Once
	open := func() { once.Do(func() { close(g.gate) }) }
	t.Cleanup(open) // before the forwarder stops, should the test fail
	<-g.in          // the first lease is in flight
	l.leasingClaim(f, "src:a")
	waitFor(t, "a delivered while the lease commits", stateIs(l, "src:a", engine.StateDone))
	open()
}

// TestWakeDuringALeaseLeasesAgain: events that came due while a lease was
// committing are leased after it, though that lease, proposed before them,
// came back short.
func TestWakeDuringALeaseLeasesAgain(t *testing.T) {
	l := newLeader(t)
	s := &sink{}
	srv := serve(t, s)
	h := &heldLeases{leader: l, in: make(chan struct{}, 1), gate: make(chan struct{})}
	wake := make(chan struct{}, 1)
	f := New(Options{Store: h, Targets: only(Target{URL: srv.URL}), Workers: 2, Wake: wake, PollInterval: time.Hour, SweepInterval: time.Hour})
	runF(t, f)
	<-h.in // the first lease found nothing and is committing
	l.claim("src:a", "src", "a")
	wake <- struct{}{}
	waitFor(t, "the wake taken", func() bool { return len(wake) == 0 })
	close(h.gate)
	waitFor(t, "a delivered", stateIs(l, "src:a", engine.StateDone))
}

// reserveSlot waits until f reserves a worker for a claim of source "src"
// (what: the wait's name) and returns the lease length and ticket.
func reserveSlot(t *testing.T, f *Forwarder, what string) (time.Duration, uint64) {
	t.Helper()
	var lf time.Duration
	var ticket uint64
	waitFor(t, what, func() bool {
		var ok bool
		lf, ticket, ok, _ = f.ReserveSlot("src")
		return ok
	})
	return lf, ticket
}
