package engine

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// A cluster names itself once: the first leader of a file with no name
// proposes OpIdentify with a random id (the cluster package draws it; the
// engine never does), and the first such command applied wins on every
// replica. The name travels in snapshots and backups, so a node restored or
// caught up from a snapshot knows it too. Membership compares it before it
// lets a node with history join (docs/operations.md, Adding a node): raft
// alone cannot tell two clusters apart whose logs have the same indexes and
// terms.

// metaCluster is the meta key of the cluster's id (absent: not named yet).
var metaCluster = []byte("cluster")

// MaxClusterIDLen bounds an id OpIdentify may set.
const MaxClusterIDLen = 64

func (a *applier) identify(c *Command) (Result, error) {
	if len(c.Key) == 0 || len(c.Key) > MaxClusterIDLen {
		return bad("identify id length %d", len(c.Key))
	}
	if a.meta.Get(metaCluster) != nil {
		return Result{}, nil
	}
	if err := a.meta.Put(metaCluster, []byte(c.Key)); err != nil {
		return Result{}, fmt.Errorf("identify: %w", err)
	}
	return Result{N: 1}, nil
}

// ClusterID is the id the cluster named itself with ("": not named yet).
func (e *Engine) ClusterID() (string, error) {
	var id string
	err := e.view(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bMeta).Get(metaCluster))
		return nil
	})
	return id, err
}
