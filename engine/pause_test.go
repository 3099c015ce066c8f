package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func pauseCmd(src string, now int64) Command {
	return Command{Op: OpPause, Now: now, Source: src, Who: "ops", Reason: "handler down"}
}

func resumeCmd(src string, now int64) Command {
	return Command{Op: OpResume, Now: now, Source: src, Who: "ops", Reason: "fixed"}
}

func otherClaim(key string, now int64) Command {
	c := claimCmd(key, now)
	c.Source = "other"
	return c
}

// leasedKeys checks that a lease result holds exactly keys, in order.
func leasedKeys(keys ...string) func(t *testing.T, h *harness, r Result) {
	return func(t *testing.T, h *harness, r Result) {
		t.Helper()
		var got []string
		for _, ev := range r.Events {
			got = append(got, ev.Key)
		}
		if !slices.Equal(got, keys) {
			t.Errorf("leased %q, want %q", got, keys)
		}
	}
}

// wantHeld checks the number of pending events a pause holds, and where:
// in the held index under the meanings of a format before
// formatPauseInPlace, in their sources' due runs from it.
func wantHeld(n int) func(t *testing.T, h *harness, r Result) {
	return func(t *testing.T, h *harness, r Result) {
		t.Helper()
		got, err := pausedPending(h.e)
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("pending events held by a pause = %d, want %d", got, n)
		}
		inHeld, err := heldEntries(h.e)
		if err != nil {
			t.Fatal(err)
		}
		if old := h.format != 0 && h.format < formatPauseInPlace; old && inHeld != n || !old && inHeld != 0 {
			t.Errorf("held index entries = %d with format %d, of %d held", inHeld, h.format, n)
		}
		if err := h.e.Check(); err != nil {
			t.Errorf("Check: %v", err)
		}
	}
}

func TestPauseTransitions(t *testing.T) {
	const a, b, c = "src:a", "src:b", "src:c"
	lease := leaseCmd(t0+hour, 10)
	tests := []struct {
		name  string
		steps []step
	}{
		{"pause holds existing due events and new claims; lease leases nothing of the source", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: otherClaim("other:x", t0+sec), created: true},
			{cmd: pauseCmd("src", t0+2*sec), n: 1, check: wantHeld(1)},
			{cmd: claimCmd(b, t0+3*sec), created: true, state: StatePending, check: wantHeld(2)},
			{cmd: lease, n: 1, key: a, keyState: StatePending, attempts: 0, check: leasedKeys("other:x")},
			{cmd: lease, n: 0, key: b, keyState: StatePending, attempts: 0},
		}},
		{"pause and resume are idempotent; an empty source is a bad command", []step{
			{cmd: pauseCmd("src", t0), n: 1},
			{cmd: pauseCmd("src", t0+sec), n: 0, check: func(t *testing.T, h *harness, r Result) {
				s, err := h.e.Sources()
				if err != nil {
					t.Fatal(err)
				}
				if got := s["src"]; !got.Paused || got.Since != t0 || got.Who != "ops" || got.Reason != "handler down" || len(s) != 1 {
					t.Errorf("Sources = %+v, want src paused at t0 by ops", s)
				}
			}},
			{cmd: resumeCmd("src", t0+2*sec), n: 1},
			{cmd: resumeCmd("src", t0+3*sec), n: 0, check: func(t *testing.T, h *harness, r Result) {
				if s, err := h.e.Sources(); err != nil || len(s) != 0 {
					t.Errorf("Sources = %v, %v; want none paused", s, err)
				}
			}},
			{cmd: resumeCmd("never", t0+3*sec), n: 0},
			{cmd: pauseCmd("", t0), err: ErrBadCommand},
			{cmd: resumeCmd("", t0), err: ErrBadCommand},
			{cmd: pauseCmd("a\x00b", t0), err: ErrBadCommand},
		}},
		{"an outstanding lease completes normally while paused", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: pauseCmd("src", t0+hour+sec), n: 1, check: wantHeld(0)},
			{cmd: completeCmd(a, 0, t0+hour+2*sec), tok: 1, state: StateDone, key: a, keyState: StateDone, attempts: 1},
		}},
		{"a fail of an outstanding lease while paused goes to held", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: pauseCmd("src", t0+hour+sec), n: 1},
			{cmd: failCmd(a, 0, t0+hour+2*sec, 5), tok: 1, state: StatePending, check: wantHeld(1)},
			{cmd: leaseCmd(t0+2*hour, 10), n: 0, key: a, keyState: StatePending, attempts: 1},
			{cmd: resumeCmd("src", t0+2*hour), n: 1, check: wantHeld(0)},
			{cmd: leaseCmd(t0+2*hour, 10), n: 1, key: a, keyState: StateProcessing, attempts: 2},
		}},
		{"a reclaimed lease of a paused source goes to held", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: pauseCmd("src", t0+hour+sec), n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 2*hour}, n: 1, key: a, keyState: StatePending, attempts: 1, check: wantHeld(1)},
			{cmd: leaseCmd(t0+2*hour, 10), n: 0},
		}},
		{"a replay into a paused source goes to held", []step{
			{cmd: claimCmd(a, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(a, 0, t0+hour+sec, 1), tok: 1, state: StateDead},
			{cmd: pauseCmd("src", t0+hour+2*sec), n: 1},
			{cmd: Command{Op: OpReplay, Now: t0 + hour + 3*sec, Keys: []string{a}, Who: "ops"}, n: 1, state: StatePending, check: wantHeld(1)},
			{cmd: leaseCmd(t0+2*hour, 10), n: 0, key: a, keyState: StatePending, attempts: 0},
		}},
		{"resume releases the held events oldest first", []step{
			{cmd: pauseCmd("src", t0), n: 1},
			{cmd: claimCmd(c, t0+sec), created: true},
			{cmd: claimCmd(a, t0+3*sec), created: true},
			{cmd: claimCmd(b, t0+2*sec), created: true},
			{cmd: resumeCmd("src", t0+4*sec), n: 1, check: wantHeld(0)},
			{cmd: leaseCmd(t0+5*sec, 10), n: 3, check: func(t *testing.T, h *harness, r Result) {
				leasedKeys(c, b, a)(t, h, r)
				for _, ev := range r.Events {
					if ev.Attempts != 1 {
						t.Errorf("%s attempts = %d, want 1", ev.Key, ev.Attempts)
					}
				}
			}},
		}},
		{"a held event outlives its bucket: it moves and stays held", []step{
			{cmd: pauseCmd("src", t0), n: 1},
			{cmd: claimCmd(a, t0+sec), created: true, check: wantHeld(1)},
			{cmd: Command{Op: OpExpire, Now: t0 + 26*hour}, n: 0, key: a, keyState: StatePending, check: wantHeld(1)},
			{cmd: resumeCmd("src", t0+26*hour), n: 1, check: wantHeld(0)},
			{cmd: leaseCmd(t0+26*hour, 10), n: 1},
		}},
		{"backlog counts pending events per source, paused or not", []step{
			{cmd: claimCmd(a, t0+sec), created: true},
			{cmd: claimCmd(b, t0+2*sec), created: true},
			{cmd: otherClaim("other:x", t0+3*sec), created: true},
			{cmd: pauseCmd("src", t0+4*sec), n: 1, check: func(t *testing.T, h *harness, r Result) {
				bl, err := h.e.Backlog()
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]Backlog{"src": {2, t0 + sec}, "other": {1, t0 + 3*sec}}
				if len(bl) != 2 || bl["src"] != want["src"] || bl["other"] != want["other"] {
					t.Errorf("Backlog = %+v, want %+v", bl, want)
				}
			}},
		}},
	}
	for _, tt := range tests {
		// The meanings of today's entries, and of an older leader's, which
		// moved a paused source's events to the held index.
		for _, format := range []uint8{0, formatPauseInPlace - 1} {
			t.Run(fmt.Sprintf("%s/format %d", tt.name, format), func(t *testing.T) {
				h := newHarness(t, Options{NoSync: true})
				h.format = format
				runSteps(t, h, tt.steps)
			})
		}
	}
}

// TestPauseDeterministic applies the same pause scenario to two files and
// requires identical contents.
func TestPauseDeterministic(t *testing.T) {
	entries := []Entry{
		{Index: 1, Cmds: []Command{claimCmd("src:a", t0), claimCmd("src:b", t0+1), otherClaim("other:c", t0+2)}},
		{Index: 2, Cmds: []Command{pauseCmd("src", t0+3), claimCmd("src:d", t0+4), leaseCmd(t0+5, 10)}},
		{Index: 3, Cmds: []Command{failCmd("other:c", 2, t0+6, 5), resumeCmd("src", t0+7), leaseCmd(t0+8, 10)}},
	}
	var hashes [][32]byte
	for range 2 {
		e := mustOpen(t, Options{NoSync: true})
		rs, err := e.ApplyBatch(entries)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			for j := range r {
				if r[j].Err != nil && !errors.Is(r[j].Err, ErrStaleToken) {
					t.Fatalf("entry %d cmd %d: %v", i, j, r[j].Err)
				}
			}
		}
		if got := rs[2][2].N; got != 3 {
			t.Errorf("lease after resume leased %d, want 3", got)
		}
		hashes = append(hashes, mustHash(t, e))
	}
	if hashes[0] != hashes[1] {
		t.Fatal("two fresh files differ")
	}
}

// TestRestoreSnapshotWithoutSourcesBuckets: a snapshot written before the
// sources and held buckets existed restores, and pausing works after it.
func TestRestoreSnapshotWithoutSourcesBuckets(t *testing.T) {
	snap := oldSnapshot(t, bSources, bHeld)
	h := newHarness(t, Options{NoSync: true})
	if err := h.e.Restore(snap); err != nil {
		t.Fatalf("Restore of a snapshot without the sources and held buckets: %v", err)
	}
	h.idx = h.e.LastApplied()
	if r := h.one(pauseCmd("src", t0+sec)); r.Err != nil || r.N != 1 {
		t.Fatalf("pause after restore: %+v", r)
	}
	if r := h.one(leaseCmd(t0+2*sec, 10)); r.N != 0 {
		t.Fatalf("lease of a paused source after restore: %+v", r)
	}
}

// TestPauseAcrossTheUpgrade: a source paused by an older leader's entry
// (its events moved to the held index) and then claimed under today's
// meanings (the new event stays in the due index) holds both; nothing of
// it is leased, LeaseDue does not call it due, and today's resume brings
// every one back, oldest first.
func TestPauseAcrossTheUpgrade(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	a, b, c := keyN(1), keyN(2), keyN(3)
	h.apply(claimCmd(a, t0), claimCmd(b, t0+sec))
	old := pauseCmd("src", t0+2*sec)
	old.format = formatPauseInPlace - 1
	if r := h.one(old); r.N != 1 {
		t.Fatalf("pause: %+v", r)
	}
	h.one(claimCmd(c, t0+3*sec))
	if held, _ := heldEntries(h.e); held != 2 {
		t.Fatalf("held index entries = %d, want the 2 the old pause moved", held)
	}
	if n, _ := pausedPending(h.e); n != 3 {
		t.Fatalf("pending events held by the pause = %d, want 3", n)
	}
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
	if due, err := h.e.LeaseDue(t0+hour, nil); err != nil || due {
		t.Errorf("LeaseDue with only a paused source's events: %v, %v; want false", due, err)
	}
	if r := h.one(leaseCmd(t0+hour, 10)); len(r.Events) != 0 {
		t.Fatalf("a paused source's events leased: %v", r.Events)
	}
	if r := h.one(resumeCmd("src", t0+hour)); r.N != 1 {
		t.Fatalf("resume: %+v", r)
	}
	if held, _ := heldEntries(h.e); held != 0 {
		t.Errorf("held index entries after the resume = %d", held)
	}
	if due, err := h.e.LeaseDue(t0+hour, nil); err != nil || !due {
		t.Errorf("LeaseDue after the resume: %v, %v; want true", due, err)
	}
	leasedKeys(a, b, c)(t, h, h.one(leaseCmd(t0+hour, 10)))
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
}
