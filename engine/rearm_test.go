package engine

import (
	"errors"
	"testing"
)

// TestRearmWaitsForATimedOutAttempt: a provider's re-arm (a replay with
// OnlyFrom dead) of an event whose last attempt timed out is refused while
// that attempt's lease runs by the command's own time, the leader's; the
// event is left as it was. An attempt that failed otherwise, an operator's
// replay and an older writer's entry re-arm at once.
func TestRearmWaitsForATimedOutAttempt(t *testing.T) {
	const k = "src:a"
	const lease = 30 * sec
	for _, tc := range []struct {
		name     string
		failure  string
		after    int64 // the re-arm's Now after the attempt's start
		operator bool  // a replay without OnlyFrom
		cmdLease int64 // the re-arm's LeaseFor (the source's lease)
		format   uint8 // 0: this binary's
		wantErr  error
	}{
		{"a timeout, its lease running", AttemptTimeout, 10 * sec, false, lease, 0, ErrLastAttemptRunning},
		{"a stalled answer, its lease running", "read body: timeout", 10 * sec, false, lease, 0, ErrLastAttemptRunning},
		{"a timeout, its lease over", AttemptTimeout, lease, false, lease, 0, nil},
		{"a timeout, the source's lease longer", AttemptTimeout, lease, false, 2 * lease, 0, ErrLastAttemptRunning},
		{"a failure, not a timeout", "status 500", sec, false, lease, 0, nil},
		{"an operator's replay", AttemptTimeout, 10 * sec, true, 0, 0, nil},
		{"stamped an hour ahead", AttemptTimeout, -hour, false, lease, 0, nil},
		{"an older writer's entry", AttemptTimeout, 10 * sec, false, lease, formatRearmWait - 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			h.one(claimCmd(k, t0))
			r := h.one(leaseCmd(t0+sec, 10))
			start := t0 + sec
			fail := failCmd(k, r.Events[0].Token, start+lease, 1)
			fail.Attempt = &Attempt{At: start, Took: lease, Error: tc.failure}
			if r := h.one(fail); r.Err != nil || r.State != StateDead {
				t.Fatalf("fail = %+v, want dead", r)
			}
			before := h.get(k)
			c := Command{Op: OpReplay, Now: start + tc.after, Keys: []string{k}, OnlyFrom: StateDead,
				LeaseFor: tc.cmdLease, Who: "provider", Reason: "provider retry", format: tc.format}
			if tc.operator {
				c.OnlyFrom, c.Who = 0, "ops"
			}
			r = h.one(c)
			if !errors.Is(r.Err, tc.wantErr) && r.Err != tc.wantErr {
				t.Fatalf("re-arm = %+v, want error %v", r, tc.wantErr)
			}
			ev := h.get(k)
			if tc.wantErr != nil {
				if r.N != 0 || r.State != StateDead || ev.State != StateDead || len(ev.Audit) != 0 || ev.UpdatedAt != before.UpdatedAt {
					t.Fatalf("refused re-arm: result %+v, event %+v; want it left dead", r, ev)
				}
				return
			}
			if r.N != 1 || ev.State != StatePending || len(ev.Audit) != 1 {
				t.Fatalf("re-arm: result %+v, event %+v; want it pending", r, ev)
			}
		})
	}
}
