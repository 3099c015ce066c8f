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
