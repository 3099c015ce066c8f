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
		if k, _ := tx.Bucket(bLeases).Cursor().Last(); k != nil && (len(k) < 9 || timeOf(k) > now+horizon) {
			due = true
			return nil
		}
		t, ok := lastDue(tx.Bucket(bDue))
		due = ok && t > now+horizon
		return nil
	})
	return due, err
}

// LeaseDue reports whether a lease at now (Command.Now) with quotas may find
// an event: the oldest entry of the due index, of the sources the quotas do
// not skip (Hard with Max 0), is due by now. The leader's dispatcher
// asks it before it proposes a lease, for the same reason as ReclaimDue: it
// leases on every poll tick, and an idle cluster would commit an entry a
// second. It may say true when the lease then finds nothing (an ordered
// event waiting for its object's head, an event reclaimed in the same entry);
// it never says false while an applied event is due. Under load it is asked
// after every delivery, so it neither commits entries applied in a pending
// transaction (as view would) nor waits for them: while one is open it says
// true, and the lease looks.
func (e *Engine) LeaseDue(now int64, quotas []Quota) (bool, error) {
	if e.open.Load() {
		return true, nil
	}
	var due bool
	err := e.viewCommitted(func(tx *bolt.Tx) error {
		// A malformed index key counts as work: the lease reports it.
		t, ok := firstDue(tx.Bucket(bDue), quotas)
		due = ok && t <= now
		return nil
	})
	return due, err
}
