package forward

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// The sizer step by step: two saturated ticks ask for a step, the tick after
// it is skipped, and the two after that are weighed against the two before.
func TestPoolSizerSteps(t *testing.T) {
	type tick struct {
		sat       bool
		delivered int
		want      int
	}
	tests := []struct {
		name  string
		ticks []tick
	}{
		{"not saturated: the base stays", []tick{
			{false, 80, 8}, {false, 80, 8}, {false, 80, 8}, {false, 80, 8}, {false, 80, 8}, {false, 80, 8},
		}},
		{"one saturated tick is not enough", []tick{
			{true, 80, 8}, {false, 80, 8}, {true, 80, 8}, {false, 80, 8},
		}},
		{"a step that pays stays", []tick{
			{true, 80, 8}, {true, 80, 10}, // step: before = 160
			{true, 90, 10},                   // skipped
			{true, 100, 10}, {true, 100, 10}, // 200 >= 176: kept
			{true, 100, 10}, {true, 100, 12}, // the next step
		}},
		{"a step that does not pay is undone and held", []tick{
			{true, 80, 8}, {true, 80, 10},
			{true, 80, 10},
			{true, 84, 10}, {true, 86, 8}, // 170 < 176: undone, hold 10
			{true, 80, 8}, {true, 80, 8}, {true, 80, 8}, {true, 80, 8}, {true, 80, 8},
			{true, 80, 8}, {true, 80, 8}, {true, 80, 8}, {true, 80, 8},
			{true, 80, 10}, // the hold is over, and the ticks were saturated all along: a step again
		}},
		{"a handler that answers no 2xx earns no workers", []tick{
			{true, 0, 8}, {true, 0, 10},
			{true, 0, 10},
			{true, 0, 10}, {true, 0, 8}, // nothing before, nothing after: undone
			{true, 0, 8}, {true, 0, 8},
		}},
		{"the maximum caps a step", []tick{
			{true, 10, 8}, {true, 10, 9}, // base 8, max 9
			{true, 20, 9}, {true, 20, 9}, {true, 20, 9},
			{true, 20, 9}, {true, 20, 9}, {true, 20, 9},
		}},
		{"a limit below the pool brings it down, and caps later steps", []tick{
			{true, 80, 8}, {true, 80, 10}, {true, 100, 10}, {true, 100, 10}, {true, 100, 10}, // kept at 10
			{true, 100, 9}, // limit 9 before this tick
			{true, 100, 9}, {true, 100, 9}, {true, 100, 9},
		}},
		{"calm shrinks the pool toward its base", []tick{
			{true, 80, 8}, {true, 80, 10}, {true, 100, 10}, {true, 100, 10}, {true, 100, 10}, // kept at 10
			{false, 50, 10}, {false, 50, 10}, {false, 50, 10}, {false, 50, 10}, {false, 50, 8},
			{false, 50, 8}, {false, 50, 8}, {false, 50, 8}, {false, 50, 8}, {false, 50, 8},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			most := 64
			if tt.name == "the maximum caps a step" {
				most = 9
			}
			p := newPoolSizer(8, most)
			for i, tk := range tt.ticks {
				if tt.name == "a limit below the pool brings it down, and caps later steps" && i == 5 {
					p.limit(9)
				}
				if got := p.step(tk.sat, tk.delivered); got != tk.want {
					t.Fatalf("tick %d (saturated %v, %d delivered): size %d, want %d", i+1, tk.sat, tk.delivered, got, tk.want)
				}
			}
		})
	}
}

// Against model handlers, tick by tick: one whose deliveries grow with the
// pool takes it to the maximum; one that answers at most 100 per tick whatever
// the pool keeps it near the size that reaches that; and when the backlog is
// gone the pool returns to its base.
func TestPoolSizerFollowsTheHandler(t *testing.T) {
	const base, most, rate = 16, 256, 10 // rate: deliveries per worker per tick
	run := func(p *poolSizer, ticks int, deliver func(n int) int) (maxN int) {
		n := p.n
		for range ticks {
			d := deliver(n)
			n = p.step(true, d)
			maxN = max(maxN, n)
		}
		return maxN
	}

	p := newPoolSizer(base, most)
	if got := run(p, 100, func(n int) int { return n * rate }); p.n != most || got != most {
		t.Fatalf("a handler that scales: pool %d (largest %d) after 100 ticks, want %d", p.n, got, most)
	}

	// A step that reaches past the limit may still pay (90 -> 112 adds a
	// tenth), so the pool settles within a step above it and tries at most
	// one more.
	p = newPoolSizer(base, most)
	capped := func(n int) int { return min(n*rate, 100*rate) } // the handler's own limit: 100 at once
	if got := run(p, 200, capped); p.n < 80 || p.n > 125 || got > 125+125/4 {
		t.Fatalf("a handler at its limit of 100: pool %d, largest %d; want 80..125, never above %d", p.n, got, 125+125/4)
	}

	for range sizeCalmTicks * 20 {
		p.step(false, 10)
	}
	if p.n != base {
		t.Fatalf("after the backlog: pool %d, want the base %d", p.n, base)
	}
}

// Pool sizes of the synctest runs below: 8 workers to start with, 64 at most.
const poolBase, poolMost = 8, 64

// runPool claims events on a real engine and runs a Forwarder that may grow
// its pool from poolBase to poolMost against h for 30 s of fake time. It
// returns the leader and the pool sizes OnWorkers was told.
func runPool(t *testing.T, events int, h *concurrencySink) (*leader, []int) {
	t.Helper()
	return runPoolBodies(t, events, "x", 0, h)
}

// runPoolBodies is runPool with events of body and Options.PoolBytes.
func runPoolBodies(t *testing.T, events int, body string, poolBytes int64, h *concurrencySink) (*leader, []int) {
	t.Helper()
	l := newLeader(t)
	for i := range events {
		l.claim(fmt.Sprintf("src:%d", i), "src", body)
	}
	var sizes sizeLog
	opts := poolOptions(l, h, &sizes)
	opts.PoolBytes = poolBytes
	bubbleRun(t, opts, 30*time.Second, nil)
	return l, sizes.all()
}

// poolOptions are the Options of the pool tests: l's events to h, a pool of
// poolBase that may grow to poolMost, a tick a second, sizes told to sizes.
func poolOptions(l *leader, h *concurrencySink, sizes *sizeLog) Options {
	return Options{
		Store:        l,
		Targets:      only(Target{URL: "http://handler/s", Timeout: 10 * time.Second}),
		Client:       &http.Client{Transport: handlerTransport{h}},
		Workers:      poolBase,
		MaxWorkers:   poolMost,
		PollInterval: time.Second,
		OnWorkers:    sizes.add,
	}
}

// The pool grows for a slow handler that has room: 5,000 events, a handler
// that takes about 100 ms (fake time) and answers any number at once. A fixed
// pool of 8 delivers about 80 a second; the growing one more than half as
// many again within 30 s, never above its maximum, and every event once.
func TestPoolGrowsForASlowHandlerSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &concurrencySink{latency: slowLatency}
		l, sizes := runPool(t, 5000, h)
		got, peak := h.stats()
		if fixed := 30 * poolBase * 10; got < fixed*3/2 {
			t.Errorf("%d deliveries in 30 s; a fixed pool of %d makes about %d", got, poolBase, fixed)
		}
		if peak <= poolBase || peak > poolMost {
			t.Errorf("at most %d requests at once; want more than %d, at most %d", peak, poolBase, poolMost)
		}
		if len(sizes) < 2 || sizes[0] != poolBase || sizes[len(sizes)-1] != 0 || slicesMax(sizes) > poolMost {
			t.Errorf("pool sizes %v: want %d first, growth within %d, 0 at the end", sizes, poolBase, poolMost)
		}
		assertDeliveredOnce(t, l, h, got)
	})
}

// A handler that is itself the limit (at most 8 requests served at once, the
// others queued) gets no more than one step above the base: each step is
// undone when the deliveries do not follow.
func TestPoolStaysForASaturatedHandlerSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &concurrencySink{latency: slowLatency, serving: make(chan struct{}, poolBase)}
		l, sizes := runPool(t, 3000, h)
		got, peak := h.stats()
		if limit := poolBase + poolBase/4; slicesMax(sizes) > limit || peak > limit {
			t.Errorf("pool sizes %v, %d requests at once: want at most %d", sizes, peak, limit)
		}
		if got == 0 {
			t.Fatal("nothing delivered")
		}
		assertDeliveredOnce(t, l, h, got)
	})
}

// Bodies bound the pool: with 4 KiB bodies and 128 KiB for the pool, it
// grows from 8 for a slow handler with room, but never past 16
// (128 KiB / (2 × 4 KiB)).
func TestPoolBoundedByBodiesSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const body, poolBytes = 4 << 10, 128 << 10
		h := &concurrencySink{latency: slowLatency}
		l, sizes := runPoolBodies(t, 3000, strings.Repeat("b", body), poolBytes, h)
		got, peak := h.stats()
		if limit := poolBytes / (2 * body); slicesMax(sizes) != limit || peak > limit {
			t.Errorf("pool sizes %v, %d requests at once: want growth to %d and no further", sizes, peak, limit)
		}
		assertDeliveredOnce(t, l, h, got)
	})
}

// slowLatency is a handler's time for request n: 80 to 120 ms, varied so that
// the workers do not finish in lockstep on the fake clock.
func slowLatency(n int) time.Duration {
	return time.Duration(80+(n*37)%41) * time.Millisecond
}

// concurrencySink answers 200 after latency(n), serving at most cap(serving)
// requests at once when serving is set (the rest wait their turn, as in a
// handler's own queue), and counts requests and the most at once.
type concurrencySink struct {
	latency func(n int) time.Duration
	serving chan struct{}

	mu       sync.Mutex
	n, now   int
	peak     int
	received map[string]int
}

func (s *concurrencySink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n++
	n := s.n
	s.now++
	s.peak = max(s.peak, s.now)
	if s.received == nil {
		s.received = make(map[string]int)
	}
	s.received[r.Header.Get(HeaderIdempotencyKey)]++
	s.mu.Unlock()
	if s.serving != nil {
		s.serving <- struct{}{}
	}
	time.Sleep(s.latency(n))
	if s.serving != nil {
		<-s.serving
	}
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
}

func (s *concurrencySink) stats() (requests, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.peak
}

// assertDeliveredOnce checks that no key reached the handler twice and that
// the store has as many events done as the handler answered, less those whose
// outcome was still committing when Run ended.
func assertDeliveredOnce(t *testing.T, l *leader, h *concurrencySink, requests int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, c := range h.received {
		if c != 1 {
			t.Errorf("%s delivered %d times", k, c)
		}
	}
	done := 0
	for k := range h.received {
		if l.get(k).State == engine.StateDone {
			done++
		}
	}
	if done == 0 || done > requests {
		t.Errorf("%d events done after %d requests", done, requests)
	}
}

// sizeLog records what OnWorkers was told.
type sizeLog struct {
	mu sync.Mutex
	s  []int
}

func (l *sizeLog) add(n int) {
	l.mu.Lock()
	l.s = append(l.s, n)
	l.mu.Unlock()
}

func (l *sizeLog) all() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.s...)
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// As the pool shrinks back, its surplus workers quit: the worker goroutines
// are the pool's size again. Idle extra workers would let events queued
// beyond the size (claims reserve workers while a lease is in flight) reach
// the handler at once.
func TestPoolWorkersFollowTheSizeSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		for i := range 1500 {
			l.claim(fmt.Sprintf("src:%d", i), "src", "x")
		}
		h := &concurrencySink{latency: slowLatency}
		var sizes sizeLog
		f := New(poolOptions(l, h, &sizes))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		time.Sleep(time.Minute) // the backlog is gone after about 15 s; the pool then shrinks
		synctest.Wait()
		workers, size := f.workers.Load(), f.slots.size()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		s := sizes.all()
		if slicesMax(s) <= poolBase || size != poolBase {
			t.Fatalf("pool sizes %v, %d at the end: want growth, then back to %d", s, size, poolBase)
		}
		if int(workers) != size {
			t.Errorf("%d worker goroutines for a pool of %d", workers, size)
		}
	})
}
