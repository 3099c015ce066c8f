package engine

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// SnapshotView is a consistent read view of the whole state, opened now and
// written later. Raft asks for a snapshot between two applies (the state must
// be exactly that of the last applied entry) and persists it while applies go
// on; the view's read transaction is what pins that state.
type SnapshotView struct {
	tx    *bolt.Tx
	once  sync.Once
	e     *Engine
	abort atomic.Bool // set by a restore: the state is being replaced
}

// ErrViewAborted: a restore replaced the state while a snapshot view was
// being written; what was written is not a whole copy.
var ErrViewAborted = errors.New("engine: snapshot cut short: the state is being replaced by a restore")

// BeginSnapshot opens a SnapshotView. The caller must Close it; until then
// bbolt cannot reuse the pages the view still sees.
func (e *Engine) BeginSnapshot() (*SnapshotView, error) {
	if err := e.Flush(); err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return nil, ErrClosed
	}
	tx, err := e.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("engine: begin snapshot: %w", err)
	}
	v := &SnapshotView{tx: tx, e: e}
	e.viewsMu.Lock()
	if e.views == nil {
		e.views = make(map[*SnapshotView]struct{})
	}
	e.views[v] = struct{}{}
	v.abort.Store(e.replacing) // begun while a restore replaces the file
	e.viewsMu.Unlock()
	return v, nil
}

// abortViews makes every open view's writing end at its next write, and
// every view begun until viewsDone too.
func (e *Engine) abortViews() {
	e.viewsMu.Lock()
	defer e.viewsMu.Unlock()
	e.replacing = true
	for v := range e.views {
		v.abort.Store(true)
	}
}

// viewsDone ends what abortViews began: views begin whole again.
func (e *Engine) viewsDone() {
	e.viewsMu.Lock()
	e.replacing = false
	e.viewsMu.Unlock()
}

// abortableWriter fails every write once its view is aborted.
type abortableWriter struct {
	w     io.Writer
	abort *atomic.Bool
}

func (a abortableWriter) Write(p []byte) (int, error) {
	if a.abort.Load() {
		return 0, ErrViewAborted
	}
	return a.w.Write(p)
}

// WriteTo writes the view as a bbolt file that Restore and Open accept.
func (s *SnapshotView) WriteTo(w io.Writer) (int64, error) {
	n, err := s.tx.WriteTo(abortableWriter{w: w, abort: &s.abort})
	if err != nil {
		if s.abort.Load() {
			// bbolt words a failed write of a meta page with %s, which
			// drops the sentinel a caller tells a restore's abort by.
			err = ErrViewAborted
		}
		return n, fmt.Errorf("engine: write snapshot: %w", err)
	}
	return n, nil
}

// Close releases the view. It is safe to call more than once.
func (s *SnapshotView) Close() error {
	var err error
	s.once.Do(func() {
		err = s.tx.Rollback()
		s.e.viewsMu.Lock()
		delete(s.e.views, s)
		s.e.viewsMu.Unlock()
	})
	return err
}

// Sync flushes the file to stable storage. With Options.NoSync, commits reach
// the operating system but not the disk; a caller that can rebuild the state
// (from a Raft snapshot and log) calls Sync before it records a clean close.
func (e *Engine) Sync() error {
	if err := e.Flush(); err != nil {
		return err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return ErrClosed
	}
	if err := e.db.Sync(); err != nil {
		return fmt.Errorf("engine: sync: %w", err)
	}
	return nil
}

// CheckFile verifies that path holds a readable engine file (the buckets and
// meta keys Open needs, consistent indexes, and bbolt's own page structure)
// without changing it. An operator's backup is checked this way before it
// replaces a cluster's state, so a damaged one must be refused, not crash the
// node: while it runs, a fault on a page outside the file's mapping is a
// panic (debug.SetPanicOnFault), recovered, like bbolt's own panics on a
// malformed page, as ErrCorrupt; the file is closed whatever happens.
func CheckFile(path string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("engine: check %s: %w: a damaged page (%v)", path, ErrCorrupt, r)
		}
		if db != nil {
			if cerr := db.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("engine: check %s: %w", path, cerr)
			}
		}
	}()
	if err := CheckFileSize(path); err != nil {
		return fmt.Errorf("engine: check %s: %w", path, err)
	}
	if err := checkPages(path); err != nil {
		return fmt.Errorf("engine: check %s: %w", path, err)
	}
	db, err = openBolt(path, Options{}.withDefaults(), true, false)
	if err != nil {
		return err
	}
	if _, _, err := checkMeta(db, Options{}, false); err != nil {
		return err
	}
	// Every page any bucket reaches is read here first, where a fault is
	// recovered: bbolt's own check (Check runs it) reads pages in a
	// goroutine of its own.
	if err := db.View(walkPages); err != nil {
		return fmt.Errorf("engine: check %s: %w", path, err)
	}
	e := &Engine{path: path, db: db}
	// Check compares the replay guard's in-memory index with the file's
	// bodies bucket: it must be loaded from the file, as Open does, or every
	// file holding a guarded body is refused.
	if err := db.View(func(tx *bolt.Tx) (err error) { e.bodies, err = loadBodyIndex(tx); return err }); err != nil {
		return fmt.Errorf("engine: check %s: %w", path, err)
	}
	return e.Check()
}

// walkPages reads every key of every bucket, nested ones included, so that
// every branch and leaf page of the file is read once.
func walkPages(tx *bolt.Tx) error {
	var walk func(b *bolt.Bucket, depth int) error
	walk = func(b *bolt.Bucket, depth int) error {
		if depth > 8 { // the engine nests one level; a deeper one is damage
			return fmt.Errorf("%w: buckets nested %d deep", ErrCorrupt, depth)
		}
		return b.ForEach(func(k, v []byte) error {
			if v != nil {
				return nil
			}
			if nb := b.Bucket(k); nb != nil {
				return walk(nb, depth+1)
			}
			return nil
		})
	}
	return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walk(b, 1) })
}
