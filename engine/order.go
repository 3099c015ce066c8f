package engine

import (
	"bytes"
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// Order at delivery. A claim with an OrderObject stores the object and its
// place in the object's queue with the event (flagOrder), and every
// unfinished (pending or processing) event of an object has an entry in the
// objects bucket:
//
//	objects  len(object) (2 bytes big endian) object time(OrderTime)
//	         OrderIndex (8 bytes) OrderPos (4 bytes) key -> ""
//
// so an object's entries sort oldest order time first, ties in claim order
// (the Raft index of the claim's entry, then its position in the entry).
// The length prefix keeps one object's range apart from any other's, whatever
// bytes the objects hold.
//
// Lease leases an event of an ordered source only when it is the first entry
// of its object's queue. The head leaves the queue only when it is finished
// (done, dead, expired), and a processing event stays in it, so at most one
// event per object is processing, and the next one goes only once the one
// before it is finished:
//
//   - A claim older than the newest claimed for its object is stale (the
//     ordering guard) and never enters the queue; a claim with an equal or
//     newer order time is not stale, so it sorts after every queued event
//     (its index is the newest): claims only ever append to a queue (append
//     makes sure of it when a replayed event outlived the order entry).
//   - A dead event leaves its queue: the next event of its object may go.
//   - A reclaimed head is pending again and still the head: it goes again
//     before any younger event.
//   - A replayed event (done, dead or stale) re-enters its queue at the tail:
//     its place is the replay's index and position, and the order time of the
//     tail when that is newer than its own. It goes after the events of its
//     object already waiting. A replay is an operator's decision to deliver
//     an old event again; it is the one way an older event can reach the
//     handler after a newer one. Events of one object replayed by one
//     command share that place and go in key order.
//   - An event claimed without flagOrder (by a binary that predates it) is
//     not in any queue and is leased as if its source had no order.
//   - Objects are named as the ordering guard names them (the orders
//     bucket): equal names are one queue. The intake scopes every object by
//     its source ("{source}:{object}"), so two sources never share one.
//
// The check costs Lease one seek in objects per due event of an ordered
// source, and nothing for the others; an event that is not its queue's head
// is skipped where it is in due (it stays there, due).

// objectPrefix appends the prefix of every objects key of object.
func objectPrefix(dst []byte, object string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(object)))
	return append(dst, object...)
}

// appendObjectKey appends ev's objects key.
func appendObjectKey(dst []byte, ev *Event) []byte {
	dst = objectPrefix(dst, ev.OrderObject)
	dst = appendTime(dst, ev.OrderTime)
	dst = binary.BigEndian.AppendUint64(dst, ev.OrderIndex)
	dst = binary.BigEndian.AppendUint32(dst, ev.OrderPos)
	return append(dst, ev.Key...)
}

// objectKeyLen is the length of the fixed part after the object: time, index, position.
const objectKeyLen = 8 + 8 + 4

// parseObjectKey splits an objects key; ok is false when it is malformed.
func parseObjectKey(k []byte) (object []byte, t int64, index uint64, pos uint32, key []byte, ok bool) {
	if len(k) < 2 {
		return nil, 0, 0, 0, nil, false
	}
	n := int(binary.BigEndian.Uint16(k))
	rest := k[2:]
	if len(rest) < n+objectKeyLen+1 || n == 0 {
		return nil, 0, 0, 0, nil, false
	}
	object, rest = rest[:n], rest[n:]
	t = timeOf(rest)
	index = binary.BigEndian.Uint64(rest[8:])
	pos = binary.BigEndian.Uint32(rest[16:])
	return object, t, index, pos, rest[objectKeyLen:], true
}

// objBucket returns the objects bucket, opened on first use (a batch without
// ordered events never pays for it).
func (a *applier) objBucket() *bolt.Bucket {
	if a.objects == nil {
		a.objects = a.tx.Bucket(bObjects)
	}
	return a.objects
}

// objPoint returns the kept cursor of the objects bucket, made on first use.
func (a *applier) objPoint() point {
	if a.objp.c == nil {
		a.objp = point{a.objBucket().Cursor()}
	}
	return a.objp
}

// queued reports whether an event in state s is in its object's queue.
func queued(s State) bool { return s == StatePending || s == StateProcessing }

// enqueue adds ev to its object's queue (ev carries flagOrder).
func (a *applier) enqueue(ev *Event) error {
	a.kbuf = appendObjectKey(a.kbuf[:0], ev)
	return a.objBucket().Put(a.kbuf, empty)
}

// dequeue removes ev from its object's queue, when it is ordered and was
// unfinished in state from.
func (a *applier) dequeue(ev *Event, from State) error {
	if ev.OrderObject == "" || !queued(from) {
		return nil
	}
	a.kbuf = appendObjectKey(a.kbuf[:0], ev)
	return a.objPoint().del(a.kbuf)
}

// isHead reports whether ev is the first entry of its object's queue: the
// one event of the object that Lease may lease.
func (a *applier) isHead(ev *Event) bool {
	a.kbuf = objectPrefix(a.kbuf[:0], ev.OrderObject)
	k, _ := a.objPoint().c.Seek(a.kbuf)
	if k == nil {
		return false
	}
	a.kbuf = appendObjectKey(a.kbuf[:0], ev)
	return bytes.Equal(k, a.kbuf)
}

// Lengths of an orders entry: time and expiry; and since format 15 the
// index and position of the claim that set it.
const (
	orderEntryTimed   = 16
	orderEntryClaimed = 28
)

func orderEntryLen(n int) bool { return n == orderEntryTimed || n == orderEntryClaimed }

// superseded reports whether an event of ev's object was claimed after ev
// with a newer order time, or with an equal one (ties go in claim order),
// or waits or runs now (every queued event of the object was claimed after
// ev, which left the queue when it finished): a provider's re-arm of ev
// would deliver it after that event. An entry written before format 15
// does not name its claim; then only a newer time counts.
func (a *applier) superseded(ev *Event) bool {
	if v := a.orders.Get(strBytes(ev.OrderObject)); orderEntryLen(len(v)) {
		t := int64(binary.BigEndian.Uint64(v))
		if t > ev.OrderTime {
			return true
		}
		if t == ev.OrderTime && len(v) == orderEntryClaimed {
			idx, pos := binary.BigEndian.Uint64(v[16:]), binary.BigEndian.Uint32(v[24:])
			if idx > ev.OrderIndex || idx == ev.OrderIndex && pos > ev.OrderPos {
				return true
			}
		}
	}
	a.kbuf = objectPrefix(a.kbuf[:0], ev.OrderObject)
	k, _ := a.objPoint().c.Seek(a.kbuf)
	return k != nil && bytes.HasPrefix(k, a.kbuf)
}

// afterEveryEntry follows an object's prefix to sort after every entry of
// its queue: a time and an index of all ones (no entry has that index).
// One 0xff byte sorted before the entries of times from 2260 on, whose
// first byte is 0xff too.
var afterEveryEntry = [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// append puts ev (a claim, or a replayed event) at the tail of its object's
// queue: at this command's index and position, and at the tail's order time
// when that is newer than ev's. For a claim the tail is never newer while
// the object's order entry lives (a newer claim makes this one stale), but
// a replayed event can outlive that entry; so a claim, too, goes after it.
func (a *applier) append(ev *Event) error {
	a.kbuf = append(objectPrefix(a.kbuf[:0], ev.OrderObject), afterEveryEntry[:]...)
	c := a.objPoint().c
	k, _ := seekBefore(c, a.kbuf)
	if obj, t, _, _, _, ok := parseObjectKey(k); ok && string(obj) == ev.OrderObject && t > ev.OrderTime {
		ev.OrderTime = t
	}
	ev.OrderIndex, ev.OrderPos = a.index, a.pos
	return a.enqueue(ev)
}
