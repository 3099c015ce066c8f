package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"oncehook/failpoint"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// The engine's file is written without fsync. That is safe because it is a
// cache of the Raft log, which is fsynced before any claim is acknowledged:
//
//   - A process crash (SIGKILL, panic, OOM) loses nothing: every commit already
//     reached the kernel's page cache, and bbolt's commit order (pages, then
//     meta) leaves either the old or the new transaction visible.
//   - Only an operating-system crash or power loss can lose or tear unsynced
//     pages. Then the machine's boot id has changed, and the engine file is not
//     trusted: it is set aside, the newest Raft snapshot (itself fsynced by the
//     snapshot store) is restored, and raft replays the log after it.
//
// The marker file records the boot id the engine was last written under and
// whether it was closed cleanly (synced). This turns four fsyncs per batch
// (log and engine, data and meta each) into two.
const markerName = "fsm.boot"

// bootID is the kernel's boot id; a failpoints build lets a test override it
// (failpoint.BootID) to simulate a reboot. A release build reads the kernel's.
func bootID() string {
	if id, ok := failpoint.BootID(); ok {
		return id
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// engineTrusted reports whether dir's engine file can be used as it is.
func engineTrusted(dir, boot string) bool {
	if _, err := os.Stat(filepath.Join(dir, "fsm.db")); errors.Is(err, os.ErrNotExist) {
		return true // nothing to distrust
	}
	b, err := os.ReadFile(filepath.Join(dir, markerName))
	if err != nil {
		// No marker: the file was written by a synced engine (or an older
		// version that synced every commit).
		return errors.Is(err, os.ErrNotExist)
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return false
	}
	return fields[1] == "clean" || (boot != "" && fields[0] == boot)
}

// writeMarker records the boot id and state ("dirty" while running unsynced,
// "clean" after a synced close), durably.
func writeMarker(dir, boot, state string) error {
	if boot == "" {
		boot = "unknown"
	}
	if err := writeDurably(filepath.Join(dir, markerName), []byte(boot+" "+state+"\n")); err != nil {
		return fmt.Errorf("engine marker: %w", err)
	}
	return nil
}

// writeDurably replaces the file at path with data, synced, its directory
// too: after a crash the file holds the old content or the new, whole.
func writeDurably(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = engine.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// setAside moves an untrusted engine file out of the way, keeping it for
// inspection.
func setAside(dir string) error {
	from := filepath.Join(dir, "fsm.db")
	to := filepath.Join(dir, "fsm.db.untrusted")
	os.Remove(to)
	if err := os.Rename(from, to); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("set aside untrusted engine file: %w", err)
	}
	return nil
}

// The data dir is private: directories 0700, files 0600. hashicorp/raft's
// FileSnapshotStore does not follow that: it makes its directories with
// MkdirAll(0o755) and its files with os.Create (0o666), so under the usual
// umask 022 a snapshot, a full copy of every stored payload, is 0755/0644.
// The data dir's own 0700 keeps other users out, but a copy or a backup of the
// directory tree would carry the loose modes. A process-wide umask 077 would
// do it too, but a library must not change its host process's umask, so the
// store is wrapped instead.

// retainSnapshots is how many raft snapshots stay on disk. Each is a full
// copy of the engine file, compressed (engine/snapstream.go); before the
// compression, at ten million keys, two copies were two thirds of the data
// dir (docs/performance.md, "Retained state"). One is enough here: the
// engine file is the state and needs no snapshot to restart; a snapshot
// serves followers that are too far behind for the log; a node whose only
// snapshot and engine file are both lost rejoins and gets the leader's
// (docs/operations.md, "Durability"). raft writes a new snapshot completely
// before it removes the old one.
const retainSnapshots = 1

// openSnapshots opens raft's snapshot store under raftDir with private modes:
// the snapshots dir is made 0700 before raft sees it, entries left loose by
// an older version are tightened, and every snapshot raft creates from now on
// is tightened as soon as it exists (see privateSnapshots).
func openSnapshots(raftDir string, logger hclog.Logger, storing func(error)) (raft.SnapshotStore, error) {
	dir := filepath.Join(raftDir, "snapshots") // FileSnapshotStore's own sub-directory name
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	if err := removeUnfinishedSnapshots(dir, logger); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	store, err := raft.NewFileSnapshotStoreWithLogger(raftDir, retainSnapshots, logger)
	if err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	if err := tightenTree(dir); err != nil {
		return nil, fmt.Errorf("open snapshots: %w", err)
	}
	return privateSnapshots{FileSnapshotStore: store, dir: dir, storing: storing}, nil
}

// removeUnfinishedSnapshots deletes the temporary directories (NAME.tmp) of
// snapshots a crash interrupted: raft never lists nor removes them, and each
// may hold up to a whole copy of the state. Nothing writes a snapshot while
// the store opens.
func removeUnfinishedSnapshots(dir string, logger hclog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
		logger.Warn("removed a snapshot a crash left unfinished", "dir", e.Name())
	}
	return nil
}

// privateSnapshots is raft's file snapshot store with private modes.
type privateSnapshots struct {
	*raft.FileSnapshotStore
	dir string
	// storing hears a snapshot that could not be written here (a full
	// disk: a follower's install then fails before the state machine sees
	// it; Node.storeTrouble); nil in tests.
	storing func(error)
	// sinkClosed: Config.sinkClosed (tests).
	sinkClosed func() error
}

// Create lets raft make the snapshot's temporary directory and its two files
// (meta.json, state.bin), then tightens them before a byte of state is
// written. The rename into place keeps the modes, and so does raft's rewrite
// of meta.json on Close (os.Create of an existing file keeps its mode). The
// whole tree is walked rather than the one directory so as not to depend on
// raft's naming of temporary directories; it holds two or three entries.
func (s privateSnapshots) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		// raft made the directory, then failed to write its meta file (a
		// full disk) and left it: its name is term-index-milliseconds.
		if left, _ := filepath.Glob(filepath.Join(s.dir, fmt.Sprintf("%d-%d-*.tmp", term, index))); len(left) > 0 {
			for _, dir := range left {
				_ = os.RemoveAll(dir)
			}
		}
		s.failed(err)
		return nil, err
	}
	if err := tightenTree(s.dir); err != nil {
		sink.Cancel()
		return nil, fmt.Errorf("snapshot %s: %w", sink.ID(), err)
	}
	fsink := newFlushingSink(sink, filepath.Join(s.dir, sink.ID()+".tmp", "state.bin"))
	fsink.failed, fsink.closed = s.failed, s.sinkClosed
	return fsink, nil
}

func (s privateSnapshots) failed(err error) {
	if s.storing != nil {
		s.storing(fmt.Errorf("write snapshot: %w", err))
	}
}

// A snapshot copies the whole engine file, gigabytes once millions of keys
// are retained; compressed, retained keys shrink to a few percent, but stored
// payloads only as far as their own bytes compress. raft's sink buffers the
// copy in the page cache and syncs it once at the end; with a few GiB of
// memory the kernel starts writing it back on its own only much later, so
// that final sync puts the whole copy
// in the disk's queue at once, and every log fsync (every claim's commit)
// waits behind it for seconds. Syncing every snapshotFlushEvery bytes keeps
// the queue short: the snapshot takes a little longer, claims do not stall.
const snapshotFlushEvery = 16 << 20

// flushingSink syncs the snapshot's state file as it is written, through a
// second handle on it (raft's own is unexported). When that file cannot be
// opened (a future raft names it differently) it only passes writes on.
type flushingSink struct {
	raft.SnapshotSink
	tmpDir  string   // the snapshot's temporary directory
	f       *os.File // nil: no flushing
	pending int      // bytes written since the last sync
	syncs   int      // syncs done (tests)
	failed  func(error)
	closed  func() error // privateSnapshots.sinkClosed
}

func newFlushingSink(sink raft.SnapshotSink, statePath string) *flushingSink {
	f, err := os.Open(statePath) // fsync flushes the file, whatever the handle
	if err != nil {
		f = nil
	}
	return &flushingSink{SnapshotSink: sink, tmpDir: filepath.Dir(statePath), f: f}
}

func (s *flushingSink) Write(b []byte) (int, error) {
	n, err := s.SnapshotSink.Write(b)
	s.pending += n
	if err == nil && s.f != nil && s.pending >= snapshotFlushEvery {
		s.pending = 0
		s.syncs++
		if err := s.f.Sync(); err != nil {
			err = fmt.Errorf("sync snapshot: %w", err)
			s.fail(err)
			return n, err
		}
	}
	if err != nil {
		s.fail(err)
	}
	return n, err
}

func (s *flushingSink) Close() error {
	s.closeFile()
	err := s.SnapshotSink.Close()
	if err == nil && s.closed != nil {
		err = s.closed()
	}
	if err != nil {
		s.fail(err)
		s.removeTmp()
	}
	return err
}

// removeTmp removes what a failed snapshot left. raft's sink removes its
// temporary directory when its last write fails, but not when its meta
// file cannot be written, nor on a Cancel whose flush fails: on a full disk
// every failed snapshot would leave its partial copy, holding the space
// the node needs to recover. Once the snapshot was moved into place the
// directory is gone and this does nothing.
func (s *flushingSink) removeTmp() {
	if s.tmpDir != "" && strings.HasSuffix(s.tmpDir, ".tmp") {
		_ = os.RemoveAll(s.tmpDir)
	}
}

func (s *flushingSink) fail(err error) {
	if s.failed != nil {
		s.failed(err)
	}
}

func (s *flushingSink) Cancel() error {
	s.closeFile()
	err := s.SnapshotSink.Cancel()
	if err != nil {
		s.removeTmp()
	}
	return err
}

func (s *flushingSink) closeFile() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// tightenTree makes every directory under root 0700 and every file 0600.
// Entries that vanish meanwhile (raft reaping an old snapshot) are skipped.
func tightenTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // chmod would change what it points at
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		if info.Mode().Perm() == want {
			return nil
		}
		if err := os.Chmod(p, want); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tighten mode of %s: %w", p, err)
		}
		return nil
	})
}
