package engine

import bolt "go.etcd.io/bbolt"

// ReclaimDue reports whether a reclaim at now with horizon (Command.Now,
// Command.Horizon) would change anything: a lease that ended by now, or,
// when horizon > 0, a retry or a lease end scheduled beyond now+horizon.
// The leader's sweeper asks it before it proposes one, so that an idle
// cluster does not commit a Raft entry (and fsync its log on every node)
// at every sweep. It reads committed state; now comes from the caller.
func (e *Engine) ReclaimDue(now, horizon int64) (bool, error) {
	var due bool
	err := e.view(func(tx *bolt.Tx) error {
		// A malformed index key counts as work: the reclaim reports it.
		if k, _ := tx.Bucket(bLeases).Cursor().First(); k != nil && (len(k) < 9 || timeOf(k) <= now) {
			due = true
			return nil
		}
		if horizon <= 0 {
			return nil
		}
		for _, b := range [][]byte{bDue, bLeases} {
			if k, _ := tx.Bucket(b).Cursor().Last(); k != nil && (len(k) < 9 || timeOf(k) > now+horizon) {
				due = true
				return nil
			}
		}
		return nil
	})
	return due, err
}
