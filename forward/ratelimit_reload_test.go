package forward

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// A reload that changes a source's rate while events of it are parked gives
// it no second burst: the source just spent its burst, so with burst 3 no
// more than 3 deliveries start in the following second and a half. (The
// parked events' slots were given back at the new rate after the share in
// use had left them out already: a whole second burst.)
func TestReloadWithParkedEventsGivesNoSecondBurstSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, h, rate, wake, stop := runReloadableSource(t, Target{URL: "http://handler/r", MaxRate: 0.5, Burst: 3, Timeout: 2 * time.Second}, 16, time.Minute)
		defer stop()
		l.claim("r:first", "r", "x")
		wake <- struct{}{}
		time.Sleep(20 * time.Second) // idle: the bucket is full again
		synctest.Wait()
		t0 := time.Now()
		for i := range 10 {
			l.claim(fmt.Sprintf("r:%d", i), "r", "x")
		}
		wake <- struct{}{}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		// 3 started, 7 parked at 2 s intervals. Reload: a slightly lower rate.
		rate.Store(&Target{URL: "http://handler/r", MaxRate: 0.4, Burst: 3, Timeout: 2 * time.Second})
		time.Sleep(40 * time.Second)
		synctest.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		var offsets []time.Duration
		for _, at := range h.at[1:] {
			offsets = append(offsets, at.Sub(t0))
		}
		n := 0
		for _, off := range offsets {
			if off < 1500*time.Millisecond {
				n++
			}
		}
		if n > 3 {
			t.Errorf("%d deliveries started within 1.5 s with max_rate_burst 3 (a reload while events were parked gave a second burst): %v", n, offsets)
		}
	})
}

// A source's first lease after a reload turned its rate on is capped by its
// bucket's room, also when it was delivered unlimited before (its bucket
// then existed without a rate, and ensure left it so); a source never seen
// is capped as well.
func TestRateTurnedOnFirstLeaseIsCapped(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := newLimiter(30 * time.Second)
	// Unlimited, one delivery booked: the bucket exists with no rate.
	if _, _, ok := l.book("a", Target{}.withDefaults(), t0, t0.Add(time.Hour)); !ok {
		t.Fatal("refused")
	}
	limited := Target{MaxRate: 1, Burst: 1, Timeout: 2 * time.Second}
	targets := func(string) (Target, bool) { return limited, true }
	now := t0.Add(time.Minute)
	l.ensure([]string{"a", "b"}, targets, now)
	q := l.room(nil, now, 100, nil)
	capped := map[string]bool{}
	for _, x := range q {
		capped[x.Source] = x.Hard
	}
	if !capped["b"] {
		t.Fatalf("control: a never-seen limited source b is not capped: %+v", q)
	}
	if !capped["a"] {
		t.Errorf("source a, whose rate a reload turned on, is not capped on its first lease: quotas %+v", q)
	}
}

// A bucket whose rate a reload turned on holds a single token, as a new one
// does (the source's traffic before, unlimited, says nothing of its burst).
func TestRateTurnedOnHoldsOneToken(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := newLimiter(30 * time.Second)
	far := t0.Add(time.Hour)
	for range 50 { // busy while unlimited
		l.book("a", Target{}.withDefaults(), t0, far)
	}
	tgt := Target{MaxRate: 1, Burst: 5, Timeout: 2 * time.Second}
	var starts []time.Duration
	for range 5 {
		s, _, _ := l.book("a", tgt, t0, far)
		starts = append(starts, s.Sub(t0))
	}
	if starts[0] != 0 || starts[1] != time.Second {
		t.Errorf("starts after a reload turned the rate on: %v, want a single token (now, then one a second)", starts)
	}
}

// TestReloadChargesParkedEventsOnce: a reload while parked events are due
// but not yet started (every worker busy) gives their old slots back before
// it weighs the bucket, as they are booked again under the new rate: each
// is charged once. Burst 3 at 0.5/s: 3 start at t0, 7 park at
// t0+2s..t0+14s; at t0+14.5s none of the 7 has started and a reload sets
// 0.4/s. Only 3 deliveries ever started, 14.5 s ago: the bucket is full, and
// the first 3 rebooked events start at once.
func TestReloadChargesParkedEventsOnce(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := newLimiter(10 * time.Minute)
	far := t0.Add(time.Hour)
	old := Target{MaxRate: 0.5, Burst: 3, Timeout: 2 * time.Second}.withDefaults()
	// One delivery a minute before: the bucket is full again at t0.
	if _, _, ok := l.book("r", old, t0.Add(-time.Minute), far); !ok {
		t.Fatal("refused")
	}
	var gen uint64
	for range 10 {
		_, g, ok := l.book("r", old, t0, far)
		if !ok {
			t.Fatal("refused")
		}
		gen = g
	}
	// The dispatcher's count: 7 of them parked under this generation.
	l.parked = func(src string, g uint64) int {
		if src == "r" && g == gen {
			return 7
		}
		return 0
	}
	now := t0.Add(14500 * time.Millisecond)
	nw := Target{MaxRate: 0.4, Burst: 3, Timeout: 2 * time.Second}.withDefaults()
	// What rebookChangedRates does on its tick: apply the rate, see the gen moved.
	if g := l.gens(map[string]*Target{"r": &nw}, now)["r"]; g == gen {
		t.Fatal("control: gen did not move")
	}
	// The 7 parked events are popped (rebook) and placed again.
	var starts []time.Duration
	for range 7 {
		s, _, _ := l.book("r", nw, now, far)
		starts = append(starts, s.Sub(now))
	}
	if starts[0] != 0 || starts[2] != 0 || starts[3] == 0 {
		t.Errorf("rebooked starts after the reload, from now: %v; want the first 3 at once (3 deliveries in 14.5 s, burst 3), then one per interval", starts)
	}
}
