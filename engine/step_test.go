package engine

import (
	"encoding/hex"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Resumable handlers: a handler's Oncehook-Step travels in Complete and Fail
// commands (Command.Step) and is kept as Event.Step.

func stepCmd(c Command, step string) Command {
	c.Step = step
	return c
}

func TestStepStoredThroughTransitions(t *testing.T) {
	h := newHarness(t)
	const k = "src:evt_step"
	h.one(claimCmd(k, t0))
	if ev := h.get(k); ev.Step != "" {
		t.Fatalf("new event has step %q", ev.Step)
	}
	tok := h.one(leaseCmd(t0+sec, 1)).Events[0].Token

	// A failure with a step stores it; the next lease hands it out.
	if r := h.one(stepCmd(failCmd(k, tok, t0+2*sec, 5), "charged")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ev := h.get(k); ev.Step != "charged" || ev.State != StatePending {
		t.Fatalf("after fail: state %d step %q", ev.State, ev.Step)
	}
	evs := h.one(leaseCmd(t0+20*sec, 1)).Events
	if len(evs) != 1 || evs[0].Step != "charged" {
		t.Fatalf("lease after fail: %+v", evs)
	}
	// A failure without a step keeps the stored one.
	h.one(failCmd(k, evs[0].Token, t0+21*sec, 5))
	evs = h.one(leaseCmd(t0+40*sec, 1)).Events
	if evs[0].Step != "charged" {
		t.Fatalf("a fail without a step changed it to %q", evs[0].Step)
	}
	// A later step replaces it; completion keeps it.
	h.one(stepCmd(failCmd(k, evs[0].Token, t0+41*sec, 5), "3"))
	evs = h.one(leaseCmd(t0+60*sec, 1)).Events
	if evs[0].Step != "3" {
		t.Fatalf("step %q, want 3", evs[0].Step)
	}
	if r := h.one(completeCmd(k, evs[0].Token, t0+61*sec)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ev := h.get(k); ev.State != StateDone || ev.Step != "3" {
		t.Fatalf("done: state %d step %q", ev.State, ev.Step)
	}
	// An operator replay keeps the step for the next attempt.
	h.one(Command{Op: OpReplay, Now: t0 + 70*sec, Keys: []string{k}, Who: "ops", Reason: "again"})
	evs = h.one(leaseCmd(t0+71*sec, 1)).Events
	if evs[0].Step != "3" || evs[0].Attempts != 1 {
		t.Fatalf("after replay: step %q attempts %d", evs[0].Step, evs[0].Attempts)
	}
	// Completion with a step stores it.
	h.one(stepCmd(completeCmd(k, evs[0].Token, t0+72*sec), "shipped"))
	if ev := h.get(k); ev.Step != "shipped" {
		t.Fatalf("complete with a step: %q", ev.Step)
	}
}

// A reclaimed lease (the worker died) carries no new step: the stored one
// stays and goes out with the next lease. A fenced command's step is dropped.
func TestStepReclaimAndFencing(t *testing.T) {
	h := newHarness(t)
	const k = "src:evt_reclaim"
	h.one(claimCmd(k, t0))
	tok := h.one(leaseCmd(t0+sec, 1)).Events[0].Token
	h.one(stepCmd(failCmd(k, tok, t0+2*sec, 9), "reserved"))
	old := h.one(leaseCmd(t0+20*sec, 1)).Events[0].Token
	if n := h.one(Command{Op: OpReclaim, Now: t0 + hour}).N; n != 1 {
		t.Fatalf("reclaim moved %d", n)
	}
	if ev := h.get(k); ev.Step != "reserved" || ev.State != StatePending || ev.LastError != reclaimReason {
		t.Fatalf("after reclaim: %+v", ev)
	}
	evs := h.one(leaseCmd(t0+hour+sec, 1)).Events
	if evs[0].Step != "reserved" {
		t.Fatalf("lease after reclaim: step %q", evs[0].Step)
	}
	// The dead worker's late answer is fenced and its step is not stored.
	if r := h.one(stepCmd(completeCmd(k, old, t0+hour+2*sec), "late")); !errors.Is(r.Err, ErrStaleToken) {
		t.Fatalf("late completion: %v", r.Err)
	}
	if r := h.one(stepCmd(failCmd(k, old, t0+hour+2*sec, 9), "late")); !errors.Is(r.Err, ErrStaleToken) {
		t.Fatalf("late failure: %v", r.Err)
	}
	if ev := h.get(k); ev.Step != "reserved" {
		t.Fatalf("a fenced command changed the step to %q", ev.Step)
	}
}

func TestStepRejectsBadSteps(t *testing.T) {
	h := newHarness(t)
	const k = "src:evt_bad_step"
	h.one(claimCmd(k, t0))
	tok := h.one(leaseCmd(t0+sec, 1)).Events[0].Token
	for _, bad := range []string{strings.Repeat("s", MaxStepLen+1), "a\nb", "tab\t", "caf\u00e9", "\x7f"} {
		for _, c := range []Command{stepCmd(completeCmd(k, tok, t0+2*sec), bad), stepCmd(failCmd(k, tok, t0+2*sec, 5), bad)} {
			if r := h.one(c); !errors.Is(r.Err, ErrBadCommand) {
				t.Fatalf("op %d with step %q: %v, want ErrBadCommand", c.Op, bad, r.Err)
			}
		}
	}
	if ev := h.get(k); ev.State != StateProcessing || ev.Step != "" {
		t.Fatalf("rejected commands changed the event: %+v", ev)
	}
	// The longest printable step is fine.
	longest := strings.Repeat("~", MaxStepLen)
	if r := h.one(stepCmd(completeCmd(k, tok, t0+3*sec), longest)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if ev := h.get(k); ev.Step != longest {
		t.Fatalf("step %q", ev.Step)
	}
}

func TestStepSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const k = "src:evt_reopen"
	mustApply := func(idx uint64, c Command) Result {
		t.Helper()
		rs, err := e.Apply(idx, c)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
	mustApply(1, claimCmd(k, t0))
	tok := mustApply(2, leaseCmd(t0+sec, 1)).Events[0].Token
	mustApply(3, stepCmd(failCmd(k, tok, t0+2*sec, 5), "charged"))
	before := mustHash(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpenPath(t, path, Options{})
	ev, err := e.Get(k, false)
	if err != nil || ev.Step != "charged" {
		t.Fatalf("after reopen: %+v %v", ev, err)
	}
	if after := mustHash(t, e); after != before {
		t.Fatal("state changed across close and reopen")
	}
	rs, err := e.Apply(4, leaseCmd(t0+20*sec, 1))
	if err != nil || len(rs[0].Events) != 1 || rs[0].Events[0].Step != "charged" {
		t.Fatalf("lease after reopen: %+v %v", rs, err)
	}
}

// Stored records and log entries written before steps existed decode
// unchanged, and values without a step keep exactly that layout. The bytes are
// written out by hand from the layouts documented in codec.go.
func TestStepEncodingsAreCompatible(t *testing.T) {
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Event record, version 1: done, attempts 1, token 5, created 10, updated
	// 20, expires 30, source "s", no audit.
	v1Record := unhex("01 03 00 01 05 14 28 00 00 3c 00 01 73 00 00")
	want := Event{State: StateDone, Attempts: 1, Token: 5, CreatedAt: 10, UpdatedAt: 20, ExpiresAt: 30, Source: "s"}
	var got Event
	if flags, err := decodeRecord([]byte("k"), v1Record, &got); err != nil || flags != 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1 record: %+v %d %v", got, flags, err)
	}
	if b := appendRecord(nil, &want, 0); hex.EncodeToString(b) != hex.EncodeToString(v1Record) {
		t.Fatalf("a record without a step is no longer the version 1 layout: %x", b)
	}
	// The same record with a step: flag 0x02 and the step at the end.
	stepped := unhex("01 03 02 01 05 14 28 00 00 3c 00 01 73 00 00 07") // then "charged"
	stepped = append(stepped, "charged"...)
	want.Step = "charged"
	if _, err := decodeRecord([]byte("k"), stepped, &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("record with a step: %+v %v", got, err)
	}
	if b := appendRecord(nil, &want, 0); hex.EncodeToString(b) != hex.EncodeToString(stepped) {
		t.Fatalf("record with a step encodes as %x", b)
	}
	for name, b := range map[string][]byte{
		"flag without step": unhex("01 03 02 01 05 14 28 00 00 3c 00 01 73 00 00"),
		"empty step":        unhex("01 03 02 01 05 14 28 00 00 3c 00 01 73 00 00 00"),
		"step, no flag":     append(unhex("01 03 00 01 05 14 28 00 00 3c 00 01 73 00 00 07"), "charged"...),
		"unknown flag":      unhex("01 03 80 01 05 14 28 00 00 3c 00 01 73 00 00"),
	} {
		if _, err := decodeRecord([]byte("k"), b, &got); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}

	// Log entry, version 1: one complete of "k" under token 5 (mask: key, token).
	v1Entry := unhex("01 01 03 82 08 01 6b 05")
	cmds, err := DecodeEntry(v1Entry)
	if err != nil || !reflect.DeepEqual(cmds, []Command{{Op: OpComplete, Key: "k", Token: 5, format: legacyFormat}}) {
		t.Fatalf("version 1 entry: %+v %v", cmds, err)
	}
	if b := EncodeRelayEntry(nil, cmds); hex.EncodeToString(b) != hex.EncodeToString(v1Entry) {
		t.Fatalf("an entry without a step is no longer the version 1 layout: %x", b)
	}
	// With a step: mask bit 20 and the step after the other fields.
	withStep := append(unhex("01 01 03 82 88 40 01 6b 05 07"), "charged"...)
	cmds, err = DecodeEntry(withStep)
	if err != nil || !reflect.DeepEqual(cmds, []Command{{Op: OpComplete, Key: "k", Token: 5, Step: "charged", format: legacyFormat}}) {
		t.Fatalf("entry with a step: %+v %v", cmds, err)
	}
	if b := EncodeRelayEntry(nil, cmds); hex.EncodeToString(b) != hex.EncodeToString(withStep) {
		t.Fatalf("entry with a step encodes as %x", b)
	}
	if _, err := DecodeEntry(unhex("01 01 03 82 88 40 01 6b 05 00")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("entry with an empty step: %v, want ErrCorrupt", err)
	}
}
