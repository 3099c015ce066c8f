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

	// Under load a later lease is always running: the oldest one that
	// ended (a worker gone with a killed leader) is what is due.
	h.apply(claimCmd("src:b", t0+40*sec), claimCmd("src:c", t0+40*sec))
	h.one(leaseCmd(t0+50*sec, 1)) // one of them, until 80s
	h.one(leaseCmd(t0+70*sec, 1)) // the other, until 100s
	check("a lease ended, a later one running", t0+80*sec, 0, true)
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

// TestPayloadsDue: true exactly when a DropPayloads at now with since would
// find a payload to drop (and while applied entries wait for their commit);
// an event completed without a drop time counts only before since.
func TestPayloadsDue(t *testing.T) {
	h := newHarness(t)
	check := func(what string, now, since int64, want bool) {
		t.Helper()
		got, err := h.e.PayloadsDue(now, since)
		if err != nil || got != want {
			t.Fatalf("%s: PayloadsDue(now+%ds, since+%ds) = %v, %v; want %v", what, (now-t0)/sec, (since-t0)/sec, got, err, want)
		}
		if !want {
			// Cross-check with the command itself: nothing to drop.
			if r := h.one(Command{Op: OpDropPayloads, Now: now, Before: now, Since: since}); r.N != 0 {
				t.Fatalf("%s: PayloadsDue said no, DropPayloads dropped %d", what, r.N)
			}
		}
	}
	check("empty", t0, 1, false)
	h.one(claimCmd("src:a", t0))
	check("claimed, not done", t0+hour, 1, false)

	ev := h.one(leaseCmd(t0, 1)).Events[0]
	c := completeCmd(ev.Key, ev.Token, t0+sec)
	c.PayloadRetention = 10 * sec
	h.one(c)
	check("done, retention running", t0+10*sec, 1, false)
	check("done, retention over", t0+12*sec, 1, true)
	if r := h.one(Command{Op: OpDropPayloads, Now: t0 + 12*sec, Before: t0 + 12*sec, Since: 1}); r.N != 1 {
		t.Fatalf("dropped %d, want 1", r.N)
	}
	check("dropped", t0+hour, 1, false)

	// Completed without a drop time (as before drop times were recorded):
	// indexed at its completion, dropped only once older than since.
	h.one(claimCmd("src:legacy", t0+20*sec))
	ev = h.one(leaseCmd(t0+20*sec, 1)).Events[0]
	h.one(completeCmd(ev.Key, ev.Token, t0+21*sec))
	check("legacy, younger than since", t0+hour, t0+21*sec, false)
	check("legacy, older than since", t0+hour, t0+22*sec, true)

	// Behind it, an event with a drop time that is due.
	h.one(claimCmd("src:b", t0+30*sec))
	ev = h.one(leaseCmd(t0+30*sec, 1)).Events[0]
	c = completeCmd(ev.Key, ev.Token, t0+31*sec)
	c.PayloadRetention = sec
	h.one(c)
	check("legacy first, a due one behind it", t0+hour, t0+21*sec, true)
}

// TestPayloadsDueWithDeferredApplies: PayloadsDue reads committed state
// only: a payload a group of applied entries made due counts once the group
// is committed, and asking commits nothing.
func TestPayloadsDueWithDeferredApplies(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	c := Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src", Payload: []byte("x"), Retention: 24 * hour, LeaseFor: 30 * sec}
	lease := Command{Op: OpLease, Now: t0, Max: 1, LeaseFor: 30 * sec}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 1, Cmds: []Command{c, lease}}}); err != nil {
		t.Fatal(err)
	}
	done := Command{Op: OpComplete, Now: t0 + sec, Key: "src:a", Token: 1, PayloadRetention: sec}
	rs, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{done}}})
	if err != nil || rs[0][0].Err != nil {
		t.Fatalf("complete: %v, %v", rs, err)
	}
	if due, err := e.PayloadsDue(t0+hour, 1); err != nil || due {
		t.Fatalf("PayloadsDue = %v, %v; want false while the completion waits for its commit", due, err)
	}
	if e.LastApplied() != 0 {
		t.Fatalf("PayloadsDue committed the pending entries (last applied %d)", e.LastApplied())
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if due, err := e.PayloadsDue(t0+hour, 1); err != nil || !due {
		t.Fatalf("PayloadsDue = %v, %v; want true once committed", due, err)
	}
}

// TestLastAttemptLostIsTriedOnceMore: an attempt whose lease ran out
// unanswered (its leader lost mid-delivery) has an unknown outcome, so a
// reclaim never makes the event dead, even when it was the last attempt
// max_attempts allowed: the event is pending again, tried once more, and
// only that attempt's failure makes it dead (docs: README, the attempts
// history).
func TestLastAttemptLostIsTriedOnceMore(t *testing.T) {
	h := newHarness(t)
	h.one(claimCmd("src:a", t0))
	ev := h.one(leaseCmd(t0, 1)).Events[0] // attempt 1
	h.one(Command{Op: OpFail, Now: t0 + sec, Key: ev.Key, Token: ev.Token, RetryIn: sec, MaxAttempts: 2, Reason: "500"})
	ev = h.one(leaseCmd(t0+2*sec, 1)).Events[0] // attempt 2 of 2, lost: its lease ends at 32 s
	if r := h.one(Command{Op: OpReclaim, Now: t0 + 40*sec}); r.N != 1 {
		t.Fatalf("reclaim: %+v", r)
	}
	if got := h.get("src:a"); got.State != StatePending || got.Attempts != 2 {
		t.Fatalf("after the lost last attempt: %s, %d attempts; want pending, 2", got.State, got.Attempts)
	}
	ev = h.one(leaseCmd(t0+41*sec, 1)).Events[0]
	if ev.Attempts != 3 {
		t.Fatalf("the attempt after it is number %d, want 3", ev.Attempts)
	}
	h.one(Command{Op: OpFail, Now: t0 + 42*sec, Key: ev.Key, Token: ev.Token, RetryIn: sec, MaxAttempts: 2, Reason: "500"})
	if got := h.get("src:a"); got.State != StateDead {
		t.Fatalf("after a failed attempt past max_attempts: %s, want dead", got.State)
	}
}
