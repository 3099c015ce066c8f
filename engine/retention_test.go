package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestRetentionRules: the expiry rules of docs/architecture.md (Event
// states): dead retention, a replay's fresh window, payload drop times, purge
// and the schedule horizon.
func TestRetentionRules(t *testing.T) {
	const a, b, c = "src:a", "src:b", "src:c"
	lease := leaseCmd(t0+sec, 10)
	deadFail := func(key string, now, keep int64) Command {
		f := failCmd(key, 0, now, 1)
		f.DeadRetention = keep
		return f
	}
	complete := func(key string, now, keep int64) Command {
		f := completeCmd(key, 0, now)
		f.PayloadRetention = keep
		return f
	}
	expiresAt := func(key string, want int64) func(t *testing.T, h *harness, r Result) {
		return func(t *testing.T, h *harness, r Result) {
			t.Helper()
			if ev := h.get(key); ev.ExpiresAt != want {
				t.Errorf("%s expires at t0%+dh, want t0%+dh", key, (ev.ExpiresAt-t0)/hour, (want-t0)/hour)
			}
		}
	}
	payload := func(key string, want bool) func(t *testing.T, h *harness, r Result) {
		return func(t *testing.T, h *harness, r Result) {
			t.Helper()
			if ev := h.get(key); (ev.Payload != nil) != want {
				t.Errorf("%s payload %q, want present = %v", key, ev.Payload, want)
			}
		}
	}
	deadExpired := func(keys ...string) func(t *testing.T, h *harness, r Result) {
		return func(t *testing.T, h *harness, r Result) {
			t.Helper()
			var got []string
			for _, ev := range r.Events {
				got = append(got, ev.Key)
			}
			if !slices.Equal(got, keys) {
				t.Errorf("dead letters expired = %q, want %q", got, keys)
			}
		}
	}
	// Times: a claim at t0 with 24 h expires at t0+25h (the end of the bucket
	// holding t0+24h); its window is 25 h, and a move to now+window lands at
	// the end of the bucket holding that.
	tests := []struct {
		name  string
		steps []step
	}{
		{"a dead letter is kept for its dead retention, then expired and reported", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			// Dead at t0+1h with 48 h: kept to the end of t0+49h's bucket.
			{cmd: deadFail(a, t0+hour, 48*hour), tok: 1, state: StateDead, check: expiresAt(a, t0+50*hour)},
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour}, n: 0, key: a, keyState: StateDead, attempts: 1, check: deadExpired()},
			{cmd: Command{Op: OpExpire, Now: t0 + 50*hour}, n: 1, key: a, check: deadExpired(a)},
		}},
		{"dead retention never shortens the key's retention", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: deadFail(a, t0+hour, hour), tok: 1, state: StateDead, check: expiresAt(a, t0+25*hour)},
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour}, n: 1, key: a, check: deadExpired(a)},
		}},
		{"a replay gives a fresh retention window", []step{
			{cmd: claimCmd(a, t0), created: true, check: expiresAt(a, t0+25*hour)},
			{cmd: lease, n: 1},
			{cmd: complete(a, t0+2*sec, 0), tok: 1},
			{cmd: Command{Op: OpReplay, Now: t0 + 20*hour, Keys: []string{a}, Who: "ops"}, n: 1, state: StatePending,
				check: expiresAt(a, t0+46*hour)},
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour}, n: 0, key: a, keyState: StatePending, attempts: 0},
			// The window is the claim's, not the one the replay stretched.
			{cmd: leaseCmd(t0+26*hour, 1), n: 1},
			{cmd: complete(a, t0+26*hour, 0), tok: 1},
			{cmd: Command{Op: OpReplay, Now: t0 + 40*hour, Keys: []string{a}, Who: "ops"}, n: 1, state: StatePending,
				check: expiresAt(a, t0+66*hour)},
		}},
		{"a replayed dead letter loses its dead retention", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: deadFail(a, t0+hour, 48*hour), tok: 1, state: StateDead},
			{cmd: Command{Op: OpReplay, Now: t0 + 2*hour, State: StateDead, Who: "ops"}, n: 1, state: StatePending,
				check: expiresAt(a, t0+28*hour)},
			// Pending at its expiry: moved, not deleted.
			{cmd: Command{Op: OpExpire, Now: t0 + 28*hour}, n: 0, key: a, keyState: StatePending, check: expiresAt(a, t0+54*hour)},
		}},
		{"payloads are dropped at their drop time; the key stays", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: claimCmd(b, t0), created: true},
			{cmd: lease, n: 2},
			{cmd: complete(a, t0+2*sec, 2*hour), tok: 1},
			{cmd: complete(b, t0+2*sec, 5*hour), tok: 1},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + hour}, n: 0, check: payload(a, true)},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + 3*hour, Before: t0 + 3*hour}, n: 1, key: a, keyState: StateDone, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					payload(a, false)(t, h, r)
					payload(b, true)(t, h, r)
				}},
			// Nothing to deliver again: the replay is refused, and a state
			// replay skips it.
			{cmd: Command{Op: OpReplay, Now: t0 + 4*hour, Keys: []string{a}, Who: "ops"}, err: ErrNoPayload, state: StateDone},
			{cmd: Command{Op: OpReplay, Now: t0 + 4*hour, State: StateDone, Who: "ops"}, n: 1, state: StatePending, key: a, keyState: StateDone, attempts: 1},
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour}, n: 1, key: a},
		}},
		{"payload drops come in batches of at most Max", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: claimCmd(b, t0), created: true},
			{cmd: claimCmd(c, t0), created: true},
			{cmd: lease, n: 3},
			{cmd: complete(a, t0+2*sec, hour), tok: 1},
			{cmd: complete(b, t0+2*sec, hour), tok: 1},
			// c without a drop time, not old enough by Since: walked past,
			// not counted against Max.
			{cmd: complete(c, t0+sec, 0), tok: 1},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + 2*hour, Before: t0 + 2*hour, Since: t0, Max: 1}, n: 1},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + 2*hour, Before: t0 + 2*hour, Since: t0, Max: 1}, n: 1,
				check: func(t *testing.T, h *harness, r Result) {
					payload(a, false)(t, h, r)
					payload(b, false)(t, h, r)
					payload(c, true)(t, h, r)
				}},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + 2*hour, Before: t0 + 2*hour, Since: t0, Max: 1}, n: 0},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + 2*hour, Before: t0 + 2*hour, Max: -1}, err: ErrBadCommand},
		}},
		{"done events without a drop time are dropped by Since", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: complete(a, t0+2*sec, 0), tok: 1},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + hour, Since: t0}, n: 0, check: payload(a, true)},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + hour, Since: t0 + 3*sec}, n: 1, check: payload(a, false)},
		}},
		{"purge deletes dead, done and stale events up to Before, by source, at most Max", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: claimCmd(b, t0), created: true},
			{cmd: otherClaim("other:c", t0), created: true},
			{cmd: claimCmd(c, t0), created: true},
			{cmd: leaseCmd(t0+sec, 3), n: 3},
			{cmd: deadFail(a, t0+2*sec, 48*hour), tok: 1, state: StateDead},
			{cmd: deadFail(b, t0+3*sec, 0), tok: 1, state: StateDead},
			{cmd: deadFail("other:c", t0+4*sec, 0), tok: 1, state: StateDead},
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StatePending, Before: t0 + hour, Max: 10}, err: ErrBadCommand},
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StateProcessing, Before: t0 + hour, Max: 10}, err: ErrBadCommand},
			// Before is exclusive: b (dead at t0+3s) stays.
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StateDead, Source: "src", Before: t0 + 3*sec, Max: 10}, n: 1, key: a,
				check: func(t *testing.T, h *harness, r Result) {
					if !slices.Equal(r.Keys, []string{a}) {
						t.Errorf("purged %q", r.Keys)
					}
				}},
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StateDead, Source: "src", Before: t0 + hour, Max: 10}, n: 1, key: b},
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StateDead, Before: t0 + hour, Max: 1}, n: 1, key: "other:c"},
			{cmd: Command{Op: OpPurge, Now: t0 + hour, State: StateDead, Before: t0 + hour, Max: 1}, n: 0, key: c, keyState: StatePending},
			// A purged key is new again.
			{cmd: claimCmd(a, t0+2*hour), created: true, state: StatePending},
		}},
		{"a due entry stamped beyond the horizon is rescheduled", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: claimCmd(b, t0), created: true},
			{cmd: lease, n: 2},
			// The leader's clock ran an hour ahead for these fails.
			{cmd: failCmd(a, 0, t0+hour, 0), tok: 1, state: StatePending},
			{cmd: failCmd(b, 0, t0+2*sec, 0), tok: 1, state: StatePending},
			{cmd: leaseCmd(t0+11*60*sec, 10), n: 1}, // b only: a waits an hour
			{cmd: Command{Op: OpReclaim, Now: t0 + 11*60*sec, Horizon: 10 * 60 * sec}, n: 0,
				check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(a); ev.NextAttemptAt != t0+21*60*sec {
						t.Errorf("rescheduled to t0%+ds, want t0+1260s", (ev.NextAttemptAt-t0)/sec)
					}
				}},
			{cmd: leaseCmd(t0+21*60*sec, 10), n: 1},
		}},
		{"before format 22 a lease ending beyond the horizon is reclaimed now", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: claimCmd(b, t0), created: true},
			{cmd: leaseCmd(t0+hour, 1), n: 1},                    // a, stamped an hour ahead
			{cmd: leaseCmd(t0+2*sec, 1), n: 1},                   // b, in time
			{cmd: Command{Op: OpReclaim, Now: t0 + 3*sec}, n: 0}, // no horizon: nothing
			{cmd: Command{Op: OpReclaim, Now: t0 + 3*sec, Horizon: 10 * 60 * sec, format: formatLeaseKeptAhead - 1}, n: 1, key: a, keyState: StatePending, attempts: 1},
			{cmd: completeCmd(b, 0, t0+4*sec), tok: 1, state: StateDone},
		}},
		// A leader whose clock stepped back an hour (or a new leader an hour
		// behind the one that leased): the attempt under the lease may have
		// started a moment ago, so the lease keeps its length from now
		// instead of ending at once (and the event going out again while
		// that attempt runs).
		{"a lease ending beyond the horizon keeps its length from now", []step{
			{cmd: withLeaseFor(claimCmd(a, t0), 30*sec), created: true},
			{cmd: claimCmd(b, t0), created: true}, // no lease length of its own
			{cmd: leaseCmd(t0+hour, 2), n: 2},     // both stamped an hour ahead
			{cmd: Command{Op: OpReclaim, Now: t0 + 3*sec, Horizon: 10 * 60 * sec}, n: 0, key: a, keyState: StateProcessing, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					if got := h.get(a).LeaseUntil; got != t0+33*sec {
						t.Errorf("a's lease ends at t0%+ds, want t0+33s (its 30s from now)", (got-t0)/sec)
					}
					if got := h.get(b).LeaseUntil; got != t0+3*sec+10*60*sec {
						t.Errorf("b's lease ends at t0%+ds, want t0+603s (the horizon from now)", (got-t0)/sec)
					}
				}},
			// The attempt that was running completes under its token.
			{cmd: completeCmd(a, 0, t0+20*sec), tok: 1, state: StateDone},
			{cmd: Command{Op: OpReclaim, Now: t0 + 602*sec, Horizon: 10 * 60 * sec}, n: 0, key: b, keyState: StateProcessing, attempts: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 603*sec, Horizon: 10 * 60 * sec}, n: 1, key: b, keyState: StatePending, attempts: 1},
		}},
		{"a held due entry beyond the horizon is repaired after resume", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: pauseCmd("src", t0+2*sec), n: 1},
			{cmd: failCmd(a, 0, t0+hour, 0), tok: 1, state: StatePending},
			{cmd: Command{Op: OpReclaim, Now: t0 + 3*sec, Horizon: 10 * 60 * sec}, n: 0, check: wantHeld(1)},
			{cmd: resumeCmd("src", t0+4*sec), n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 5*sec, Horizon: 10 * 60 * sec}, n: 0},
			{cmd: leaseCmd(t0+5*sec+10*60*sec, 1), n: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, newHarness(t, Options{NoSync: true}), tt.steps)
		})
	}
}

// TestPurgeRetained: of the done events a purge would delete, it counts
// those whose key is still kept against a provider's resend (ExpiresAt after
// now), of the purge's source and before its bound only.
func TestPurgeRetained(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	short := func(key string) Command { c := claimCmd(key, t0); c.Retention = hour; return c }
	other := otherClaim("other:x", t0)
	other.Retention = hour
	for _, c := range []Command{short("src:a"), short("src:b"), claimCmd("src:c", t0), claimCmd("src:d", t0), other} {
		h.one(c)
	}
	for _, ev := range h.one(leaseCmd(t0+sec, 5)).Events {
		done := t0 + 2*sec
		if ev.Key == "src:d" {
			done = t0 + 3*hour // after the bound below
		}
		h.one(completeCmd(ev.Key, ev.Token, done))
	}
	tests := []struct {
		name   string
		source string
		now    int64
		want   int
	}{
		// a, b (1 h) and c (24 h) done before t0+1h; d done after it.
		{"inside every window", "src", t0 + 10*sec, 3},
		{"past the short windows", "src", t0 + 2*hour, 1},
		{"past every window", "src", t0 + 25*hour + 2*hour, 0},
		{"every source", "", t0 + 10*sec, 4},
	}
	// In read transactions of any size: the count is the same.
	defer func(c int) { retainedChunk = c }(retainedChunk)
	for _, chunk := range []int{retainedChunk, 1, 2} {
		retainedChunk = chunk
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, %d a transaction", tt.name, chunk), func(t *testing.T) {
				n, err := h.e.PurgeRetained(StateDone, tt.source, t0+hour, tt.now)
				if err != nil || n != tt.want {
					t.Fatalf("PurgeRetained(done, %q, t0+1h, t0%+ds) = %d, %v; want %d", tt.source, (tt.now-t0)/sec, n, err, tt.want)
				}
			})
		}
	}
	if _, err := h.e.PurgeRetained(StatePending, "", t0+hour, t0); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("PurgeRetained of pending: %v, want ErrBadCommand", err)
	}
}

// TestPurgePreviewAndOldestDead: the dry run lists what Purge would delete
// and changes nothing; OldestDeadBySource finds each source's earliest dead
// letter.
func TestPurgePreviewAndOldestDead(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	if m, err := h.e.OldestDeadBySource(nil); len(m) != 0 || err != nil {
		t.Fatalf("OldestDeadBySource on an empty file = %v, %v", m, err)
	}
	for i := range 5 {
		h.one(claimCmd(keyN(i), t0))
	}
	for _, ev := range h.one(leaseCmd(t0+sec, 5)).Events {
		h.one(failCmd(ev.Key, ev.Token, t0+2*sec+int64(len(ev.Key)%7)*sec, 1))
	}
	keys, n, err := h.e.PurgePreview(StateDead, "src", t0+hour, 3)
	if err != nil || len(keys) != 3 || n != 5 {
		t.Fatalf("PurgePreview = %q, %d, %v; want 3 keys of 5", keys, n, err)
	}
	if _, _, err := h.e.PurgePreview(StatePending, "", t0+hour, 3); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("PurgePreview of pending: %v, want ErrBadCommand", err)
	}
	if s, _ := mustCounts(t, h.e); s[StateDead] != 5 {
		t.Fatalf("the dry run changed the counts: %v", s)
	}
	h.one(otherClaim("other:x", t0+3*sec))
	ev := h.one(leaseCmd(t0+4*sec, 1)).Events[0]
	h.one(failCmd(ev.Key, ev.Token, t0+5*sec, 1))
	for _, want := range [][]string{nil, {"src", "other"}, {"other"}} {
		m, err := h.e.OldestDeadBySource(want)
		if err != nil || len(m) != 2 || m["src"] != t0+2*sec+int64(len(keyN(0))%7)*sec || m["other"] != t0+5*sec {
			t.Fatalf("OldestDeadBySource(%q) = %v, %v", want, m, err)
		}
	}
	// Only src is wanted: the walk stops at its oldest, before other's.
	if m, _ := h.e.OldestDeadBySource([]string{"src"}); len(m) != 1 || m["src"] == 0 {
		t.Fatalf("OldestDeadBySource(src) = %v, want src's only", m)
	}
	r := h.one(Command{Op: OpPurge, Now: t0 + hour, State: StateDead, Before: t0 + hour, Max: 3})
	if !slices.Equal(r.Keys, keys) {
		t.Fatalf("Purge deleted %q, the dry run said %q", r.Keys, keys)
	}
}
