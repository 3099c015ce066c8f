package forward

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pathSink serves every source's handler in one process, by URL path: each
// path answers after its delay (none when absent), and the arrival times
// (fake time) are kept per path.
type pathSink struct {
	delay map[string]time.Duration
	mu    sync.Mutex
	at    map[string][]time.Time
}

func (s *pathSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.at == nil {
		s.at = make(map[string][]time.Time)
	}
	s.at[r.URL.Path] = append(s.at[r.URL.Path], time.Now())
	s.mu.Unlock()
	time.Sleep(s.delay[r.URL.Path])
}

func (s *pathSink) arrivals(path string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at[path]...)
}

// fairOpts delivers the sources of targets to h's paths, with a pool of 8
// that does not grow.
func fairOpts(l *leader, h http.Handler, targets map[string]Target) Options {
	return Options{
		Store: l,
		Targets: func(src string) (Target, bool) {
			tgt, ok := targets[src]
			return tgt, ok
		},
		Client:         &http.Client{Transport: handlerTransport{h}},
		Workers:        8,
		MaxWorkers:     8,
		PollInterval:   time.Second,
		SweepInterval:  time.Hour,
		ExpireInterval: time.Hour,
		DefaultLease:   5 * time.Minute,
	}
}

// slowBacklog claims n events of source "slow", whose handler takes 10 s,
// and returns the options that deliver them and those of source "fast"
// (answered at once).
func slowBacklog(t *testing.T, n int) (*leader, *pathSink, Options) {
	l := newLeader(t)
	h := &pathSink{delay: map[string]time.Duration{"/slow": 10 * time.Second}}
	for i := range n {
		l.claim(fmt.Sprintf("slow:%03d", i), "slow", "x")
	}
	opts := fairOpts(l, h, map[string]Target{
		"slow": {URL: "http://handler/slow", Timeout: time.Minute},
		"fast": {URL: "http://handler/fast"},
	})
	return l, h, opts
}

// checkPrompt fails unless want events reached path, each within most of
// since.
func checkPrompt(t *testing.T, h *pathSink, path string, want int, since time.Time, most time.Duration) {
	t.Helper()
	got := h.arrivals(path)
	if len(got) != want {
		t.Fatalf("%s got %d deliveries, want %d", path, len(got), want)
	}
	for i, at := range got {
		if wait := at.Sub(since); wait > most {
			t.Errorf("%s delivery %d came %v after its claim, want at most %v", path, i, wait, most)
		}
	}
}

// A source with a slow handler and a long backlog holds every worker while
// it is alone, but once another source has events due it gets back no more
// than its share: the other source's newer events go to their handler as
// soon as the first slow requests end, not after the backlog (100 events,
// 8 at a time, 10 s each: over two minutes).
func TestSlowSourceLeavesWorkersSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, h, opts := slowBacklog(t, 100)
		var claimed time.Time
		bubbleRun(t, opts, 40*time.Second, func() {
			time.Sleep(time.Second)
			synctest.Wait()
			if n := len(h.arrivals("/slow")); n != 8 {
				t.Errorf("%d slow requests at once while the source is alone, want all 8 workers", n)
			}
			claimed = time.Now()
			for i := range 4 {
				l.claim(fmt.Sprintf("fast:%d", i), "fast", "x")
			}
		})
		checkPrompt(t, h, "/fast", 4, claimed, 10*time.Second)
		if n := len(h.arrivals("/slow")); n < 24 {
			t.Errorf("%d slow requests in 40 s, want the workers the fast source left (at least 24)", n)
		}
	})
}

// A throttled source's backlog does not hold up another source: while the
// throttled one has slots booked far ahead, leases skip it and take the
// other's events, which go out within a poll interval of their claim.
func TestThrottledSourceDoesNotHoldOthersSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &pathSink{}
		for i := range 400 {
			l.claim(fmt.Sprintf("limited:%03d", i), "limited", "x")
		}
		opts := fairOpts(l, h, map[string]Target{
			"limited": {URL: "http://handler/limited", MaxRate: 2, Burst: 1},
			"other":   {URL: "http://handler/other"},
		})
		var claimed time.Time
		bubbleRun(t, opts, 30*time.Second, func() {
			time.Sleep(5 * time.Second)
			claimed = time.Now()
			for i := range 3 {
				l.claim(fmt.Sprintf("other:%d", i), "other", "x")
			}
		})
		checkPrompt(t, h, "/other", 3, claimed, 2*time.Second)
		got := h.arrivals("/limited")
		if n := len(got); n < 66 || n > 72 {
			t.Errorf("%d deliveries of the limited source in 35 s at 2/s", n)
		}
	})
}

// A claim carries its lease (ReserveSlot) unless its source holds its share
// of the workers while another source has events waiting, or its rate limit
// stops its leases; a refusal of one source leaves the others theirs.
func TestReserveSlotShares(t *testing.T) {
	f := New(Options{Store: newLeader(t), Targets: only(Target{URL: "http://handler/"}), Workers: 8})
	now := time.Now()
	f.lim = newLimiter(time.Minute)
	f.slots.open(8)
	defer f.slots.close()
	reserve := func(what, source string, wantOK, wantMore bool) {
		t.Helper()
		_, ticket, ok, more := f.ReserveSlot(source)
		if ok != wantOK || more != wantMore {
			t.Fatalf("%s: ReserveSlot(%q) = %v, %v; want %v, %v", what, source, ok, more, wantOK, wantMore)
		}
		if ok {
			f.ReleaseSlot(ticket)
		}
	}
	for range 4 {
		f.slots.enter("a")
	}
	if got := f.InFlight(); !maps.Equal(got, map[string]int{"a": 4}) {
		t.Fatalf("InFlight %v, want a: 4", got)
	}
	reserve("a holds its share, nobody waits", "a", true, true)
	f.slots.setWaiting([]string{"a"})
	reserve("a holds its share, only a waits", "a", true, true)
	f.slots.setWaiting([]string{"a", "b"})
	reserve("a holds its share, b waits", "a", false, true)
	reserve("b holds nothing", "b", true, true)
	f.slots.leave("a", now)
	reserve("a under its share", "a", true, true)

	// c is throttled: slots booked further ahead than half the lease.
	tgt := Target{MaxRate: 1, Burst: 1, Timeout: time.Second}
	for range 40 {
		f.lim.book("c", tgt, now, now.Add(time.Hour))
	}
	reserve("c throttled", "c", false, true)

	// Only the spare worker (one of 8) is free: a, at its share, gets it
	// only while no other source is active.
	f.slots.enter("a")
	f.slots.setWaiting(nil)
	if got := f.slots.take(7); got != 7 {
		t.Fatalf("took %d workers of 8", got)
	}
	reserve("a at its share, the spare worker free, no other source active", "a", true, true)
	f.opts.Sources = func() int { return 2 }
	reserve("a at its share, the spare worker free, another source configured", "a", false, true)
	f.opts.Sources = func() int { return 1 }
	reserve("a at its share, the spare worker free, a the only source configured", "a", true, true)
	f.opts.Sources = nil
	f.slots.enter("b")
	f.slots.leave("b", now) // b delivered just now
	reserve("a at its share, the spare worker free, b active", "a", false, true)
	reserve("b, the spare worker free", "b", true, true)
	if got := f.slots.take(1); got != 1 {
		t.Fatalf("took %d of the last worker", got)
	}
	reserve("every worker taken", "b", false, false)
}

// With two sources configured, a source past its share leaves a spare worker
// free even while it is the only one active: the other source's first events
// after a quiet spell, and its later ones, start within a poll interval
// instead of waiting for one of the slow handler's requests to end (each
// takes 10 s).
func TestSpareWorkerForConfiguredSourceSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, h, opts := slowBacklog(t, 200)
		opts.Sources = func() int { return 2 }
		var claimed []time.Time
		bubbleRun(t, opts, 40*time.Second, func() {
			time.Sleep(time.Second)
			for i, pause := range []time.Duration{12 * time.Second, 3 * time.Second, 3 * time.Second, 0} {
				claimed = append(claimed, time.Now())
				l.claim(fmt.Sprintf("fast:%d", i), "fast", "x")
				time.Sleep(pause)
			}
		})
		got := h.arrivals("/fast")
		if len(got) != len(claimed) {
			t.Fatalf("/fast got %d deliveries, want %d", len(got), len(claimed))
		}
		for i, at := range got {
			if wait := at.Sub(claimed[i]); wait > 1500*time.Millisecond {
				t.Errorf("fast:%d came %v after its claim, want within a poll interval", i, wait)
			}
		}
		// The slow source still had every worker but the spare one.
		if n := len(h.arrivals("/slow")); n < 7*5 {
			t.Errorf("/slow got %d deliveries in 59 s, want at least 35 (7 workers, 10 s each)", n)
		}
	})
}

// While another source is active, a source past its share leaves a spare
// worker free (an eighth of the pool), so that the other source's events
// start within a poll interval instead of waiting for one of the slow
// handler's requests to end.
func TestSpareWorkerForActiveSourceSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, h, opts := slowBacklog(t, 200)
		var claimed []time.Time
		bubbleRun(t, opts, 40*time.Second, func() {
			time.Sleep(time.Second)
			l.claim("fast:0", "fast", "x") // fast is not active yet: it waits for a worker
			time.Sleep(11 * time.Second)
			for i := 1; i <= 5; i++ {
				claimed = append(claimed, time.Now())
				l.claim(fmt.Sprintf("fast:%d", i), "fast", "x")
				time.Sleep(3 * time.Second)
			}
		})
		got := h.arrivals("/fast")
		if len(got) != 6 {
			t.Fatalf("/fast got %d deliveries, want 6", len(got))
		}
		for i, at := range got[1:] {
			if wait := at.Sub(claimed[i]); wait > 1500*time.Millisecond {
				t.Errorf("fast:%d came %v after its claim, want within a poll interval", i+1, wait)
			}
		}
	})
}
