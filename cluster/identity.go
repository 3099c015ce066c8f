package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"oncehook/engine"
)

// A cluster's id tells its nodes from another cluster's that happen to have
// the same ids, addresses, indexes and terms: raft compares only indexes
// and terms, so it would take such a node's history for its own (its
// engine keeping the other cluster's events) if it were added as a voter.
// The first leader of a cluster names it (nameCluster); a join compares
// the ids (sameCluster). See docs/operations.md, Adding a node.

// nameCluster names a cluster that has no id yet: the leader proposes a
// random one (the engine keeps the first applied). It retries every second
// until the name is applied or ctx ends (leadership lost: the next leader
// names it).
func (n *Node) nameCluster(ctx context.Context) {
	if n.cfg.unnamed {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if id, err := n.eng.ClusterID(); err == nil && id != "" {
			return
		}
		var b [16]byte
		rand.Read(b[:])
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := n.prop.submit(pctx, []engine.Command{{Op: engine.OpIdentify, Key: hex.EncodeToString(b[:])}}, true)
		cancel()
		if err == nil {
			continue // read back the id that was applied first
		}
		if ctx.Err() == nil {
			n.log.Debug("name the cluster", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clusterID is this node's cluster id ("": none, or unreadable).
func (n *Node) clusterID() string {
	id, err := n.eng.ClusterID()
	if err != nil {
		return ""
	}
	return id
}

// sameCluster refuses a node whose history may be another cluster's. A node
// with history (members, and not fresh: it did not start empty) is
// accepted only under this cluster's id: a node of an older release, or of
// a cluster not led since its upgrade, has none, and its members may share
// this cluster's ids. A fresh node (started with an empty data dir; what it
// holds came from this cluster's leader) is refused only when it names
// another cluster.
func (n *Node) sameCluster(ms memberStats) error {
	const empty = "; start it with an empty data dir to add it"
	ours := n.clusterID()
	history := len(ms.Members) > 0 && !ms.Fresh
	switch {
	case ms.Cluster != "" && ms.Cluster != ours && ours != "":
		return fmt.Errorf("belongs to another cluster (id %s; this cluster is %s)%s", ms.Cluster, ours, empty)
	case len(ms.Members) > 0 && !slices.Contains(ms.Members, n.cfg.ID):
		return fmt.Errorf("belongs to another cluster (members %s)%s", strings.Join(ms.Members, ", "), empty)
	case ours == "" && (ms.Cluster != "" || history):
		return errors.New("holds a cluster's history, and this cluster has no id yet to compare it with (its leader names it within seconds of leading): try again")
	case history && ms.Cluster == "":
		return fmt.Errorf("holds a history but no cluster id (a node of an older release, of a cluster not led since its upgrade, or one still catching up): it may be another cluster's%s", empty)
	}
	return nil
}

// identityCheckEvery: a follower compares its cluster id with its leader's
// every this many ticks of the membership watch (an election timeout each).
const identityCheckEvery = 5

// checkLeaderIdentity asks the leader at addr for its cluster id. A
// follower whose own id differs holds state that came from another
// cluster (two wiped nodes that bootstrapped while the survivor was
// stopped, say): the log raft gave it since is this cluster's, but its
// engine applied the other one's entries under the same indexes. It is
// marked not ready, with the remedy, and says so once in the log.
func (n *Node) checkLeaderIdentity(ctx context.Context, addr string) {
	if addr == string(n.trans.LocalAddr()) {
		n.foreign.Store(nil)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	defer cancel()
	ms, err := n.askStats(ctx, addr)
	if err != nil {
		return
	}
	ours := n.clusterID()
	if ms.Cluster == "" || ours == "" || ms.Cluster == ours {
		n.foreign.Store(nil)
		return
	}
	why := fmt.Sprintf("this node's state belongs to cluster %s, its leader %s's to cluster %s: stop it, empty its data dir and start it again", ours, ms.ID, ms.Cluster)
	if n.foreign.Swap(&why) == nil {
		n.log.Error("cluster id differs from the leader's", "node", n.cfg.ID, "cluster", ours, "leader", ms.ID, "leader_cluster", ms.Cluster)
	}
}
