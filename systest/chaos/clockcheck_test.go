package chaos

import (
	"testing"
	"time"
)

// TestDoubleRunsUnderALeaderClockJump: an overlap whose first lease the
// leader's clock ended early (a forward jump) is a reclaim when the first
// run did not apply its effect, and a double run otherwise or without a jump.
func TestDoubleRunsUnderALeaderClockJump(t *testing.T) {
	sec := int64(time.Second)
	ahead := func(d time.Duration) func(int64, int64) int64 {
		return func(int64, int64) int64 { return int64(d) }
	}
	for _, tc := range []struct {
		name        string
		first       string // outcome of the earlier run
		leaderAhead func(int64, int64) int64
		wantDouble  int
		wantClock   int
	}{
		{"no jump: a double run", "fenced", nil, 1, 0},
		{"jump of 10 min, first run fenced: a reclaim", "fenced", ahead(10 * time.Minute), 0, 1},
		{"jump of 10 min, first run failed: a reclaim", "fail", ahead(10 * time.Minute), 0, 1},
		{"jump of 10 min, first run applied: a double run", "ok", ahead(10 * time.Minute), 1, 0},
		{"jump shorter than what was left of the lease: a double run", "fenced", ahead(100 * time.Millisecond), 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const key = "orders:k1"
			runs := []hrun{
				{Key: key, Token: 5, Start: 10 * sec, End: 12 * sec, Outcome: tc.first},
				{Key: key, Token: 6, Start: 10*sec + sec/2, End: 11 * sec, Outcome: "ok"},
			}
			final := map[string]finalEvent{key: {Key: key, State: "done", Token: 6}}
			r := &result{}
			checkHistory(r, nil, final, runs, timeline{leaderAhead: tc.leaderAhead}, "")
			if r.DoubleRuns != tc.wantDouble || r.ClockReclaims != tc.wantClock {
				t.Fatalf("double runs %d, clock reclaims %d; want %d, %d", r.DoubleRuns, r.ClockReclaims, tc.wantDouble, tc.wantClock)
			}
		})
	}
}

// TestLeaderAhead: the growth of the leader's offset between two instants,
// from S11's phases; follower phases and phases whose leader changed do not
// count, and a change may be picked up late.
func TestLeaderAhead(t *testing.T) {
	l, f := &cnode{id: "node1"}, &cnode{id: "node2"}
	s := &srun{g: &loadGen{}}
	s.g.base = time.Unix(1000, 0)
	b := s.g.base.UnixNano()
	sec := int64(time.Second)
	s.phases = []clockPhase{
		{node: f, leader: l, off: 10 * time.Minute, from: 0, to: 12 * sec},
		{node: l, leader: l, off: 10 * time.Minute, from: 20 * sec, to: 32 * sec},
		{node: l, leader: l, off: -10 * time.Minute, from: 32 * sec, to: 44 * sec},
		{node: l, leader: nil, off: 6 * time.Second, from: 44 * sec, to: 56 * sec},
	}
	for _, tc := range []struct {
		name     string
		from, to int64
		want     time.Duration
	}{
		{"before any leader phase", 1 * sec, 5 * sec, 0},
		{"across the leader's +10 min", 19 * sec, 25 * sec, 10 * time.Minute},
		{"inside the +10 min phase", 22 * sec, 25 * sec, 0},
		{"across +10 min to -10 min (backwards)", 30 * sec, 35 * sec, 0},
		{"just after the switch: +10 min may still be in force", 31 * sec, 32*sec + 100*int64(time.Millisecond), 0},
		{"from -10 min back to +6 s under a changed leader", 40 * sec, 50 * sec, 10 * time.Minute},
		{"picked up late at the start of +10 min", 20*sec + 100*int64(time.Millisecond), 25 * sec, 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := time.Duration(s.leaderAhead(b+tc.from, b+tc.to)); got != tc.want {
				t.Fatalf("leaderAhead = %v, want %v", got, tc.want)
			}
		})
	}
}
