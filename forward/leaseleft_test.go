package forward

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// A job whose lease ended while it waited for a worker (here the
// dispatcher stalls for two leases right after leasing, as a stopped
// process or a stalled machine would) is handed back instead of sent: its
// lease was reclaimed meanwhile, and the handler gets the event once, under
// the newer lease. Sent, the stale job would reach the handler besides the
// newer one, and on an ordered source after a newer event of its object.
func TestLeaseEndedBeforeTheStartSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		var mu sync.Mutex
		var tokens []string
		h := &rateSink{answer: func(_ arrival, _ int, w http.ResponseWriter) {}}
		record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tokens = append(tokens, r.Header.Get(HeaderFencingToken))
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
		tgt := Target{URL: "http://handler/src", Timeout: 10 * time.Second}
		var calls atomic.Int32
		stalled := func(source string) (Target, bool) {
			if calls.Add(1) == 1 { // the dispatcher placing the first lease
				time.Sleep(time.Minute)
			}
			return only(tgt)(source)
		}
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:         l,
			Targets:       stalled,
			Client:        &http.Client{Transport: handlerTransport{record}},
			Workers:       2,
			PollInterval:  time.Second,
			SweepInterval: time.Second,
			DefaultLease:  30 * time.Second,
		})
		defer stop()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		ev := l.get("src:1")
		mu.Lock()
		defer mu.Unlock()
		if ev.State != engine.StateDone || len(tokens) != 1 {
			t.Fatalf("event %v; the handler got tokens %v, want it done after one request", ev.State, tokens)
		}
	})
}

// A timed-out attempt is retried no sooner than its lease's end: the
// handler may still be working on it, and forward_timeout < lease leaves it
// the lease to finish, so one handler never runs the event twice at once
// (here the handler takes 3 s of a 1 s timeout; the backoff is 100 ms).
func TestTimedOutAttemptRetriesAfterTheLeaseSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{answer: func(_ arrival, n int, w http.ResponseWriter) {
			if n == 1 {
				time.Sleep(3 * time.Second)
			}
		}}
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      only(Target{URL: "http://handler/src", Timeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			PollInterval: time.Second,
			DefaultLease: 10 * time.Second,
		})
		defer stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		got := h.of("src")
		if len(got) != 2 || l.get("src:1").State != engine.StateDone {
			t.Fatalf("%d requests, event %v; want the timeout, then a 2xx", len(got), l.get("src:1").State)
		}
		if gap := got[1].at.Sub(got[0].at); gap < 10*time.Second {
			t.Fatalf("retried %v after the timed-out attempt started, inside its 10 s lease", gap)
		}
	})
}

// stallLeader stalls the first lease that returns events after the lease
// was stamped (a slow commit, a GC pause, the process stopped): the
// forwarder receives it 25 s into a 30 s lease.
type stallLeader struct {
	*leader
	once atomic.Bool
}

func (s *stallLeader) LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) ([]engine.Event, []string, error) {
	evs, w, err := s.leader.LeaseFrom(ctx, max, leaseFor, leases, quotas, share, spare)
	if len(evs) > 0 && s.once.CompareAndSwap(false, true) {
		time.Sleep(25 * time.Second)
	}
	return evs, w, err
}

// A lease received with less left than the timeout must not be sent: the
// handler (9 s, inside the 10 s timeout) is still running at the lease's end,
// the sweeper reclaims it and it is delivered again at once.
func TestLeaseStampedLongBeforeReceiptSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &stallLeader{leader: newLeader(t)}
		var busy peak
		var mu sync.Mutex
		var tokens []string
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tokens = append(tokens, r.Header.Get(HeaderFencingToken))
			mu.Unlock()
			done := busy.enter()
			time.Sleep(9 * time.Second)
			done()
		})
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:         l,
			Targets:       only(Target{URL: "http://handler/src", Timeout: 10 * time.Second}),
			Client:        &http.Client{Transport: handlerTransport{h}},
			Workers:       2,
			PollInterval:  time.Second,
			SweepInterval: time.Second,
			DefaultLease:  30 * time.Second,
		})
		defer stop()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if busy.most.Load() > 1 {
			t.Fatalf("the handler held the event %d times at once (tokens %v)", busy.most.Load(), tokens)
		}
	})
}

// On an ordered source, a last attempt that times out makes the event dead
// only at its lease's end: dead before, it would release its object and the
// next event would reach the handler while the handler still runs the
// timed-out one (docs/architecture.md, Invariants, 10). The handler here
// keeps working after the 1 s timeout, for up to just under the 10 s lease.
func TestOrderedLastAttemptTimeoutHoldsItsObjectSynctest(t *testing.T) {
	for _, work := range []time.Duration{3 * time.Second, 9*time.Second + 900*time.Millisecond} {
		t.Run(work.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLeader(t)
				busy := &peak{}
				l.claimOrdered("src:1", "A", 1)
				l.claimOrdered("src:2", "A", 2)
				// One attempt: the sweeper did not reclaim the lease from
				// under the Fail proposed at its end.
				runOrderedToTheEnd(t, l, busy, orderedTimeoutOptions(l, busy, work), 1)
			})
		})
	}
}

// A drain (a hand-over, a stop) during that wait does not make the event
// dead early: its attempt is recorded as not the last, the object stays
// held, and the next run (the next leader) retries it once after the
// lease's end before the next event of the object goes.
func TestOrderedLastAttemptTimeoutDrainedSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		busy := &peak{}
		l.claimOrdered("src:1", "A", 1)
		l.claimOrdered("src:2", "A", 2)
		opts := orderedTimeoutOptions(l, busy, 9*time.Second+900*time.Millisecond)
		f := New(opts)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		time.Sleep(2 * time.Second) // the attempt timed out at 1 s; the worker waits for the lease's end
		if err := f.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ev := l.get("src:1"); ev.State != engine.StatePending || ev.Attempts != 1 {
			t.Fatalf("after the drain src:1 is %v with %d attempts; want pending, its one attempt not the last", ev.State, ev.Attempts)
		}
		runOrderedToTheEnd(t, l, busy, opts, 2)
	})
}

// runOrderedToTheEnd runs a forwarder for a minute and checks that the
// handler never held both events of object A, that src:1 is dead after
// attempts and src:2 done.
func runOrderedToTheEnd(t *testing.T, l *leader, busy *peak, opts Options, attempts uint32) {
	t.Helper()
	stop := runInBubble(t, opts)
	defer stop()
	time.Sleep(time.Minute)
	synctest.Wait()
	if busy.most.Load() > 1 {
		t.Fatalf("the handler held two events of object A at once")
	}
	if a, b := l.get("src:1"), l.get("src:2"); a.State != engine.StateDead || a.Attempts != attempts || b.State != engine.StateDone {
		t.Fatalf("src:1 %v after %d attempts, src:2 %v; want src:1 dead after %d and src:2 done", a.State, a.Attempts, b.State, attempts)
	}
}

// orderedTimeoutOptions: one attempt, a 1 s timeout and a 10 s lease, and
// a handler that works on src:1 for work whatever the timeout.
func orderedTimeoutOptions(l *leader, busy *peak, work time.Duration) Options {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := busy.enter()
		if r.Header.Get(HeaderEventKey) == "src:1" {
			time.Sleep(work)
		}
		done()
	})
	return Options{
		Store:        l,
		Targets:      only(Target{URL: "http://handler/src", Timeout: time.Second, MaxAttempts: 1}),
		Client:       &http.Client{Transport: asyncTransport{h}},
		PollInterval: 100 * time.Millisecond,
		DefaultLease: 10 * time.Second,
	}
}

// asyncTransport runs the handler on its own goroutine and gives up when the
// request's context ends, as a real client does; the handler keeps working.
type asyncTransport struct{ h http.Handler }

func (at asyncTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	done := make(chan *http.Response, 1)
	r2 := r.Clone(context.Background())
	go func() {
		rec := httptest.NewRecorder()
		at.h.ServeHTTP(rec, r2)
		done <- rec.Result()
	}()
	select {
	case resp := <-done:
		return resp, nil
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
}

// peak counts the requests a handler holds at once, and the most it held.
type peak struct{ now, most atomic.Int32 }

// enter counts one request in; the function it returns counts it out.
func (p *peak) enter() func() {
	n := p.now.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	return func() { p.now.Add(-1) }
}

// stalledBodyTransport answers 200 at once and then sends nothing more of
// the body until the request ends: a sync handler whose answer stalls.
type stalledBodyTransport struct{}

func (stalledBodyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: stalledBody{r.Context()}, Request: r}, nil
}

type stalledBody struct{ ctx context.Context }

func (b stalledBody) Read([]byte) (int, error) { <-b.ctx.Done(); return 0, b.ctx.Err() }
func (b stalledBody) Close() error             { return nil }

// A sync handler whose 2xx answer stalls mid-body past the timeout timed
// out like one that never answered: it may still be working, so the retry
// waits for the lease's end instead of the backoff (which would run the
// event twice at once).
func TestSyncBodyTimeoutWaitsForTheLeaseSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store: l,
			Targets: only(Target{URL: "http://handler/src", Sync: true, Timeout: time.Second,
				BackoffMin: 100 * time.Millisecond, BackoffMax: 200 * time.Millisecond, MaxAttempts: 5}),
			Client:       &http.Client{Transport: stalledBodyTransport{}},
			Workers:      1,
			PollInterval: time.Hour,
			DefaultLease: 10 * time.Second,
		})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		stop()
		fails := l.failLog()
		if len(fails) != 1 {
			t.Fatalf("%d attempts recorded, want 1", len(fails))
		}
		if f := fails[0]; time.Duration(f.RetryIn) < 8*time.Second || !strings.HasSuffix(f.Reason, "timeout") {
			t.Fatalf("the stalled answer failed with %q, retry in %s: want a timeout retried after the lease's end (about 9 s)", f.Reason, time.Duration(f.RetryIn))
		}
	})
}

// TestLeaseEnd: a lease ends at its end by the wall clock, but never later
// than its length after it was taken (or its attempt started): a wall clock
// stepped back (an hour here, on the leader that stamped the lease) would
// stretch it by the step, starting an attempt after the leader's own end of
// the lease, or holding a worker and, on an ordered source, the event's
// object that much longer.
func TestLeaseEnd(t *testing.T) {
	f := New(Options{DefaultLease: 30 * time.Second})
	leased := time.Now()
	for _, tc := range []struct {
		name     string
		until    time.Duration // the lease's end by the wall clock, from leased; 0: none given
		leaseFor time.Duration // the event's own lease length; 0: DefaultLease
		want     time.Duration // from leased
	}{
		{"in time", 8 * time.Second, 10 * time.Second, 8 * time.Second},
		{"stamped an hour ahead", time.Hour, 10 * time.Second, 10 * time.Second},
		{"stamped an hour ahead, the default length", time.Hour, 0, 30 * time.Second},
		{"already over", -time.Second, 10 * time.Second, -time.Second},
		{"no end given", 0, 0, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := engine.Event{LeaseFor: int64(tc.leaseFor)}
			if tc.until != 0 {
				ev.LeaseUntil = leased.Add(tc.until).UnixNano()
			}
			got := f.leaseEnd(&ev, leased).Sub(leased)
			if d := got - tc.want; d < -time.Second || d > time.Second {
				t.Fatalf("ends %v after the lease was taken, want %v", got, tc.want)
			}
		})
	}
}
