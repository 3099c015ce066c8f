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
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
		}
	}
	events, payloads, responses := tx.Bucket(bEvents), tx.Bucket(bPayloads), tx.Bucket(bResponses)
	due, leases, states, done := tx.Bucket(bDue), tx.Bucket(bLeases), tx.Bucket(bStates), tx.Bucket(bDone)
	expiry, orders, counters := tx.Bucket(bExpiry), tx.Bucket(bOrders), tx.Bucket(bCounters)
	bodies, sources, held := tx.Bucket(bBodies), tx.Bucket(bSources), tx.Bucket(bHeld)
	objects, attempts := tx.Bucket(bObjects), tx.Bucket(bAttempts)
	for _, b := range []*bolt.Bucket{events, payloads, responses, due, leases, states, done, expiry, orders, counters, bodies, sources, held, objects, attempts} {
		if b == nil {
			return fmt.Errorf("%w: a bucket is missing", ErrCorrupt)
		}
	}
	tk := func(t int64, key []byte) []byte { return append(appendTime(nil, t), key...) }
	ptk := func(p byte, t int64, key []byte) []byte { return append(appendTime([]byte{p}, t), key...) }

	hk := func(src string, t int64, key []byte) []byte {
		return append(appendTime(append([]byte(src), 0), t), key...)
	}
	paused := map[string]bool{}
	c := sources.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if _, err := decodeSourceRecord(k, v); err != nil {
			bad("%v", err)
		}
		if !validSource(string(k)) {
			bad("sources entry %q: not a valid source", k)
		}
		paused[string(k)] = true
	}

	var byState [StateStale + 1]uint64
	bySource := map[string]uint64{}
	nEvents, nHeld, nHeldPending, nQueued, nHistory := 0, 0, 0, 0, 0
	oc := objects.Cursor()
	c = events.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		nEvents++
		var ev Event
		flags, err := decodeRecord(k, v, &ev)
		if err != nil {
			bad("%v", err)
			continue
		}
		byState[ev.State]++
		if flags&flagBody != 0 {
			nHeld++
			if v := bodies.Get(tk(ev.CreatedAt, k)); len(v) == 0 {
				bad("event %q: flagged as holding a body entry, none at %d", k, ev.CreatedAt)
			}
		}
		bySource[ev.Source]++
		ev.Key = string(k)
		if flags&flagOrder != 0 && queued(ev.State) {
			nQueued++
			ok := appendObjectKey(nil, &ev)
			if objects.Get(ok) == nil {
				bad("event %q (state %d): not in the queue of its object %q", k, ev.State, ev.OrderObject)
			}
			// A processing event is the head of its object's queue (order.go).
			if first, _ := oc.Seek(objectPrefix(nil, ev.OrderObject)); ev.State == StateProcessing && !bytes.Equal(first, ok) {
				bad("event %q is processing but not the head of its object %q", k, ev.OrderObject)
			}
		}
		if flags&flagHistory != 0 {
			nHistory++
			if hv := attempts.Get(tk(ev.CreatedAt, k)); hv == nil {
				bad("event %q: flagged with a history, none at %d", k, ev.CreatedAt)
			} else if _, err := decodeHistory(k, hv); err != nil {
				bad("%v", err)
			}
		}
		if src := states.Get(ptk(byte(ev.State), ev.UpdatedAt, k)); src == nil || string(src) != ev.Source {
			bad("event %q: no states entry for %d/%q", k, ev.State, ev.Source)
		}
		isPaused := paused[ev.Source]
		if (ev.State == StatePending && !isPaused) != (due.Get(tk(ev.NextAttemptAt, k)) != nil) {
			bad("event %q (state %d, paused %v): due index disagrees", k, ev.State, isPaused)
		}
		if ev.State == StatePending && isPaused {
			nHeldPending++
			if held.Get(hk(ev.Source, ev.NextAttemptAt, k)) == nil {
				bad("event %q: pending on paused source %q but not in the held index", k, ev.Source)
			}
		}
		if ev.State != StatePending && ev.NextAttemptAt != 0 {
			bad("event %q (state %d): next attempt %d", k, ev.State, ev.NextAttemptAt)
		}
		if (ev.State == StateProcessing) != (leases.Get(tk(ev.LeaseUntil, k)) != nil) {
			bad("event %q (state %d): lease index disagrees", k, ev.State)
		}
		if ev.State != StateProcessing && ev.LeaseUntil != 0 {
			bad("event %q (state %d): lease until %d", k, ev.State, ev.LeaseUntil)
		}
		if ev.State == StateDone && payloads.Get(tk(ev.CreatedAt, k)) != nil && done.Get(tk(doneTime(&ev), k)) == nil {
			bad("event %q: done with a payload but not in the done index", k)
		}
		if flags&flagDeadKept != 0 && ev.State != StateDead {
			bad("event %q (state %d): kept for dead retention but not dead", k, ev.State)
		}
		if ev.PayloadDropAt != 0 && ev.State != StateDone {
			bad("event %q (state %d): payload drop time but not done", k, ev.State)
		}
		if (flags&flagResponse != 0) != (responses.Get(tk(ev.CreatedAt, k)) != nil) {
			bad("event %q: response flag disagrees with the responses bucket", k)
		}
		if eb := expiry.Bucket(appendTime(nil, ev.ExpiresAt)); eb == nil || eb.Get(ptk(expiryEvent, ev.CreatedAt, k)) == nil {
			bad("event %q: not listed in its expiry bucket %d", k, ev.ExpiresAt)
		}
	}

	// Every index entry names a matching event.
	record := func(k []byte) (Event, bool) {
		var ev Event
		v := events.Get(k)
		if v == nil {
			return ev, false
		}
		if _, err := decodeRecord(k, v, &ev); err != nil {
			return ev, false
		}
		return ev, true
	}
	nStates := 0
	c = states.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nStates++
		if len(k) < 10 {
			bad("states key %x", k)
			continue
		}
		if ev, ok := record(k[9:]); !ok || byte(ev.State) != k[0] || ev.UpdatedAt != timeOf(k[1:]) {
			bad("states entry %q names no matching event", k)
		}
	}
	if nStates != nEvents {
		bad("%d states entries for %d events", nStates, nEvents)
	}
	timeIndex := func(name string, b *bolt.Bucket, match func(ev Event, t int64) bool) {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				bad("%s key %x", name, k)
				continue
			}
			if ev, ok := record(k[8:]); !ok || !match(ev, timeOf(k)) {
				bad("%s entry %q names no matching event", name, k[8:])
			}
		}
	}
	nHeldEntries := 0
	c = held.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nHeldEntries++
		i := bytes.IndexByte(k, 0)
		if i <= 0 || len(k)-i-1 < 9 {
			bad("held key %x", k)
			continue
		}
		src, t, key := string(k[:i]), timeOf(k[i+1:]), k[i+9:]
		if !paused[src] {
			bad("held entry %q of source %q, which is not paused", key, src)
		}
		if ev, ok := record(key); !ok || ev.State != StatePending || ev.Source != src || ev.NextAttemptAt != t {
			bad("held entry %q names no matching event", key)
		}
	}
	if nHeldEntries != nHeldPending {
		bad("%d held entries for %d pending events of paused sources", nHeldEntries, nHeldPending)
	}
	timeIndex("due", due, func(ev Event, t int64) bool { return ev.State == StatePending && ev.NextAttemptAt == t })
	timeIndex("leases", leases, func(ev Event, t int64) bool { return ev.State == StateProcessing && ev.LeaseUntil == t })
	timeIndex("done", done, func(ev Event, t int64) bool { return ev.State == StateDone && doneTime(&ev) == t })
	for _, b := range []*bolt.Bucket{payloads, responses} {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) < 9 {
				bad("payload or response key %x", k)
				continue
			}
			if ev, ok := record(k[8:]); !ok || ev.CreatedAt != timeOf(k) {
				bad("payload or response %q without an event", k)
			}
		}
	}

	// Expiry buckets list exactly the events and order entries that end with them.
	listed := 0
	c = expiry.Cursor()
	for name, _ := c.First(); name != nil; name, _ = c.Next() {
		eb := expiry.Bucket(name)
		if eb == nil || len(name) != 8 {
			bad("expiry entry %x is not a bucket", name)
			continue
		}
		end := timeOf(name)
		ec := eb.Cursor()
		for k, _ := ec.First(); k != nil; k, _ = ec.Next() {
			switch {
			case len(k) > 9 && k[0] == expiryEvent:
				listed++
				if ev, ok := record(k[9:]); !ok || ev.ExpiresAt != end || ev.CreatedAt != timeOf(k[1:]) {
					bad("expiry %d lists %q, which does not end there", end, k[9:])
				}
			case len(k) > 1 && k[0] == expiryOrder:
				if v := orders.Get(k[1:]); len(v) != 16 || int64(binary.BigEndian.Uint64(v[8:])) != end {
					bad("expiry %d lists order %q, which does not end there", end, k[1:])
				}

			default:
				bad("expiry key %x", k)
			}
		}
	}
	if listed != nEvents {
		bad("expiry lists %d events for %d", listed, nEvents)
	}
	// Body entries and the records that hold them name each other.
	nBodies := 0
	c = bodies.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		nBodies++
		if len(k) < 9 || len(v) == 0 {
			bad("bodies entry %x", k)
			continue
		}
		var ev Event
		rv := events.Get(k[8:])
		flags, err := decodeRecord(k[8:], rv, &ev)
		if rv == nil || err != nil || flags&flagBody == 0 || ev.CreatedAt != timeOf(k) {
			bad("body entry %q names no event holding it", k[8:])
		}
	}
	if nBodies != nHeld {
		bad("%d body entries for %d events holding one", nBodies, nHeld)
	}
	// Object queues hold exactly the unfinished ordered events, at their places.
	nObjects := 0
	for k, _ := oc.First(); k != nil; k, _ = oc.Next() {
		nObjects++
		obj, t, index, pos, key, ok := parseObjectKey(k)
		if !ok {
			bad("objects key %x", k)
			continue
		}
		var ev Event
		rv := events.Get(key)
		flags, err := decodeRecord(key, rv, &ev)
		if rv == nil || err != nil || flags&flagOrder == 0 || !queued(ev.State) || ev.OrderObject != string(obj) ||
			ev.OrderTime != t || ev.OrderIndex != index || ev.OrderPos != pos {
			bad("objects entry %q of %q names no matching event", key, obj)
		}
	}
	if nObjects != nQueued {
		bad("%d objects entries for %d unfinished ordered events", nObjects, nQueued)
	}
	nAttempts := 0
	c = attempts.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		nAttempts++
		if len(k) < 9 {
			bad("attempts key %x", k)
			continue
		}
		var ev Event
		rv := events.Get(k[8:])
		flags, err := decodeRecord(k[8:], rv, &ev)
		if rv == nil || err != nil || flags&flagHistory == 0 || ev.CreatedAt != timeOf(k) {
			bad("attempts entry %q names no event flagged with it", k[8:])
		}
	}
	if nAttempts != nHistory {
		bad("%d attempts entries for %d events with a history", nAttempts, nHistory)
	}
	c = orders.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) != 16 {
			bad("order entry %q: %x", k, v)
			continue
		}
		eb := expiry.Bucket(appendTime(nil, int64(binary.BigEndian.Uint64(v[8:]))))
		if eb == nil || eb.Get(append([]byte{expiryOrder}, k...)) == nil {
			bad("order entry %q not listed in its expiry bucket", k)
		}
	}

	// Counters equal the records.
	want := map[string]uint64{}
	for s := StatePending; s <= StateStale; s++ {
		if byState[s] != 0 {
			want[string([]byte{counterState, byte(s)})] = byState[s]
		}
	}
	for src, n := range bySource {
		want[string(counterSource)+src] = n
	}
	got := map[string]uint64{}
	c = counters.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(v) != 8 {
			bad("counter %q: %x", k, v)
			continue
		}
		got[string(k)] = binary.BigEndian.Uint64(v)
	}
	for _, k := range sortedKeys(want) {
		if got[k] != want[k] {
			bad("counter %q is %d, records say %d", k, got[k], want[k])
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			bad("counter %q is %d, records say 0", k, got[k])
		}
	}
	return errors.Join(errs...)
}
