package cluster

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// fsm applies committed entries to the engine. It is unexported so that the
// raft contract stays off Node's public surface.
//
// hashicorp/raft's contract, restated: ApplyBatch is called from one goroutine
// in log order and must be deterministic; Snapshot must be fast and capture the
// state as of the last applied entry; Persist may run concurrently with later
// applies; Release is always called; Restore replaces the whole state.
type fsm struct {
	eng   *engine.Engine
	snaps raft.SnapshotStore // the snapshot being restored is the newest in it
	fatal func(error)

	// notify is called after each applied batch, outside the engine's
	// transaction, with the commands and their results.
	notify func(cmds [][]engine.Command, res [][]engine.Result)

	mu      sync.Mutex
	entries []engine.Entry // reused between batches; only the apply goroutine touches it
}

var _ raft.BatchingFSM = (*fsm)(nil)

func (f *fsm) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// applied is the FSM's answer for one log entry, returned through ApplyFuture.
type applied struct {
	results []engine.Result
	err     error
}

func (f *fsm) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	f.mu.Lock()
	defer f.mu.Unlock()
	entries := f.entries[:0]
	pos := make([]int, 0, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		cmds, err := engine.DecodeEntry(l.Data)
		if err != nil {
			// The log is replicated byte for byte, so every node rejects the
			// same entry the same way: determinism holds, nothing is applied.
			out[i] = &applied{err: fmt.Errorf("entry %d: %w", l.Index, err)}
			continue
		}
		entries = append(entries, engine.Entry{Index: l.Index, Cmds: cmds})
		pos = append(pos, i)
	}
	f.entries = entries[:0]
	if len(entries) == 0 {
		return out
	}
	res, err := f.eng.ApplyBatch(entries)
	if err != nil {
		// raft moves its applied index on whatever we return; a node that
		// skipped a write would silently diverge. Stop instead.
		f.fatal(fmt.Errorf("fsm apply of entries %d..%d: %w", entries[0].Index, entries[len(entries)-1].Index, err))
		for _, i := range pos {
			out[i] = &applied{err: ErrShutdown}
		}
		return out
	}
	cmds := make([][]engine.Command, len(entries))
	for j, i := range pos {
		out[i] = &applied{results: res[j]}
		cmds[j] = entries[j].Cmds
	}
	if f.notify != nil {
		f.notify(cmds, res)
	}
	return out
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.eng.BeginSnapshot()
	if err != nil {
		return nil, fmt.Errorf("fsm snapshot: %w", err)
	}
	return fsmSnapshot{s}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := f.eng.Restore(rc); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	// raft persists a snapshot in the store before it restores the FSM from it
	// (both for an install from the leader and an operator's restore) and does
	// not pass its index; the restored file's own applied index belongs to the
	// cluster it came from. Record the snapshot's index instead.
	list, err := f.snaps.List()
	if err != nil || len(list) == 0 {
		return fmt.Errorf("fsm restore: find the restored snapshot: %v", err)
	}
	if err := f.eng.SetLastApplied(list[0].Index); err != nil {
		return fmt.Errorf("fsm restore: %w", err)
	}
	return nil
}

type fsmSnapshot struct{ s *engine.SnapshotView }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() { s.s.Close() }
