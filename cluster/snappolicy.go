package cluster

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// A raft snapshot here is a full copy of the engine file (fsm.go), while the
// engine itself is persistent and needs no snapshot to restart: snapshots
// only let raft drop old log entries and bring a far-behind follower up to
// date. raft takes one every SnapshotThreshold entries, which costs nothing
// while the state is small but, with millions of retained keys, means
// writing gigabytes every minute: a ten-million-key fill wrote a 3.6 GiB copy
// every 30-60 s, and the claims that arrived during each copy waited
// (docs/performance.md, "Retained state").
//
// So once the state passes snapshotFloor the threshold grows with it: the
// next snapshot waits until the log written since the last one holds about
// half as many bytes as that snapshot. Snapshots then cost at most twice
// the bytes the log itself takes in, whatever the state's size, and the log
// kept between two snapshots stays under half the state. Below the floor the
// configured threshold holds as is. The threshold lives in memory: after a
// restart the first snapshot comes at the configured threshold again, one
// extra copy per restart, and sets it anew.
const (
	defaultSnapshotThreshold = 4096      // entries, while the state is small
	snapshotFloor            = 256 << 20 // bytes of snapshot below which the configured threshold holds
	snapshotShare            = 2         // the log since the last snapshot reaches 1/snapshotShare of it
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

// persisted sets the threshold that follows a snapshot of size bytes.
func (p *snapshotPolicy) persisted(size int64) error {
	var avg float64
	if n := p.entries.Load(); n > 0 {
		avg = float64(p.bytes.Load()) / float64(n)
	}
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
