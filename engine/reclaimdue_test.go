package engine

import "testing"

// TestReclaimDue: ReclaimDue is true exactly when a reclaim at the same time
// and horizon has work (an ended lease, a schedule beyond the horizon), and
// false again once that reclaim is applied.
func TestReclaimDue(t *testing.T) {
	h := newHarness(t)
	check := func(what string, now, horizon int64, want bool) {
		t.Helper()
		got, err := h.e.ReclaimDue(now, horizon)
		if err != nil || got != want {
			t.Fatalf("%s: ReclaimDue(now+%ds, %ds) = %v, %v; want %v", what, (now-t0)/sec, horizon/sec, got, err, want)
		}
	}
	reclaim := func(now, horizon int64) Result {
		t.Helper()
		return h.one(Command{Op: OpReclaim, Now: now, Horizon: horizon})
	}

	check("empty", t0, 0, false)
	check("empty, horizon", t0, 60*sec, false)
	h.one(claimCmd("src:a", t0))
	check("a pending event is due, not reclaimable", t0+sec, 60*sec, false)

	ev := h.one(leaseCmd(t0, 1)).Events[0] // lease until t0+30s
	check("lease running", t0+10*sec, 0, false)
	check("lease within the horizon", t0+10*sec, 60*sec, false)
	check("lease beyond the horizon", t0+sec, 10*sec, true)
	check("lease ended", t0+30*sec, 0, true)
	if r := reclaim(t0+30*sec, 0); r.N != 1 {
		t.Fatalf("reclaim of the ended lease: %+v", r)
	}
	check("after the reclaim", t0+30*sec, 0, false)

	ev = h.one(leaseCmd(t0+31*sec, 1)).Events[0]
	h.one(Command{Op: OpFail, Now: t0 + 32*sec, Key: ev.Key, Token: ev.Token, RetryIn: 100 * sec, MaxAttempts: 5, Reason: "x"})
	check("retry within the horizon", t0+33*sec, 200*sec, false)
	check("retry beyond the horizon", t0+33*sec, 10*sec, true)
	reclaim(t0+33*sec, 10*sec)
	if got := h.get("src:a").NextAttemptAt; got != t0+43*sec {
		t.Fatalf("retry after the repair at %ds, want 43s", (got-t0)/sec)
	}
	check("after the repair", t0+33*sec, 10*sec, false)
}

// TestLeaseDue: LeaseDue is true exactly while the due index holds an event
// due by then: not for an empty store, a retry scheduled later, a leased or
// done event, or a paused source's held one.
func TestLeaseDue(t *testing.T) {
	h := newHarness(t)
	check := func(what string, now int64, want bool) {
		t.Helper()
		got, err := h.e.LeaseDue(now, nil)
		if err != nil || got != want {
			t.Fatalf("%s: LeaseDue(now+%ds) = %v, %v; want %v", what, (now-t0)/sec, got, err, want)
		}
	}
	check("empty", t0, false)
	h.one(claimCmd("src:a", t0+sec))
	check("claimed after now", t0, false)
	check("claimed, due", t0+sec, true)

	ev := h.one(leaseCmd(t0+sec, 1)).Events[0]
	check("leased", t0+2*sec, false)
	h.one(Command{Op: OpFail, Now: t0 + 2*sec, Key: ev.Key, Token: ev.Token, RetryIn: 10 * sec, MaxAttempts: 5, Reason: "x"})
	check("retry scheduled later", t0+3*sec, false)
	check("retry due", t0+12*sec, true)

	h.one(Command{Op: OpPause, Now: t0 + 12*sec, Source: "src", Who: "ops", Reason: "deploy"})
	check("its source paused", t0+13*sec, false)
	h.one(Command{Op: OpResume, Now: t0 + 13*sec, Source: "src", Who: "ops", Reason: "deployed"})
	check("resumed", t0+13*sec, true)

	ev = h.one(leaseCmd(t0+14*sec, 1)).Events[0]
	h.one(Command{Op: OpComplete, Now: t0 + 15*sec, Key: ev.Key, Token: ev.Token})
	check("done", t0+16*sec, false)
}

// TestLeaseDueWithDeferredApplies: while entries applied with
// ApplyBatchDeferred wait for their commit, LeaseDue says true (the lease
// looks) and commits nothing; once they are committed it reads the file.
func TestLeaseDueWithDeferredApplies(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	due := func(what string, want bool) {
		t.Helper()
		if got, err := e.LeaseDue(t0+sec, nil); err != nil || got != want {
			t.Fatalf("%s: LeaseDue = %v, %v; want %v", what, got, err, want)
		}
	}
	due("empty", false)
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 1, Cmds: []Command{claimCmd("src:a", t0)}}}); err != nil {
		t.Fatal(err)
	}
	due("a claim applied, not committed", true)
	if e.LastApplied() != 0 {
		t.Fatalf("LeaseDue committed the pending entries (last applied %d)", e.LastApplied())
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{leaseCmd(t0+sec, 5)}}}); err != nil {
		t.Fatal(err)
	}
	due("leased, not committed", true)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	due("leased and committed", false)
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{claimCmd("src:b", t0)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	due("a claim committed", true)
}
