package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// sameCluster refuses a node whose history is another cluster's: it names
// another cluster id, or (a node of a cluster not named yet, say an older
// release) its configuration lacks this node. A node with no history (no
// members, no id) is a new or wiped node, welcome.
func (n *Node) sameCluster(ms memberStats) error {
	ours := n.clusterID()
	switch {
	case ms.Cluster != "" && ms.Cluster != ours:
		if ours == "" {
			return fmt.Errorf("belongs to cluster %s, and this cluster is not named yet", ms.Cluster)
		}
		return fmt.Errorf("belongs to another cluster (id %s; this cluster is %s)", ms.Cluster, ours)
	case len(ms.Members) > 0 && !slices.Contains(ms.Members, n.cfg.ID):
		return fmt.Errorf("belongs to another cluster (members %s)", strings.Join(ms.Members, ", "))
	}
	return nil
}
