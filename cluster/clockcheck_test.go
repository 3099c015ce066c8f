package cluster

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// skewedClocks gives each node of a test cluster its own offset from the
// wall clock.
type skewedClocks struct {
	mu    sync.Mutex
	off   map[string]time.Duration
	every time.Duration // how long a comparison is kept (0: the default)
}

func (s *skewedClocks) set(id string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.off[id] = d
}

func (s *skewedClocks) tune(logs *lockedBuffer) func(*Config) {
	return func(cfg *Config) {
		id := cfg.ID
		cfg.Now = func() time.Time {
			s.mu.Lock()
			defer s.mu.Unlock()
			return time.Now().Add(s.off[id])
		}
		if s.every != 0 {
			cfg.clockEvery = s.every
		}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
}

// TestLeaderWithAFarClockHoldsExpiry: a leader whose clock runs a month
// ahead of the other voters' neither ends retention buckets nor drops
// payloads (it would forget keys a provider may still retry, and the dead
// letters kept for their dead retention), says why in its status and its
// log, and does both once the voters' clocks agree with it. A majority is
// enough: one voter off is that voter's problem; a voter that cannot be
// asked does not count as agreeing.
func TestLeaderWithAFarClockHoldsExpiry(t *testing.T) {
	var logs lockedBuffer
	clocks := &skewedClocks{off: map[string]time.Duration{}, every: time.Nanosecond} // every sweep asks
	c := newTestCluster(t, 3, clocks.tune(&logs))
	l := c.waitLeader(-1)
	leader := c.nodes[l]
	ctx := ctxT(t, 30*time.Second)

	// One event done (payload kept an hour), one dead letter kept 30 days.
	for _, k := range []string{"src:done", "src:dead"} {
		if _, err := leader.Claim(ctx, claimCmd(k)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := leader.Lease(ctx, 2, time.Hour)
	if err != nil || len(evs) != 2 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	for _, ev := range evs {
		if ev.Key == "src:done" {
			err = leader.Complete(ctx, ev.Key, ev.Token, nil, "", time.Hour)
		} else {
			err = leader.Fail(ctx, ev.Key, ev.Token, time.Second, 1, "status 500", "", 30*24*time.Hour, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	kept := func(want int) {
		t.Helper()
		for _, k := range []string{"src:done", "src:dead"} {
			ev, err := leader.Get(k, true)
			if err != nil {
				if want == 2 {
					t.Fatalf("%s gone: %v", k, err)
				}
				continue
			}
			if k == "src:done" && (ev.Payload == nil) == (want == 2) {
				t.Fatalf("%s payload kept = %v, want %v", k, ev.Payload != nil, want == 2)
			}
		}
	}
	expire := func() int {
		t.Helper()
		n, _, err := leader.Expire(ctx)
		if err != nil {
			t.Fatalf("expire: %v", err)
		}
		if _, err := leader.DropPayloads(ctx, 0, 0); err != nil {
			t.Fatalf("drop payloads: %v", err)
		}
		return n
	}

	const month = 31 * 24 * time.Hour
	fi := c.follower(l)
	f1 := c.ids[fi]
	clocks.set(c.ids[l], month)
	if n := expire(); n != 0 {
		t.Fatalf("a leader a month ahead expired %d events", n)
	}
	kept(2)
	held := leader.Status().ClockHeld
	if !strings.Contains(held, "1 of 3 voters agree") || !strings.Contains(held, "744h0m0s ahead") {
		t.Fatalf("status clock_held = %q", held)
	}
	if !strings.Contains(logs.String(), "leader's clock disagrees with the cluster") {
		t.Fatalf("no error logged:\n%s", logs.String())
	}

	// A voter that cannot be asked does not count as agreeing.
	clocks.set(f1, month)
	c.partition(fi)
	if n := expire(); n != 0 {
		t.Fatalf("with the only agreeing voter unreachable, %d events expired", n)
	}
	kept(2)
	if held := leader.Status().ClockHeld; !strings.Contains(held, f1+": not asked") {
		t.Fatalf("status clock_held = %q", held)
	}
	c.heal()

	// Two of three agree: the third voter's clock is the one that is off.
	if n := waitExpire(t, expire); n != 2 {
		t.Fatalf("with a majority agreeing, expire ended %d events, want 2", n)
	}
	kept(0)
	if held := leader.Status().ClockHeld; held != "" {
		t.Fatalf("status clock_held = %q after the majority agreed", held)
	}
	if !strings.Contains(logs.String(), "agrees with the cluster again") {
		t.Fatalf("the end of the hold is not logged:\n%s", logs.String())
	}
}

// waitExpire calls expire until it ends something: a healed peer may take a
// moment to answer again.
func waitExpire(t *testing.T, expire func() int) int {
	t.Helper()
	var n int
	waitFor(t, "an expire that ends events", func() bool { n = expire(); return n > 0 })
	return n
}

// TestClockStepAfterAPassingComparison: the leader keeps a comparison that
// passed for a while, but not past a step of its own clock: stepped a month
// ahead right after one (NTP stepping late, a VM resumed), its next sweep
// asks again and holds, instead of forgetting every key at once.
func TestClockStepAfterAPassingComparison(t *testing.T) {
	var logs lockedBuffer
	clocks := &skewedClocks{off: map[string]time.Duration{}} // the default 30 s
	c := newTestCluster(t, 3, clocks.tune(&logs))
	l := c.waitLeader(-1)
	leader := c.nodes[l]
	ctx := ctxT(t, 30*time.Second)
	if _, err := leader.Claim(ctx, claimCmd("src:done")); err != nil {
		t.Fatal(err)
	}
	evs, err := leader.Lease(ctx, 1, time.Hour)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	if err := leader.Complete(ctx, evs[0].Key, evs[0].Token, nil, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, _, err := leader.Expire(ctx); err != nil || n != 0 {
		t.Fatalf("expire with every clock agreeing, nothing due: %d %v", n, err)
	}
	clocks.set(c.ids[l], 31*24*time.Hour)
	if n, _, err := leader.Expire(ctx); err != nil || n != 0 {
		t.Fatalf("expire right after the leader's clock stepped a month: %d events ended (%v), want a hold", n, err)
	}
	if held := leader.Status().ClockHeld; !strings.Contains(held, "1 of 3 voters agree") {
		t.Fatalf("status clock_held = %q", held)
	}
}

// TestClockCheckCutShortSaysNothing: a comparison cut short by its caller
// (the sweeper of a leader losing its leadership after a freeze) holds the
// caller but is neither kept as the verdict nor logged as a disagreement;
// the next comparison, with every clock agreeing, says nothing either.
func TestClockCheckCutShortSaysNothing(t *testing.T) {
	var logs lockedBuffer
	clocks := &skewedClocks{off: map[string]time.Duration{}}
	c := newTestCluster(t, 3, clocks.tune(&logs))
	leader := c.nodes[c.waitLeader(-1)]
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	if held := leader.clockHeld(cut); held == "" {
		t.Fatal("a comparison cut short let the caller go on")
	}
	if held := leader.Status().ClockHeld; held != "" {
		t.Fatalf("status clock_held after a comparison cut short = %q, want none", held)
	}
	if held := leader.clockHeld(ctxT(t, 30*time.Second)); held != "" {
		t.Fatalf("clocks agreeing: held %q", held)
	}
	if out := logs.String(); strings.Contains(out, "disagrees") || strings.Contains(out, "agrees with the cluster again") {
		t.Fatalf("log speaks of the clocks:\n%s", out)
	}
}
