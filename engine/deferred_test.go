package engine

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
)

// TestApplyBatchDeferred: deferred entries answer at once, are seen by
// Exists at once, count in LastApplied once committed, and are committed by
// Flush or by the first call that reads through a transaction of its own.
func TestApplyBatchDeferred(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	rs, err := e.ApplyBatchDeferred([]Entry{{Index: 1, Cmds: []Command{claimCmd("src:a", t0)}}})
	if err != nil || !rs[0][0].Created {
		t.Fatalf("deferred claim = %+v, %v", rs, err)
	}
	// Applied in the pending transaction: a second claim of the key, in a
	// later call, is a duplicate; an entry at or below the index is skipped.
	rs, err = e.ApplyBatchDeferred([]Entry{
		{Index: 1, Cmds: []Command{claimCmd("src:b", t0)}},
		{Index: 2, Cmds: []Command{claimCmd("src:a", t0), leaseCmd(t0+sec, 5)}},
	})
	if err != nil || rs[0][0].Err != ErrAlreadyApplied || rs[1][0].Created || rs[1][1].N != 1 {
		t.Fatalf("second deferred call = %+v, %v", rs, err)
	}
	if st, ok, _ := e.Exists("src:a"); !ok || st != StateProcessing || e.LastApplied() != 0 {
		t.Fatalf("before a commit: Exists = %v, %v; last applied %d", st, ok, e.LastApplied())
	}
	if _, ok, _ := e.Exists("src:b"); ok {
		t.Fatal("a skipped entry was applied")
	}
	ev, err := e.Get("src:a", false) // Get commits first
	if err != nil || ev.State != StateProcessing || ev.Token != 2 || e.LastApplied() != 2 {
		t.Fatalf("Get = %+v, %v; last applied %d", ev, err, e.LastApplied())
	}
	if st, ok, _ := e.Exists("src:a"); !ok || st != StateProcessing {
		t.Fatalf("Exists after the commit = %v, %v", st, ok)
	}
	if _, ok, _ := e.Exists("src:b"); ok {
		t.Fatal("a skipped entry was applied")
	}

	// Flush commits; a flush without pending entries does nothing.
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{claimCmd("src:c", t0)}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.Flush(); err != nil || e.LastApplied() != 3 {
			t.Fatalf("Flush: %v, last applied %d", err, e.LastApplied())
		}
	}
	// Exists sees a pending expiry's deletes (of src:c, done first: an
	// unfinished event never expires).
	expire := []Command{leaseCmd(t0, 10), completeCmd("src:c", 4, t0), {Op: OpExpire, Now: t0 + 200*hour}}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 4, Cmds: expire}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.Exists("src:c"); ok {
		t.Fatal("Exists finds a key a pending expiry deleted")
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := e.Exists("src:c"); ok {
		t.Fatal("Exists finds a key an expiry deleted")
	}
	// ApplyBatch commits what is pending, then its own entries.
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 5, Cmds: []Command{claimCmd("src:d", t0+200*hour)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(6, claimCmd("src:e", t0+200*hour)); err != nil || e.LastApplied() != 6 {
		t.Fatalf("Apply: %v, last applied %d", err, e.LastApplied())
	}
	for _, k := range []string{"src:d", "src:e"} {
		if _, ok, _ := e.Exists(k); !ok {
			t.Fatalf("%s missing", k)
		}
	}
}

// TestDeferredCommittedBySnapshotCloseAndRestore: a snapshot holds every
// applied entry, Close commits, and Restore replaces pending state too.
func TestDeferredCommittedBySnapshotCloseAndRestore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 1, Cmds: []Command{claimCmd("src:a", t0)}}}); err != nil {
		t.Fatal(err)
	}
	view, err := e.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := view.WriteTo(&snap); err != nil {
		t.Fatal(err)
	}
	view.Close()
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{claimCmd("src:b", t0)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{claimCmd("src:c", t0)}}}); err != ErrClosed {
		t.Fatalf("deferred apply after Close: %v", err)
	}

	e = mustOpenPath(t, path, Options{NoSync: true})
	if e.LastApplied() != 2 {
		t.Fatalf("after reopen: last applied %d, want 2 (Close commits)", e.LastApplied())
	}
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 3, Cmds: []Command{claimCmd("src:c", t0)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	if e.LastApplied() != 1 {
		t.Fatalf("after restore: last applied %d, want the snapshot's 1", e.LastApplied())
	}
	for k, want := range map[string]bool{"src:a": true, "src:b": false, "src:c": false} {
		if _, ok, _ := e.Exists(k); ok != want {
			t.Errorf("after restore: %s exists %v, want %v", k, ok, want)
		}
	}
	// The engine takes deferred entries again after a restore.
	if _, err := e.ApplyBatchDeferred([]Entry{{Index: 2, Cmds: []Command{claimCmd("src:d", t0)}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err != nil || e.LastApplied() != 2 {
		t.Fatalf("Sync: %v, last applied %d", err, e.LastApplied())
	}
}

// TestDeferredConcurrentFlush: flushes from other goroutines (a timer, a
// reader) interleave safely with deferred applies.
func TestDeferredConcurrentFlush(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	const n = 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := e.Flush(); err != nil {
				t.Error(err)
				return
			}
			e.Exists(keyN(n / 2))
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.Get(keyN(1), false); err != nil && err != ErrNotFound {
				t.Error(err)
				return
			}
		}
	})
	for i := 1; i <= n; i++ {
		if _, err := e.ApplyBatchDeferred([]Entry{{Index: uint64(i), Cmds: []Command{claimCmd(keyN(i), t0)}}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := e.Flush(); err != nil || e.LastApplied() != n {
		t.Fatalf("Flush: %v, last applied %d", err, e.LastApplied())
	}
	if byState, _ := mustCounts(t, e); byState[StatePending] != n {
		t.Fatalf("counts %v, want %d pending", byState, n)
	}
}
