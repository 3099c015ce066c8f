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
		if k, _ := lastKey(tx.Bucket(bLeases).Cursor()); k != nil && (len(k) < 9 || timeOf(k) > now+horizon) {
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
// transaction (as view would) nor waits for them: while one is open it
// says true when that transaction put a due entry, due by now, of a source
// the quotas do not skip (noteDue; one it put and leased again still
// counts), and otherwise reads the committed state, where any other due
// entry is.
func (e *Engine) LeaseDue(now int64, quotas []Quota) (bool, error) {
	if e.open.Load() && e.openDueBy(now, quotas) {
		return true, nil
	}
	var due bool
	err := e.viewCommitted(func(tx *bolt.Tx) error {
		// A malformed index key counts as work: the lease reports it.
		t, ok := firstDue(tx.Bucket(bDue), tx.Bucket(bSources), quotas)
		due = ok && t <= now
		return nil
	})
	return due, err
}

// payloadsDueLook bounds how many legacy entries PayloadsDue reads past:
// only files written before drop times were recorded have any.
const payloadsDueLook = 64

// PayloadsDue reports whether a DropPayloads at now with since (Command.Before
// and Since) may drop a payload: the oldest entry of the done index is due
// by now. The leader's sweeper asks it every second, for the same reason as
// LeaseDue. Unlike LeaseDue it reads only committed state, neither
// committing nor waiting for a group of applied entries: a payload that only
// such a group made due is seen by a later sweep, once the group is
// committed, which is late by at most a sweep; and under load, when a group
// is almost always open, the sweeper still finds what came due before it.
// It may say true when the command then drops nothing. An entry of an event
// completed before drop times were recorded (PayloadDropAt 0, indexed at its
// completion) is due only before since; past payloadsDueLook of those that
// are not, it says true and lets the command look.
func (e *Engine) PayloadsDue(now, since int64) (bool, error) {
	var due bool
	err := e.viewCommitted(func(tx *bolt.Tx) error {
		events := tx.Bucket(bEvents)
		cur := tx.Bucket(bDone).Cursor()
		n := 0
		for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
			// A malformed index key counts as work: the command reports it.
			if len(k) < 9 || n == payloadsDueLook {
				due = true
				return nil
			}
			if timeOf(k) >= now {
				return nil
			}
			if since == 0 || timeOf(k) < since {
				due = true
				return nil
			}
			var ev Event
			v := events.Get(k[8:])
			if v == nil {
				due = true
				return nil
			}
			if _, err := decodeRecord(k[8:], v, &ev); err != nil || ev.PayloadDropAt != 0 {
				due = true
				return nil
			}
			n++
		}
		return nil
	})
	return due, err
}
