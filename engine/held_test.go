package engine

import "testing"

// TestClaimHeld: a claim says when its new pending event is one no lease can
// take yet, so that the node wakes no lease for it (a lease per claim of a
// paused source was an entry per claim that leased nothing). Each case
// checks Held against what the next lease actually takes.
func TestClaimHeld(t *testing.T) {
	withLease := func(c Command) Command {
		c.LeaseNow, c.LeaseFor = 30*sec, 30*sec
		return c
	}
	tests := []struct {
		name   string
		before []Command
		claim  Command
		held   bool
		state  State
		leased int // events the lease after the claim takes
	}{
		{name: "a plain claim", claim: claimCmd("src:a", t0), state: StatePending, leased: 1},
		{name: "a claim of a paused source",
			before: []Command{pauseCmd("src", t0)},
			claim:  claimCmd("src:a", t0+sec), held: true, state: StatePending},
		{name: "a claim of a paused source that came with a lease",
			before: []Command{pauseCmd("src", t0)},
			claim:  withLease(claimCmd("src:a", t0+sec)), held: true, state: StatePending},
		{name: "a claim of another source than the paused one",
			before: []Command{pauseCmd("other", t0)},
			claim:  claimCmd("src:a", t0+sec), state: StatePending, leased: 1},
		{name: "a claim after a resume",
			before: []Command{pauseCmd("src", t0), resumeCmd("src", t0+sec)},
			claim:  claimCmd("src:a", t0+2*sec), state: StatePending, leased: 1},
		{name: "the first ordered event of its object",
			claim: orderedClaim("src:a", t0, "obj", 1), state: StatePending, leased: 1},
		{name: "an ordered event behind another of its object",
			before: []Command{orderedClaim("src:a", t0, "obj", 1)},
			claim:  orderedClaim("src:b", t0+sec, "obj", 2), held: true, state: StatePending, leased: 1},
		{name: "an ordered event of another object",
			before: []Command{orderedClaim("src:a", t0, "obj", 1)},
			claim:  orderedClaim("src:b", t0+sec, "obj2", 2), state: StatePending, leased: 2},
		{name: "a claim that leased its event", claim: withLease(claimCmd("src:a", t0)), state: StateProcessing},
		{name: "a duplicate",
			before: []Command{pauseCmd("src", t0), claimCmd("src:a", t0+sec)},
			claim:  claimCmd("src:a", t0+2*sec), state: StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			for _, c := range tt.before {
				if r := h.one(c); r.Err != nil {
					t.Fatalf("%v: %v", c.Op, r.Err)
				}
			}
			r := h.one(tt.claim)
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Held != tt.held || r.State != tt.state {
				t.Errorf("claim: Held %v, State %v; want %v, %v", r.Held, r.State, tt.held, tt.state)
			}
			l := h.one(leaseCmd(t0+hour, 10))
			if len(l.Events) != tt.leased {
				t.Errorf("the next lease took %d events, want %d", len(l.Events), tt.leased)
			}
		})
	}
}
