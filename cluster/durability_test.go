package cluster

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// After an operating-system crash the unsynced engine file is not trusted: it
// is rebuilt from the newest snapshot and the log, to the same bytes.
func TestEngineFileIsRebuiltAfterAMachineCrash(t *testing.T) {
	if bootID() == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id: the engine syncs every commit here")
	}
	dir := t.TempDir()
	n := openSolo(t, dir, nil)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 40; i++ {
		if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := n.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, markerName)); string(b) != bootID()+" clean\n" {
		t.Fatalf("marker after a clean close: %q", b)
	}
	// Pretend the machine crashed while the engine was running unsynced: the
	// marker names another boot and no clean close; the file holds garbage.
	if err := writeMarker(dir, "an-earlier-boot", "dirty"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fsm.db"), []byte("torn pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, nil)
	defer n.Close()
	if _, err := os.Stat(filepath.Join(dir, "fsm.db.untrusted")); err != nil {
		t.Fatalf("the untrusted file was not set aside: %v", err)
	}
	after, _ := n.Hash()
	if before != after {
		t.Fatal("the rebuilt engine differs from the one before the crash")
	}
	for _, k := range []string{"src:a0", "src:b39"} {
		if _, ok, _ := n.eng.Exists(k); !ok {
			t.Fatalf("%s lost", k)
		}
	}
}

// A process crash (no clean close, same boot) keeps the engine file: its
// commits are in the page cache.
func TestEngineFileIsKeptAfterAProcessCrash(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot id")
	}
	dir := t.TempDir()
	n := openSolo(t, dir, nil)
	if _, err := n.Claim(ctxT(t, 5*time.Second), claimCmd("src:kept")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, bootID(), "dirty"); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, nil)
	defer n.Close()
	if _, err := os.Stat(filepath.Join(dir, "fsm.db.untrusted")); err == nil {
		t.Fatal("a file from this boot was distrusted")
	}
	if _, ok, _ := n.eng.Exists("src:kept"); !ok {
		t.Fatal("claim lost")
	}
}

// The data dir is private: every directory 0700, every file 0600, raft's
// snapshots included (its FileSnapshotStore alone makes them 0755/0644), and
// a data dir written by an older version is tightened when the node opens.
func TestDataDirIsPrivate(t *testing.T) {
	// The modes raft would use come from the umask; pin the usual one so the
	// test means the same everywhere.
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, tc := range []struct {
		name   string
		loosen bool // make the snapshot entries 0755/0644 between two runs, as an older version left them
	}{
		{name: "new data dir"},
		{name: "snapshots left loose by an older version", loosen: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			n := openSolo(t, dir, nil)
			snapshot := func(prefix string) {
				t.Helper()
				for i := 0; i < 20; i++ {
					if _, err := n.Claim(ctxT(t, 5*time.Second), claimCmd(fmt.Sprintf("src:%s%d", prefix, i))); err != nil {
						t.Fatal(err)
					}
				}
				if err := n.raft.Snapshot().Error(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
			}
			snapshot("a")
			if tc.loosen {
				if err := n.Close(); err != nil {
					t.Fatal(err)
				}
				loosen(t, filepath.Join(dir, "raft", "snapshots"))
				n = openSolo(t, dir, nil)
				checkPrivate(t, dir) // tightened at open
				snapshot("b")
			}
			checkPrivate(t, dir) // while running
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			checkPrivate(t, dir) // after a clean close (markers)
		})
	}
}

// checkPrivate fails for every entry under dir that is not 0700 (directory)
// or 0600 (file), and when no snapshot state file exists (nothing was checked).
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	states := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if got := info.Mode().Perm(); got != want {
			rel, _ := filepath.Rel(dir, p)
			t.Errorf("%s: mode %#o, want %#o", rel, got, want)
		}
		if d.Name() == "state.bin" && strings.Contains(p, filepath.Join("raft", "snapshots")) {
			states++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if states == 0 {
		t.Fatal("no snapshot under raft/snapshots: nothing to check")
	}
}

// loosen gives every entry under dir the modes raft's snapshot store uses.
func loosen(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A large snapshot reaches the disk as it is written, not in one sync at the
// end, and reads back as written.
func TestSnapshotSinkSyncsAsItWrites(t *testing.T) {
	store, err := openSnapshots(t.TempDir(), hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	chunk := make([]byte, 32<<10)
	const size = 3*snapshotFlushEvery + 5<<10
	for written := 0; written < size; written += len(chunk) {
		for i := range chunk {
			chunk[i] = byte(written/len(chunk) + i)
		}
		want.Write(chunk)
		if _, err := sink.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	flushing, ok := sink.(*flushingSink)
	if !ok {
		t.Fatalf("the store's sink is a %T, not a flushingSink", sink)
	}
	if flushing.syncs < 3 {
		t.Fatalf("%d syncs while writing %d bytes, want at least 3", flushing.syncs, size)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := sha256.New()
	if _, err := io.Copy(got, rc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatal("the snapshot read back differs from what was written")
	}
}

// brokenSink is a snapshot sink on a full disk: every write and the close fail.
type brokenSink struct{ raft.SnapshotSink }

func (brokenSink) Write([]byte) (int, error) {
	return 0, fmt.Errorf("write state.bin: %w", syscall.ENOSPC)
}
func (brokenSink) Close() error { return fmt.Errorf("close state.bin: %w", syscall.ENOSPC) }

// TestSnapshotWriteFailureIsHeard: a snapshot that cannot be written here
// (a follower's install on a full disk fails before the state machine sees
// it) is reported to the node, which then says it is not ready.
func TestSnapshotWriteFailureIsHeard(t *testing.T) {
	var heard []error
	s := &flushingSink{SnapshotSink: brokenSink{}, failed: func(err error) { heard = append(heard, err) }}
	if _, err := s.Write([]byte("state")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write = %v, want ENOSPC", err)
	}
	if err := s.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close = %v, want ENOSPC", err)
	}
	if len(heard) != 2 || !errors.Is(heard[0], syscall.ENOSPC) || !errors.Is(heard[1], syscall.ENOSPC) {
		t.Fatalf("heard %v; want the write's and the close's failures", heard)
	}
}

// leavingSink fails the way raft's file sink does on a full disk: a Cancel
// whose flush fails, or a Close whose meta file cannot be written, returns
// the error and leaves the temporary directory.
type leavingSink struct{ raft.SnapshotSink }

func (leavingSink) Cancel() error { return fmt.Errorf("flush state.bin: %w", syscall.ENOSPC) }
func (leavingSink) Close() error  { return fmt.Errorf("write meta.json: %w", syscall.ENOSPC) }

// TestFailedSnapshotLeavesNothing: a snapshot that fails on a full disk
// leaves no partial copy behind (each would hold the space the node needs
// to recover), whether it is cancelled or its close fails.
func TestFailedSnapshotLeavesNothing(t *testing.T) {
	for _, end := range []string{"cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			tmp := filepath.Join(t.TempDir(), "snapshots", "2-10-1733400000000.tmp")
			if err := os.MkdirAll(tmp, 0o700); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(tmp, "state.bin")
			if err := os.WriteFile(state, make([]byte, 64<<10), 0o600); err != nil {
				t.Fatal(err)
			}
			s := newFlushingSink(leavingSink{}, state)
			var err error
			if end == "cancel" {
				err = s.Cancel()
			} else {
				err = s.Close()
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("%s = %v, want the sink's ENOSPC", end, err)
			}
			if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after a failed %s the temporary directory is still there (%v)", end, err)
			}
		})
	}
}

// A node configured with a bucket width (test builds) rebuilds an
// untrusted engine file with that width too: replayed from the log alone
// under the default, its keys would land in other buckets than its peers'.
func TestRebuiltEngineKeepsTheBucketWidth(t *testing.T) {
	if bootID() == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id: the engine syncs every commit here")
	}
	dir := t.TempDir()
	width := func(cfg *Config) { cfg.BucketWidth = 2 * time.Second }
	n := openSolo(t, dir, width)
	if _, err := n.Claim(ctxT(t, 10*time.Second), claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, "an-earlier-boot", "dirty"); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, width)
	defer n.Close()
	if _, err := os.Stat(filepath.Join(dir, "fsm.db.untrusted")); err != nil {
		t.Fatalf("the untrusted file was not set aside: %v", err)
	}
	if got := n.eng.BucketWidth(); got != 2*time.Second {
		t.Fatalf("rebuilt engine's bucket width %s, want 2s", got)
	}
}
