package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func guardedClaim(key, bodyKey string, now int64) Command {
	c := claimCmd(key, now)
	c.BodyKey = bodyKey
	return c
}

// TestReplayGuard: a claim whose body another live event holds is a duplicate
// of that event (nothing stored, the original key reported); the guard entry
// lives exactly as long as the event that holds it.
func TestReplayGuard(t *testing.T) {
	const a, b, c = "src:a", "src:b", "src:c"
	const body1, body2 = "src\x00body-1", "src\x00body-2"
	origin := func(want string) func(t *testing.T, h *harness, r Result) {
		return func(t *testing.T, h *harness, r Result) {
			t.Helper()
			if want == "" && r.Keys != nil || want != "" && !slices.Equal(r.Keys, []string{want}) {
				t.Fatalf("Keys = %q, want [%q]", r.Keys, want)
			}
		}
	}
	expireAll := Command{Op: OpExpire, Now: t0 + 26*hour} // past a's 24 h retention and its bucket
	h := newHarness(t)
	runSteps(t, h, []step{
		{cmd: guardedClaim(a, body1, t0), created: true, state: StatePending, check: origin("")},
		// Same body under another key: a duplicate of a, b is not stored.
		{cmd: guardedClaim(b, body1, t0+sec), state: StatePending, key: b, keyState: 0, check: origin(a)},
		// The same key again is the plain duplicate, whatever its body key.
		{cmd: guardedClaim(a, body2, t0+2*sec), state: StatePending, check: origin("")},
		// A claim without a body key is not guarded.
		{cmd: claimCmd(c, t0+3*sec), created: true, state: StatePending},
		{cmd: leaseCmd(t0+4*sec, 10), n: 2},
		{cmd: completeCmd(a, 0, t0+5*sec), tok: 1},
		// The duplicate reports the original's current state.
		{cmd: guardedClaim(b, body1, t0+6*sec), state: StateDone, key: a, keyState: StateDone, attempts: 1, check: origin(a)},
		// A different body is a new event.
		{cmd: guardedClaim(b, body2, t0+7*sec), created: true, state: StatePending, key: b, keyState: StatePending},
		// Expiry removes a (done) and its guard entry together: the body is
		// new again. b and c are pending: they move to a later bucket.
		{cmd: expireAll, n: 1, key: a, keyState: 0},
		{cmd: guardedClaim("src:e", body1, t0+27*hour), created: true, state: StatePending, check: origin("")},
	})
	err := h.e.view(func(tx *bolt.Tx) error {
		if n := tx.Bucket(bBodies).Stats().KeyN; n != 2 {
			t.Errorf("%d body entries after expiry, want 2 (b's and the last claim's)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplayGuardRejectsLongBodyKey: a body key longer than a key is a bad
// command that changes nothing.
func TestReplayGuardRejectsLongBodyKey(t *testing.T) {
	h := newHarness(t)
	r := h.one(guardedClaim("src:a", string(bytes.Repeat([]byte("x"), MaxKeyLen+1)), t0))
	if !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("err = %v, want ErrBadCommand", r.Err)
	}
	if _, err := h.e.Get("src:a", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after a refused claim: %v, want ErrNotFound", err)
	}
}

// oldSnapshot returns a snapshot (an engine file holding one claim, src:a)
// without the named buckets, as written before they were added.
func oldSnapshot(t *testing.T, drop ...[]byte) *os.File {
	t.Helper()
	old := filepath.Join(t.TempDir(), "old.db")
	e, err := Open(old, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(1, claimCmd("src:a", t0)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(old, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range drop {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	snap, err := os.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snap.Close() })
	return snap
}

// TestRestoreSnapshotWithoutBodiesBucket: a snapshot written before the
// bodies bucket existed restores, and the guard works on it afterwards.
func TestRestoreSnapshotWithoutBodiesBucket(t *testing.T) {
	snap := oldSnapshot(t, bBodies)

	h := newHarness(t)
	if err := h.e.Restore(snap); err != nil {
		t.Fatalf("Restore of a snapshot without the bodies bucket: %v", err)
	}
	h.idx = h.e.LastApplied()
	if ev := h.get("src:a"); ev.State != StatePending {
		t.Fatalf("restored event state %d", ev.State)
	}
	if r := h.one(guardedClaim("src:b", "src\x00x", t0+sec)); !r.Created {
		t.Fatalf("guarded claim after restore: %+v", r)
	}
	if r := h.one(guardedClaim("src:c", "src\x00x", t0+2*sec)); r.Created || !slices.Equal(r.Keys, []string{"src:b"}) {
		t.Fatalf("guard after restore: %+v", r)
	}
}

// TestReplayGuardIndexIsRebuilt: the in-memory index of the guard is derived
// from the file: a reopened engine and one restored from a snapshot both
// still find a body held before.
func TestReplayGuardIndexIsRebuilt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(1, guardedClaim("src:a", "src\x00one", t0)); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := e.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	reopened := mustOpenPath(t, path, Options{NoSync: true})
	r, err := reopened.Apply(2, guardedClaim("src:b", "src\x00one", t0+sec))
	if err != nil || r[0].Created || !slices.Equal(r[0].Keys, []string{"src:a"}) {
		t.Fatalf("after reopening: %+v %v, want a duplicate of src:a", r, err)
	}

	restored := newHarness(t)
	if err := restored.e.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	restored.idx = restored.e.LastApplied()
	if r := restored.one(guardedClaim("src:c", "src\x00one", t0+sec)); r.Created || !slices.Equal(r.Keys, []string{"src:a"}) {
		t.Fatalf("after a restore: %+v, want a duplicate of src:a", r)
	}
}

// TestReplayGuardInAPendingTransaction: claims applied but not yet committed
// (ApplyBatchDeferred) guard their bodies at once, one entry to the next;
// an event deleted in the same transaction releases its body.
func TestReplayGuardInAPendingTransaction(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	apply := func(idx uint64, c Command) Result {
		t.Helper()
		rs, err := e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: []Command{c}}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0][0]
	}
	short := guardedClaim("src:a", "src\x00one", t0)
	short.Retention = 0 // expires at the end of t0's bucket
	if r := apply(1, short); !r.Created {
		t.Fatalf("first claim: %+v", r)
	}
	if r := apply(2, guardedClaim("src:b", "src\x00one", t0+sec)); r.Created || !slices.Equal(r.Keys, []string{"src:a"}) {
		t.Fatalf("same body, same pending transaction: %+v", r)
	}
	if r := apply(3, leaseCmd(t0+sec, 1)); r.N != 1 {
		t.Fatalf("lease: %+v", r)
	}
	if r := apply(4, completeCmd("src:a", 3, t0+sec)); r.Err != nil {
		t.Fatalf("complete: %+v", r)
	}
	if r := apply(5, Command{Op: OpExpire, Now: t0 + 2*hour}); r.N != 1 {
		t.Fatalf("expire: %+v", r)
	}
	if r := apply(6, guardedClaim("src:c", "src\x00one", t0+2*hour)); !r.Created {
		t.Fatalf("after the holder expired in the pending transaction: %+v, want a new event", r)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if r := apply(7, guardedClaim("src:d", "src\x00one", t0+3*hour)); r.Created || !slices.Equal(r.Keys, []string{"src:c"}) {
		t.Fatalf("after the commit: %+v, want a duplicate of src:c", r)
	}
}

// TestReplayGuardHashPrefixSharedByTwoBodies: the index is keyed by a hash
// prefix; a hit is confirmed against the bodies bucket, so a body key whose
// index entry another body took over is neither lost nor confused.
func TestReplayGuardHashPrefixSharedByTwoBodies(t *testing.T) {
	h := newHarness(t)
	h.one(guardedClaim("src:a", "src\x00one", t0))
	// Point "two"'s hash at a's time, as a prefix collision would.
	h.e.wmu.Lock()
	h.e.bodies[hashBodyKey([]byte("src\x00two"))] = h.e.bodies[hashBodyKey([]byte("src\x00one"))]
	h.e.wmu.Unlock()
	if r := h.one(guardedClaim("src:b", "src\x00two", t0+sec)); !r.Created {
		t.Fatalf("a body that only shares an index entry: %+v, want a new event", r)
	}
	if r := h.one(guardedClaim("src:c", "src\x00one", t0+2*sec)); r.Created || !slices.Equal(r.Keys, []string{"src:a"}) {
		t.Fatalf("the first body: %+v, want a duplicate of src:a", r)
	}
}
