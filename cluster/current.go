package cluster

import (
	"context"
	"time"
)

// A node answers a duplicate from its own applied state, without a Raft
// round (Lookup). That state only ever gains keys through the log, except
// when the cluster rewinds: an operator's restore replaces it. A node that
// was down during a restore starts with the state from before it and holds
// keys the cluster no longer has until the leader sends it the restored
// snapshot; answering "duplicate" from it would acknowledge a provider's
// retry of an event the cluster forgot, and the event would be lost.
//
// So after a start, Lookup finds nothing until the node's state is current:
// it has applied up to a commit index the leader reported after the start
// (which is past any restore the leader made before it), or it won an
// election and applied its whole log (caughtUpAsLeader). Until then a
// duplicate takes the claim's path through the leader, which decides it
// on the cluster's state. It stays current while the node runs; a node cut
// off from the cluster is the limit docs/operations.md names for purges and
// restores made meanwhile.

// currentPoll is how often watchCurrent looks again.
const currentPoll = 20 * time.Millisecond

// watchCurrent sets n.current once this follower's applied state reached a
// commit index the leader reported after the start. It ends then, when the
// node leads (caughtUpAsLeader sets it), or at Close.
func (n *Node) watchCurrent() {
	ctx := n.probeCtx
	t := time.NewTicker(currentPoll)
	defer t.Stop()
	var target uint64 // the leader's commit index, once asked
	for !n.current.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if target == 0 {
			addr, id := n.raft.LeaderWithID()
			if addr == "" || string(id) == n.cfg.ID {
				continue // no leader yet, or this node: it sets current as it takes over
			}
			actx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
			ms, err := n.askStats(actx, string(addr))
			cancel()
			if err != nil || ms.CommitIndex == 0 {
				continue
			}
			target = ms.CommitIndex
			n.currentAt.Store(target)
		}
		n.isCurrent()
	}
}

// isCurrent reports whether this node's applied state is current, setting
// it the moment the applied index reaches the leader's reported commit.
func (n *Node) isCurrent() bool {
	if n.current.Load() {
		return true
	}
	if t := n.currentAt.Load(); t != 0 && n.appliedIndex() >= t {
		n.current.Store(true)
		return true
	}
	return false
}

// startWatchCurrent runs watchCurrent among the node's probes (Close waits
// for them).
func (n *Node) startWatchCurrent() {
	n.probeMu.Lock()
	defer n.probeMu.Unlock()
	if n.probeCtx.Err() != nil {
		return
	}
	n.probes.Go(n.watchCurrent)
}
