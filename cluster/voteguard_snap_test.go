package cluster

import (
	"fmt"
	"testing"
	"time"
)

// TestLogEndAfterSnapshotInstall: a follower that caught up by
// snapshot, nothing appended since. raft's own end of its log, the one a
// candidate sends in RequestVote and the one raft's vote rule compares
// (getLastEntry: the snapshot's when it is newer than the last entry), is
// the snapshot's. ownLogEnd (raft.Stats' last_log_*)
// reads the log alone: raft does not move lastLog on an install, so it is
// what the follower held before, below what it holds. memberStats (the
// floor a wiped peer takes from it) and the marker's own check both use
// it; it takes the snapshot's end when later.
func TestLogEndAfterSnapshotInstall(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 50 * time.Millisecond
	})
	leader := c.waitLeader(-1)
	lag := c.follower(leader)
	c.partition(lag)
	for i := 0; i < 200; i++ {
		leader = c.mustClaim(fmt.Sprintf("src:s%d", i), lag)
	}
	if err := c.nodes[leader].raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.heal()
	waitFor(t, "the lagging follower installs the snapshot", func() bool {
		return c.nodes[lag].raft.LastIndex() >= c.nodes[leader].raft.LastIndex()
	})
	own := c.nodes[lag].ownLogEnd()
	ms := c.nodes[lag].ownStats()
	if last := c.nodes[lag].raft.LastIndex(); own.index < last || ms.LastLogIndex < last {
		t.Fatalf("after the snapshot install raft's last index is %d, but ownLogEnd says %+v and memberStats %d/%d",
			last, own, ms.LastLogTerm, ms.LastLogIndex)
	}
}
