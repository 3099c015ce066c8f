package engine

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// This file holds the retention rules (docs/architecture.md, Event states):
// what Expire does with an event that is not finished, the dead retention, a
// replay's fresh window, payload drop times, Purge, and the schedule horizon
// that Reclaim enforces.

// DefaultDeadRetention is how long a dead letter is kept when the Fail that
// made it dead carried no DeadRetention (entries written before the field):
// Expire then keeps it this long from the moment it finds it.
const DefaultDeadRetention = 30 * 24 * 3600 * int64(1e9)

// doneTime is the time of ev's done index entry: its payload drop time, or
// its completion time when it was completed without a payload retention.
func doneTime(ev *Event) int64 {
	if ev.PayloadDropAt != 0 {
		return ev.PayloadDropAt
	}
	return ev.UpdatedAt
}

// RetentionWindow is the event's retention window: Retention, or
// ExpiresAt-CreatedAt while its expiry never moved.
func (ev *Event) RetentionWindow() int64 {
	if ev.Retention != 0 {
		return ev.Retention
	}
	return ev.ExpiresAt - ev.CreatedAt
}

// moveExpiry moves ev's expiry entry to the bucket ending at end and sets
// ev.ExpiresAt (the caller stores the record). ev.Retention is unchanged, so
// the record keeps the claim's window (flagLife) from its first move. With
// ending set the old entry is left to its bucket, which Expire is deleting.
// The order entry of ev's object is kept at least as long (keepOrder).
func (a *applier) moveExpiry(ev *Event, end int64, ending bool, c *Command) error {
	if end == ev.ExpiresAt {
		return nil
	}
	if !ending {
		if err := a.delExpiryEntry(ev); err != nil {
			return err
		}
	}
	ev.Retention = ev.RetentionWindow()
	ev.ExpiresAt = end
	nb, err := a.expiryBucket(end, true)
	if err != nil {
		return err
	}
	if err := nb.Put(a.ptk(expiryEvent, ev.CreatedAt, ev.Key), empty); err != nil {
		return err
	}
	return a.keepOrder(ev, c)
}

// keepOrder makes the order entry of ev's object live at least until ev's
// expiry. The guard must remember an object's newest order time for as long
// as an event of the object is kept: an event kept past its retention (one
// still pending after a long outage, a dead letter) would otherwise outlive
// the entry, and an older claim of its object would pass the guard and be
// delivered after it. The entry leaves its old bucket even when that is
// the one Expire is going through (Expire skips an entry it finds moved),
// since an expire in batches leaves the bucket for a later command.
func (a *applier) keepOrder(ev *Event, c *Command) error {
	if ev.OrderObject == "" || c.semantics() < formatOrderKept {
		return nil
	}
	k := strBytes(ev.OrderObject)
	v := a.orders.Get(k)
	if v == nil {
		return nil
	}
	if !orderEntryLen(len(v)) {
		return fmt.Errorf("%w: order entry %q", ErrCorrupt, clip(k))
	}
	old := int64(binary.BigEndian.Uint64(v[8:]))
	if old >= ev.ExpiresAt {
		return nil
	}
	nv := append(a.arena.make(len(v)), v...)
	binary.BigEndian.PutUint64(nv[8:], uint64(ev.ExpiresAt))
	if err := a.orders.Put(k, nv); err != nil {
		return err
	}
	ob, err := a.expiryBucket(old, false)
	if err != nil {
		return err
	}
	if ob != nil {
		if err := ob.Delete(a.pk(expiryOrder, ev.OrderObject)); err != nil {
			return err
		}
	}
	nb, err := a.expiryBucket(ev.ExpiresAt, true)
	if err != nil {
		return err
	}
	return nb.Put(a.pk(expiryOrder, ev.OrderObject), empty)
}

// delExpiryEntry removes ev's entry from its expiry bucket. A bucket left
// empty stays until Expire deletes it when it ends (checking for emptiness
// here would walk the pages emptied earlier in the transaction).
func (a *applier) delExpiryEntry(ev *Event) error {
	ob, err := a.expiryBucket(ev.ExpiresAt, false)
	if err != nil || ob == nil {
		return err
	}
	return ob.Delete(a.ptk(expiryEvent, ev.CreatedAt, ev.Key))
}

// keepDead gives an event that just went dead its dead retention: its expiry
// moves to at least the end of the bucket holding now+d, never earlier than
// its own retention, and flagDeadKept tells Expire to delete it then.
func (a *applier) keepDead(ev *Event, flags byte, now, d int64, ending bool, c *Command) (byte, error) {
	end := max(ev.ExpiresAt, bucketEnd(now+d, a.width))
	if err := a.moveExpiry(ev, end, ending, c); err != nil {
		return flags, err
	}
	return flags | flagDeadKept, nil
}

// expireEvent handles one event listed in the ended bucket end: a done or
// stale event, or a dead letter whose dead retention passed, is deleted
// (dead: reported in res.Events); a pending, processing or dead event not yet
// kept for its dead retention moves to a later bucket. Only the bucket's own
// entries are visited, so the cost is the events expired plus those moved.
//
// An expire written by a binary older than the retention rules deletes every
// event of the bucket, whatever its state, as that binary did.
func (a *applier) expireEvent(key string, created, end int64, c *Command, res *Result) error {
	now := c.Now
	// Most events of an ended bucket are finished: read the state from the
	// record's header and delete those at once (deleteEvent decodes the
	// record once), as expiry did before it kept unfinished events.
	if v := a.evp.get(strBytes(key)); v != nil {
		st, err := recordState(strBytes(key), v)
		if err != nil {
			return err
		}
		if st == StateDone || st == StateStale || c.semantics() < formatRetentionRules {
			if err := a.deleteEvent(key, created, end); err != nil {
				return err
			}
			res.N++
			return nil
		}
	}
	var ev Event
	flags, found, err := a.load(key, &ev)
	if err != nil {
		return err
	}
	if !found || ev.ExpiresAt != end || ev.CreatedAt != created {
		return fmt.Errorf("%w: expiry lists event %q it does not hold", ErrCorrupt, clip(strBytes(key)))
	}
	ev.Key = strings.Clone(key) // key points into a page that the writes may change
	switch {
	case ev.State == StateDead && flags&flagDeadKept != 0:
		if err := a.deleteEvent(ev.Key, created, end); err != nil {
			return err
		}
		ev.Audit = nil
		res.Events = append(res.Events, ev)
		res.N++
		return nil
	case ev.State == StateDead:
		// Dead before dead retention existed (or without it): keep it
		// DefaultDeadRetention from now, then delete it.
		if flags, err = a.keepDead(&ev, flags, now, DefaultDeadRetention, true, c); err != nil {
			return err
		}
	case ev.State == StatePending || ev.State == StateProcessing:
		// Unfinished: never forgotten. A fresh window from now.
		if err := a.moveExpiry(&ev, bucketEnd(now+max(ev.RetentionWindow(), 1), a.width), true, c); err != nil {
			return err
		}
	default:
		if err := a.deleteEvent(ev.Key, created, end); err != nil {
			return err
		}
		res.N++
		return nil
	}
	return a.store(&ev, flags)
}

// maxPurge bounds one purge command; the caller loops.
const maxPurge = 10000

// purgeable reports whether Purge deletes events in state s. Pending and
// processing events are in flight and never purged.
func purgeable(s State) bool { return s == StateDone || s == StateDead || s == StateStale }

// purge deletes up to c.Max events in c.State whose UpdatedAt is before
// c.Before (of c.Source when set), with everything they own. It walks the
// states index of that state from its start and stops at Before.
func (a *applier) purge(c *Command) (Result, error) {
	switch {
	case !purgeable(c.State):
		return bad("purge state %d: only dead, done and stale events can be purged", c.State)
	case c.Max <= 0 || c.Max > maxPurge:
		return bad("purge max %d", c.Max)
	case len(c.Source) > MaxKeyLen || len(c.Who) > MaxKeyLen:
		return bad("purge source or who too long")
	}
	keys, _, err := purgeKeys(a.states, c.State, c.Source, c.Before, c.Max, false)
	if err != nil {
		return Result{}, err
	}
	slices.Sort(keys) // see keyOrder
	for _, key := range keys {
		var ev Event
		if _, found, err := a.load(key, &ev); err != nil {
			return Result{}, err
		} else if !found {
			return Result{}, fmt.Errorf("%w: states index names missing event %q", ErrCorrupt, clip(strBytes(key)))
		}
		if err := a.delExpiryEntry(&ev); err != nil {
			return Result{}, err
		}
		if err := a.deleteEvent(key, ev.CreatedAt, ev.ExpiresAt); err != nil {
			return Result{}, err
		}
	}
	return Result{N: len(keys), Keys: keys}, nil
}

// purgeKeys lists up to max keys of state st with UpdatedAt < before, of
// source when set, oldest first, and counts them all when count is set (else
// it stops at max). Purge applies it; PurgePreview (dry run) reads it.
func purgeKeys(states *bolt.Bucket, st State, source string, before int64, max int, count bool) ([]string, int, error) {
	var keys []string
	n := 0
	_, err := walkPurge(states, st, source, before, nil, func(key []byte) bool {
		if n++; len(keys) < max {
			keys = append(keys, string(key))
			return true
		}
		return count
	})
	return keys, n, err
}

// walkPurge calls fn with the key of each event of state st with UpdatedAt
// < before, of source when set, oldest first, from the states index key from
// on (nil: the first of st), until fn returns false. next is then the index
// key after the last one fn saw (nil: none left), where a walk goes on.
func walkPurge(states *bolt.Bucket, st State, source string, before int64, from []byte, fn func(key []byte) bool) (next []byte, err error) {
	if from == nil {
		from = []byte{byte(st)}
	}
	cur := states.Cursor()
	for k, src := cur.Seek(from); k != nil && k[0] == byte(st); k, src = cur.Next() {
		if len(k) < 10 {
			return nil, fmt.Errorf("%w: states index key %x", ErrCorrupt, k)
		}
		if timeOf(k[1:]) >= before {
			break
		}
		if source != "" && string(src) != source {
			continue
		}
		if !fn(k[9:]) {
			if k, _ = cur.Next(); k != nil && k[0] == byte(st) {
				return bytes.Clone(k), nil
			}
			break
		}
	}
	return nil, nil
}

// PurgePreview says how many events a purge with these arguments would
// delete (all its commands together) and lists the first max of them,
// oldest first, without changing anything: the dry run. Its cost is the
// events it counts.
func (e *Engine) PurgePreview(st State, source string, before int64, max int) ([]string, int, error) {
	if !purgeable(st) {
		return nil, 0, fmt.Errorf("%w: purge state %d", ErrBadCommand, st)
	}
	var keys []string
	var n int
	err := e.view(func(tx *bolt.Tx) error {
		var err error
		keys, n, err = purgeKeys(tx.Bucket(bStates), st, source, before, max, true)
		return err
	})
	return keys, n, err
}

// PurgeRetained counts, of the events a purge with these arguments would
// delete, those whose retention has not ended at now (ExpiresAt after it):
// their providers may still send them again, and once purged a resend is a
// new event, delivered again. It reads the record of every event the purge
// would delete, retainedChunk to a read transaction: a long one would hold
// back the state machine's commits that need the file to grow.
func (e *Engine) PurgeRetained(st State, source string, before, now int64) (int, error) {
	if !purgeable(st) {
		return 0, fmt.Errorf("%w: purge state %d", ErrBadCommand, st)
	}
	n := 0
	var from []byte
	for {
		err := e.view(func(tx *bolt.Tx) error {
			events := tx.Bucket(bEvents)
			var bad error
			walked := 0
			next, err := walkPurge(tx.Bucket(bStates), st, source, before, from, func(key []byte) bool {
				v := events.Get(key)
				if v == nil {
					bad = fmt.Errorf("%w: states index names missing event %q", ErrCorrupt, clip(key))
					return false
				}
				var ev Event
				if _, bad = decodeRecord(key, v, &ev); bad != nil {
					return false
				}
				if ev.ExpiresAt > now {
					n++
				}
				walked++
				return walked < retainedChunk
			})
			from = next
			return cmp.Or(err, bad)
		})
		if err != nil || from == nil {
			return n, err
		}
	}
}

// retainedChunk bounds the records PurgeRetained reads in one transaction.
var retainedChunk = 10000

// OldestDeadBySource returns, per source with dead letters, the UpdatedAt
// (when it went dead) of its oldest one. It walks the dead range of the
// states index oldest first and stops once every source in want was found
// (want empty: walks it all), so its cost is at most the number of dead
// letters.
func (e *Engine) OldestDeadBySource(want []string) (map[string]int64, error) {
	out := make(map[string]int64)
	missing := len(want)
	err := e.view(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bStates).Cursor()
		for k, src := cur.Seek([]byte{byte(StateDead)}); k != nil && k[0] == byte(StateDead); k, src = cur.Next() {
			if len(k) < 10 {
				return fmt.Errorf("%w: states index key %x", ErrCorrupt, k)
			}
			if _, seen := out[string(src)]; seen {
				continue
			}
			out[string(src)] = timeOf(k[1:])
			if slices.Contains(want, string(src)) {
				if missing--; missing == 0 {
					return nil
				}
			}
		}
		return nil
	})
	return out, err
}

// rescheduleAhead enforces the schedule horizon (Command.Horizon): a due
// entry later than now+h is moved to now+h, and a lease ending later than
// now+h is cut to end a lease length after now (Command.Horizon says why;
// an older format's reclaim cuts it to now, so the reclaim that follows
// returns it to pending). Both indexes are walked from their end backwards and only while
// the time is beyond the horizon, so the cost is the entries repaired. The
// held index is not walked: a paused source's events are not leased, and
// OpResume returns them to due, where the next reclaim repairs them.
func (a *applier) rescheduleAhead(c *Command, h int64) error {
	now := c.Now
	limit := now + h
	type item struct {
		t   int64
		key string
	}
	walk := func(b *bolt.Bucket, name string) ([]item, error) {
		var items []item
		cur := b.Cursor()
		for k, _ := lastKey(cur); k != nil; k, _ = prevKey(cur, k) {
			if len(k) < 9 {
				return nil, fmt.Errorf("%w: %s index key %x", ErrCorrupt, name, k)
			}
			t := timeOf(k)
			if t <= limit {
				break
			}
			items = append(items, item{t, string(k[8:])})
		}
		slices.SortFunc(items, func(x, y item) int { return strings.Compare(x.key, y.key) }) // see keyOrder
		return items, nil
	}
	due, err := dueBeyond(a.due, limit)
	if err != nil {
		return err
	}
	slices.SortFunc(due, func(x, y dueItem) int { return strings.Compare(x.key, y.key) }) // see keyOrder
	for _, it := range due {
		var ev Event
		flags, found, err := a.load(it.key, &ev)
		if err != nil {
			return err
		}
		if !found || ev.State != StatePending || ev.NextAttemptAt != it.t || ev.Source != it.src {
			return fmt.Errorf("%w: due index entry %q does not match its event", ErrCorrupt, clip([]byte(it.key)))
		}
		if err := a.duep.del(a.dk(it.src, it.t, it.key)); err != nil {
			return err
		}
		ev.NextAttemptAt = limit
		if a.noteDue != nil && !a.paused(it.src) {
			a.noteDue(it.src, limit)
		}
		if err := a.due.Put(a.dk(it.src, limit, it.key), empty); err != nil {
			return err
		}
		if err := a.store(&ev, flags); err != nil {
			return err
		}
	}
	leases, err := walk(a.leases, "lease")
	if err != nil {
		return err
	}
	for _, it := range leases {
		var ev Event
		flags, found, err := a.load(it.key, &ev)
		if err != nil {
			return err
		}
		if !found || ev.State != StateProcessing || ev.LeaseUntil != it.t {
			return fmt.Errorf("%w: lease index entry %q does not match its event", ErrCorrupt, clip([]byte(it.key)))
		}
		if err := a.leasep.del(a.tk(it.t, it.key)); err != nil {
			return err
		}
		ev.LeaseUntil = now
		if c.semantics() >= formatLeaseKeptAhead {
			length := ev.LeaseFor
			if length <= 0 || length > h {
				length = h
			}
			ev.LeaseUntil = now + length
		}
		if err := a.leases.Put(a.tk(ev.LeaseUntil, it.key), empty); err != nil {
			return err
		}
		if err := a.store(&ev, flags); err != nil {
			return err
		}
	}
	return nil
}
