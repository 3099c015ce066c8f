package engine

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// deadEvents claims keys of source src and makes them dead in one entry
// each step, so that they share one UpdatedAt (the cursor must tell the
// events of one instant apart).
func deadEvents(h *harness, src string, keys []string, now int64) {
	h.tb.Helper()
	var claims []Command
	for _, k := range keys {
		c := claimCmd(k, now)
		c.Source = src
		claims = append(claims, c)
	}
	h.apply(claims...)
	rs := h.one(leaseCmd(now+1, len(keys)))
	tok := h.idx
	var fails []Command
	for _, ev := range rs.Events {
		fails = append(fails, failCmd(ev.Key, tok, now+2, 1))
	}
	h.apply(fails...)
}

// TestReplayByStateInBatches: a replay by state with a Max (format 21)
// visits at most Max entries of the state's index per command, every
// source's counted, and goes on from its cursor: looped on More, it replays
// each selected event once, though they all died at one instant, leaves
// the other sources' events, and does not replay again an event that died
// after the first command (updated past Before). With a Max of 1 and the
// cursor on another source's event, the next command must still move on.
func TestReplayByStateInBatches(t *testing.T) {
	for _, max := range []int{1, 4} {
		t.Run(fmt.Sprintf("max %d", max), func(t *testing.T) { replayInBatches(t, max) })
	}
}

func replayInBatches(t *testing.T, max int) {
	h := newHarness(t, Options{NoSync: true})
	var mine, others []string
	for i := range 23 {
		mine = append(mine, keyN(i))
	}
	for i := range 9 {
		others = append(others, "other:"+keyN(i))
	}
	deadEvents(h, "src", mine, t0)
	deadEvents(h, "other", others, t0)

	// No Before: the first command's Now bounds the replay, and each
	// result hands it on.
	cmd := Command{Op: OpReplay, State: StateDead, Source: "src", Max: max, Who: "ops", Reason: "outage over"}
	first := int64(0)
	replayed := map[string]int{}
	commands, redied := 0, 0
	for now := t0 + 2*sec; ; now += sec {
		cmd.Now = now
		r := h.one(cmd)
		commands++
		if r.Err != nil {
			t.Fatalf("command %d: %v", commands, r.Err)
		}
		if len(r.Keys) > max {
			t.Fatalf("command %d replayed %d events, Max %d", commands, len(r.Keys), max)
		}
		for _, k := range r.Keys {
			replayed[k]++
		}
		if redied == 0 && len(r.Keys) > 0 {
			// The first replayed go out and die again at once: past
			// Before, not selected again.
			lease := h.one(leaseCmd(now+1, 100))
			tok := h.idx
			var fails []Command
			for _, ev := range lease.Events {
				fails = append(fails, failCmd(ev.Key, tok, now+2, 1))
			}
			h.apply(fails...)
			redied = len(fails)
		}
		if commands == 1 {
			first = now
		}
		if r.Before != first {
			t.Fatalf("command %d: bound %d, want the first command's Now %d", commands, r.Before, first)
		}
		if !r.More {
			break
		}
		if commands > 100 {
			t.Fatal("no end after 100 commands")
		}
		cmd.Since, cmd.Key, cmd.Before = r.AfterTime, r.After, r.Before
	}
	// Max entries of the dead state a command, and perhaps one that finds
	// nothing more.
	if want := (len(mine) + len(others) + max - 1) / max; commands < want || commands > want+1 {
		t.Errorf("%d commands, want %d or %d", commands, want, want+1)
	}
	for _, k := range mine {
		if replayed[k] != 1 {
			t.Errorf("%s replayed %d times, want once", k, replayed[k])
		}
	}
	for _, k := range others {
		if replayed[k] != 0 || h.get(k).State != StateDead {
			t.Errorf("%s of another source: replayed %d times, state %s", k, replayed[k], h.get(k).State)
		}
	}
	if redied == 0 {
		t.Error("no replayed event died again: Before was not put to the test")
	}
	if len(replayed) != len(mine) {
		t.Errorf("%d keys replayed, want %d", len(replayed), len(mine))
	}
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestReplayByStateBatchedOnlyFromFormat21: an entry of an older writer
// keeps the older meaning, every selected event in one command, so that
// replicas running both binaries stay identical during an upgrade.
func TestReplayByStateBatchedOnlyFromFormat21(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	var keys []string
	for i := range 10 {
		keys = append(keys, keyN(i))
	}
	deadEvents(h, "src", keys, t0)
	old := Command{Op: OpReplay, Now: t0 + sec, State: StateDead, Max: 3, Key: "src:x", Before: t0, Who: "ops", format: formatReplayBatched - 1}
	r := h.one(old)
	if r.Err != nil || r.N != len(keys) || r.More || r.After != "" {
		t.Errorf("format %d replay with a max: N %d, More %v, After %q, err %v; want all %d in one, no cursor",
			old.format, r.N, r.More, r.After, r.Err, len(keys))
	}
}

// TestReplayByStateBatchRefused: the bounds of a batched replay are checked
// before it changes anything.
func TestReplayByStateBatchRefused(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	deadEvents(h, "src", []string{keyN(1)}, t0)
	for _, c := range []struct {
		name string
		cmd  Command
	}{
		{"max over the bound", Command{Max: MaxReplayBatch + 1}},
		{"negative max", Command{Max: -1}},
		{"cursor without a max", Command{Key: keyN(0)}},
		{"before without a max", Command{Before: t0 + sec}},
		{"negative before", Command{Max: 10, Before: -1}},
		{"cursor key too long", Command{Max: 10, Key: string(make([]byte, MaxKeyLen+1))}},
	} {
		c.cmd.Op, c.cmd.Now, c.cmd.State, c.cmd.Who = OpReplay, t0+sec, StateDead, "ops"
		r := h.one(c.cmd)
		if !errors.Is(r.Err, ErrBadCommand) {
			t.Errorf("%s: %v, want ErrBadCommand", c.name, r.Err)
		}
		if ev := h.get(keyN(1)); ev.State != StateDead {
			t.Errorf("%s: the event is %s after a refused replay", c.name, ev.State)
		}
	}
	// The bound itself is accepted.
	r := h.one(Command{Op: OpReplay, Now: t0 + sec, State: StateDead, Max: MaxReplayBatch, Who: "ops"})
	if r.Err != nil || !slices.Equal(r.Keys, []string{keyN(1)}) || r.More {
		t.Errorf("max %d: %v, keys %v, More %v", MaxReplayBatch, r.Err, r.Keys, r.More)
	}
}
