package forward

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// arrival is one request a rateSink received, at fake time.
type arrival struct {
	source  string
	attempt string
	at      time.Time
}

// rateSink records every request by source and answers with answer (nil: 200).
type rateSink struct {
	mu     sync.Mutex
	got    []arrival
	answer func(a arrival, n int, w http.ResponseWriter)
}

func (s *rateSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := arrival{r.Header.Get(HeaderSource), r.Header.Get(HeaderAttempt), time.Now()}
	s.mu.Lock()
	s.got = append(s.got, a)
	n := len(s.got)
	s.mu.Unlock()
	if s.answer != nil {
		s.answer(a, n, w)
	}
}

func (s *rateSink) of(source string) []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []arrival
	for _, a := range s.got {
		if a.source == source {
			out = append(out, a)
		}
	}
	return out
}

// runInBubble starts a Forwarder inside the current bubble and returns the
// function that stops it and waits for Run.
func runInBubble(t *testing.T, opts Options) (stop func()) {
	t.Helper()
	f := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func targets(m map[string]Target) func(string) (Target, bool) {
	return func(s string) (Target, bool) { t, ok := m[s]; return t, ok }
}

type waits struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *waits) add(source string, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[source]++
}

func (w *waits) get(source string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[source]
}

// A backlog of 200 events at max_rate 20 starts one delivery every 50 ms and
// takes about 10 s; a second, unlimited source is delivered at once meanwhile
// on the same two workers; no attempt is spent waiting. After a quiet spell
// the bucket holds a whole burst again.
func TestRateLimitBacklogSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{}
		w := &waits{}
		for i := range 200 {
			l.claim(fmt.Sprintf("limited:%03d", i), "limited", "x")
		}
		for i := range 10 {
			l.claim(fmt.Sprintf("open:%02d", i), "open", "x")
		}
		wake := make(chan struct{}, 1)
		t0 := time.Now()
		stop := runInBubble(t, Options{
			Store: l,
			Targets: targets(map[string]Target{
				"limited": {URL: "http://handler/l", MaxRate: 20},
				"open":    {URL: "http://handler/o"},
			}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      2,
			Wake:         wake,
			PollInterval: time.Hour,
			RateLimited:  w.add,
		})
		defer stop()

		time.Sleep(20 * time.Second)
		synctest.Wait()
		lim, open := h.of("limited"), h.of("open")
		if len(lim) != 200 || len(open) != 10 {
			t.Fatalf("delivered %d limited and %d open, want 200 and 10", len(lim), len(open))
		}
		for _, a := range open {
			if a.at != t0 {
				t.Errorf("open source delivered %v after start, want at once", a.at.Sub(t0))
			}
		}
		if d := lim[199].at.Sub(lim[0].at); d < 9500*time.Millisecond || d > 11*time.Second {
			t.Errorf("200 events at 20/s took %v, want about 10s", d)
		}
		for i := 1; i < len(lim); i++ {
			if gap := lim[i].at.Sub(lim[i-1].at); gap < 50*time.Millisecond {
				t.Fatalf("deliveries %d and %d only %v apart, want >= 50ms", i-1, i, gap)
			}
		}
		for _, a := range lim {
			if a.attempt != "1" {
				t.Fatalf("a delivery on attempt %s: waiting spent an attempt", a.attempt)
			}
		}
		if len(l.failLog()) != 0 {
			t.Errorf("fails recorded while waiting: %+v", l.failLog())
		}
		if n := w.get("limited"); n != 199 {
			t.Errorf("RateLimited reported %d waits, want 199", n)
		}
		if n := w.get("open"); n != 0 {
			t.Errorf("RateLimited reported %d waits for the open source", n)
		}

		// Quiet for 5 s: the bucket is full again, and 30 new events start
		// 20 at once, then one per 50 ms.
		time.Sleep(5 * time.Second)
		for i := range 30 {
			l.claim(fmt.Sprintf("limited:b%02d", i), "limited", "x")
		}
		t1 := time.Now()
		wake <- struct{}{}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		burst := h.of("limited")[200:]
		if len(burst) != 30 {
			t.Fatalf("%d of the 30 new events delivered", len(burst))
		}
		for i, a := range burst {
			want := t1
			if i >= 20 {
				want = t1.Add(time.Duration(i-19) * 50 * time.Millisecond)
			}
			if a.at != want {
				t.Errorf("burst delivery %d at %v, want %v", i, a.at.Sub(t1), want.Sub(t1))
			}
		}
	})
}

// A 429 with Retry-After: 2 delays that event's retry and holds its whole
// source for 2 s; another source is not held, and the held event waits
// without spending an attempt.
func TestRetryAfterHoldsSourceSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{answer: func(a arrival, n int, w http.ResponseWriter) {
			if n == 1 {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusTooManyRequests)
			}
		}}
		wake := make(chan struct{}, 1)
		l.claim("held:1", "held", "x")
		t0 := time.Now()
		stop := runInBubble(t, Options{
			Store: l,
			Targets: targets(map[string]Target{
				"held":  {URL: "http://handler/h", MaxAttempts: 2},
				"other": {URL: "http://handler/o"},
			}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Wake:         wake,
			PollInterval: 100 * time.Millisecond,
		})
		defer stop()

		time.Sleep(500 * time.Millisecond)
		l.claim("held:2", "held", "x")
		l.claim("other:1", "other", "x")
		wake <- struct{}{}
		time.Sleep(5 * time.Second)
		synctest.Wait()

		held, other := h.of("held"), h.of("other")
		if len(held) != 3 || len(other) != 1 {
			t.Fatalf("%d held and %d other deliveries, want 3 and 1", len(held), len(other))
		}
		if d := other[0].at.Sub(t0); d != 500*time.Millisecond {
			t.Errorf("other source delivered %v after start, want at once (500ms)", d)
		}
		for _, a := range held[1:] {
			if d := a.at.Sub(t0); d < 2*time.Second || d > 2100*time.Millisecond {
				t.Errorf("held source delivered %v after the 429, want from 2s on", d)
			}
		}
		if ev := l.get("held:2"); ev.State != engine.StateDone || ev.Attempts != 1 {
			t.Errorf("held:2 %v after %d attempts, want done after 1", ev.State, ev.Attempts)
		}
		if ev := l.get("held:1"); ev.State != engine.StateDone || ev.Attempts != 2 {
			t.Errorf("held:1 %v after %d attempts, want done after 2", ev.State, ev.Attempts)
		}
	})
}

// A hold longer than the lease cannot be waited out inside it: the event is
// handed back, once, with the hold as its retry delay, and a hand-back never
// makes an event dead even on its last attempt.
func TestHoldPastLeaseHandsBackSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{answer: func(a arrival, n int, w http.ResponseWriter) {
			if n == 1 {
				w.Header().Set("Retry-After", "120")
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}}
		wake := make(chan struct{}, 1)
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      only(Target{URL: "http://handler/src", MaxAttempts: 1, BackoffMax: time.Hour}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Wake:         wake,
			PollInterval: time.Second,
		})
		defer stop()
		time.Sleep(time.Second)
		l.claim("src:2", "src", "x")
		wake <- struct{}{}
		time.Sleep(time.Second)
		synctest.Wait()
		if ev := l.get("src:2"); ev.State != engine.StatePending || ev.LastError != ReasonRateLimited {
			t.Fatalf("src:2 %v (%q), want pending, handed back", ev.State, ev.LastError)
		}
		fails := l.failLog()
		if len(fails) != 2 || fails[1].Key != "src:2" || time.Duration(fails[1].RetryIn) != 119*time.Second {
			t.Fatalf("fails %+v, want the hand-back of s:2 for 119s", fails)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if ev := l.get("src:2"); ev.State != engine.StateDone {
			t.Errorf("src:2 %v after the hold, want done", ev.State)
		}
		if n := len(h.of("src")); n != 2 {
			t.Errorf("%d deliveries, want 2 (the 503 and s:2 after the hold)", n)
		}
	})
}

// The bucket starts with one token, holds burst at most, and books one slot
// per interval; a hold pushes every start past it.
func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := newLimiter(30 * time.Second)
	tgt := Target{MaxRate: 10, Burst: 3}.withDefaults()
	far := t0.Add(time.Hour)
	var got []time.Duration
	for range 3 {
		s, _, ok := l.book("a", tgt, t0, far)
		if !ok {
			t.Fatal("refused")
		}
		got = append(got, s.Sub(t0))
	}
	if want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("starts %v, want %v", got, want)
	}
	// An hour later the bucket holds 3 tokens, not more.
	got = got[:0]
	for range 4 {
		s, _, _ := l.book("a", tgt, far, far.Add(time.Hour))
		got = append(got, s.Sub(far))
	}
	if want := []time.Duration{0, 0, 0, 100 * time.Millisecond}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("starts after a quiet hour %v, want %v", got, want)
	}
	if s, _, ok := l.book("a", tgt, far, far.Add(150*time.Millisecond)); ok {
		t.Errorf("booked %v past the deadline", s.Sub(far))
	}
	// Unlimited sources start at once unless held.
	if s, _, _ := l.book("b", Target{}, t0, far); !s.Equal(t0) {
		t.Errorf("unlimited source starts %v late", s.Sub(t0))
	}
	if !l.setHold("b", t0, t0.Add(2*time.Second)) || l.setHold("b", t0, t0.Add(time.Second)) {
		t.Error("setHold: want a new hold reported once")
	}
	if s, _, _ := l.book("b", Target{}, t0, far); s.Sub(t0) != 2*time.Second {
		t.Errorf("held source starts %v after, want 2s", s.Sub(t0))
	}
}

// TestPauseStopsParkedEventsSynctest: a pause stops a throttled source's
// deliveries at once: the events leased before it and parked for the rate
// are handed back when their slot comes, not delivered, and never dead;
// after the resume every event is delivered.
func TestPauseStopsParkedEventsSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{}
		for i := range 20 {
			l.claim(fmt.Sprintf("limited:%02d", i), "limited", "x")
		}
		wake := make(chan struct{}, 1)
		paused := func(source string) bool {
			ss, err := l.eng.Sources()
			return err == nil && ss[source].Paused
		}
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      targets(map[string]Target{"limited": {URL: "http://handler/l", MaxRate: 2}}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      4,
			Wake:         wake,
			PollInterval: time.Second,
			Paused:       paused,
		})
		defer stop()

		time.Sleep(1200 * time.Millisecond)
		synctest.Wait()
		before := len(h.of("limited"))
		if before == 0 || before >= 20 {
			t.Fatalf("%d delivered before the pause, want some and not all", before)
		}
		if _, err := l.apply(engine.Command{Op: engine.OpPause, Source: "limited", Who: "ops", Reason: "deploy"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if after := len(h.of("limited")); after != before {
			t.Fatalf("%d deliveries after the pause (%d before it), want none", after-before, before)
		}
		for i := range 20 {
			if ev := l.get(fmt.Sprintf("limited:%02d", i)); ev.State == engine.StateDead {
				t.Fatalf("event %d went dead while paused", i)
			}
		}

		if _, err := l.apply(engine.Command{Op: engine.OpResume, Source: "limited", Who: "ops", Reason: "done"}); err != nil {
			t.Fatal(err)
		}
		wake <- struct{}{}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := len(h.of("limited")); n != 20 {
			t.Fatalf("%d of 20 delivered after the resume", n)
		}
	})
}

// mutableTargets is a config a test reloads while the Forwarder runs.
type mutableTargets struct {
	mu sync.Mutex
	m  map[string]Target
}

func (m *mutableTargets) get(s string) (Target, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.m[s]
	return t, ok
}

func (m *mutableTargets) set(s string, t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[s] = t
}

// TestRateChangeReachesTheParkedBacklogSynctest: a reload that lowers a
// source's max_rate applies to the events already leased and waiting for
// their slot, not only to those leased after it (a backlog booked at the
// old rate went on at it for up to half a lease); one that lifts the limit
// releases them at once.
func TestRateChangeReachesTheParkedBacklogSynctest(t *testing.T) {
	run := func(t *testing.T, from, to float64, check func(t *testing.T, h *rateSink, changed time.Time)) {
		synctest.Test(t, func(t *testing.T) {
			l := newLeader(t)
			h := &rateSink{}
			for i := range 60 {
				l.claim(fmt.Sprintf("limited:%03d", i), "limited", "x")
			}
			tg := &mutableTargets{m: map[string]Target{"limited": {URL: "http://handler/l", MaxRate: from}}}
			stop := runInBubble(t, Options{
				Store:        l,
				Targets:      tg.get,
				Client:       &http.Client{Transport: handlerTransport{h}},
				Workers:      2,
				Wake:         make(chan struct{}, 1),
				PollInterval: time.Second,
			})
			defer stop()
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if n := len(h.of("limited")); n < int(2*from) || n > int(2*from)+int(from)+1 {
				t.Fatalf("%d deliveries in the first 2 s at %v/s", n, from)
			}
			tg.set("limited", Target{URL: "http://handler/l", MaxRate: to})
			changed := time.Now()
			time.Sleep(10 * time.Second)
			synctest.Wait()
			check(t, h, changed)
		})
	}
	t.Run("lowered", func(t *testing.T) {
		run(t, 5, 0.5, func(t *testing.T, h *rateSink, changed time.Time) {
			// At 5/s the next 10 s would bring 50; at 0.5/s about 5, after
			// the tick (at most 1 s) that sees the change.
			after := 0
			for _, a := range h.of("limited") {
				if a.at.After(changed.Add(time.Second)) {
					after++
				}
			}
			if after > 6 {
				t.Fatalf("%d deliveries in the 9 s after lowering max_rate to 0.5/s, want at most 6", after)
			}
		})
	})
	t.Run("lifted", func(t *testing.T) {
		run(t, 1, 0, func(t *testing.T, h *rateSink, changed time.Time) {
			got := h.of("limited")
			if len(got) != 60 {
				t.Fatalf("%d of 60 delivered 10 s after the limit was lifted", len(got))
			}
			if last := got[59].at.Sub(changed); last > 2*time.Second {
				t.Fatalf("the last of the backlog went %v after the limit was lifted, want within the next tick", last)
			}
		})
	})
}

// keySink records the event key of every request, in order.
type keySink struct {
	mu   sync.Mutex
	keys []string
}

func (s *keySink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get(HeaderEventKey))
	s.mu.Unlock()
}

func (s *keySink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// Events arriving faster than max_rate for a while wait their turn: a lease
// takes no more of the source's events than can start within the lease, so
// none is handed back for want of a slot, and they go out in the order they
// came. (A lease used to take every due event, hand back those past the
// lease with their slot as their next try, and newer events took those
// slots meanwhile: some waited until the load stopped.)
func TestRateLimitedStreamKeepsItsOrderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &keySink{}
		wake := make(chan struct{}, 1)
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      targets(map[string]Target{"slow": {URL: "http://handler/s", MaxRate: 1, Burst: 1, Timeout: 2 * time.Second}}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      8,
			Wake:         wake,
			PollInterval: 500 * time.Millisecond,
			DefaultLease: 5 * time.Second,
		})
		defer stop()
		var want []string
		for i := range 60 { // 4 events every 3 s: a third over the rate, for 45 s
			key := fmt.Sprintf("slow:%03d", i)
			l.claim(key, "slow", "x")
			want = append(want, key)
			select {
			case wake <- struct{}{}:
			default:
			}
			time.Sleep(750 * time.Millisecond)
		}
		time.Sleep(30 * time.Second) // the 15 s of backlog drains
		synctest.Wait()
		if fails := l.failLog(); len(fails) != 0 {
			t.Errorf("%d events handed back, the first %+v", len(fails), fails[0])
		}
		got := h.got()
		if len(got) != len(want) {
			t.Fatalf("delivered %d of %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("delivery %d was %s, want %s (the order they came in)", i, got[i], want[i])
			}
		}
	})
}

// A drain hands the events parked for their slot back to pending, their
// attempt refunded and their slot's time as their next try, and Drain waits
// for it: a leader that stops (SIGTERM, a hand-over) no longer leaves them
// processing until their lease ends, then delivered with an attempt spent.
func TestDrainHandsParkedEventsBackSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &keySink{}
		for i := range 5 {
			l.claim(fmt.Sprintf("slow:%d", i), "slow", "x")
		}
		f := New(Options{
			Store:        l,
			Targets:      targets(map[string]Target{"slow": {URL: "http://handler/s", MaxRate: 0.5, Burst: 1, Timeout: 2 * time.Second}}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      8,
			PollInterval: time.Hour,
			DefaultLease: 12 * time.Second,
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		synctest.Wait() // one delivered, the next ones parked for their slots
		if got := h.got(); len(got) != 1 {
			t.Fatalf("delivered %v before the drain, want the first only", got)
		}
		if err := f.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		handedBack := 0
		for _, c := range l.failLog() {
			if c.Reason == ReasonStopping && c.Refund {
				handedBack++
			}
		}
		if handedBack == 0 {
			t.Fatal("no parked event handed back by the drain")
		}
		for i := 1; i < 5; i++ {
			ev := l.get(fmt.Sprintf("slow:%d", i))
			if ev.State != engine.StatePending || ev.Attempts != 0 {
				t.Errorf("%s after the drain: %s with %d attempts, want pending with none spent", ev.Key, ev.State, ev.Attempts)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// A backlog of one source whose rate times its budget is more than its
// share of the pool: its parked events make it hold its share, and with no
// other source waiting, its leases are still capped by the slots it can
// book, so none is handed back and they go out in order.
func TestRateLimitedBacklogOverItsShareSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &keySink{}
		var want []string
		for i := range 200 {
			key := fmt.Sprintf("fast:%03d", i)
			l.claim(key, "fast", "x")
			want = append(want, key)
		}
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      targets(map[string]Target{"fast": {URL: "http://handler/s", MaxRate: 8, Burst: 1, Timeout: 2 * time.Second}}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      16,
			PollInterval: 100 * time.Millisecond,
			DefaultLease: 5 * time.Second,
		})
		defer stop()
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if fails := l.failLog(); len(fails) != 0 {
			t.Errorf("%d events handed back, the first %+v", len(fails), fails[0])
		}
		if got := h.got(); !slices.Equal(got, want) {
			t.Errorf("delivered %d of 200, in another order than they came", len(got))
		}
	})
}

// A new leader that finds a rate-limited source's backlog leases no more of
// it than its bucket can start within its budget, from its first lease on:
// a first lease that took the whole backlog booked slots past the events'
// leases and handed those back behind the others. Every event is delivered
// in its order, none handed back.
func TestNewLeaderCapsALimitedBacklogSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &keySink{}
		var want []string
		for i := range 30 {
			key := fmt.Sprintf("slow:%03d", i)
			l.claim(key, "slow", "x")
			want = append(want, key)
		}
		stop := runInBubble(t, Options{
			Store:          l,
			Targets:        targets(map[string]Target{"slow": {URL: "http://handler/s", MaxRate: 1, Burst: 1, Timeout: 2 * time.Second}}),
			LimitedSources: func() []string { return []string{"slow"} },
			Client:         &http.Client{Transport: handlerTransport{h}},
			Workers:        64,
			PollInterval:   500 * time.Millisecond,
			DefaultLease:   12 * time.Second,
		})
		defer stop()
		time.Sleep(45 * time.Second) // 30 s of backlog at one a second
		synctest.Wait()
		if fails := l.failLog(); len(fails) != 0 {
			t.Errorf("%d events handed back, the first %+v", len(fails), fails[0])
		}
		if got := h.got(); !slices.Equal(got, want) {
			t.Fatalf("delivered %d of %d, in this order: %v", len(got), len(want), got)
		}
	})
}

// timeSink records when each delivery reached the handler.
type timeSink struct {
	mu sync.Mutex
	at []time.Time
}

func (s *timeSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

// runReloadableSource runs, in the current bubble, a Forwarder for source
// "r" with target tgt (rate-limited; Store a new one in rate to reload it),
// its deliveries timed by h.
func runReloadableSource(t *testing.T, tgt Target, workers int, lease time.Duration) (l *leader, h *timeSink, rate *atomic.Pointer[Target], wake chan struct{}, stop func()) {
	l, h, rate, wake = newLeader(t), &timeSink{}, &atomic.Pointer[Target]{}, make(chan struct{}, 1)
	rate.Store(&tgt)
	stop = runInBubble(t, Options{
		Store:          l,
		Targets:        func(string) (Target, bool) { return *rate.Load(), true },
		LimitedSources: func() []string { return []string{"r"} },
		Client:         &http.Client{Transport: handlerTransport{h}},
		Workers:        workers,
		Wake:           wake,
		PollInterval:   time.Second,
		DefaultLease:   lease,
	})
	return l, h, rate, wake, stop
}

// A reload that changes a source's rate keeps its burst: after a quiet
// spell the source starts max_rate_burst deliveries at once, then one per
// interval of the new rate. (The bucket was made anew with a single token
// at the first booking after the reload, and the events parked under it
// were booked a second time: seven events at 2.5/s with a burst of 3 took
// 4 s, with a 2 s gap, where they take 1.6 s.)
func TestReloadedRateKeepsItsBurstSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, h, rate, wake, stop := runReloadableSource(t, Target{URL: "http://handler/r", MaxRate: 2, Burst: 3, Timeout: 2 * time.Second}, 8, 30*time.Second)
		defer stop()
		l.claim("r:first", "r", "x") // the bucket is in use before the reload
		wake <- struct{}{}
		time.Sleep(5 * time.Second)
		rate.Store(&Target{URL: "http://handler/r", MaxRate: 2.5, Burst: 3, Timeout: 2 * time.Second})
		time.Sleep(10 * time.Second)
		synctest.Wait()
		t0 := time.Now()
		for i := range 7 {
			l.claim(fmt.Sprintf("r:%d", i), "r", "x")
		}
		wake <- struct{}{}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.at) != 8 {
			t.Fatalf("delivered %d of 8", len(h.at))
		}
		var offsets []time.Duration
		for _, at := range h.at[1:] {
			offsets = append(offsets, at.Sub(t0))
		}
		// Three at once, then one every 400 ms.
		for i, off := range offsets {
			want := time.Duration(max(0, i-2)) * 400 * time.Millisecond
			if off < want || off > want+100*time.Millisecond {
				t.Fatalf("delivery offsets %v: delivery %d at %v, want about %v", offsets, i, off, want)
			}
		}
	})
}

// slowHandBack is a store whose hand-backs each wait for a commit of their
// own, as a Raft commit would for a command sent alone.
type slowHandBack struct {
	*leader
	commit time.Duration
}

func (s slowHandBack) HandBack(ctx context.Context, key string, token uint64, retryIn time.Duration, reason string) error {
	time.Sleep(s.commit)
	return s.leader.HandBack(ctx, key, token, retryIn, reason)
}

// A drain with a throttled source's whole budget parked (a thousand
// events) hands them all back within the drain's time: one at a time, each
// waiting for its commit, it ran out of time and left hundreds processing
// with an attempt spent.
func TestDrainHandsBackAFullParkQuicklySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &keySink{}
		const n = 1100
		for i := range n {
			l.claim(fmt.Sprintf("slow:%04d", i), "slow", "x")
		}
		f := New(Options{
			Store:        slowHandBack{l, 20 * time.Millisecond},
			Targets:      targets(map[string]Target{"slow": {URL: "http://handler/s", MaxRate: 40, Burst: 1, Timeout: 10 * time.Second}}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      8,
			PollInterval: time.Hour,
			DefaultLease: 60 * time.Second,
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		synctest.Wait()
		dctx, dcancel := context.WithTimeout(context.Background(), 11*time.Second)
		defer dcancel()
		if err := f.Drain(dctx); err != nil {
			t.Fatalf("drain: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		processing, handedBack := 0, 0
		for i := range n {
			if l.get(fmt.Sprintf("slow:%04d", i)).State == engine.StateProcessing {
				processing++
			}
		}
		for _, c := range l.failLog() {
			if c.Reason == ReasonStopping && c.Refund {
				handedBack++
			}
		}
		if processing != 0 || handedBack < 900 {
			t.Fatalf("after the drain: %d processing, %d handed back (want 0, and the park's ~1000)", processing, handedBack)
		}
	})
}

// TestTinyRateStaysALimit: a rate of one delivery in centuries is a limit,
// however large its burst: computed in integers, 1e9/rate past the largest
// duration wrapped around to 1 ns, and the source had no limit at all.
func TestTinyRateStaysALimit(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{1e-9, 1}, {1e-10, 1}, {1e-12, 1}, {1e-4, 1_000_000}, {1e-12, 1_000_000}} {
		l := newLimiter(30 * time.Second)
		tgt := Target{MaxRate: tc.rate, Burst: tc.burst}
		if _, _, ok := l.book("a", tgt, t0, t0.Add(time.Hour)); !ok {
			t.Fatalf("rate %g burst %d: the first delivery waits", tc.rate, tc.burst)
		}
		if s, _, ok := l.book("a", tgt, t0, t0.Add(time.Hour)); ok || !s.After(t0.Add(time.Hour)) {
			t.Errorf("rate %g burst %d: the second delivery may start at %s (ok %v), want a slot far ahead", tc.rate, tc.burst, s.Sub(t0), ok)
		}
	}
}

// TestBudgetFollowsTheSourcesLease: a source with its own lease books slots
// within half of (its lease - its timeout), not the default lease's: with a
// timeout at the default lease it had no budget at all.
func TestBudgetFollowsTheSourcesLease(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	l := newLimiter(30 * time.Second)
	tgt := Target{MaxRate: 1, Burst: 1, Timeout: 30 * time.Second, Lease: 2 * time.Minute}
	for i := range 3 {
		if _, _, ok := l.book("a", tgt, t0, t0.Add(time.Minute)); !ok {
			t.Fatalf("slot %d refused", i)
		}
	}
	if full, _ := l.full(t0); len(full) != 0 {
		t.Fatalf("3 s of slots booked counts as over a budget of 45 s: %v", full)
	}
}
