package cluster

import (
	"context"
	"slices"
	"time"
)

// A node removed from the configuration while it was behind (under load, or
// cut off) may never receive the entry that removes it: the leader stops
// sending it anything once the removal commits, so the node keeps standing
// for election, its /readyz saying it waits for a quorum. Its former peers
// know better: while it has no leader, it asks them (docs/operations.md,
// Three nodes).

// watchMembership asks the other members, every election timeout while this
// node has had no leader for two of them, whether it is still in their
// configuration; Ready reports what one that knows a leader says.
func (n *Node) watchMembership() {
	defer close(n.memberDone)
	every := orDur(n.cfg.ElectionTimeout, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	var since time.Time // when this node last knew a leader, or started
	for {
		select {
		case <-n.stopObserve:
			return
		case <-t.C:
		}
		if addr, _ := n.raft.LeaderWithID(); addr != "" || n.removed() {
			since = time.Time{}
			n.removedBy.Store(nil)
			continue
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < 2*every {
			continue
		}
		by := n.askRemoved()
		switch {
		case by == "":
			n.removedBy.Store(nil)
		case n.removedBy.Load() == nil:
			n.log.Warn("this node is not in the cluster's configuration (removed); it takes no part in commits", "says", by)
			n.removedBy.Store(&by)
		}
	}
}

// askRemoved asks the other members of this node's configuration and returns
// the id of the first that knows a leader and whose configuration lacks this
// node ("": none says so, or none answered).
func (n *Node) askRemoved() string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.stopObserve: // shutting down: do not hold it up
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		ms, err := n.askStats(ctx, string(s.Address))
		if err != nil || ms.ID != string(s.ID) || ms.Leader == "" || len(ms.Members) == 0 {
			continue // unreachable, another node, leaderless itself, or a binary that does not say
		}
		if !slices.Contains(ms.Members, n.cfg.ID) {
			return ms.ID
		}
	}
	return ""
}
