package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// claimFrom is a claim of key on source, due at now.
func claimFrom(source, key string, now int64) Command {
	return Command{Op: OpClaim, Now: now, Key: key, Source: source, Payload: []byte("x"), Retention: 24 * hour}
}

func keysOf(evs []Event) []string {
	keys := make([]string, len(evs))
	for i, ev := range evs {
		keys[i] = ev.Key
	}
	return keys
}

// TestLeaseMergesSourcesOldestFirst: without quotas a lease takes the due
// events of every source oldest first, ties by key, as one time-ordered
// index would: leases of a few events at a time hand out exactly the
// sorted order.
func TestLeaseMergesSourcesOldestFirst(t *testing.T) {
	h := newHarness(t)
	rng := rand.New(rand.NewPCG(1, 2))
	type due struct {
		t   int64
		key string
	}
	var want []due
	for i := range 300 {
		src := fmt.Sprintf("s%d", rng.IntN(6))
		at := t0 + int64(rng.IntN(40))*sec // many ties of time across sources
		key := fmt.Sprintf("%s:evt_%03d", src, i)
		h.one(claimFrom(src, key, at))
		want = append(want, due{at, key})
	}
	slices.SortFunc(want, func(x, y due) int {
		if x.t != y.t {
			return int((x.t - y.t) / sec)
		}
		return strings.Compare(x.key, y.key)
	})
	var got []string
	for len(got) < len(want) {
		r := h.one(leaseCmd(t0+hour, 1+rng.IntN(17)))
		if len(r.Events) == 0 {
			t.Fatalf("lease found nothing after %d of %d", len(got), len(want))
		}
		got = append(got, keysOf(r.Events)...)
	}
	for i := range want {
		if got[i] != want[i].key {
			t.Fatalf("lease %d: %q, want %q (due at %ds)", i, got[i], want[i].key, (want[i].t-t0)/sec)
		}
	}
}

// TestLeaseQuotas: a source whose quota is spent gives way to the other
// sources' due events and takes what is left after them; a hard quota (a
// throttled source) takes nothing more; Share is the quota of every source
// not named; Spare keeps the last free workers from the sources past their
// quotas; Waiting names the sources left with due events.
func TestLeaseQuotas(t *testing.T) {
	// a has four events due at 1..4 s, b two at 5 and 6 s, c one at 7 s.
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		for i := 1; i <= 4; i++ {
			h.one(claimFrom("a", fmt.Sprintf("a:%d", i), t0+int64(i)*sec))
		}
		h.one(claimFrom("b", "b:5", t0+5*sec))
		h.one(claimFrom("b", "b:6", t0+6*sec))
		h.one(claimFrom("c", "c:7", t0+7*sec))
		return h
	}
	tests := []struct {
		name        string
		now         int64
		max         int
		quotas      []Quota
		share       int
		spare       int
		want        []string
		wantWaiting []string
	}{
		{"no quotas", t0 + 10*sec, 3, nil, 0, 0,
			[]string{"a:1", "a:2", "a:3"}, []string{"a", "b", "c"}},
		{"a's quota spent: the others first", t0 + 10*sec, 3, []Quota{{Source: "a", Max: 1}}, 0, 0,
			[]string{"a:1", "b:5", "b:6"}, []string{"a", "c"}},
		{"a's quota spent: the rest after the others", t0 + 10*sec, 10, []Quota{{Source: "a", Max: 1}}, 0, 0,
			[]string{"a:1", "b:5", "b:6", "c:7", "a:2", "a:3", "a:4"}, nil},
		{"a quota of 0: a after the others", t0 + 10*sec, 4, []Quota{{Source: "a"}}, 0, 0,
			[]string{"b:5", "b:6", "c:7", "a:1"}, []string{"a"}},
		{"a hard quota of 0 skips a", t0 + 10*sec, 10, []Quota{{Source: "a", Hard: true}}, 0, 0,
			[]string{"b:5", "b:6", "c:7"}, []string{"a"}},
		{"a hard quota of 2", t0 + 10*sec, 10, []Quota{{Source: "a", Max: 2, Hard: true}}, 0, 0,
			[]string{"a:1", "a:2", "b:5", "b:6", "c:7"}, []string{"a"}},
		{"share 1", t0 + 10*sec, 10, nil, 1, 0,
			[]string{"a:1", "b:5", "c:7", "a:2", "a:3", "a:4", "b:6"}, nil},
		{"a quota overrides the share", t0 + 10*sec, 4, []Quota{{Source: "a", Max: 3}}, 1, 0,
			[]string{"a:1", "a:2", "a:3", "b:5"}, []string{"a", "b", "c"}},
		{"quotas of sources with nothing due", t0 + 10*sec, 2, []Quota{{Source: "x", Hard: true}, {Source: "z", Max: 1}}, 0, 0,
			[]string{"a:1", "a:2"}, []string{"a", "b", "c"}},
		{"spare workers: what is left after the quotas stops short of them", t0 + 10*sec, 10, []Quota{{Source: "a", Max: 1}}, 0, 5,
			[]string{"a:1", "b:5", "b:6", "c:7", "a:2"}, []string{"a"}},
		{"spare workers are for events within their quotas", t0 + 10*sec, 3, nil, 0, 2,
			[]string{"a:1", "a:2", "a:3"}, []string{"a", "b", "c"}},
		{"only what is due by now", t0 + 5*sec, 10, []Quota{{Source: "a", Max: 1}}, 0, 0,
			[]string{"a:1", "b:5", "a:2", "a:3", "a:4"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := setup(t)
			r := h.one(Command{Op: OpLease, Now: tt.now, Max: tt.max, LeaseFor: 30 * sec, Quotas: tt.quotas, Share: tt.share, Spare: tt.spare})
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := keysOf(r.Events); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("leased %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(r.Waiting, tt.wantWaiting) {
				t.Errorf("waiting %q, want %q", r.Waiting, tt.wantWaiting)
			}
			for _, ev := range r.Events {
				if got := h.get(ev.Key); got.State != StateProcessing || got.Token != h.idx {
					t.Errorf("%s: state %d token %d, want processing under %d", ev.Key, got.State, got.Token, h.idx)
				}
			}
		})
	}
}

// TestLeaseQuotasRefused: malformed quotas are a bad command that changes
// nothing; the decoder refuses a list that is not sorted by source.
func TestLeaseQuotasRefused(t *testing.T) {
	h := newHarness(t)
	h.one(claimFrom("a", "a:1", t0))
	for _, tt := range []struct {
		name   string
		quotas []Quota
		share  int
		spare  int
	}{
		{"not sorted", []Quota{{Source: "b"}, {Source: "a"}}, 0, 0},
		{"twice", []Quota{{Source: "a"}, {Source: "a", Max: 1}}, 0, 0},
		{"negative", []Quota{{Source: "a", Max: -1}}, 0, 0},
		{"empty source", []Quota{{Source: ""}}, 0, 0},
		{"too large", []Quota{{Source: "a", Max: maxQuota + 1}}, 0, 0},
		{"negative share", nil, -1, 0},
		{"negative spare", nil, 0, -1},
		{"spare above max", nil, 0, 6},
	} {
		r := h.one(Command{Op: OpLease, Now: t0 + sec, Max: 5, LeaseFor: 30 * sec, Quotas: tt.quotas, Share: tt.share, Spare: tt.spare})
		if !errors.Is(r.Err, ErrBadCommand) || len(r.Events) != 0 {
			t.Errorf("%s: %+v, want ErrBadCommand and nothing leased", tt.name, r)
		}
	}
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
	if ev := h.get("a:1"); ev.State != StatePending || ev.Attempts != 0 {
		t.Fatalf("a:1 is %d with %d attempts after refused leases", ev.State, ev.Attempts)
	}

	raw := EncodeEntry(nil, []Command{{Op: OpLease, Now: t0, Max: 5, LeaseFor: sec, Quotas: []Quota{{Source: "b"}, {Source: "a"}}}})
	if _, err := DecodeEntry(raw); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decoding unsorted quotas: %v, want ErrCorrupt", err)
	}
}

// TestLeaseLengthsFromTheRunningConfig: a lease that names a source's
// length leases that source's events for it, whatever length their claim
// stored (a reload changed the source's lease since), and stores it for the
// leases after; a source it does not name keeps its events' stored length.
func TestLeaseLengthsFromTheRunningConfig(t *testing.T) {
	h := newHarness(t)
	for _, c := range []Command{claimFrom("a", "a:1", t0), claimFrom("b", "b:1", t0)} {
		c.LeaseFor = 30 * sec // the lease when they were claimed
		h.one(c)
	}
	now := t0 + sec
	r := h.one(Command{Op: OpLease, Now: now, Max: 5, LeaseFor: 10 * sec, Leases: []LeaseLength{{Source: "a", For: 120 * sec}}})
	if r.Err != nil || len(r.Events) != 2 {
		t.Fatalf("lease: %+v", r)
	}
	for _, ev := range r.Events {
		want := map[string]int64{"a": 120 * sec, "b": 30 * sec}[ev.Source]
		if ev.LeaseUntil != now+want || h.get(ev.Key).LeaseFor != want {
			t.Errorf("%s leased until %d (stored length %d), want %d", ev.Key, ev.LeaseUntil-now, h.get(ev.Key).LeaseFor, want)
		}
	}
	// Failed and leased again by a lease that names no length: a:1 keeps
	// the one it was last given.
	a := h.get("a:1")
	h.one(Command{Op: OpFail, Now: now, Key: "a:1", Token: a.Token, RetryIn: 1})
	later := now + 2*sec
	r = h.one(Command{Op: OpLease, Now: later, Max: 5, LeaseFor: 10 * sec})
	if len(r.Events) != 1 || r.Events[0].LeaseUntil != later+120*sec {
		t.Fatalf("second lease: %+v, want a:1 until +120s", r)
	}
	if err := h.e.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseLengthsRefused: malformed lengths are a bad command that changes
// nothing; the decoder refuses a list that is not sorted by source.
func TestLeaseLengthsRefused(t *testing.T) {
	h := newHarness(t)
	h.one(claimFrom("a", "a:1", t0))
	for _, tt := range []struct {
		name   string
		leases []LeaseLength
	}{
		{"not sorted", []LeaseLength{{Source: "b", For: sec}, {Source: "a", For: sec}}},
		{"twice", []LeaseLength{{Source: "a", For: sec}, {Source: "a", For: 2 * sec}}},
		{"zero", []LeaseLength{{Source: "a"}}},
		{"negative", []LeaseLength{{Source: "a", For: -sec}}},
		{"too long", []LeaseLength{{Source: "a", For: maxDuration + 1}}},
		{"empty source", []LeaseLength{{Source: "", For: sec}}},
	} {
		r := h.one(Command{Op: OpLease, Now: t0 + sec, Max: 5, LeaseFor: 30 * sec, Leases: tt.leases})
		if !errors.Is(r.Err, ErrBadCommand) || len(r.Events) != 0 {
			t.Errorf("%s: %+v, want ErrBadCommand and nothing leased", tt.name, r)
		}
	}
	if ev := h.get("a:1"); ev.State != StatePending || ev.Attempts != 0 {
		t.Fatalf("a:1 is %d with %d attempts after refused leases", ev.State, ev.Attempts)
	}
	raw := EncodeEntry(nil, []Command{{Op: OpLease, Now: t0, Max: 5, LeaseFor: sec, Leases: []LeaseLength{{Source: "b", For: 1}, {Source: "a", For: 1}}}})
	if _, err := DecodeEntry(raw); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decoding unsorted lease lengths: %v, want ErrCorrupt", err)
	}
}

// TestLeaseDueSkipsHardQuotas: LeaseDue looks past the sources a lease
// would skip (hard quotas of 0), and only those.
func TestLeaseDueSkipsHardQuotas(t *testing.T) {
	h := newHarness(t)
	h.one(claimFrom("a", "a:1", t0))
	skipA := []Quota{{Source: "a", Hard: true}}
	for _, tt := range []struct {
		name   string
		quotas []Quota
		want   bool
	}{
		{"no quotas", nil, true},
		{"a skipped", skipA, false},
		{"a's soft quota of 0", []Quota{{Source: "a"}}, true},
		{"a's hard quota of 1", []Quota{{Source: "a", Max: 1, Hard: true}}, true},
	} {
		if got, err := h.e.LeaseDue(t0+sec, tt.quotas); err != nil || got != tt.want {
			t.Errorf("%s: LeaseDue = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	h.one(claimFrom("b", "b:1", t0+2*sec))
	if got, _ := h.e.LeaseDue(t0+sec, skipA); got {
		t.Error("a skipped, b due later: LeaseDue says due")
	}
	if got, _ := h.e.LeaseDue(t0+2*sec, skipA); !got {
		t.Error("a skipped, b due: LeaseDue says nothing is due")
	}
}

// TestOpenMigratesDueIndex: a file whose due index has the layout of format
// 8 and older (time, key; no source), and no pending counters, is rewritten
// by source and counted when this binary opens it: the file is then exactly
// the one this binary would have written, passes Check, leases in the same
// order and reports the same backlog.
func TestOpenMigratesDueIndex(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{tb: t, e: e}
	for i := range 40 {
		src := []string{"stripe", "github", "shop"}[i%3]
		h.one(claimFrom(src, fmt.Sprintf("%s:evt_%02d", src, i), t0+int64(40-i)*sec))
	}
	ev := h.one(leaseCmd(t0+hour, 1)).Events[0]
	h.one(failCmd(ev.Key, ev.Token, t0+hour, 5)) // due again 10 s later
	// Paused as format 8 paused: its events moved to the held index.
	h.one(Command{Op: OpPause, Now: t0 + hour, Source: "shop", Who: "ops", format: formatPauseInPlace - 1})
	want := mustHash(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// Rewrite the due index as format 8 wrote it, and stamp the file 8.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		due := tx.Bucket(bDue)
		var keys [][]byte
		c := due.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		for _, k := range keys {
			_, at, key, ok := splitDueKey(k)
			if !ok {
				return fmt.Errorf("due key %x", k)
			}
			if err := due.Delete(k); err != nil {
				return err
			}
			if err := due.Put(append(appendTime(nil, at), key...), empty); err != nil {
				return err
			}
			n++
		}
		// Format 8 had no pending counters.
		counters := tx.Bucket(bCounters)
		var pending [][]byte
		cc := counters.Cursor()
		for k, _ := cc.Seek([]byte{counterPending}); k != nil && k[0] == counterPending; k, _ = cc.Next() {
			pending = append(pending, bytes.Clone(k))
		}
		if len(pending) != 3 { // stripe, github, and shop's held events
			return fmt.Errorf("%d pending counters, want 3", len(pending))
		}
		for _, k := range pending {
			if err := counters.Delete(k); err != nil {
				return err
			}
		}
		return tx.Bucket(bMeta).Put(metaFormat, binary.BigEndian.AppendUint64(nil, 8))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if n != 27 { // 40 claims, 13 of them held (shop is paused)
		t.Fatalf("%d due entries rewritten, want 27", n)
	}

	e = mustOpenPath(t, path, Options{NoSync: true})
	backlog, err := e.Backlog()
	if err != nil {
		t.Fatal(err)
	}
	wantBacklog := map[string]Backlog{
		"stripe": {Pending: 14, OldestPendingAt: t0 + 4*sec}, // evt_39 failed, due again an hour later; evt_36 next
		"github": {Pending: 13, OldestPendingAt: t0 + 3*sec}, // evt_37
		"shop":   {Pending: 13, OldestPendingAt: t0 + 2*sec}, // evt_38, held
	}
	if !reflect.DeepEqual(backlog, wantBacklog) {
		t.Errorf("backlog after the migration %+v, want %+v", backlog, wantBacklog)
	}
	if err := e.Check(); err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	if got := mustHash(t, e); got != want {
		t.Fatal("the migrated file differs from the one this binary wrote")
	}
	h = &harness{tb: t, e: e, idx: e.LastApplied()}
	got := keysOf(h.one(leaseCmd(t0+hour, 2)).Events)
	if want := []string{"github:evt_37", "stripe:evt_36"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first lease after the migration: %q, want %q", got, want)
	}
}

// TestLeaseDueWhileATransactionIsOpen: while entries applied in the engine's
// pending transaction are not committed yet, LeaseDue answers from the due
// entries that transaction put and from the committed state, instead of
// saying true whenever one is open: a dispatcher woken with nothing to
// lease (a completion of an ordered event, a claim of a source past its
// rate) proposed a lease, an entry, that found nothing. It may still say
// true for an entry the open transaction put and then leased; never false
// while one is due.
func TestLeaseDueWhileATransactionIsOpen(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	idx := uint64(0)
	apply := func(cmds ...Command) []Result {
		t.Helper()
		idx++
		rs, err := e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: cmds}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs[0] {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		return rs[0]
	}
	due := func(now int64, quotas []Quota) bool {
		t.Helper()
		got, err := e.LeaseDue(now, quotas)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	flush := func() {
		t.Helper()
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	skipA := []Quota{{Source: "a", Hard: true}}

	// A claim applied, not committed: due, unless its source is skipped.
	apply(claimFrom("a", "a:1", t0))
	if !due(t0, nil) {
		t.Error("a claim in the open transaction: LeaseDue says nothing is due")
	}
	if due(t0, skipA) {
		t.Error("a claim of a skipped source in the open transaction: LeaseDue says due")
	}
	l := apply(leaseCmd(t0+sec, 10))
	flush()

	// Nothing due in the committed state; the open transaction completes
	// the event and claims one that leases itself: nothing is due.
	withLease := claimFrom("a", "a:2", t0+2*sec)
	withLease.LeaseNow, withLease.LeaseFor = 30*sec, 30*sec
	cl := apply(completeCmd("a:1", l[0].Events[0].Token, t0+2*sec), withLease)
	if cl[1].State != StateProcessing || len(cl[1].Events) != 1 {
		t.Fatalf("a claim with its lease: %+v", cl[1])
	}
	if due(t0+3*sec, nil) {
		t.Error("no event due, transaction open: LeaseDue says due")
	}
	// A retry put in the open transaction is due at its time, not before.
	r := apply(failCmd("a:2", cl[1].Events[0].Token, t0+3*sec, 5))
	if r[0].State != StatePending {
		t.Fatalf("fail of a:2: %+v", r[0])
	}
	if due(t0+3*sec, nil) {
		t.Error("a retry due later, in the open transaction: LeaseDue says due now")
	}
	if !due(t0+48*hour, nil) {
		t.Error("a retry in the open transaction, due by then: LeaseDue says nothing is due")
	}
	flush()
	if !due(t0+48*hour, nil) {
		t.Error("a retry committed, due by then: LeaseDue says nothing is due")
	}

	// A pause committed, the resume in the open transaction: the source's
	// due entries are due again at once.
	apply(pauseCmd("a", t0+4*sec))
	flush()
	if due(t0+48*hour, nil) {
		t.Error("the source paused: LeaseDue says due")
	}
	apply(resumeCmd("a", t0+5*sec))
	if !due(t0+48*hour, nil) {
		t.Error("the resume in the open transaction: LeaseDue says nothing is due")
	}
}
