package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestFailedCommitStopsTheEngine: when the commit of deferred entries fails
// (a full disk), whoever asked for it (a read that needs the file current,
// here Counts), the entries are gone from the file although they were
// reported applied. Applying later entries on top would skip them for good
// (seen as one replica's events stuck in processing at the same applied
// index as the others'), so every later apply, flush and read fails with
// ErrLostCommit, and a reopened file holds only what was committed: the log
// replays the rest.
func TestFailedCommitStopsTheEngine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(i int) Command {
		return Command{Op: OpClaim, Now: t0, Key: fmt.Sprintf("src:k%d", i), Source: "src", Payload: []byte("{}"), Retention: hour}
	}
	if _, err := e.ApplyBatch([]Entry{{Index: 1, Cmds: []Command{claim(1)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{claim(2)}}}); err != nil {
		t.Fatal(err)
	}
	e.commit = func(tx *bolt.Tx) error {
		tx.Rollback()
		return fmt.Errorf("write engine.db: %w", syscall.ENOSPC)
	}
	if _, _, err := e.Counts(); !errors.Is(err, ErrLostCommit) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Counts with a failing commit: %v; want ErrLostCommit wrapping ENOSPC", err)
	}
	e.commit = (*bolt.Tx).Commit // the disk has room again: too late for entry 2
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{claim(3)}}}); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("apply after the lost commit: %v; want ErrLostCommit", err)
	}
	if err := e.Flush(); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("Flush after the lost commit: %v; want ErrLostCommit", err)
	}
	if _, err := e.ApplyBatch([]Entry{{Index: 3, Cmds: []Command{claim(3)}}}); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("ApplyBatch after the lost commit: %v; want ErrLostCommit", err)
	}
	if err := e.Close(); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("Close: %v; want ErrLostCommit", err)
	}

	// What a restart finds: entry 1, and the log to apply from index 2.
	e = mustOpenPath(t, path, Options{NoSync: true})
	if got := e.LastApplied(); got != 1 {
		t.Fatalf("last applied after reopen: %d; want 1", got)
	}
	if _, found, err := e.Exists("src:k2"); err != nil || found {
		t.Fatalf("src:k2 after reopen: found %v, %v; want absent until the log replays it", found, err)
	}
	rs, err := e.ApplyBatch([]Entry{{Index: 2, Cmds: []Command{claim(2)}}, {Index: 3, Cmds: []Command{claim(3)}}})
	if err != nil || !rs[0][0].Created || !rs[1][0].Created {
		t.Fatalf("replay of entries 2 and 3: %+v, %v; want both created", rs, err)
	}
}

// TestStorageErrorStopsTheEngine: a storage error while applying (here a
// damaged index: the lease finds a due entry without its event) rolls back
// the pending transaction, and with it entries applied and answered before
// it in that transaction. Applying later entries on top would move the
// applied index past them, and their replay would be skipped: every later
// apply fails with ErrLostCommit instead, and a reopened file holds only
// what was committed.
func TestStorageErrorStopsTheEngine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatch([]Entry{{Index: 1, Cmds: []Command{claimCmd("src:a", t0)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bEvents).Delete([]byte("src:a")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{claimCmd("src:b", t0+sec)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{leaseCmd(t0+2*sec, 10)}}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lease over a damaged index: %v; want ErrCorrupt", err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 4, Cmds: []Command{claimCmd("src:c", t0+3*sec)}}}); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("apply after the storage error: %v; want ErrLostCommit (entry 2 was answered and is gone)", err)
	}
	if err := e.Flush(); !errors.Is(err, ErrLostCommit) {
		t.Fatalf("Flush after the storage error: %v; want ErrLostCommit", err)
	}
	e.Close()
	e = mustOpenPath(t, path, Options{NoSync: true})
	if got := e.LastApplied(); got != 1 {
		t.Fatalf("last applied after reopen: %d; want 1 (the log replays entry 2 on)", got)
	}
	e.Close()

	// The error in the first entry of a transaction loses nothing answered:
	// the engine goes on (the FSM stops the replica anyway).
	e = mustOpenPath(t, path, Options{NoSync: true})
	defer e.Close()
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{leaseCmd(t0+2*sec, 10)}}}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lease over a damaged index: %v; want ErrCorrupt", err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{claimCmd("src:b", t0+sec)}}}); err != nil {
		t.Fatalf("apply after an error that lost nothing: %v", err)
	}
}
