package cluster

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// damagePages overwrites most of the pages after bbolt's two meta pages
// of the file at path with random bytes, as a failing disk or a bad copy
// would: the meta pages still name a tree, whose pages no longer hold one.
func damagePages(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	if len(b) < 4*page {
		t.Fatalf("%s is %d bytes: too small to damage", path, len(b))
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for i := 2 * page; i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startRefused opens the node in dir and fails the test unless it is
// refused with an error that says each of want.
func startRefused(t *testing.T, dir string, want ...string) {
	t.Helper()
	n, err := Open(Config{ID: "solo", Dir: dir, Logger: quietLogger(), RaftLogLevel: "error"})
	if err == nil {
		n.Close()
		t.Fatal("the node started")
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

// TestDamagedFilesAreRefusedByName: a node whose engine file or raft log
// has damaged pages (bbolt panics on them while it opens the file, in a
// goroutine of its own, which took the process down naming nothing) is
// refused at start with the file's name and what to do; the engine file,
// moved away as told, is rebuilt from the snapshot and the log with every
// event.
func TestDamagedFilesAreRefusedByName(t *testing.T) {
	for _, tc := range []struct {
		file string // under the data dir
		want string
	}{
		{"fsm.db", "at its next start the node rebuilds it from the newest snapshot and the raft log"},
		{filepath.Join("raft", "logs.db"), "move its data directory away"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			dir := t.TempDir()
			n := openSolo(t, dir, func(c *Config) { c.SnapshotThreshold = 1 << 20 })
			claimSolo(t, n, "a", 200)
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			claimSolo(t, n, "b", 100)
			want, _ := n.Hash()
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			damagePages(t, path)
			startRefused(t, dir, path, "corrupt", tc.want)
			if tc.file != "fsm.db" {
				return
			}
			if err := os.Rename(path, path+".damaged"); err != nil {
				t.Fatal(err)
			}
			n = openSolo(t, dir, nil)
			defer n.Close()
			if got, _ := n.Hash(); got != want {
				t.Fatal("the rebuilt engine file differs from the one before the damage")
			}
		})
	}
}

// TestRefusesALogPastItsSnapshot: a node whose raft log was compacted past
// its newest snapshot, and whose snapshot is then gone (deleted, or its
// meta.json damaged so that raft does not list it), does not start: raft
// would panic on the first entry it lacks. The error names the log, the
// snapshots directory and what to do; with the snapshot back, the node
// starts with every event.
func TestRefusesALogPastItsSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, snapDir string)
	}{
		{"removed", func(t *testing.T, snapDir string) {
			if err := os.RemoveAll(snapDir); err != nil {
				t.Fatal(err)
			}
		}},
		{"its meta.json damaged", func(t *testing.T, snapDir string) {
			metas, _ := filepath.Glob(filepath.Join(snapDir, "*", "meta.json"))
			if len(metas) != 1 {
				t.Fatalf("meta files %v", metas)
			}
			if err := os.WriteFile(metas[0], []byte("garbage"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tune := func(c *Config) { c.SnapshotThreshold, c.TrailingLogs = 1<<20, 4 }
			n := openSolo(t, dir, tune)
			claimSolo(t, n, "a", 100)
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			claimSolo(t, n, "b", 10)
			want, _ := n.Hash()
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			snapDir := filepath.Join(dir, "raft", "snapshots")
			kept := filepath.Join(t.TempDir(), "snapshots")
			if err := os.CopyFS(kept, os.DirFS(snapDir)); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, snapDir)
			startRefused(t, dir, filepath.Join(dir, "raft", "logs.db"), "starts at index", snapDir, "put the snapshot back")

			if err := os.RemoveAll(snapDir); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(snapDir, os.DirFS(kept)); err != nil {
				t.Fatal(err)
			}
			n = openSolo(t, dir, tune)
			defer n.Close()
			if got, _ := n.Hash(); got != want {
				t.Fatal("the engine changed across the refused start")
			}
		})
	}
}

// TestUnfinishedSnapshotIsRemoved: the temporary directory of a snapshot a
// crash interrupted (raft neither lists nor removes it) is removed when the
// node opens, and the snapshot next to it is kept.
func TestUnfinishedSnapshotIsRemoved(t *testing.T) {
	dir := t.TempDir()
	n := openSolo(t, dir, nil)
	claimSolo(t, n, "a", 20)
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	snapDir := filepath.Join(dir, "raft", "snapshots")
	tmp := filepath.Join(snapDir, "2-99-1700000000000.tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, nil)
	defer n.Close()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the unfinished snapshot is still there: %v", err)
	}
	if list, err := n.fsm.snaps.List(); err != nil || len(list) != 1 {
		t.Fatalf("snapshots after the start: %v, %v; want the finished one", list, err)
	}
}
