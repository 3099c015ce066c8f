package engine

import (
	"bytes"
	"errors"
	"fmt"
	"go/build"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// fixedSequence exercises every op once or more.
func fixedSequence() []Entry {
	order := func(key string, ot int64) Command {
		c := claimCmd(key, t0)
		c.OrderObject, c.OrderTime = "obj", ot
		return c
	}
	// Two payloads in pieces (pieces.go): one dropped after delivery, one
	// that goes dead, is replayed and expires.
	large := func(key string, now int64, n int) Command {
		c := claimCmd(key, now)
		c.Payload = bytes.Repeat([]byte(key), n/len(key)+1)[:n]
		return c
	}
	return []Entry{
		{Index: 1, Cmds: []Command{large("src:a", t0, 2*pieceLen+3), large("src:b", t0+1, pieceLen+1), order("src:o1", 5), order("src:o2", 4)}},
		{Index: 2, Cmds: []Command{leaseCmd(t0+sec, 2)}},
		{Index: 3, Cmds: []Command{completeCmd("src:a", 2, t0+2*sec), withAttempt(stepped(failCmd("src:b", 2, t0+2*sec, 1), "charged"))}},
		{Index: 4, Cmds: []Command{{Op: OpReplay, Now: t0 + 3*sec, State: StateDead, Who: "ops", Reason: "why"}}},
		{Index: 5, Cmds: []Command{{Op: OpDropPayloads, Now: t0 + 4*sec, Before: t0 + 3*sec}, {Op: OpNoop}}},
		{Index: 6, Cmds: []Command{leaseCmd(t0+5*sec, 5), {Op: OpReclaim, Now: t0 + hour}}},
		{Index: 7, Cmds: []Command{{Op: OpExpire, Now: t0 + 25*hour}, claimCmd("src:c", t0+25*hour)}},
		{Index: 8, Cmds: []Command{{Op: OpPause, Now: t0 + 26*hour, Source: "src", Who: "ops", Reason: "down"}, claimCmd("src:d", t0+26*hour)}},
		{Index: 9, Cmds: []Command{{Op: OpResume, Now: t0 + 27*hour, Source: "src", Who: "ops", Reason: "up"}, leaseCmd(t0+27*hour, 5)}},
		{Index: 10, Cmds: []Command{
			{Op: OpComplete, Now: t0 + 28*hour, Key: "src:c", Token: 9, PayloadRetention: hour},
			{Op: OpFail, Now: t0 + 28*hour, Key: "src:d", Token: 9, MaxAttempts: 1, DeadRetention: 2 * hour},
			{Op: OpDropPayloads, Now: t0 + 30*hour, Before: t0 + 30*hour},
			{Op: OpReclaim, Now: t0 + 30*hour, Horizon: 10 * 60 * sec},
		}},
		{Index: 11, Cmds: []Command{
			{Op: OpPurge, Now: t0 + 31*hour, State: StateDone, Before: t0 + 31*hour, Max: 10, Who: "ops", Reason: "r"},
			{Op: OpExpire, Now: t0 + 60*hour},
		}},
	}
}

func TestDeterminismFixed(t *testing.T) {
	var hashes [][32]byte
	var dumps []string
	for range 2 {
		e := mustOpen(t, Options{NoSync: true})
		if _, err := e.ApplyBatch(fixedSequence()); err != nil {
			t.Fatal(err)
		}
		var d bytes.Buffer
		if err := e.Dump(&d); err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, mustHash(t, e))
		dumps = append(dumps, d.String())
	}
	if hashes[0] != hashes[1] || dumps[0] != dumps[1] {
		t.Fatalf("two fresh files differ:\n%s\n---\n%s", dumps[0], dumps[1])
	}
	if !strings.Contains(dumps[0], `bucket "events"`) || !strings.Contains(dumps[0], `bucket "counters"`) {
		t.Fatalf("dump lacks buckets:\n%s", dumps[0])
	}
}

// attemptOf is a failed attempt derived from a command's time: none for a
// fifth of the commands, else one with a body of up to 299 bytes (some cut).
func attemptOf(now int64) *Attempt {
	if now%5 == 0 {
		return nil
	}
	return &Attempt{At: now - sec, Took: now % sec, Status: int(now % 3 * 250), Error: []string{"err 0", "err 1", "err 2", AttemptTimeout}[now%4],
		Body: bytes.Repeat([]byte("b"), int(now%300))}
}

func stepped(c Command, step string) Command {
	c.Step = step
	return c
}

// stepOf is a handler's step derived from a command's time: none for a third
// of the commands, else one of a few names.
func stepOf(now int64) string {
	if now%3 == 0 {
		return ""
	}
	return fmt.Sprintf("step-%d", now%7)
}

// randomEntries builds a seeded random sequence of every op, choosing tokens
// and keys from what a reference engine answers, and returns the entries.
func randomEntries(t *testing.T, seed uint64, n int) []Entry {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x6f6e6365686f6f6b))
	ref := mustOpen(t, Options{NoSync: true})
	type lease struct {
		key   string
		token uint64
	}
	var leases []lease
	now := t0
	key := func() string { return fmt.Sprintf("s%d:k%03d", rng.IntN(3), rng.IntN(300)) }
	var entries []Entry
	for idx := uint64(1); idx <= uint64(n); idx++ {
		var cmds []Command
		for range 1 + rng.IntN(4) {
			now += rng.Int64N(3 * 60 * sec)
			var c Command
			switch p := rng.IntN(100); {
			case p < 35:
				k := key()
				c = Command{Op: OpClaim, Now: now, Key: k, Source: k[:2], Retention: rng.Int64N(4 * hour),
					LeaseFor: rng.Int64N(2) * 20 * sec, Payload: []byte(k + " body")}
				if rng.IntN(2) == 0 {
					c.Headers = []Header{{Name: "H", Value: k}}
				}
				if rng.IntN(4) == 0 {
					// Order times in 2-hour steps that follow now (ties
					// and several unfinished events per object), one in
					// three a step behind (often stale).
					c.OrderObject, c.OrderTime = fmt.Sprintf("obj%d", rng.IntN(5)), now/(2*hour)-rng.Int64N(1000)%3/2
				}
				c.BodyKey = bodyKeyOf(k) // from k, so the rng sequence stays as it was
				// A quarter of the claims carry their lease (from now, so the rng
				// sequence stays as it was).
				c.LeaseNow = now % 4 / 3 * 30 * sec
			case p < 50:
				c = Command{Op: OpLease, Now: now, Max: 1 + rng.IntN(5), LeaseFor: 30 * sec}
			case p < 65 && len(leases) > 0:
				l := leases[rng.IntN(len(leases))]
				c = Command{Op: OpComplete, Now: now, Key: l.key, Token: l.token, PayloadRetention: now % 3 * hour}
				if rng.IntN(3) == 0 {
					c.Response = &Response{Status: 200 + rng.IntN(3), Body: []byte("resp")}
				}
				c.Step = stepOf(now) // from now, so the rng sequence stays as it was
			case p < 78 && len(leases) > 0:
				l := leases[rng.IntN(len(leases))]
				c = Command{Op: OpFail, Now: now, Key: l.key, Token: l.token, RetryIn: rng.Int64N(10 * 60 * sec),
					MaxAttempts: rng.IntN(4), Reason: fmt.Sprintf("err %d", rng.IntN(9))}
				c.Step = stepOf(now)
				c.Attempt = attemptOf(now)
				c.DeadRetention = now % 4 * hour // from now, so the rng sequence stays as it was
			case p < 83:
				c = Command{Op: OpReclaim, Now: now, Horizon: now % 2 * 5 * 60 * sec}
			case p < 88:
				if rng.IntN(2) == 0 {
					c = Command{Op: OpReplay, Now: now, Keys: []string{key(), key()}, Who: "ops", Reason: "r", OnlyFrom: []State{0, StateDead}[now/sec%2],
						LeaseFor: now % 3 * 30 * sec} // from now, so the rng sequence stays as it was
				} else {
					c = Command{Op: OpReplay, Now: now, State: []State{StateDone, StateDead, StateStale}[rng.IntN(3)],
						Source: []string{"", "s0"}[rng.IntN(2)], Since: now - rng.Int64N(hour), Who: "ops"}
				}
			case p < 92:
				c = Command{Op: OpExpire, Now: now}
			case p < 95:
				c = Command{Op: OpDropPayloads, Now: now, Before: now - rng.Int64N(hour)}
				c.Max, c.Since = int(now%3), now%2*(now-2*hour) // from now, so the rng sequence stays as it was
			case p < 97:
				c = Command{Op: Op(rng.IntN(12)), Now: now} // often malformed
			default:
				c = Command{Op: OpNoop, Now: now}
			}
			cmds = append(cmds, c)
		}
		// Pause and resume the sources on a schedule derived from idx, so
		// the rng sequence of the other ops stays as it was. s0 and s1 are
		// paused (sometimes again: a no-op), s0 to s2 resumed (s2 never
		// paused: a no-op).
		if idx%19 == 0 {
			cmds = append(cmds, Command{Op: OpPause, Now: now, Source: fmt.Sprintf("s%d", idx/19%2), Who: "ops", Reason: "down"})
		}
		if idx%29 == 0 {
			cmds = append(cmds, Command{Op: OpResume, Now: now, Source: fmt.Sprintf("s%d", idx/29%3), Who: "ops"})
		}
		// Purge on a schedule too: dead, done or stale, some of one source.
		if idx%23 == 0 {
			cmds = append(cmds, Command{Op: OpPurge, Now: now, State: []State{StateDead, StateDone, StateStale}[idx/23%3],
				Source: []string{"", "s1"}[idx/23%2], Before: now - hour, Max: int(idx%7 + 1), Who: "ops", Reason: "r"})
		}
		e := Entry{Index: idx, Cmds: cmds}
		rs, err := ref.ApplyBatch([]Entry{e})
		if err != nil {
			t.Fatalf("seed %d entry %d: %v", seed, idx, err)
		}
		for _, r := range rs[0] {
			for _, ev := range r.Events {
				leases = append(leases, lease{ev.Key, ev.Token})
			}
		}
		if len(leases) > 50 {
			leases = leases[len(leases)-50:]
		}
		entries = append(entries, e)
	}
	return entries
}

// TestDeterminismRandom applies seeded random sequences of every op to fresh
// files, one entry per batch, in random batch sizes and all at once (through
// the entry codec), and requires identical contents. Each file also passes
// the index check at cleanup.
// bodyKeyOf gives half the keys a replay-guard body key shared with the
// other keys of their source that end in the same digit, so that random
// sequences hit the guard (a duplicate naming another key) as well as miss it.
func bodyKeyOf(k string) string {
	last := k[len(k)-1]
	if last%2 == 1 {
		return ""
	}
	return k[:2] + "#" + string(last)
}

func TestDeterminismRandom(t *testing.T) {
	n := 600
	if testing.Short() || raceEnabled {
		n = 200
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			entries := randomEntries(t, seed, n)
			var hashes [][32]byte
			var results [4][]string
			// Modes: one entry per commit; random batches; one batch; and
			// ApplyBatchDeferred on in-place decoded entries, committed at
			// random points (Flush, a Get, or not at all until Hash).
			for mode := range 4 {
				e := mustOpen(t, Options{NoSync: true})
				rng := rand.New(rand.NewPCG(seed, 99))
				for i := 0; i < len(entries); {
					size := 1
					switch mode {
					case 1, 3:
						size = 1 + rng.IntN(40)
					case 2:
						size = len(entries)
					}
					batch := slices.Clone(entries[i:min(i+size, len(entries))])
					for j := range batch {
						decode := DecodeEntry
						if mode == 3 {
							decode = DecodeEntryShared
						}
						cmds, err := decode(EncodeEntry(nil, batch[j].Cmds))
						if err != nil {
							t.Fatal(err)
						}
						batch[j].Cmds = cmds
					}
					apply := e.ApplyBatch
					if mode == 3 {
						apply = e.ApplyBatchDeferred
					}
					rs, err := apply(batch)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range rs {
						for _, c := range r {
							results[mode] = append(results[mode], resultString(c))
						}
					}
					if mode == 3 {
						switch rng.IntN(4) {
						case 0:
							if err := e.Flush(); err != nil {
								t.Fatal(err)
							}
						case 1:
							e.Get("src:none", false)
						}
					}
					i += size
				}
				hashes = append(hashes, mustHash(t, e))
				if err := e.Check(); err != nil {
					t.Fatalf("mode %d: %v", mode, err)
				}
			}
			if hashes[0] != hashes[1] || hashes[0] != hashes[2] || hashes[0] != hashes[3] {
				t.Fatalf("hashes differ by batching: %x", hashes)
			}
			for _, m := range []int{1, 3} {
				if !slices.Equal(results[0], results[m]) {
					t.Fatalf("mode %d: results differ from one entry per commit", m)
				}
			}
		})
	}
}

// resultString renders what a caller sees of a result.
func resultString(r Result) string {
	s := fmt.Sprintf("%v %d %d %v %v", r.Created, r.State, r.N, r.Keys, r.Err)
	for _, ev := range r.Events {
		s += fmt.Sprintf(" [%s %d %d %d %q %d]", ev.Key, ev.State, ev.Token, ev.Attempts, ev.Payload, len(ev.Headers))
	}
	return s
}

// TestRandomSequenceCoversOutcomes guards the generator: a sequence that
// stopped exercising the ops would make the determinism test vacuous.
func TestRandomSequenceCoversOutcomes(t *testing.T) {
	entries := randomEntries(t, 7, 300)
	e := mustOpen(t, Options{NoSync: true})
	seen := map[string]int{}
	var rs [][]Result
	for _, en := range entries {
		r, err := e.ApplyBatch([]Entry{en})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r...)
		if n, err := pausedPending(e); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			seen["held"]++
		}
		if longestQueue(t, e) > 1 {
			seen["queued behind"]++
		}
		if maxHistoryLen(t, e) > 1 {
			seen["history"]++
		}
	}
	for i, en := range entries {
		for j, c := range en.Cmds {
			r := rs[i][j]
			switch {
			case r.Err != nil:
				for _, want := range []error{ErrStaleToken, ErrWrongState, ErrNotFound, ErrBadCommand} {
					if errors.Is(r.Err, want) {
						seen[want.Error()]++
					}
				}
			case c.Op == OpClaim && r.State == StateStale:
				seen["stale claim"]++
			case c.Op == OpClaim && !r.Created && len(r.Keys) == 1:
				seen["body duplicate"]++
			case c.Op == OpClaim && !r.Created:
				seen["duplicate"]++
			case c.Op == OpClaim && len(r.Events) == 1:
				seen["claim leased"]++
			case c.Op == OpClaim && c.LeaseNow > 0 && r.State == StatePending:
				seen["claim lease declined"]++
			case c.Op == OpComplete:
				seen["complete"]++
			case c.Op == OpFail && r.State == StateDead:
				seen["dead"]++
			case c.Op == OpFail:
				seen["retry"]++
			case r.N > 0:
				seen[fmt.Sprint("op ", c.Op)]++
			case c.Op == OpPause:
				seen["pause no-op"]++
			case c.Op == OpResume:
				seen["resume no-op"]++
			}
		}
	}
	for _, want := range []string{ErrStaleToken.Error(), ErrWrongState.Error(), ErrBadCommand.Error(),
		"stale claim", "duplicate", "body duplicate", "claim leased", "claim lease declined", "complete", "dead", "retry",
		"op lease", "op reclaim", "op replay", "op expire", "op drop payloads", "op pause", "op resume", "pause no-op", "resume no-op", "held",
		"queued behind", "history"} {
		if seen[want] == 0 {
			t.Errorf("the random sequence never produced %q (saw %v)", want, seen)
		}
	}
}

// TestDependencyRule: the engine imports nothing of ours and none of the
// packages doc.go forbids.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"oncehook", "github.com/hashicorp/raft", "github.com/valyala/fasthttp",
		"github.com/BurntSushi/toml", "net/http"}
	for _, imp := range pkg.Imports {
		for _, f := range forbidden {
			if imp == f || strings.HasPrefix(imp, f+"/") {
				t.Errorf("engine imports %s", imp)
			}
		}
	}
}

func withAttempt(c Command) Command {
	c.Attempt = &Attempt{At: c.Now - sec, Took: sec / 2, Status: 500, Error: "status 500", Body: []byte("no")}
	return c
}

// longestQueue is the most unfinished events one object has queued.
func longestQueue(tb testing.TB, e *Engine) int {
	tb.Helper()
	best, n := 0, 0
	var last string
	err := e.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bObjects).ForEach(func(k, v []byte) error {
			obj, _, _, _, _, _ := parseObjectKey(k)
			if string(obj) != last {
				last, n = string(obj), 0
			}
			n++
			best = max(best, n)
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return best
}

// maxHistoryLen is the longest attempt history stored.
func maxHistoryLen(tb testing.TB, e *Engine) int {
	tb.Helper()
	best := 0
	err := e.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bAttempts).ForEach(func(k, v []byte) error {
			h, err := decodeHistory(k, v)
			best = max(best, len(h))
			return err
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return best
}
