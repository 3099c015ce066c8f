package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// orderedClaim is a claim of key for object at order time ot.
func orderedClaim(key string, now int64, object string, ot int64) Command {
	c := claimCmd(key, now)
	c.OrderObject, c.OrderTime = object, ot
	return c
}

func sortedLeased(r Result) []string {
	var ks []string
	for _, ev := range r.Events {
		ks = append(ks, ev.Key)
	}
	slices.Sort(ks)
	return ks
}

// orderStep is one step of an ordering scenario: an entry of commands
// (built when the step runs, so it can use an earlier lease's token), then
// the keys the next lease must hand out (sorted; nil: none).
type orderStep struct {
	cmds  func(h *harness) []Command
	lease []string
}

func cmds(cs ...Command) func(*harness) []Command { return func(*harness) []Command { return cs } }

// token returns key's current lease token.
func (h *harness) token(key string) uint64 { h.tb.Helper(); return h.get(key).Token }

// TestOrderAtDelivery: on an ordered source at most one event per object is
// processing, the oldest order time first; a dead event releases its object;
// a retried or reclaimed head goes again before a younger event; unordered
// events and other objects are not held back; a paused source keeps it.
func TestOrderAtDelivery(t *testing.T) {
	now := t0
	tests := []struct {
		name  string
		steps []orderStep
	}{
		{"one lease per object, oldest first", []orderStep{
			{cmds(orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200), orderedClaim("src:b1", now, "B", 100)),
				[]string{"src:a1", "src:b1"}},
			{cmds(Command{Op: OpNoop, Now: now}), nil},
			{func(h *harness) []Command { return []Command{completeCmd("src:a1", h.token("src:a1"), now)} }, []string{"src:a2"}},
		}},
		{"a dead event releases its object", []orderStep{
			{cmds(orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200)), []string{"src:a1"}},
			{func(h *harness) []Command { return []Command{failCmd("src:a1", h.token("src:a1"), now, 1)} }, []string{"src:a2"}},
		}},
		{"a retried head blocks the younger event", []orderStep{
			{cmds(orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200)), []string{"src:a1"}},
			{func(h *harness) []Command {
				return []Command{{Op: OpFail, Now: now, Key: "src:a1", Token: h.token("src:a1"), RetryIn: 10 * hour}}
			}, nil},
		}},
		{"a reclaimed head is leased again, not the younger event", []orderStep{
			{cmds(orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200)), []string{"src:a1"}},
			{cmds(Command{Op: OpReclaim, Now: now + hour}), []string{"src:a1"}},
		}},
		{"unordered events of the source are not held back", []orderStep{
			{cmds(orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200), claimCmd("src:u1", now), claimCmd("src:u2", now)),
				[]string{"src:a1", "src:u1", "src:u2"}},
		}},
		{"a paused source keeps its order when resumed", []orderStep{
			{cmds(Command{Op: OpPause, Now: now, Source: "src"}, orderedClaim("src:a1", now, "A", 100), orderedClaim("src:a2", now, "A", 200)), nil},
			{cmds(Command{Op: OpResume, Now: now, Source: "src"}), []string{"src:a1"}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			for i, st := range tc.steps {
				for j, r := range h.apply(st.cmds(h)...) {
					if r.Err != nil {
						t.Fatalf("step %d command %d: %v", i, j, r.Err)
					}
				}
				// Step i leases at now + i hours (a lease of step i-1 has ended).
				if got := sortedLeased(h.one(leaseCmd(now+int64(i)*hour, 100))); !slices.Equal(got, st.lease) {
					t.Fatalf("step %d: leased %v, want %v", i, got, st.lease)
				}
			}
		})
	}
}

// TestOrderTiesByClaimOrder delivers four events of one object with one order
// time, claimed in an order unlike their keys' (some in one entry), one at a
// time, in claim order.
func TestOrderTiesByClaimOrder(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	h.one(orderedClaim("src:z", t0, "A", 100))
	h.apply(orderedClaim("src:y", t0, "A", 100), orderedClaim("src:b", t0, "A", 100))
	h.one(orderedClaim("src:a", t0, "A", 100))
	var got []string
	for range 4 {
		r := h.one(leaseCmd(t0, 100))
		if r.N != 1 {
			t.Fatalf("lease handed out %v, want one event", sortedLeased(r))
		}
		got = append(got, r.Events[0].Key)
		h.one(completeCmd(r.Events[0].Key, r.Events[0].Token, t0))
	}
	if want := []string{"src:z", "src:y", "src:b", "src:a"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v (claim order)", got, want)
	}
}

// TestOrderReplayRequeues: a replayed dead event re-enters its object's queue
// at the tail: it waits for the event processing and for the one waiting.
func TestOrderReplayRequeues(t *testing.T) {
	// Order times near the end of what nanoseconds hold (2260-2262,
	// RFC 3339 or 19 digits) must find the tail too.
	for _, base := range []int64{0, 1<<63 - 1 - 300} {
		t.Run(fmt.Sprint(base), func(t *testing.T) { testOrderReplayRequeues(t, base) })
	}
}

func testOrderReplayRequeues(t *testing.T, base int64) {
	h := newHarness(t, Options{NoSync: true})
	h.apply(orderedClaim("src:a1", t0, "A", base+100), orderedClaim("src:a2", t0, "A", base+200), orderedClaim("src:a3", t0, "A", base+300))
	r := h.one(leaseCmd(t0, 100))
	h.one(failCmd("src:a1", r.Events[0].Token, t0, 1)) // dead: a2 may go
	r = h.one(leaseCmd(t0, 100))
	if got := sortedLeased(r); !slices.Equal(got, []string{"src:a2"}) {
		t.Fatalf("after the dead one, leased %v", got)
	}
	if rr := h.one(Command{Op: OpReplay, Now: t0, Keys: []string{"src:a1"}, Who: "op"}); rr.N != 1 {
		t.Fatalf("replay = %+v", rr)
	}
	if ev := h.get("src:a1"); ev.OrderTime != base+300 || ev.OrderIndex != h.idx {
		t.Fatalf("replayed event's place = %d/%d, want the tail's time %d at index %d", ev.OrderTime, ev.OrderIndex, base+300, h.idx)
	}
	if got := sortedLeased(h.one(leaseCmd(t0, 100))); len(got) != 0 {
		t.Fatalf("while a2 is processing, leased %v", got)
	}
	var order []string
	h.one(completeCmd("src:a2", r.Events[0].Token, t0))
	for range 2 {
		r = h.one(leaseCmd(t0, 100))
		if r.N != 1 {
			t.Fatalf("lease handed out %v, want one event", sortedLeased(r))
		}
		order = append(order, r.Events[0].Key)
		h.one(completeCmd(r.Events[0].Key, r.Events[0].Token, t0))
	}
	if want := []string{"src:a3", "src:a1"}; !slices.Equal(order, want) {
		t.Fatalf("after a2, delivered %v, want %v", order, want)
	}
	if n := objectEntries(t, h.e); n != 0 {
		t.Fatalf("%d objects entries left with every event done", n)
	}
}

// TestOrderQueueLeavesWithTheEvent: done, dead and stale (never queued)
// events leave no objects entry; an unfinished event keeps its entry
// through the expiry of its bucket.
func TestOrderQueueLeavesWithTheEvent(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	h.apply(orderedClaim("src:a1", t0, "A", 100), orderedClaim("src:a2", t0, "A", 200),
		orderedClaim("src:old", t0, "A", 50), orderedClaim("src:b1", t0, "B", 100))
	if n := objectEntries(t, h.e); n != 3 {
		t.Fatalf("%d objects entries, want 3 (the stale claim is not queued)", n)
	}
	r := h.one(leaseCmd(t0, 100))
	for _, ev := range r.Events {
		if ev.Key == "src:a1" {
			h.one(completeCmd(ev.Key, ev.Token, t0))
		} else {
			h.one(failCmd(ev.Key, ev.Token, t0, 1))
		}
	}
	if n := objectEntries(t, h.e); n != 1 {
		t.Fatalf("%d objects entries after done and dead, want 1", n)
	}
	r = h.one(leaseCmd(t0, 100)) // a2 processing when its bucket ends
	if r.N != 1 {
		t.Fatalf("lease handed out %v, want a2", sortedLeased(r))
	}
	// Expiry deletes the done and the stale event; processing a2 moves to a
	// later bucket (unfinished events never expire) and keeps its place.
	if r := h.one(Command{Op: OpExpire, Now: t0 + 48*hour}); r.N != 2 {
		t.Fatalf("expire = %d, want 2 (a1 done, old stale)", r.N)
	}
	if n := objectEntries(t, h.e); n != 1 {
		t.Fatalf("%d objects entries after expiry, want a2's", n)
	}
	h.one(completeCmd("src:a2", r.Events[0].Token, t0+48*hour))
	if n := objectEntries(t, h.e); n != 0 {
		t.Fatalf("%d objects entries with every event finished", n)
	}
}

// TestCheckFindsQueueDisagreement: Check reports a missing objects entry
// and a processing event that is not its queue's head.
func TestCheckFindsQueueDisagreement(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(tx *bolt.Tx) error
		want  string
	}{
		{"missing entry", func(tx *bolt.Tx) error {
			ev := Event{Key: "src:a2", OrderObject: "A", OrderTime: 200, OrderIndex: 1, OrderPos: 1}
			return tx.Bucket(bObjects).Delete(appendObjectKey(nil, &ev))
		}, "not in the queue"},
		{"processing behind the head", func(tx *bolt.Tx) error {
			ev := Event{Key: "src:a0", OrderObject: "A", OrderTime: 1, OrderIndex: 1, OrderPos: 0}
			return tx.Bucket(bObjects).Put(appendObjectKey(nil, &ev), []byte{})
		}, "not the head"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Open(t.TempDir()+"/e.db", Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if _, err := e.Apply(1, orderedClaim("src:a1", t0, "A", 100), orderedClaim("src:a2", t0, "A", 200)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Apply(2, leaseCmd(t0, 10)); err != nil {
				t.Fatal(err)
			}
			if err := e.Check(); err != nil {
				t.Fatalf("Check before: %v", err)
			}
			if err := e.db.Update(tc.spoil); err != nil {
				t.Fatal(err)
			}
			err = e.Check()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrCorrupt naming %q", err, tc.want)
			}
		})
	}
}

func objectEntries(tb testing.TB, e *Engine) int {
	tb.Helper()
	n := 0
	err := e.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bObjects).ForEach(func(k, v []byte) error { n++; return nil })
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// TestRestoreSnapshotWithoutOrderBuckets: a snapshot written before the
// objects and attempts buckets existed restores, and ordering and the
// attempt history work after it (its unordered event is leased as before).
func TestRestoreSnapshotWithoutOrderBuckets(t *testing.T) {
	snap := oldSnapshot(t, bObjects, bAttempts)
	h := newHarness(t, Options{NoSync: true})
	if err := h.e.Restore(snap); err != nil {
		t.Fatalf("Restore of a snapshot without the objects and attempts buckets: %v", err)
	}
	h.idx = h.e.LastApplied()
	h.apply(orderedClaim("src:o1", t0, "A", 1), orderedClaim("src:o2", t0, "A", 2))
	r := h.one(leaseCmd(t0+sec, 10))
	if got := sortedLeased(r); !slices.Equal(got, []string{"src:a", "src:o1"}) {
		t.Fatalf("leased %v after restore", got)
	}
	f := failCmd("src:o1", r.Events[0].Token, t0+sec, 0)
	if r.Events[0].Key != "src:o1" {
		f.Token = r.Events[1].Token
	}
	f.Attempt = attemptN(1)
	if res := h.one(f); res.Err != nil {
		t.Fatal(res.Err)
	}
	if ev := h.get("src:o1"); len(ev.History) != 1 {
		t.Fatalf("history after restore = %+v", ev.History)
	}
}

// TestOrderClaimAfterAReplayedStaleEvent: a stale event replayed after its
// object's order entry expired is the tail of the queue; a claim that the
// guard no longer finds stale still goes after it, never beside it.
func TestOrderClaimAfterAReplayedStaleEvent(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	n := orderedClaim("src:new", t0, "A", 200)
	n.Retention = hour / 2
	h.one(n)
	if r := h.one(orderedClaim("src:stale", t0, "A", 100)); r.State != StateStale {
		t.Fatalf("older claim = %+v", r)
	}
	r := h.one(leaseCmd(t0, 10))
	h.one(completeCmd("src:new", r.Events[0].Token, t0))
	h.one(Command{Op: OpExpire, Now: t0 + 2*hour}) // src:new and the order entry go; src:stale stays
	h.one(Command{Op: OpReplay, Now: t0 + 2*hour, Keys: []string{"src:stale"}, Who: "ops"})
	if got := sortedLeased(h.one(leaseCmd(t0+2*hour, 10))); !slices.Equal(got, []string{"src:stale"}) {
		t.Fatalf("leased %v", got)
	}
	if r := h.one(orderedClaim("src:late", t0+2*hour, "A", 50)); r.State != StatePending {
		t.Fatalf("claim after the order entry expired = %+v", r)
	}
	if got := sortedLeased(h.one(leaseCmd(t0+2*hour, 10))); len(got) != 0 {
		t.Fatalf("leased %v while src:stale is processing", got)
	}
}

// TestRearmOfASupersededEvent: a provider's re-arm (a replay by key with
// OnlyFrom dead) leaves a dead ordered event as it is when a newer event
// of its object was claimed since, done or still queued, so that the
// handler never gets it after the newer one; with nothing newer it re-arms
// it. An operator's replay, and an entry of a binary before
// formatRearmOrder, still move it.
func TestRearmOfASupersededEvent(t *testing.T) {
	rearm := func(key string) Command {
		return Command{Op: OpReplay, Now: t0 + 10, Keys: []string{key}, OnlyFrom: StateDead, Who: "provider", Reason: "provider retry"}
	}
	deadFirst := func(t *testing.T) *harness {
		h := newHarness(t, Options{NoSync: true})
		h.one(orderedClaim("src:old", t0, "A", 100))
		r := h.one(leaseCmd(t0, 10))
		h.one(failCmd("src:old", r.Events[0].Token, t0+1, 1))
		if ev := h.get("src:old"); ev.State != StateDead {
			t.Fatalf("old is %v, want dead", ev.State)
		}
		return h
	}
	// delivered claims an event of object A at order time ot after old
	// died, and delivers it.
	delivered := func(ot int64) func(h *harness) {
		return func(h *harness) {
			h.one(orderedClaim("src:new", t0+2, "A", ot))
			r := h.one(leaseCmd(t0+2, 10))
			h.one(completeCmd("src:new", r.Events[0].Token, t0+3))
		}
	}
	for _, tc := range []struct {
		name  string
		after func(h *harness) // what happens to object A after old died
		cmd   Command
		want  error
	}{
		{"nothing newer", func(h *harness) {}, rearm("src:old"), nil},
		{"a newer one delivered", delivered(200), rearm("src:old"), ErrSuperseded},
		{"a later one waiting, same order time", func(h *harness) {
			h.one(orderedClaim("src:new", t0+2, "A", 100))
		}, rearm("src:old"), ErrSuperseded},
		{"a later one delivered, same order time", delivered(100), rearm("src:old"), ErrSuperseded},
		{"another object's event", func(h *harness) {
			h.one(orderedClaim("src:b", t0+2, "B", 500))
		}, rearm("src:old"), nil},
		{"an operator's replay", func(h *harness) {
			h.one(orderedClaim("src:new", t0+2, "A", 200))
		}, Command{Op: OpReplay, Now: t0 + 10, Keys: []string{"src:old"}, Who: "ops", Reason: "again"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := deadFirst(t)
			tc.after(h)
			r := h.one(tc.cmd)
			if !errors.Is(r.Err, tc.want) {
				t.Fatalf("re-arm = %+v, want %v", r, tc.want)
			}
			want := StatePending
			if tc.want != nil {
				want = StateDead
			}
			if ev := h.get("src:old"); ev.State != want {
				t.Fatalf("old is %v after the re-arm, want %v", ev.State, want)
			}
		})
	}
	t.Run("an earlier one of the same time", func(t *testing.T) {
		// Claimed before old with the same order time and delivered: old is
		// the newer of the two, and goes again.
		h := newHarness(t, Options{NoSync: true})
		h.one(orderedClaim("src:first", t0, "A", 100))
		r := h.one(leaseCmd(t0, 10))
		h.one(completeCmd("src:first", r.Events[0].Token, t0))
		h.one(orderedClaim("src:old", t0, "A", 100))
		r = h.one(leaseCmd(t0, 10))
		h.one(failCmd("src:old", r.Events[0].Token, t0+1, 1))
		if r := h.one(rearm("src:old")); r.Err != nil || h.get("src:old").State != StatePending {
			t.Fatalf("re-arm = %+v, want it re-armed", r)
		}
	})
	t.Run("format 14", func(t *testing.T) {
		h := deadFirst(t)
		h.one(orderedClaim("src:new", t0+2, "A", 200))
		old := rearm("src:old")
		old.format = formatRearmOrder - 1
		if r := h.one(old); r.Err != nil || h.get("src:old").State != StatePending {
			t.Fatalf("a format %d re-arm = %+v, want it re-armed as that binary does", old.format, r)
		}
	})
}

// TestOrderEntryOutlivesAKeptEvent: an event kept past its retention (still
// pending after a long outage, or a dead letter kept for its dead
// retention) keeps its object's order entry at least as long, so that an
// older claim of the object is still stale and never reaches the handler
// after it. Entries of binaries before formatOrderKept keep the old meaning:
// the entry goes with the claim's retention.
func TestOrderEntryOutlivesAKeptEvent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format uint8 // 0: this binary's
		dead   bool  // o2 fails its only attempt and is kept dead
		want   State // the older claim's state after o2's retention passed
	}{
		{"pending past its retention", 0, false, StateStale},
		{"dead, kept for its dead retention", 0, true, StateStale},
		{"pending, an older binary's entries", formatRearmOrder, false, StatePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			at := func(c Command) Command { c.format = tc.format; return c }
			o2 := orderedClaim("src:o2", t0, "A", 2000)
			o2.Retention = hour
			h.one(at(o2))
			if r := h.one(at(orderedClaim("src:o1", t0, "A", 1000))); r.State != StateStale {
				t.Fatalf("older claim before the expiry = %+v", r)
			}
			if tc.dead {
				r := h.one(at(leaseCmd(t0, 10)))
				h.one(at(Command{Op: OpFail, Now: t0, Key: "src:o2", Token: r.Events[0].Token, MaxAttempts: 1, DeadRetention: 720 * hour, Reason: "500"}))
			}
			h.one(at(Command{Op: OpExpire, Now: t0 + 3*hour})) // o2's own bucket and the entry's first one end
			if st := h.get("src:o2").State; st == StateDone || st == StateStale {
				t.Fatalf("o2 is %v", st)
			}
			if r := h.one(at(orderedClaim("src:o0", t0+3*hour, "A", 500))); r.State != tc.want {
				t.Fatalf("older claim after o2's retention = %v, want %v", r.State, tc.want)
			}
			// Everything goes in the end, the entry with the last event
			// (the harness checks the file at cleanup).
			h.one(at(Command{Op: OpPurge, Now: t0 + 3*hour, State: StateDead, Before: t0 + 4*hour, Max: 10, Who: "ops", Reason: "r"}))
			if !tc.dead {
				r := h.one(at(leaseCmd(t0+3*hour, 10)))
				for _, ev := range r.Events {
					h.one(at(completeCmd(ev.Key, ev.Token, t0+3*hour)))
				}
			}
			h.one(at(Command{Op: OpExpire, Now: t0 + 1000*hour}))
			if n := orderEntries(t, h.e); n != 0 {
				t.Fatalf("%d order entries left after every event expired", n)
			}
		})
	}
}

// TestOrderEntryIsNeverShortened: a replayed dead letter of an object gets
// a fresh window shorter than another dead letter's of the same object; the
// entry keeps the longer one, so an older claim is stale while that other
// dead letter is kept.
func TestOrderEntryIsNeverShortened(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	for _, c := range []Command{orderedClaim("src:x", t0, "A", 1500), orderedClaim("src:y", t0, "A", 2000)} {
		c.Retention = hour
		h.one(c)
	}
	for range 2 { // x first (older), then y: both go dead, kept 720 h
		for _, ev := range h.one(leaseCmd(t0, 10)).Events {
			h.one(Command{Op: OpFail, Now: t0, Key: ev.Key, Token: ev.Token, MaxAttempts: 1, DeadRetention: 720 * hour, Reason: "500"})
		}
	}
	h.one(Command{Op: OpReplay, Now: t0 + hour, Keys: []string{"src:x"}, Who: "ops", Reason: "r"})
	for _, ev := range h.one(leaseCmd(t0+hour, 10)).Events {
		h.one(completeCmd(ev.Key, ev.Token, t0+hour))
	}
	for h.one(Command{Op: OpExpire, Now: t0 + 5*hour, Max: 1}).More {
	}
	if st := h.get("src:y").State; st != StateDead {
		t.Fatalf("y is %v, want dead (kept)", st)
	}
	if r := h.one(orderedClaim("src:old", t0+5*hour, "A", 1000)); r.State != StateStale {
		t.Fatalf("an older claim while y (2000) is kept dead: %v, want stale", r.State)
	}
}

// orderEntries counts the entries of the orders bucket.
func orderEntries(tb testing.TB, e *Engine) int {
	tb.Helper()
	n := 0
	if err := e.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bOrders).ForEach(func(_, _ []byte) error { n++; return nil })
	}); err != nil {
		tb.Fatal(err)
	}
	return n
}
