package engine

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestConcurrentClaimsOfOneKey: 64 goroutines claim the same key, each in its
// own ApplyBatch with an index from an atomic counter. The engine serialises
// the write transactions; exactly one claim creates the event. A claim whose
// index was overtaken by a higher one is skipped (ErrAlreadyApplied), which is
// what a replayed Raft entry gets; every other one is a duplicate.
func TestConcurrentClaimsOfOneKey(t *testing.T) {
	for _, mode := range []string{"atomic index", "mutex around index"} {
		t.Run(mode, func(t *testing.T) {
			e := mustOpen(t, Options{NoSync: true})
			var (
				next                              atomic.Uint64
				mu                                sync.Mutex
				created, dup, skipped, unexpected atomic.Int64
				wg                                sync.WaitGroup
				start                             = make(chan struct{})
			)
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					c := claimCmd("src:same", t0+int64(g))
					var rs []Result
					var err error
					if mode == "atomic index" {
						rs, err = e.Apply(next.Add(1), c)
					} else {
						mu.Lock()
						rs, err = e.Apply(next.Add(1), c)
						mu.Unlock()
					}
					switch {
					case err != nil:
						t.Error(err)
					case rs[0].Created:
						created.Add(1)
					case rs[0].Err == nil && rs[0].State == StatePending:
						dup.Add(1)
					case errors.Is(rs[0].Err, ErrAlreadyApplied):
						skipped.Add(1)
					default:
						unexpected.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if created.Load() != 1 || unexpected.Load() != 0 || created.Load()+dup.Load()+skipped.Load() != 64 {
				t.Fatalf("created %d, duplicates %d, skipped %d, unexpected %d", created.Load(), dup.Load(), skipped.Load(), unexpected.Load())
			}
			if mode == "mutex around index" && skipped.Load() != 0 {
				t.Fatalf("%d skipped with ordered indexes", skipped.Load())
			}
			if s, _ := mustCounts(t, e); s[StatePending] != 1 || len(s) != 1 {
				t.Fatalf("counts = %v", s)
			}
			if e.LastApplied() != 64 {
				t.Fatalf("LastApplied = %d", e.LastApplied())
			}
		})
	}
}

// TestCrashSafety: an event leased and never completed survives a restart
// (and an abandoned, never closed handle), is reclaimed after its lease, and
// re-applying old entries changes nothing.
func TestCrashSafety(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.db")
	e, err := Open(path, Options{}) // fsync on: this is the durable setting
	if err != nil {
		t.Fatal(err)
	}
	entries := []Entry{
		{Index: 1, Cmds: []Command{claimCmd("src:a", t0), claimCmd("src:b", t0)}},
		{Index: 2, Cmds: []Command{leaseCmd(t0+sec, 1)}},
	}
	rs, err := e.ApplyBatch(entries)
	if err != nil || rs[1][0].N != 1 {
		t.Fatalf("ApplyBatch = %+v, %v", rs, err)
	}
	// A crash right now: copy the file as it is on disk with the handle still
	// open (nothing more is flushed at Close, so this is what a crash leaves).
	crashed := filepath.Join(dir, "crashed.db")
	copyFile(t, path, crashed)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	for _, p := range []string{path, crashed} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			e := mustOpenPath(t, p, Options{})
			if e.LastApplied() != 2 {
				t.Fatalf("LastApplied after reopen = %d", e.LastApplied())
			}
			if st, ok, err := e.Exists("src:a"); err != nil || !ok || st != StateProcessing {
				t.Fatalf("src:a after reopen: %v %v %v", st, ok, err)
			}
			if st, ok, err := e.Exists("src:b"); err != nil || !ok || st != StatePending {
				t.Fatalf("src:b after reopen: %v %v %v", st, ok, err)
			}
			before := mustHash(t, e)
			states, sources := mustCounts(t, e)

			// The log is replayed from the start after a restart: no-op.
			rs, err := e.ApplyBatch(entries)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range append(rs[0], rs[1]...) {
				if !errors.Is(r.Err, ErrAlreadyApplied) {
					t.Fatalf("replayed entry: %v", r.Err)
				}
			}
			if mustHash(t, e) != before {
				t.Fatal("replaying applied entries changed the state")
			}
			if s2, src2 := mustCounts(t, e); !equalMaps(states, s2) || !equalMaps(sources, src2) {
				t.Fatalf("counts changed: %v %v -> %v %v", states, sources, s2, src2)
			}
			if ev, _ := e.Get("src:a", false); ev.Attempts != 1 {
				t.Fatalf("attempts = %d after replay, want 1", ev.Attempts)
			}

			// Not reclaimed before the lease ends, then back to pending.
			if rs, _ := e.Apply(3, Command{Op: OpReclaim, Now: t0 + 30*sec}); rs[0].N != 0 {
				t.Fatalf("reclaimed before the lease end")
			}
			if rs, _ := e.Apply(4, Command{Op: OpReclaim, Now: t0 + 31*sec}); rs[0].N != 1 {
				t.Fatalf("reclaim = %+v", rs[0])
			}
			rs2, err := e.Apply(5, leaseCmd(t0+32*sec, 10))
			if err != nil || rs2[0].N != 2 {
				t.Fatalf("lease after reclaim = %+v, %v", rs2, err)
			}
			for _, ev := range rs2[0].Events {
				if string(ev.Payload) != "payload of "+ev.Key || ev.Token != 5 {
					t.Fatalf("event after restart = %+v", ev)
				}
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func equalMaps[K comparable](a, b map[K]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSnapshotWhileWriting takes a snapshot while another goroutine keeps
// applying, restores it into another engine and checks that it equals a fresh
// engine that applied the same entries up to the snapshot's index.
func TestSnapshotWhileWriting(t *testing.T) {
	entry := func(i uint64) Entry {
		cmds := []Command{claimCmd(keyN(int(i)), t0+int64(i)*sec)}
		if i%3 == 0 {
			cmds = append(cmds, leaseCmd(t0+int64(i)*sec, 2))
		}
		if i%7 == 0 {
			cmds = append(cmds, Command{Op: OpReclaim, Now: t0 + int64(i)*sec})
		}
		return Entry{Index: i, Cmds: cmds}
	}
	src := mustOpen(t, Options{NoSync: true})
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		written atomic.Uint64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); !stop.Load() || i < 200; i++ {
			if _, err := src.ApplyBatch([]Entry{entry(i)}); err != nil {
				t.Error(err)
				return
			}
			written.Store(i)
		}
	}()
	for written.Load() < 50 {
		// wait for some state; the writer does not wait for us
		runtime.Gosched()
	}
	var snap bytes.Buffer
	n, err := src.Snapshot(&snap)
	stop.Store(true)
	wg.Wait()
	if err != nil || n != int64(snap.Len()) {
		t.Fatalf("Snapshot = %d, %v (buffer %d)", n, err, snap.Len())
	}

	dst := mustOpen(t, Options{NoSync: true})
	if _, err := dst.Apply(1, claimCmd("src:to_be_replaced", t0)); err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	at := dst.LastApplied()
	if at < 50 || at >= written.Load() {
		t.Fatalf("snapshot at index %d (writer reached %d)", at, written.Load())
	}
	if _, ok, _ := dst.Exists("src:to_be_replaced"); ok {
		t.Fatal("Restore kept the old state")
	}
	ref := mustOpen(t, Options{NoSync: true})
	for i := uint64(1); i <= at; i++ {
		if _, err := ref.ApplyBatch([]Entry{entry(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if mustHash(t, dst) != mustHash(t, ref) {
		t.Fatalf("restored snapshot differs from a replay to index %d", at)
	}
	// The restored engine keeps working and converges with the source.
	for i := at + 1; i <= written.Load(); i++ {
		if _, err := dst.ApplyBatch([]Entry{entry(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if mustHash(t, dst) != mustHash(t, src) {
		t.Fatal("restored engine did not converge with its source")
	}

	// A broken snapshot is refused and leaves the state alone.
	before := mustHash(t, dst)
	if err := dst.Restore(io.LimitReader(bytes.NewReader(snap.Bytes()), 100)); err == nil {
		t.Fatal("Restore accepted a truncated snapshot")
	}
	if mustHash(t, dst) != before {
		t.Fatal("a failed Restore changed the state")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst.Path()), "*.restore-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestClosed(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(1, Command{Op: OpNoop}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
	if _, _, err := e.Exists("k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exists after Close: %v", err)
	}
	if _, err := e.Get("k", false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if err := e.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestBucketWidthIsStored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e, err := Open(path, Options{NoSync: true, BucketWidth: 10 * 60 * 1e9})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = mustOpenPath(t, path, Options{NoSync: true}) // default width asked: the stored one wins
	if e.BucketWidth() != 10*60*1e9 {
		t.Fatalf("BucketWidth = %v", e.BucketWidth())
	}
	rs, _ := e.Apply(1, Command{Op: OpClaim, Now: t0 + 1, Key: "k", Source: "s", Retention: 0})
	if ev, _ := e.Get("k", false); !rs[0].Created || ev.ExpiresAt != t0+10*60*1e9 {
		t.Fatalf("ExpiresAt = %d, want the end of a 10 minute bucket", ev.ExpiresAt-t0)
	}
}

// TestRestoreRefusesForeignFile: a bbolt file that is not an engine file (or
// garbage) is refused before the live file is touched.
func TestRestoreRefusesForeignFile(t *testing.T) {
	foreign := filepath.Join(t.TempDir(), "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("other"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	foreignBytes, err := os.ReadFile(foreign)
	if err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	before := mustHash(t, h.e)
	for name, r := range map[string]io.Reader{
		"foreign bbolt file": bytes.NewReader(foreignBytes),
		"garbage":            bytes.NewReader(bytes.Repeat([]byte("x"), 1<<14)),
		"empty":              bytes.NewReader(nil),
	} {
		if err := h.e.Restore(r); err == nil {
			t.Fatalf("%s: Restore accepted it", name)
		}
		if mustHash(t, h.e) != before || h.e.LastApplied() != 1 {
			t.Fatalf("%s: a refused Restore changed the state", name)
		}
	}
	if r := h.one(claimCmd("src:b", t0)); !r.Created {
		t.Fatalf("engine unusable after refused restores: %+v", r)
	}
}

// TestCorruptRecord: a damaged record is a storage failure (an error wrapping
// ErrCorrupt that names the key, the batch not applied), never a panic, and
// the engine stays usable for everything else.
func TestCorruptRecord(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	if _, err := e.Apply(1, claimCmd("src:bad", t0), claimCmd("src:good", t0)); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bEvents).Put([]byte("src:bad"), []byte{recordVersion, byte(StatePending), 0, 0xff})
	}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Apply(2, claimCmd("src:new", t0), completeCmd("src:bad", 1, t0))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "src:bad") {
		t.Fatalf("Apply over a corrupt record: %v", err)
	}
	if e.LastApplied() != 1 {
		t.Fatalf("LastApplied = %d after a failed batch", e.LastApplied())
	}
	if _, ok, _ := e.Exists("src:new"); ok {
		t.Fatal("part of the failed batch was applied")
	}
	if _, err := e.Get("src:bad", false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get: %v", err)
	}
	if rs, err := e.Apply(2, claimCmd("src:new", t0)); err != nil || !rs[0].Created {
		t.Fatalf("engine unusable after a storage error: %+v, %v", rs, err)
	}
	// Put the record back so the cleanup check passes.
	if err := e.db.Update(func(tx *bolt.Tx) error {
		ev := Event{State: StatePending, Source: "src", CreatedAt: t0, UpdatedAt: t0, NextAttemptAt: t0, ExpiresAt: t0 + 25*hour}
		return tx.Bucket(bEvents).Put([]byte("src:bad"), appendRecord(nil, &ev, 0))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreAtRecordsTheIndexInTheFile: RestoreAt takes a snapshot's state
// under the index given, whatever index the file carried (an operator's
// backup carries another cluster's), and that index is in the file that
// replaced the engine's: a reopen, as after a crash, finds it, and a
// restore at index 0 is refused. Restore keeps the file's own.
func TestRestoreAtRecordsTheIndexInTheFile(t *testing.T) {
	src := newHarness(t, Options{NoSync: true})
	for i := range 54 {
		if _, err := src.e.Apply(uint64(i+1), claimCmd(keyN(i), t0+int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := src.e.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	if got := src.e.LastApplied(); got != 54 {
		t.Fatalf("source applied %d, want 54", got)
	}

	path := filepath.Join(t.TempDir(), "fsm.db")
	e := mustOpenPath(t, path, Options{NoSync: true})
	if err := e.RestoreAt(bytes.NewReader(snap.Bytes()), 0); err == nil {
		t.Fatal("RestoreAt index 0 accepted")
	}
	if err := e.RestoreAt(bytes.NewReader(snap.Bytes()), 7); err != nil {
		t.Fatal(err)
	}
	if got := e.LastApplied(); got != 7 {
		t.Fatalf("LastApplied after RestoreAt = %d, want 7", got)
	}
	if _, err := e.Get(keyN(53), false); err != nil {
		t.Fatalf("restored state: %v", err)
	}
	// The file as a crash would leave it: read beside the open engine.
	copied := filepath.Join(t.TempDir(), "fsm.db")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := mustOpenPath(t, copied, Options{NoSync: true}).LastApplied(); got != 7 {
		t.Fatalf("the restored file says %d, want 7", got)
	}

	if err := e.Restore(bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := e.LastApplied(); got != 54 {
		t.Fatalf("LastApplied after Restore = %d, want the file's own 54", got)
	}
}

// A restore that fails after its file is in place leaves the engine closed,
// never serving a state that may not be on disk, and says so; the file in
// place holds the restored state under the given index, as a restart finds
// it.
func TestRestoreFailingAfterTheRenameClosesTheEngine(t *testing.T) {
	src := newHarness(t, Options{NoSync: true})
	for i := range 5 {
		if _, err := src.e.Apply(uint64(i+1), claimCmd(keyN(i), t0+int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := src.e.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "fsm.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	synced := restoreSyncDir
	restoreSyncDir = func(string) error { return errors.New("injected EIO") }
	defer func() { restoreSyncDir = synced }()

	err = e.RestoreAt(bytes.NewReader(snap.Bytes()), 9)
	if !errors.Is(err, ErrRestoreIncomplete) || !strings.Contains(err.Error(), "injected EIO") {
		t.Fatalf("RestoreAt with the directory sync failing: %v; want ErrRestoreIncomplete with the cause", err)
	}
	if _, err := e.Get(keyN(0), false); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after the incomplete restore: %v; want ErrClosed", err)
	}
	if _, err := e.Apply(10, claimCmd(keyN(7), t0+10)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Apply after the incomplete restore: %v; want ErrClosed", err)
	}
	if err := e.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("Close after the incomplete restore: %v", err)
	}

	again := mustOpenPath(t, path, Options{NoSync: true})
	if got := again.LastApplied(); got != 9 {
		t.Fatalf("the file in place says applied %d, want 9", got)
	}
	if _, err := again.Get(keyN(4), false); err != nil {
		t.Fatalf("the restored state after a restart: %v", err)
	}
}
