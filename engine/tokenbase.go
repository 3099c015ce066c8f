package engine

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// A lease's fencing token is its entry's index plus the file's token base
// (meta "tokenbase"). Indexes alone would not do across a restore: a
// backup of another cluster, whose log was longer, holds tokens far above
// this log's index (its events would wait for the log to pass them), and a
// backup of this cluster's past, restored after such a restore, would hand
// out tokens already issued. Before a restore the leader raises the
// backup's base above both (PrepareRestore); the base then travels inside
// the file, so every replica computes the same tokens.

// restoreMargin is added to a restore's base beyond the largest token the
// file can hold: a backup taken from a node that lagged (the survivor of a
// lost majority) lacks the entries the leader applied after it, and the
// tokens those issued. 2^32 entries are days of the largest rate a cluster
// commits; tokens stay far below 2^64 over any number of restores.
const restoreMargin = 1 << 32

// PrepareRestore readies the backup file at path for a restore into a
// cluster whose leases so far carry tokens up to issued (the leader's last
// log index plus its TokenBase): it raises the file's token base to the
// greater of issued and the largest token the file can hold (its applied
// index plus its base), plus restoreMargin, so that every lease after the
// restore takes a token above both. The file
// is stamped with this binary's format: an older binary refuses it rather
// than compute other tokens. A cluster id other than "" replaces the
// backup's (identity.go): the cluster restored into stays itself, and two
// clusters restored from one backup stay two.
func PrepareRestore(path string, issued uint64, cluster string) error {
	if len(cluster) > MaxClusterIDLen {
		return fmt.Errorf("engine: prepare restore: cluster id length %d", len(cluster))
	}
	db, _, applied, err := openFile(path, Options{}, true, true)
	if err != nil {
		return fmt.Errorf("engine: prepare restore: %w", err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bMeta)
		base := max(issued, applied+tokenBase(m)) + restoreMargin
		if cluster != "" {
			if err := m.Put(metaCluster, []byte(cluster)); err != nil {
				return err
			}
		}
		return m.Put(metaTokenBase, binary.BigEndian.AppendUint64(nil, base))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("engine: prepare restore: %w", err)
	}
	return nil
}

// TokenBase is the file's token base: the tokens of the leases applied so
// far are at most the last applied index plus it, and the entries the log
// holds beyond that issue at most their own index plus it.
func (e *Engine) TokenBase() (uint64, error) {
	var base uint64
	err := e.view(func(tx *bolt.Tx) error {
		base = tokenBase(tx.Bucket(bMeta))
		return nil
	})
	return base, err
}

func tokenBase(m *bolt.Bucket) uint64 {
	if v := m.Get(metaTokenBase); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}
