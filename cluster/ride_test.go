package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"oncehook/engine"
)

// TestOutcomeRidesWithNextClaim: under light traffic a delivery's outcome
// waits for the next claim and shares its log entry, instead of taking an
// entry of its own that the claim would then wait for; a sync source's
// completion (its provider waits for it) and anything proposed once the
// wait is over go at once.
func TestOutcomeRidesWithNextClaim(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.RideFor = time.Minute })
	leader := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 30*time.Second)

	lease := func(key string) engine.Event {
		t.Helper()
		if _, err := leader.Claim(ctx, claimCmd(key)); err != nil {
			t.Fatal(err)
		}
		evs, err := leader.Lease(ctx, 1, time.Minute)
		if err != nil || len(evs) != 1 {
			t.Fatalf("lease %s: %v %v", key, evs, err)
		}
		return evs[0]
	}
	entries := func() uint64 { return leader.prop.entries.Load() }

	// A completion rides: it does not commit on its own, and goes in the
	// entry of the claim that comes after it.
	a := lease("src:a")
	done := make(chan error, 1)
	before := entries()
	go func() { done <- leader.Complete(ctx, a.Key, a.Token, nil, "", time.Hour) }()
	waitFor(t, "the completion queued", func() bool { return leader.prop.riders.Load() == 1 })
	select {
	case err := <-done:
		t.Fatalf("a riding completion committed alone (%v)", err)
	default:
	}
	if _, err := leader.Claim(ctx, claimCmd("src:b")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("complete: %v", err)
	}
	if got := entries() - before; got != 1 {
		t.Errorf("a completion and the next claim took %d entries, want 1", got)
	}
	if ev, err := leader.eng.Get(a.Key, false); err != nil || ev.State != engine.StateDone {
		t.Errorf("%s: %v %v, want done", a.Key, ev.State, err)
	}

	// A failure rides too.
	d := lease("src:d")
	before = entries()
	go func() { done <- leader.Fail(ctx, d.Key, d.Token, time.Second, 5, "boom", "", time.Hour, nil) }()
	waitFor(t, "the failure queued", func() bool { return leader.prop.riders.Load() == 1 })
	if _, err := leader.Claim(ctx, claimCmd("src:e")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("fail: %v", err)
	}
	if got := entries() - before; got != 1 {
		t.Errorf("a failure and the next claim took %d entries, want 1", got)
	}

	// A sync source's completion carries the handler's answer for a waiting
	// provider: it goes at once, alone.
	s := lease("src:s")
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := leader.Complete(sctx, s.Key, s.Token, &engine.Response{Status: 200, Body: []byte("ok")}, "", time.Hour); err != nil {
		t.Fatalf("sync completion waited for a claim: %v", err)
	}
}

// TestRideEndsWhenDue: with no claim coming, an outcome commits after
// RideFor.
func TestRideEndsWhenDue(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) { cfg.RideFor = 20 * time.Millisecond })
	leader := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 30*time.Second)
	if _, err := leader.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	evs, err := leader.Lease(ctx, 1, time.Minute)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	if err := leader.Complete(ctx, evs[0].Key, evs[0].Token, nil, "", time.Hour); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

// TestIdleSweepProposesNothing: a reclaim with nothing to reclaim or repair
// commits no entry; one with an ended lease does, and reclaims it.
func TestIdleSweepProposesNothing(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 30*time.Second)
	if _, err := leader.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Lease(ctx, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	before := leader.prop.entries.Load()
	for range 3 {
		if n, err := leader.Reclaim(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("idle reclaim: %d, %v", n, err)
		}
	}
	if got := leader.prop.entries.Load() - before; got != 0 {
		t.Errorf("idle reclaims proposed %d entries, want 0", got)
	}
	c.clock.advance(2 * time.Minute) // the lease has ended
	if n, err := leader.Reclaim(ctx, time.Hour); err != nil || n != 1 {
		t.Fatalf("reclaim of an ended lease: %d, %v", n, err)
	}
}

// TestIdleLeaseProposesNothing: a lease with nothing due (an empty store, an
// event already leased, a retry scheduled later) and nothing applied waiting
// for the engine's commit proposes no entry, so the
// forwarder's lease on every poll tick costs an idle cluster nothing; one
// with an event due does, and leases it. On a follower it still fails with
// ErrNotLeader.
func TestIdleLeaseProposesNothing(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	leader := c.nodes[li]
	ctx := ctxT(t, 30*time.Second)
	idle := func(what string) {
		t.Helper()
		// The FSM commits what it applied within 100 ms; until then a
		// lease looks (LeaseDue). Commit it now rather than wait.
		if err := leader.eng.Flush(); err != nil {
			t.Fatal(err)
		}
		before := leader.prop.entries.Load()
		for range 3 {
			if evs, err := leader.Lease(ctx, 8, time.Minute); err != nil || len(evs) != 0 {
				t.Fatalf("%s: idle lease: %v, %v", what, evs, err)
			}
		}
		if got := leader.prop.entries.Load() - before; got != 0 {
			t.Errorf("%s: idle leases proposed %d entries, want 0", what, got)
		}
	}
	idle("empty store")
	if _, err := c.nodes[c.follower(li)].Lease(ctx, 8, time.Minute); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("lease on a follower: %v, want ErrNotLeader", err)
	}

	if _, err := leader.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	before := leader.prop.entries.Load()
	evs, err := leader.Lease(ctx, 8, time.Minute)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease of a due event: %v, %v", evs, err)
	}
	if leader.prop.entries.Load() == before {
		t.Fatal("the lease of a due event proposed no entry")
	}
	idle("event leased")
	if err := leader.Fail(ctx, evs[0].Key, evs[0].Token, time.Hour, 5, "status 500", "", 0, nil); err != nil {
		t.Fatal(err)
	}
	idle("retry in an hour")
	c.clock.advance(2 * time.Hour)
	if evs, err := leader.Lease(ctx, 8, time.Minute); err != nil || len(evs) != 1 {
		t.Fatalf("lease of the retry once due: %v, %v", evs, err)
	}
}
