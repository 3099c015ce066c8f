package engine

import (
	"bytes"
	"testing"
)

// leasingClaim is a claim of key that carries its lease.
func leasingClaim(key string, now int64) Command {
	c := claimCmd(key, now)
	c.LeaseNow = 30 * sec
	return c
}

// leasedAt checks that the result holds key leased under the entry's index
// (the harness's last), until until, with the claim's payload.
func leasedAt(key string, until int64) func(t *testing.T, h *harness, r Result) {
	return func(t *testing.T, h *harness, r Result) {
		t.Helper()
		if len(r.Events) != 1 {
			t.Fatalf("events = %d, want 1", len(r.Events))
		}
		ev := r.Events[0]
		if ev.Key != key || ev.State != StateProcessing || ev.Token != h.idx || ev.LeaseUntil != until || ev.Attempts != 1 {
			t.Errorf("leased %q state %d token %d until %d attempts %d; want %q processing token %d until %d attempts 1",
				ev.Key, ev.State, ev.Token, ev.LeaseUntil, ev.Attempts, key, h.idx, until)
		}
		if !bytes.Equal(ev.Payload, []byte("payload of "+key)) || len(ev.Headers) != 1 {
			t.Errorf("payload %q, %d headers", ev.Payload, len(ev.Headers))
		}
		if got := h.get(key); got.Token != h.idx || got.LeaseUntil != until || got.State != StateProcessing {
			t.Errorf("stored token %d until %d state %d", got.Token, got.LeaseUntil, got.State)
		}
		if err := h.e.Check(); err != nil {
			t.Errorf("Check: %v", err)
		}
	}
}

// noEvents checks that the result leased nothing.
func noEvents(t *testing.T, _ *harness, r Result) {
	t.Helper()
	if len(r.Events) != 0 {
		t.Errorf("result holds %d events, want none", len(r.Events))
	}
}

func TestClaimLeaseTransitions(t *testing.T) {
	const a, b = "src:a", "src:b"
	lease := leaseCmd(t0+hour, 10)
	withLeaseFor := leasingClaim(a, t0)
	withLeaseFor.LeaseFor = 5 * sec
	ordered := func(key string, ot int64, leaseNow bool) Command {
		c := orderedClaim(key, t0+ot, "obj", ot)
		if leaseNow {
			c.LeaseNow = 30 * sec
		}
		return c
	}
	badLease := leasingClaim(a, t0)
	badLease.LeaseNow = -1
	tests := []struct {
		name  string
		steps []step
	}{
		{"claim leases, complete under its token", []step{
			{cmd: leasingClaim(a, t0), created: true, state: StateProcessing, n: 1, key: a, keyState: StateProcessing, attempts: 1,
				check: leasedAt(a, t0+30*sec)},
			{cmd: lease, n: 0, check: noEvents}, // already processing: no second lease
			{cmd: completeCmd(a, 0, t0+sec), tok: 1, key: a, keyState: StateDone, attempts: 1, check: wantHeld(0)},
		}},
		{"the event's own lease length wins", []step{
			{cmd: withLeaseFor, created: true, state: StateProcessing, n: 1, key: a, keyState: StateProcessing, attempts: 1,
				check: leasedAt(a, t0+5*sec)},
		}},
		{"fenced after reclaim and a new lease", []step{
			{cmd: leasingClaim(a, t0), created: true, state: StateProcessing, n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 31*sec}, n: 1, key: a, keyState: StatePending, attempts: 1},
			{cmd: leaseCmd(t0+32*sec, 10), n: 1, key: a, keyState: StateProcessing, attempts: 2},
			{cmd: completeCmd(a, 0, t0+33*sec), tok: 2, err: ErrStaleToken, key: a, keyState: StateProcessing, attempts: 2},
			{cmd: completeCmd(a, 0, t0+33*sec), tok: 1, key: a, keyState: StateDone, attempts: 2},
		}},
		{"a late completion of the claim's lease is fenced", []step{
			{cmd: leasingClaim(a, t0), created: true, state: StateProcessing, n: 1},
			{cmd: failCmd(a, 0, t0+sec, 5), tok: 1, key: a, keyState: StatePending, attempts: 1},
			{cmd: completeCmd(a, 0, t0+2*sec), tok: 1, err: ErrWrongState, key: a, keyState: StatePending, attempts: 1},
			{cmd: leaseCmd(t0+hour, 10), n: 1, key: a, keyState: StateProcessing, attempts: 2},
			{cmd: completeCmd(a, 0, t0+hour), tok: 2, err: ErrStaleToken, key: a, keyState: StateProcessing, attempts: 2},
		}},
		{"a duplicate leases nothing", []step{
			{cmd: claimCmd(a, t0), created: true, state: StatePending},
			{cmd: leasingClaim(a, t0+sec), state: StatePending, check: noEvents, key: a, keyState: StatePending},
			{cmd: lease, n: 1, key: a, keyState: StateProcessing, attempts: 1},
		}},
		{"a paused source's claim is held, not leased", []step{
			{cmd: pauseCmd("src", t0), n: 1},
			{cmd: leasingClaim(a, t0+sec), created: true, state: StatePending, check: wantHeld(1), key: a, keyState: StatePending},
			{cmd: lease, n: 0},
			{cmd: resumeCmd("src", t0+2*sec), n: 1, check: wantHeld(0)},
			{cmd: lease, n: 1, check: leasedKeys(a)},
		}},
		{"ordered: only the head of its object's queue is leased", []step{
			{cmd: ordered(a, 100, true), created: true, state: StateProcessing, n: 1},
			{cmd: ordered(b, 200, true), created: true, state: StatePending, check: noEvents, key: b, keyState: StatePending},
			{cmd: lease, n: 0}, // a is in flight for the object
			{cmd: completeCmd(a, 0, t0+hour), tok: 1, key: a, keyState: StateDone, attempts: 1},
			{cmd: leaseCmd(t0+2*hour, 10), n: 1, check: leasedKeys(b)},
		}},
		{"ordered: a claim behind a pending head waits", []step{
			{cmd: ordered(a, 100, false), created: true, state: StatePending},
			{cmd: ordered(b, 200, true), created: true, state: StatePending, check: noEvents},
			{cmd: lease, n: 1, check: leasedKeys(a)},
		}},
		{"ordered: a stale claim is never leased", []step{
			{cmd: ordered(a, 200, true), created: true, state: StateProcessing, n: 1},
			{cmd: ordered(b, 100, true), created: true, state: StateStale, check: noEvents, key: b, keyState: StateStale},
		}},
		{"a negative lease is refused", []step{
			{cmd: badLease, err: ErrBadCommand, key: a},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			runSteps(t, h, tt.steps)
			if err := h.e.Check(); err != nil {
				t.Fatalf("Check: %v", err)
			}
		})
	}
}

// TestClaimLeaseInOneEntry: a claim that leases and a lease in the same entry
// never hand out one event twice, and two claims of one key in one entry make
// one event with one lease.
func TestClaimLeaseInOneEntry(t *testing.T) {
	h := newHarness(t)
	rs := h.apply(leasingClaim("src:a", t0), leaseCmd(t0, 10), leasingClaim("src:a", t0), leasingClaim("src:b", t0))
	if len(rs[0].Events) != 1 || rs[1].N != 0 || len(rs[2].Events) != 0 || rs[2].Created || len(rs[3].Events) != 1 {
		t.Fatalf("results: claim %d events, lease %d, duplicate %d events (created %v), claim %d events",
			len(rs[0].Events), rs[1].N, len(rs[2].Events), rs[2].Created, len(rs[3].Events))
	}
	if rs[0].Events[0].Token != h.idx || rs[3].Events[0].Token != h.idx {
		t.Fatalf("tokens %d, %d; want the entry's index %d", rs[0].Events[0].Token, rs[3].Events[0].Token, h.idx)
	}
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
}
