package cluster

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// A raft snapshot here is a copy of the engine file (fsm.go), compressed
// (engine/snapstream.go), while the engine itself is persistent and needs no
// snapshot to restart: snapshots only let raft drop old log entries and
// bring a far-behind follower up to date. raft takes one every
// SnapshotThreshold entries, which costs nothing while the state is small
// but, with millions of retained keys, means reading gigabytes every minute:
// a ten-million-key fill copied 3.6 GiB every 30-60 s, and the claims that
// arrived during each copy waited (docs/performance.md, "Retained state").
//
// So once the state passes snapshotFloor the threshold grows with it: the
// next snapshot waits until the log written since the last one holds about
// half as many bytes as the engine file held then. Snapshots then read at
// most twice the bytes the log itself takes in, whatever the state's size,
// and the log kept between two snapshots stays under half the state. The
// sizes are the file's, not the compressed snapshot's: reading and
// compressing the file is what a snapshot costs. Below the floor the
// configured threshold holds as is. raft keeps the threshold in memory only,
// so a restarting node works it out again (resume) from its newest snapshot's
// size and the entries at the end of its log; otherwise every restart would
// cost one extra full copy at the configured threshold.
const (
	defaultSnapshotThreshold = 4096      // entries, while the state is small
	snapshotFloor            = 256 << 20 // bytes of engine file below which the configured threshold holds
	snapshotShare            = 2         // the log since the last snapshot reaches 1/snapshotShare of the file
	resumeSample             = 256       // newest log entries read at start for their average size
)

// nextSnapshotThreshold returns the number of new log entries the next
// snapshot waits for, after a snapshot of snapBytes, when command entries
// average avgEntry bytes. It never goes below base.
func nextSnapshotThreshold(base uint64, snapBytes int64, avgEntry float64, floor int64) uint64 {
	if snapBytes < floor || avgEntry < 1 {
		return base
	}
	return max(base, uint64(float64(snapBytes)/snapshotShare/avgEntry))
}

// snapshotPolicy measures the entries the FSM applies and moves raft's
// snapshot threshold after each snapshot.
type snapshotPolicy struct {
	base  uint64
	floor int64
	log   *slog.Logger

	bytes   atomic.Uint64 // bytes of command entries applied since start
	entries atomic.Uint64 // their number

	mu sync.Mutex
	r  *raft.Raft // nil until raft runs
}

func newSnapshotPolicy(base uint64, floor int64, log *slog.Logger) *snapshotPolicy {
	return &snapshotPolicy{base: base, floor: floor, log: log}
}

// attach hands the policy the running raft.
func (p *snapshotPolicy) attach(r *raft.Raft) {
	p.mu.Lock()
	p.r = r
	p.mu.Unlock()
}

// applied counts the command entries of an applied batch.
func (p *snapshotPolicy) applied(logs []*raft.Log) {
	var b, n uint64
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			b += uint64(len(l.Data))
			n++
		}
	}
	p.bytes.Add(b)
	p.entries.Add(n)
}

// average is the mean size of the command entries counted so far; 0 for none.
func (p *snapshotPolicy) average() float64 {
	if n := p.entries.Load(); n > 0 {
		return float64(p.bytes.Load()) / float64(n)
	}
	return 0
}

// resume returns the threshold a node starts raft with: the one its newest
// snapshot calls for, with the entry size measured on the newest entries of
// its log (which also seed the average later snapshots use), or the
// configured one while there is no snapshot past the floor. It runs before
// raft starts.
func (p *snapshotPolicy) resume(snaps raft.SnapshotStore, logs raft.LogStore) (uint64, error) {
	list, err := snaps.List()
	if err != nil {
		return 0, fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) == 0 {
		return p.base, nil
	}
	size, err := stateSize(snaps, list[0])
	if err != nil {
		// The threshold only paces snapshots; a damaged snapshot must not
		// keep the node from starting on its engine file (docs/operations.md).
		p.log.Warn("newest snapshot unreadable; snapshot threshold not resumed from it", "snapshot", list[0].ID, "err", err)
		return p.base, nil
	}
	if size < p.floor {
		return p.base, nil
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("first log index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("last log index: %w", err)
	}
	var l raft.Log
	for i := last; i >= first && i > 0 && last-i < resumeSample; i-- {
		if err := logs.GetLog(i, &l); err != nil {
			return 0, fmt.Errorf("log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			p.bytes.Add(uint64(len(l.Data)))
			p.entries.Add(1)
		}
	}
	avg := p.average()
	want := nextSnapshotThreshold(p.base, size, avg, p.floor)
	if want != p.base {
		p.log.Info("snapshot threshold resumed", "entries", want, "state_bytes", size, "avg_entry_bytes", int64(avg))
	}
	return want, nil
}

// stateSize is the size of the engine file a stored snapshot holds, which
// is what the schedule follows: the snapshot itself is compressed
// (engine/snapstream.go), and one written before that is the file.
func stateSize(snaps raft.SnapshotStore, meta *raft.SnapshotMeta) (int64, error) {
	_, rc, err := snaps.Open(meta.ID)
	if err != nil {
		return 0, fmt.Errorf("open snapshot %s: %w", meta.ID, err)
	}
	defer rc.Close()
	size, err := engine.SnapshotFileSize(rc, meta.Size)
	if err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", meta.ID, err)
	}
	return size, nil
}

// persisted sets the threshold that follows a snapshot of an engine file
// of size bytes (before compression).
func (p *snapshotPolicy) persisted(size int64) error {
	avg := p.average()
	want := nextSnapshotThreshold(p.base, size, avg, p.floor)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.r == nil {
		return nil
	}
	rc := p.r.ReloadableConfig()
	if rc.SnapshotThreshold == want {
		return nil
	}
	rc.SnapshotThreshold = want
	if err := p.r.ReloadConfig(rc); err != nil {
		return fmt.Errorf("snapshot threshold %d: %w", want, err)
	}
	p.log.Info("snapshot threshold changed", "entries", want, "snapshot_bytes", size, "avg_entry_bytes", int64(avg))
	return nil
}
