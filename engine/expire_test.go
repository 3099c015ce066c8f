package engine

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestExpireManyBuckets: 100,000 keys over 72 hourly buckets (10,000 under
// -short or -race), in every state. Expire at hour 36 deletes exactly the done
// keys whose bucket ended, moves the unfinished ones (pending, processing,
// dead) of those buckets to later buckets, and leaves the others (records,
// payloads, indexes, counters) intact.
func TestExpireManyBuckets(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	const buckets = 72
	e := mustOpen(t, Options{NoSync: true})
	idx := uint64(0)
	apply := func(cmds ...Command) []Result {
		t.Helper()
		idx++
		rs, err := e.Apply(idx, cmds...)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	// Key i is claimed in hour i%72 with a retention of 30 minutes, so it ends
	// with bucket (i%72)+1 or +2 depending on the minute it was claimed at.
	claimAt := func(i int) int64 { return t0 + int64(i%buckets)*hour + int64(i%60)*60*sec }
	ends := func(i int) int64 { return bucketEnd(claimAt(i)+30*60*sec, hour) }
	// Key i's state: i%10 == 0 stays pending, 1 processing, 2 dead, else done.
	want := func(i int) State {
		switch i % 10 {
		case 0:
			return StatePending
		case 1:
			return StateProcessing
		case 2:
			return StateDead
		}
		return StateDone
	}
	const batch = 2000
	cmds := make([]Command, 0, batch)
	index := make(map[string]int, n)
	for i := range n {
		c := claimCmd(keyN(i), claimAt(i))
		c.Retention = 30 * 60 * sec
		index[c.Key] = i
		cmds = append(cmds, c)
		if len(cmds) == batch || i == n-1 {
			apply(cmds...)
			cmds = cmds[:0]
		}
	}
	leased := apply(leaseCmd(t0+100*hour, n))[0].Events
	for _, ev := range leased {
		switch want(index[ev.Key]) {
		case StatePending:
			cmds = append(cmds, Command{Op: OpFail, Now: t0 + 100*hour, Key: ev.Key, Token: ev.Token, RetryIn: 100 * hour})
		case StateDead:
			cmds = append(cmds, failCmd(ev.Key, ev.Token, t0+100*hour, 1))
		case StateDone:
			cmds = append(cmds, completeCmd(ev.Key, ev.Token, t0+100*hour))
		}
		if len(cmds) == batch {
			apply(cmds...)
			cmds = cmds[:0]
		}
	}
	apply(cmds...)
	if states, sources := mustCounts(t, e); sumCounts(states) != n || sources["src"] != n {
		t.Fatalf("counts before = %v %v", states, sources)
	}

	cut := t0 + 36*hour
	wantGone := 0
	for i := range n {
		if ends(i) <= cut && want(i) == StateDone {
			wantGone++
		}
	}
	if wantGone == 0 || wantGone == n {
		t.Fatalf("bad fixture: %d of %d expire", wantGone, n)
	}
	r := apply(Command{Op: OpExpire, Now: cut})[0]
	if r.Err != nil || r.N != wantGone {
		t.Fatalf("Expire = %d, %v; want %d", r.N, r.Err, wantGone)
	}
	states, sources := mustCounts(t, e)
	if sumCounts(states) != n-wantGone || sources["src"] != n-wantGone {
		t.Fatalf("counts after = %v %v, want %d", states, sources, n-wantGone)
	}
	for i := 0; i < n; i += 37 {
		ev, err := e.Get(keyN(i), true)
		switch {
		case ends(i) <= cut && want(i) == StateDone:
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s (ends %d) survived: %v", keyN(i), (ends(i)-t0)/hour, err)
			}
		case ends(i) <= cut:
			if err != nil || ev.State != want(i) || ev.ExpiresAt <= cut || string(ev.Payload) != "payload of "+keyN(i) {
				t.Fatalf("unfinished %s was not moved: %+v, %v", keyN(i), ev, err)
			}
		default:
			if err != nil || ev.ExpiresAt != ends(i) || string(ev.Payload) != "payload of "+keyN(i) {
				t.Fatalf("kept %s = %+v, %v", keyN(i), ev, err)
			}
		}
	}
	// Nothing is left in an ended bucket: a second Expire changes nothing.
	if r := apply(Command{Op: OpExpire, Now: cut})[0]; r.N != 0 {
		t.Fatalf("second Expire = %d", r.N)
	}
	// The indexes of the kept keys still work: everything pending is leasable.
	pending := states[StatePending]
	if got := apply(leaseCmd(t0+200*hour, n))[0].N; got != pending {
		t.Fatalf("leased %d after expiry, want the %d pending", got, pending)
	}
	// Claiming an expired key creates it again.
	for i := range buckets {
		if ends(i) <= cut && want(i) == StateDone {
			if r := apply(claimCmd(keyN(i), t0+200*hour))[0]; !r.Created {
				t.Fatalf("re-claim of expired %s: %+v", keyN(i), r)
			}
			break
		}
	}
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
}

func sumCounts(m map[State]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestExpireInBatches: an expire with a Max visits at most that many
// entries of the ended buckets and says whether more remain; run until
// none do, it leaves exactly the state one whole expire leaves (done and
// stale events deleted, dead letters reported once, unfinished events and
// their objects' order entries kept later), and the file checks after every
// command. An entry of a binary before formatExpireBatched ignores Max.
func TestExpireInBatches(t *testing.T) {
	fill := func(h *harness) {
		for i := range 23 {
			c := claimCmd(fmt.Sprintf("src:done%02d", i), t0)
			c.Retention = hour * int64(1+i%3) // three buckets
			h.one(c)
		}
		for i := range 4 {
			c := claimCmd(fmt.Sprintf("src:pending%d", i), t0)
			c.Retention = hour
			h.one(c)
		}
		for i := range 3 {
			c := orderedClaim(fmt.Sprintf("src:ordered%d", i), t0, "A", int64(100+i))
			c.Retention = hour
			h.one(c)
		}
		// Leased: the done ones complete, one fails for good (dead), the
		// rest stay processing (the ordered ones behind their head).
		for range 3 {
			r := h.one(leaseCmd(t0, 100))
			for _, ev := range r.Events {
				switch {
				case strings.HasPrefix(ev.Key, "src:done"):
					h.one(completeCmd(ev.Key, ev.Token, t0))
				case ev.Key == "src:pending0":
					h.one(Command{Op: OpFail, Now: t0, Key: ev.Key, Token: ev.Token, MaxAttempts: 1, DeadRetention: hour, Reason: "500"})
				}
			}
		}
	}
	now := t0 + 10*hour

	for _, tc := range []struct {
		name     string
		format   uint8
		max      int
		commands int
	}{
		{"one entry a command", 0, 1, 0},
		{"four entries a command", 0, 4, 0},
		{"more than there are", 0, 1000, 1},
		{"an older binary's entries", formatOrderKept, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := newHarness(t, Options{NoSync: true})
			fill(whole)
			want := whole.one(Command{Op: OpExpire, Now: now})
			if want.More || want.N == 0 {
				t.Fatalf("whole expire = %+v", want)
			}
			h := newHarness(t, Options{NoSync: true})
			fill(h)
			entries := endedEntries(t, h.e, now)
			n, commands := 0, 0
			var dead []string
			for {
				r := h.one(Command{Op: OpExpire, Now: now, Max: tc.max, format: tc.format})
				commands++
				n += r.N
				for _, ev := range r.Events {
					dead = append(dead, ev.Key)
				}
				if err := h.e.Check(); err != nil {
					t.Fatalf("after command %d: %v", commands, err)
				}
				if !r.More {
					break
				}
				if commands > 1000 {
					t.Fatal("expire never ends")
				}
			}
			// Every command visits Max entries, the last what is left; an
			// order entry kept later with its object's moved events leaves
			// the bucket unvisited (one object here).
			least, most := tc.commands, tc.commands
			if tc.commands == 0 {
				least, most = (entries-1+tc.max-1)/tc.max, (entries+tc.max-1)/tc.max
			}
			if commands < least || commands > most {
				t.Fatalf("%d commands for %d entries, want %d to %d", commands, entries, least, most)
			}
			var wantDead []string
			for _, ev := range want.Events {
				wantDead = append(wantDead, ev.Key)
			}
			if n != want.N || !slices.Equal(dead, wantDead) {
				t.Fatalf("expired %d (dead %v), a whole expire %d (dead %v)", n, dead, want.N, wantDead)
			}
			for whole.idx < h.idx { // the same last applied index
				whole.one(Command{Op: OpNoop, Now: now})
			}
			if mustHash(t, h.e) != mustHash(t, whole.e) {
				t.Fatal("the state differs from a whole expire's")
			}
		})
	}
}

// endedEntries counts the entries of the expiry buckets that ended by now.
func endedEntries(tb testing.TB, e *Engine, now int64) int {
	tb.Helper()
	n := 0
	if err := e.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bExpiry).ForEachBucket(func(name []byte) error {
			if timeOf(name) <= now {
				n += tx.Bucket(bExpiry).Bucket(name).Stats().KeyN
			}
			return nil
		})
	}); err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestExpireCostIsTheBucketsNotTheStore: expiry deletes whole time buckets
// and never walks the stored keys, so expiring one ended bucket costs the
// same whether none or 20,000 live keys wait in later buckets. Counted in
// allocations, which do not depend on the machine's speed: anything that
// reads each stored event allocates at least once per key.
func TestExpireCostIsTheBucketsNotTheStore(t *testing.T) {
	mallocs := func(live int) uint64 {
		e := mustOpen(t, Options{NoSync: true})
		idx := uint64(0)
		apply := func(cmds ...Command) {
			t.Helper()
			idx++
			if _, err := e.Apply(idx, cmds...); err != nil {
				t.Fatal(err)
			}
		}
		var cmds []Command
		for i := range 10 {
			c := claimCmd(fmt.Sprintf("src:ending_%d", i), t0)
			c.Retention = 30 * 60 * sec
			cmds = append(cmds, c)
		}
		apply(cmds...)
		cmds = cmds[:0]
		for i := range live {
			c := claimCmd(keyN(i), t0)
			c.Retention = 1000 * hour
			if cmds = append(cmds, c); len(cmds) == 2000 || i == live-1 {
				apply(cmds...)
				cmds = cmds[:0]
			}
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		apply(Command{Op: OpExpire, Now: t0 + 2*hour})
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	alone, among := mallocs(0), mallocs(20_000)
	if among > alone+2_000 {
		t.Fatalf("expiring one bucket of 10 keys took %d allocations among 20,000 live keys and %d alone: expiry reads the store, not its bucket", among, alone)
	}
	t.Logf("allocations: %d alone, %d among 20,000 live keys", alone, among)
}
