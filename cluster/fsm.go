package cluster

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
	"oncehook/failpoint"
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
	// storing hears whether a snapshot install stored its state (nil) or
	// failed (Node.storeTrouble); nil in tests that do not care.
	storing func(error)
	// policy moves raft's snapshot threshold with the state's size
	// (snappolicy.go); nil in tests that build an fsm by hand.
	policy *snapshotPolicy

	// hold, in tests, runs before each batch is applied.
	hold func()

	// notify is called after each applied batch with the commands and their
	// results (final; the engine may commit them a little later).
	notify func(cmds [][]engine.Command, res [][]engine.Result)

	// restoreAt is eng.RestoreAt; tests replace it to fail a restore.
	restoreAt func(r io.Reader, index uint64) error

	// restores counts the snapshots restored into the engine: an
	// operator's restore that raft refused before it got this far took
	// nothing (Node.Restore).
	restores atomic.Uint64

	mu      sync.Mutex
	entries []engine.Entry // reused between batches; only the apply goroutine touches it
	// joined holds the fragments of an entry read so far (joinFragment):
	// nil between entries; joinedSum is the checksum they carry.
	joined    []byte
	joinedSum uint32

	// Group commit of the engine file: see ApplyBatch. Guarded by mu.
	flushTimer *time.Timer // fires flushDelay after the first uncommitted batch
	armed      bool        // flushTimer is set
	unflushed  int         // bytes of entries applied since the timer was armed
}

// The engine commits applied entries in groups: at most flushDelay after
// the first entry of a group was applied, or at once when a group holds
// flushBytes of entries. A commit writes every page the transaction touched,
// one write each, and consecutive entries touch mostly the same pages, so
// committing entry by entry cost about as much again as applying them.
// Nothing a caller sees depends on the commit: results come from the apply,
// Lookup answers from the applied state (the engine keeps a note of the
// events a pending group wrote), and reads that need more (Get of a changed
// event, List, Counts, snapshots, Sync) commit first. The engine file is not
// synced anyway: a crash loses the group, and raft applies those entries
// again (every entry after the last snapshot is replayed; a snapshot
// commits first).
//
// 100 ms rather than less: a commit holds the engine while it writes, so
// under load every commit stalls the apply of the entry in flight, and the
// pages every event touches (the tails of the time-ordered indexes, the
// counters) are written once per commit. Measured on one node at 64 clients
// (docs/performance.md): 25 ms -> 100 ms gave +15 % claims/s and -14 % node
// CPU per claim; 250 ms and 1 s gave nothing more.
const (
	flushDelay = 100 * time.Millisecond
	flushBytes = 16 << 20
)

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
	if f.hold != nil {
		f.hold()
	}
	out := make([]interface{}, len(logs))
	if f.policy != nil {
		f.policy.applied(logs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	entries := f.entries[:0]
	pos := make([]int, 0, len(logs))
	var newer error // an entry this binary cannot read; logs from it on are not applied
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		data, err := f.joinFragment(l)
		if err != nil {
			// Like a corrupt entry: every replica reads the same fragments
			// in the same order and refuses the same one.
			out[i] = &applied{err: fmt.Errorf("entry %d: %w", l.Index, err)}
			continue
		}
		if data == nil {
			out[i] = &applied{} // a fragment; the last one answers for the entry
			continue
		}
		// In place: raft never writes to a log entry's Data once appended,
		// nor the fsm to a joined entry, and the engine copies what it stores
		// (saves two copies of every payload on every node).
		cmds, err := engine.DecodeEntryShared(data)
		if errors.Is(err, engine.ErrNewerFormat) {
			// A newer binary wrote it and the replicas that run one apply
			// it: skipping it would diverge from them. Apply what came
			// before, then stop this node (docs/operations.md, Upgrades).
			newer = fmt.Errorf("entry %d was written by a newer binary; this node stops rather than skip it: %w", l.Index, err)
			for j := i; j < len(logs); j++ {
				out[j] = &applied{err: ErrShutdown}
			}
			logs = logs[:i]
			break
		}
		if err != nil {
			// The log is replicated byte for byte, so every node rejects the
			// same corrupt entry the same way: determinism holds, nothing is
			// applied.
			out[i] = &applied{err: fmt.Errorf("entry %d: %w", l.Index, err)}
			continue
		}
		entries = append(entries, engine.Entry{Index: l.Index, Cmds: cmds})
		pos = append(pos, i)
	}
	f.entries = entries[:0]
	// The next batch reuses the array: a slot it does not overwrite must not
	// keep this batch's commands, and with them its log entries' payloads,
	// alive.
	defer clear(entries)
	if newer != nil {
		defer f.fatal(newer)
	}
	if len(entries) == 0 {
		return out
	}
	res, err := f.eng.ApplyBatchDeferred(entries)
	if err == nil {
		err = f.scheduleFlush(logs)
	}
	if err == nil && newer != nil {
		// Commit what was applied before the node stops.
		err = f.eng.Flush()
	}
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

// joinFragment returns the entry l carries: its Data, or, for the last
// fragment of a split entry (engine.SplitEntry), the joined entry; nil for
// any other fragment. The proposer puts an entry's fragments into the log
// one after the other with no command between them, so a command that
// comes between them, or a fragment that does not continue the one before
// (another offset, length or entry checksum), means the rest never came (the
// leader lost its place before proposing them all; their caller was never
// answered): what was joined is dropped. A joined entry whose checksum
// differs from the one its fragments carry is refused. Only the log decides,
// so every replica joins, drops and refuses the same fragments. Callers hold
// mu.
func (f *fsm) joinFragment(l *raft.Log) ([]byte, error) {
	fr, ok, err := engine.ParseFragment(l.Data)
	if !ok || err != nil {
		f.joined = nil
		if err != nil {
			return nil, err
		}
		return l.Data, nil
	}
	if fr.Offset == 0 {
		f.joined, f.joinedSum = make([]byte, 0, fr.Total), fr.Sum
	} else if f.joined == nil || len(f.joined) != fr.Offset || cap(f.joined) != fr.Total || f.joinedSum != fr.Sum {
		f.joined = nil
		return nil, fmt.Errorf("%w: fragment at %d of an entry of %d bytes (checksum %08x) without the fragments before it",
			errFragment, fr.Offset, fr.Total, fr.Sum)
	}
	f.joined = append(f.joined, fr.Bytes...)
	if !fr.Last() {
		return nil, nil
	}
	whole := f.joined
	f.joined = nil
	if sum := engine.EntrySum(whole); sum != fr.Sum {
		return nil, fmt.Errorf("%w: joined entry of %d bytes has checksum %08x, its fragments carry %08x", errFragment, len(whole), sum, fr.Sum)
	}
	return whole, nil
}

// scheduleFlush commits the engine at once when enough is pending, else
// makes sure a commit follows within flushDelay. Callers hold mu.
func (f *fsm) scheduleFlush(logs []*raft.Log) error {
	for _, l := range logs {
		f.unflushed += len(l.Data)
	}
	if f.unflushed >= flushBytes {
		f.unflushed = 0
		return f.eng.Flush()
	}
	if !f.armed {
		f.armed = true
		if f.flushTimer == nil {
			f.flushTimer = time.AfterFunc(flushDelay, f.timedFlush)
		} else {
			f.flushTimer.Reset(flushDelay)
		}
	}
	return nil
}

// timedFlush is flushTimer's function.
func (f *fsm) timedFlush() {
	f.mu.Lock()
	f.armed, f.unflushed = false, 0
	f.mu.Unlock()
	if err := f.eng.Flush(); err != nil && !errors.Is(err, engine.ErrClosed) {
		f.fatal(fmt.Errorf("fsm commit: %w", err))
	}
}

// joining tells whether part of an entry's fragments have been applied and
// the rest not yet.
func (f *fsm) joining() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.joined != nil
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if f.joining() {
		// The snapshot's index would fall between an entry's fragments, and
		// a replica restored from it would get the last ones without the
		// first. raft tries again at its next interval; the next command
		// ends any run of fragments.
		return nil, fmt.Errorf("fsm snapshot: %w", errJoining)
	}
	s, err := f.eng.BeginSnapshot()
	if err != nil {
		return nil, fmt.Errorf("fsm snapshot: %w", err)
	}
	return fsmSnapshot{s: s, policy: f.policy}, nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	// raft persists a snapshot in the store before it restores the FSM from it
	// (both for an install from the leader and an operator's restore) and does
	// not pass its index; the restored file's own applied index belongs to the
	// cluster it came from. The snapshot's index is recorded instead, in the
	// restored file itself (RestoreAt): a crash between the two would leave
	// the state under the old index, and the log after it skipped.
	list, err := f.snaps.List()
	if err != nil || len(list) == 0 {
		return fmt.Errorf("fsm restore: find the restored snapshot: %v", err)
	}
	restoreAt := f.eng.RestoreAt
	if f.restoreAt != nil {
		restoreAt = f.restoreAt
	}
	if err := restoreAt(rc, list[0].Index); err != nil {
		err = fmt.Errorf("fsm restore: %w", err)
		if errors.Is(err, engine.ErrRestoreIncomplete) {
			// The file in place is the snapshot's but the engine is closed:
			// the node stops. The snapshot is in the store, so the next start
			// has it whatever the engine file holds then.
			f.fatal(err)
		}
		// Otherwise the state is as it was, and so is the log after it: an
		// entry being joined goes on with the fragments that follow.
		if f.storing != nil {
			f.storing(err)
		}
		return err
	}
	f.restores.Add(1)
	f.mu.Lock()
	f.joined = nil // fragments before the snapshot's index; a snapshot never falls between them
	f.mu.Unlock()
	if f.storing != nil {
		f.storing(nil)
	}
	return nil
}

type fsmSnapshot struct {
	s      *engine.SnapshotView
	policy *snapshotPolicy // may be nil
}

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	failpoint.Inject(failpoint.BeforeSnapshotPersist)
	size, err := s.s.WriteStream(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return err
	}
	if s.policy != nil {
		// The snapshot is kept either way; a threshold left as it was only
		// means the next snapshot comes sooner.
		if err := s.policy.persisted(size); err != nil {
			s.policy.log.Warn("snapshot policy", "err", err)
		}
	}
	return nil
}

func (s fsmSnapshot) Release() { s.s.Close() }
