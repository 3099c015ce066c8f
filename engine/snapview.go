package engine

import (
	"fmt"
	"io"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// SnapshotView is a consistent read view of the whole state, opened now and
// written later. Raft asks for a snapshot between two applies (the state must
// be exactly that of the last applied entry) and persists it while applies go
// on; the view's read transaction is what pins that state.
type SnapshotView struct {
	tx   *bolt.Tx
	once sync.Once
}

// BeginSnapshot opens a SnapshotView. The caller must Close it; until then
// bbolt cannot reuse the pages the view still sees.
func (e *Engine) BeginSnapshot() (*SnapshotView, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return nil, ErrClosed
	}
	tx, err := e.db.Begin(false)
	if err != nil {
		return nil, fmt.Errorf("engine: begin snapshot: %w", err)
	}
	return &SnapshotView{tx: tx}, nil
}

// WriteTo writes the view as a bbolt file that Restore and Open accept.
func (s *SnapshotView) WriteTo(w io.Writer) (int64, error) {
	n, err := s.tx.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("engine: write snapshot: %w", err)
	}
	return n, nil
}

// Close releases the view. It is safe to call more than once.
func (s *SnapshotView) Close() error {
	var err error
	s.once.Do(func() { err = s.tx.Rollback() })
	return err
}

// Sync flushes the file to stable storage. With Options.NoSync, commits reach
// the operating system but not the disk; a caller that can rebuild the state
// (from a Raft snapshot and log) calls Sync before it records a clean close.
func (e *Engine) Sync() error {
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
