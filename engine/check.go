package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// checkIndexes verifies the invariants between records, indexes and counters
// (doc.go, "Invariants"). It reads everything once and returns at most a
// screenful of problems, each wrapping ErrCorrupt.
func checkIndexes(tx *bolt.Tx) error {
	ck, err := newChecker(tx)
	if err != nil {
		return err
	}
	ck.checkSources()
	ck.checkEvents()
	// Every index entry names a matching event.
	ck.checkStates()
	ck.checkHeld()
	ck.checkTimeIndexes()
	ck.checkExpiry()
	ck.checkBodies()
	ck.checkObjects()
	ck.checkAttempts()
	ck.checkOrders()
	ck.checkCounters()
	return errors.Join(ck.errs...)
}

// checker is one run of checkIndexes: the buckets it reads, what the records
// say (the tallies the indexes and counters must agree with) and the problems
// found so far. Its steps run in a fixed order, so the problems are reported
// in the same order every time.
type checker struct {
	events, payloads, responses  *bolt.Bucket
	due, leases, states, done    *bolt.Bucket
	expiry, orders, counters     *bolt.Bucket
	bodies, sources, held        *bolt.Bucket
	objects, attempts            *bolt.Bucket
	pieces                       *bolt.Bucket // nil in a file no format 14 binary has opened
	errs                         []error
	paused                       map[string]bool // sources with a sources entry
	byState                      [StateStale + 1]uint64
	bySource                     map[string]uint64
	pendingBySource              map[string]uint64
	nEvents, nHeld, nHeldPending int // events; holding a body; pending on a paused source
	nQueued, nHistory            int // unfinished ordered events; events with a history
}

func newChecker(tx *bolt.Tx) (*checker, error) {
	ck := &checker{
		events: tx.Bucket(bEvents), payloads: tx.Bucket(bPayloads), responses: tx.Bucket(bResponses),
		due: tx.Bucket(bDue), leases: tx.Bucket(bLeases), states: tx.Bucket(bStates), done: tx.Bucket(bDone),
		expiry: tx.Bucket(bExpiry), orders: tx.Bucket(bOrders), counters: tx.Bucket(bCounters),
		bodies: tx.Bucket(bBodies), sources: tx.Bucket(bSources), held: tx.Bucket(bHeld),
		objects: tx.Bucket(bObjects), attempts: tx.Bucket(bAttempts), pieces: tx.Bucket(bPieces),
		paused: map[string]bool{}, bySource: map[string]uint64{}, pendingBySource: map[string]uint64{},
	}
	for _, b := range []*bolt.Bucket{ck.events, ck.payloads, ck.responses, ck.due, ck.leases, ck.states, ck.done,
		ck.expiry, ck.orders, ck.counters, ck.bodies, ck.sources, ck.held, ck.objects, ck.attempts} {
		if b == nil {
			return nil, fmt.Errorf("%w: a bucket is missing", ErrCorrupt)
		}
	}
	return ck, nil
}

// bad records a problem, up to a screenful.
func (ck *checker) bad(format string, args ...any) {
	if len(ck.errs) < 20 {
		ck.errs = append(ck.errs, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
	}
}

// timeKey is a time index key: the time, then the event key.
func timeKey(t int64, key []byte) []byte { return append(appendTime(nil, t), key...) }

// prefixedTimeKey is a time index key under a one-byte prefix (a state, an expiry kind).
func prefixedTimeKey(p byte, t int64, key []byte) []byte {
	return append(appendTime([]byte{p}, t), key...)
}

// heldKey is a held index key: source, 0, next attempt time, event key.
func heldKey(src string, t int64, key []byte) []byte {
	return append(appendTime(append([]byte(src), 0), t), key...)
}

// record decodes the event stored under k; false when there is none or it
// does not decode.
func (ck *checker) record(k []byte) (Event, bool) {
	var ev Event
	v := ck.events.Get(k)
	if v == nil {
		return ev, false
	}
	if _, err := decodeRecord(k, v, &ev); err != nil {
		return ev, false
	}
	return ev, true
}

// checkSources: every sources entry decodes and names a valid source; the
// entries are the paused sources.
func (ck *checker) checkSources() {
	c := ck.sources.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if _, err := decodeSourceRecord(k, v); err != nil {
			ck.bad("%v", err)
		}
		if !validSource(string(k)) {
			ck.bad("sources entry %q: not a valid source", k)
		}
		ck.paused[string(k)] = true
	}
}

// checkEvents: every record decodes and is in each index its state and flags
// call for; it tallies what the indexes and counters are checked against.
func (ck *checker) checkEvents() {
	oc := ck.objects.Cursor()
	c := ck.events.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		ck.nEvents++
		var ev Event
		flags, err := decodeRecord(k, v, &ev)
		if err != nil {
			ck.bad("%v", err)
			continue
		}
		ck.byState[ev.State]++
		if flags&flagBody != 0 {
			ck.nHeld++
			if v := ck.bodies.Get(timeKey(ev.CreatedAt, k)); len(v) == 0 {
				ck.bad("event %q: flagged as holding a body entry, none at %d", k, ev.CreatedAt)
			}
		}
		ck.bySource[ev.Source]++
		if ev.State == StatePending {
			ck.pendingBySource[ev.Source]++
		}
		ev.Key = string(k)
		if flags&flagOrder != 0 && queued(ev.State) {
			ck.nQueued++
			ok := appendObjectKey(nil, &ev)
			if ck.objects.Get(ok) == nil {
				ck.bad("event %q (state %d): not in the queue of its object %q", k, ev.State, ev.OrderObject)
			}
			// A processing event is the head of its object's queue (order.go).
			if first, _ := oc.Seek(objectPrefix(nil, ev.OrderObject)); ev.State == StateProcessing && !bytes.Equal(first, ok) {
				ck.bad("event %q is processing but not the head of its object %q", k, ev.OrderObject)
			}
		}
		if flags&flagHistory != 0 {
			ck.nHistory++
			if hv := ck.attempts.Get(timeKey(ev.CreatedAt, k)); hv == nil {
				ck.bad("event %q: flagged with a history, none at %d", k, ev.CreatedAt)
			} else if _, err := decodeHistory(k, hv); err != nil {
				ck.bad("%v", err)
			}
		}
		ck.checkEventIndexes(k, flags, &ev)
	}
}

// checkEventIndexes: the event is in the states, due, held, lease, done,
// responses and expiry indexes exactly when its state and flags say so.
func (ck *checker) checkEventIndexes(k []byte, flags byte, ev *Event) {
	if src := ck.states.Get(prefixedTimeKey(byte(ev.State), ev.UpdatedAt, k)); src == nil || string(src) != ev.Source {
		ck.bad("event %q: no states entry for %d/%q", k, ev.State, ev.Source)
	}
	// A pending event is in due, or, of a paused source, in due or held
	// (pause.go: held only by entries of formats before formatPauseInPlace);
	// never both, and no other event is in either.
	isPaused := ck.paused[ev.Source]
	inDue := ck.due.Get(appendDueKey(nil, ev.Source, ev.NextAttemptAt, k)) != nil
	inHeld := isPaused && ck.held.Get(heldKey(ev.Source, ev.NextAttemptAt, k)) != nil
	switch {
	case ev.State != StatePending && inDue:
		ck.bad("event %q (state %d): in the due index", k, ev.State)
	case ev.State == StatePending && inDue == inHeld:
		ck.bad("event %q (pending, paused %v): in the due index %v, in the held index %v", k, isPaused, inDue, inHeld)
	}
	if inHeld {
		ck.nHeldPending++
	}
	if ev.State != StatePending && ev.NextAttemptAt != 0 {
		ck.bad("event %q (state %d): next attempt %d", k, ev.State, ev.NextAttemptAt)
	}
	if (ev.State == StateProcessing) != (ck.leases.Get(timeKey(ev.LeaseUntil, k)) != nil) {
		ck.bad("event %q (state %d): lease index disagrees", k, ev.State)
	}
	if ev.State != StateProcessing && ev.LeaseUntil != 0 {
		ck.bad("event %q (state %d): lease until %d", k, ev.State, ev.LeaseUntil)
	}
	if ev.State == StateDone && ck.payloads.Get(timeKey(ev.CreatedAt, k)) != nil && ck.done.Get(timeKey(doneTime(ev), k)) == nil {
		ck.bad("event %q: done with a payload but not in the done index", k)
	}
	if flags&flagDeadKept != 0 && ev.State != StateDead {
		ck.bad("event %q (state %d): kept for dead retention but not dead", k, ev.State)
	}
	if ev.PayloadDropAt != 0 && ev.State != StateDone {
		ck.bad("event %q (state %d): payload drop time but not done", k, ev.State)
	}
	if (flags&flagResponse != 0) != (ck.responses.Get(timeKey(ev.CreatedAt, k)) != nil) {
		ck.bad("event %q: response flag disagrees with the responses bucket", k)
	}
	if eb := ck.expiry.Bucket(appendTime(nil, ev.ExpiresAt)); eb == nil || eb.Get(prefixedTimeKey(expiryEvent, ev.CreatedAt, k)) == nil {
		ck.bad("event %q: not listed in its expiry bucket %d", k, ev.ExpiresAt)
	}
}

// checkStates: every states entry names an event in that state, updated at
// that time, and there is one per event.
func (ck *checker) checkStates() {
	nStates := 0
	c := ck.states.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nStates++
		if len(k) < 10 {
			ck.bad("states key %x", k)
			continue
		}
		if ev, ok := ck.record(k[9:]); !ok || byte(ev.State) != k[0] || ev.UpdatedAt != timeOf(k[1:]) {
			ck.bad("states entry %q names no matching event", k)
		}
	}
	if nStates != ck.nEvents {
		ck.bad("%d states entries for %d events", nStates, ck.nEvents)
	}
}

// checkHeld: every held entry names a pending event of a paused source, due
// at that time, and there is one per such event.
func (ck *checker) checkHeld() {
	nHeldEntries := 0
	c := ck.held.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nHeldEntries++
		i := bytes.IndexByte(k, 0)
		if i <= 0 || len(k)-i-1 < 9 {
			ck.bad("held key %x", k)
			continue
		}
		src, t, key := string(k[:i]), timeOf(k[i+1:]), k[i+9:]
		if !ck.paused[src] {
			ck.bad("held entry %q of source %q, which is not paused", key, src)
		}
		if ev, ok := ck.record(key); !ok || ev.State != StatePending || ev.Source != src || ev.NextAttemptAt != t {
			ck.bad("held entry %q names no matching event", key)
		}
	}
	if nHeldEntries != ck.nHeldPending {
		ck.bad("%d held entries for %d pending events of paused sources held", nHeldEntries, ck.nHeldPending)
	}
}

// checkTimeIndexes: every due, lease and done entry names an event in that
// state at that time; every payload and response one an event created then.
func (ck *checker) checkTimeIndexes() {
	c := ck.due.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		src, t, key, ok := splitDueKey(k)
		if !ok {
			ck.bad("due key %x", k)
			continue
		}
		if ev, ok := ck.record(key); !ok || ev.State != StatePending || ev.NextAttemptAt != t || ev.Source != string(src) {
			ck.bad("due entry %q names no matching event", key)
		}
	}
	ck.checkTimeIndex("leases", ck.leases, func(ev Event, t int64) bool { return ev.State == StateProcessing && ev.LeaseUntil == t })
	ck.checkTimeIndex("done", ck.done, func(ev Event, t int64) bool { return ev.State == StateDone && doneTime(&ev) == t })
	for _, b := range []*bolt.Bucket{ck.payloads, ck.responses} {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				ck.bad("payload or response key %x", k)
				continue
			}
			if ev, ok := ck.record(k[8:]); !ok || ev.CreatedAt != timeOf(k) {
				ck.bad("payload or response %q without an event", k)
			}
		}
	}
	ck.checkPieces()
}

// checkPieces: every payload stored in pieces has each of its pieces, of
// their length, and every piece belongs to such a payload.
func (ck *checker) checkPieces() {
	var pc *bolt.Cursor
	if ck.pieces != nil {
		pc = ck.pieces.Cursor()
	}
	c := ck.payloads.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) < 9 || len(v) == 0 || v[0] != piecedVersion {
			continue
		}
		h, err := decodePayloadHead(k[8:], v)
		if err == nil {
			_, err = readPieces(pc, k, h)
		}
		if err != nil {
			ck.bad("payload %q: %v", k[8:], err)
		}
	}
	if pc == nil {
		return
	}
	for k, v := pc.First(); k != nil; k, v = pc.Next() {
		if len(k) < 13 {
			ck.bad("piece key %x", k)
			continue
		}
		pk, i := k[:len(k)-4], int(binary.BigEndian.Uint32(k[len(k)-4:]))
		hv := ck.payloads.Get(pk)
		if len(hv) == 0 || hv[0] != piecedVersion {
			ck.bad("piece %d of %q without a payload in pieces", i, pk[8:])
			continue
		}
		h, err := decodePayloadHead(pk[8:], hv)
		if err != nil || i >= pieceCount(h.n, h.plen) || len(v) != min(h.plen, h.n-i*h.plen) {
			ck.bad("piece %d of %q (%d bytes) does not fit its payload", i, pk[8:], len(v))
		}
	}
}

// checkTimeIndex: every entry of the time index b names an event match
// accepts at the entry's time.
func (ck *checker) checkTimeIndex(name string, b *bolt.Bucket, match func(ev Event, t int64) bool) {
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 9 {
			ck.bad("%s key %x", name, k)
			continue
		}
		if ev, ok := ck.record(k[8:]); !ok || !match(ev, timeOf(k)) {
			ck.bad("%s entry %q names no matching event", name, k[8:])
		}
	}
}

// checkExpiry: expiry buckets list exactly the events and order entries that
// end with them.
func (ck *checker) checkExpiry() {
	listed := 0
	c := ck.expiry.Cursor()
	for name, _ := c.First(); name != nil; name, _ = c.Next() {
		eb := ck.expiry.Bucket(name)
		if eb == nil || len(name) != 8 {
			ck.bad("expiry entry %x is not a bucket", name)
			continue
		}
		end := timeOf(name)
		ec := eb.Cursor()
		for k, _ := ec.First(); k != nil; k, _ = ec.Next() {
			switch {
			case len(k) > 9 && k[0] == expiryEvent:
				listed++
				if ev, ok := ck.record(k[9:]); !ok || ev.ExpiresAt != end || ev.CreatedAt != timeOf(k[1:]) {
					ck.bad("expiry %d lists %q, which does not end there", end, k[9:])
				}
			case len(k) > 1 && k[0] == expiryOrder:
				if v := ck.orders.Get(k[1:]); !orderEntryLen(len(v)) || int64(binary.BigEndian.Uint64(v[8:])) != end {
					ck.bad("expiry %d lists order %q, which does not end there", end, k[1:])
				}

			default:
				ck.bad("expiry key %x", k)
			}
		}
	}
	if listed != ck.nEvents {
		ck.bad("expiry lists %d events for %d", listed, ck.nEvents)
	}
}

// checkBodies: body entries and the records that hold them name each other.
func (ck *checker) checkBodies() {
	nBodies := 0
	c := ck.bodies.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		nBodies++
		if len(k) < 9 || len(v) == 0 {
			ck.bad("bodies entry %x", k)
			continue
		}
		var ev Event
		rv := ck.events.Get(k[8:])
		flags, err := decodeRecord(k[8:], rv, &ev)
		if rv == nil || err != nil || flags&flagBody == 0 || ev.CreatedAt != timeOf(k) {
			ck.bad("body entry %q names no event holding it", k[8:])
		}
	}
	if nBodies != ck.nHeld {
		ck.bad("%d body entries for %d events holding one", nBodies, ck.nHeld)
	}
}

// checkObjects: object queues hold exactly the unfinished ordered events, at
// their places.
func (ck *checker) checkObjects() {
	nObjects := 0
	oc := ck.objects.Cursor()
	for k, _ := oc.First(); k != nil; k, _ = oc.Next() {
		nObjects++
		obj, t, index, pos, key, ok := parseObjectKey(k)
		if !ok {
			ck.bad("objects key %x", k)
			continue
		}
		var ev Event
		rv := ck.events.Get(key)
		flags, err := decodeRecord(key, rv, &ev)
		if rv == nil || err != nil || flags&flagOrder == 0 || !queued(ev.State) || ev.OrderObject != string(obj) ||
			ev.OrderTime != t || ev.OrderIndex != index || ev.OrderPos != pos {
			ck.bad("objects entry %q of %q names no matching event", key, obj)
		}
	}
	if nObjects != ck.nQueued {
		ck.bad("%d objects entries for %d unfinished ordered events", nObjects, ck.nQueued)
	}
}

// checkAttempts: attempt histories and the records flagged with one name
// each other.
func (ck *checker) checkAttempts() {
	nAttempts := 0
	c := ck.attempts.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nAttempts++
		if len(k) < 9 {
			ck.bad("attempts key %x", k)
			continue
		}
		var ev Event
		rv := ck.events.Get(k[8:])
		flags, err := decodeRecord(k[8:], rv, &ev)
		if rv == nil || err != nil || flags&flagHistory == 0 || ev.CreatedAt != timeOf(k) {
			ck.bad("attempts entry %q names no event flagged with it", k[8:])
		}
	}
	if nAttempts != ck.nHistory {
		ck.bad("%d attempts entries for %d events with a history", nAttempts, ck.nHistory)
	}
}

// checkOrders: every order entry is listed in the expiry bucket it ends with.
func (ck *checker) checkOrders() {
	c := ck.orders.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if !orderEntryLen(len(v)) {
			ck.bad("order entry %q: %x", k, v)
			continue
		}
		eb := ck.expiry.Bucket(appendTime(nil, int64(binary.BigEndian.Uint64(v[8:]))))
		if eb == nil || eb.Get(append([]byte{expiryOrder}, k...)) == nil {
			ck.bad("order entry %q not listed in its expiry bucket", k)
		}
	}
}

// checkCounters: the counters equal the records.
func (ck *checker) checkCounters() {
	want := map[string]uint64{}
	for s := StatePending; s <= StateStale; s++ {
		if ck.byState[s] != 0 {
			want[string([]byte{counterState, byte(s)})] = ck.byState[s]
		}
	}
	for src, n := range ck.bySource {
		want[string(counterSource)+src] = n
	}
	for src, n := range ck.pendingBySource {
		want[string(counterPending)+src] = n
	}
	got := map[string]uint64{}
	c := ck.counters.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) != 8 {
			ck.bad("counter %q: %x", k, v)
			continue
		}
		got[string(k)] = binary.BigEndian.Uint64(v)
	}
	for _, k := range sortedKeys(want) {
		if got[k] != want[k] {
			ck.bad("counter %q is %d, records say %d", k, got[k], want[k])
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			ck.bad("counter %q is %d, records say 0", k, got[k])
		}
	}
}
