package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Pausing a source (OpPause, OpResume). A paused source has a record in the
// sources bucket. From formatPauseInPlace its pending events stay in the due
// index, in its source's run, and every reader of due that leases or says
// what is due (dueMerge, firstDue) passes over the runs of paused sources:
// one lookup a source, so a pause and a resume cost the same however large
// the source's backlog (a day's pause held millions of events, and a resume
// that moved them all was one entry that held every replica's apply loop
// for as long). Older formats moved the source's due events to the held
// index at the pause and back at the resume, and indexed a paused source's
// transitions into pending there; their entries still do (putPending), and
// a resume moves what they left in held back to due. Leases already out are
// unaffected.

// The sources record, stored in the sources bucket under the source name:
//
//	byte     version (1)
//	varint   paused at
//	string   who, reason
const sourceVersion = 1

func appendSourceRecord(dst []byte, s *SourceState) []byte {
	dst = append(dst, sourceVersion)
	dst = binary.AppendVarint(dst, s.Since)
	dst = appendString(dst, s.Who)
	return appendString(dst, s.Reason)
}

func decodeSourceRecord(name, b []byte) (SourceState, error) {
	d := decoder{b: b}
	if v := d.byte("source version"); d.err == nil && v != sourceVersion {
		d.fail(fmt.Sprintf("source version %d", v))
	}
	s := SourceState{Paused: true, Since: d.varint("paused at")}
	s.Who = string(d.bytes("who"))
	s.Reason = string(d.bytes("reason"))
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return SourceState{}, fmt.Errorf("source %q: %w", clip(name), d.err)
	}
	return s, nil
}

// validSource reports whether a source can be paused: a key-like name
// without 0x00 (the held index separates the source from the rest with it).
func validSource(s string) bool { return validKey(s) && !strings.Contains(s, "\x00") }

// pending is one pending event being moved between due and held.
type pendingEntry struct {
	t   int64
	key string
}

// pause records c.Source as paused. An older format's pause also moves its
// due events to held: the source's run of the due index (due.go), so the
// cost was the source's own pending events, once per pause.
func (a *applier) pause(c *Command) (Result, error) {
	switch {
	case !validSource(c.Source):
		return bad("pause source %q", clip(strBytes(c.Source)))
	case len(c.Who) > MaxKeyLen:
		return bad("pause who length %d", len(c.Who))
	}
	if a.paused(c.Source) {
		return Result{}, nil
	}
	if c.semantics() >= formatPauseInPlace {
		return a.putSourceRecord(c)
	}
	prefix := dueRunPrefix(strBytes(c.Source))
	var items []pendingEntry
	cur := a.due.Cursor()
	for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
		_, t, key, ok := splitDueKey(k)
		if !ok {
			return Result{}, fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(k))
		}
		items = append(items, pendingEntry{t: t, key: string(key)})
	}
	// The run is in (time, key) order: the order of the due keys deleted and
	// of the held keys written, so each insert lands at the end of its run
	// (see keyOrder).
	for _, it := range items {
		var ev Event
		if _, found, err := a.load(it.key, &ev); err != nil {
			return Result{}, err
		} else if !found || ev.State != StatePending || ev.NextAttemptAt != it.t || ev.Source != c.Source {
			return Result{}, fmt.Errorf("%w: due index entry %q does not match its event", ErrCorrupt, clip(strBytes(it.key)))
		}
		if err := a.duep.del(a.dk(c.Source, it.t, it.key)); err != nil {
			return Result{}, err
		}
		if err := a.held.Put(a.hk(c.Source, it.t, it.key), empty); err != nil {
			return Result{}, err
		}
	}
	return a.putSourceRecord(c)
}

// putSourceRecord records c.Source as paused by c.Who at c.Now.
func (a *applier) putSourceRecord(c *Command) (Result, error) {
	rec := SourceState{Since: c.Now, Who: c.Who, Reason: clipText(c.Reason)}
	v := appendSourceRecord(a.arena.make(1+3*binary.MaxVarintLen64+len(rec.Who)+len(rec.Reason)), &rec)
	if err := a.sources.Put(strBytes(c.Source), v); err != nil {
		return Result{}, err
	}
	return Result{N: 1}, nil
}

// resume deletes c.Source's paused record and moves its held events back to
// due at their own times, so that they go out oldest first. Its cost is the
// source's held events: from formatPauseInPlace only those an older
// format's entries left there, none once every node runs this one.
func (a *applier) resume(c *Command) (Result, error) {
	switch {
	case !validSource(c.Source):
		return bad("resume source %q", clip(strBytes(c.Source)))
	case len(c.Who) > MaxKeyLen:
		return bad("resume who length %d", len(c.Who))
	}
	if !a.paused(c.Source) {
		return Result{}, nil
	}
	prefix := append([]byte(c.Source), 0)
	var items []pendingEntry
	cur := a.held.Cursor()
	for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
		rest := k[len(prefix):]
		if len(rest) < 9 {
			return Result{}, fmt.Errorf("%w: held index key %x", ErrCorrupt, clip(k))
		}
		items = append(items, pendingEntry{t: timeOf(rest), key: string(rest[8:])})
	}
	// The held walk is already in (time, key) order: the order of the due
	// keys written.
	if err := a.srcp.del(strBytes(c.Source)); err != nil {
		return Result{}, err
	}
	if a.noteDue != nil {
		// Its due entries (formatPauseInPlace) stay where they are, in a
		// committed state that still has it paused, where LeaseDue does not
		// look, and the held ones an older format left move there below:
		// due from now on, as far as LeaseDue knows.
		a.noteDue(c.Source, math.MinInt64)
	}
	for _, it := range items {
		var ev Event
		if _, found, err := a.load(it.key, &ev); err != nil {
			return Result{}, err
		} else if !found || ev.State != StatePending || ev.NextAttemptAt != it.t || ev.Source != c.Source {
			return Result{}, fmt.Errorf("%w: held index entry %q does not match its event", ErrCorrupt, clip(strBytes(it.key)))
		}
		if err := a.held.Delete(a.hk(c.Source, it.t, it.key)); err != nil {
			return Result{}, err
		}
		if err := a.due.Put(a.dk(c.Source, it.t, it.key), empty); err != nil {
			return Result{}, err
		}
	}
	return Result{N: 1}, nil
}

// Sources returns the pause state of every paused source (a source not in
// the map is not paused). It reads the sources bucket only.
func (e *Engine) Sources() (map[string]SourceState, error) {
	out := map[string]SourceState{}
	err := e.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bSources)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			s, err := decodeSourceRecord(k, v)
			if err != nil {
				return err
			}
			out[string(k)] = s
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Backlog returns, per source with pending events, how many there are and
// the earliest NextAttemptAt among them. It reads the pending counters and,
// per source, the first entry of its due run and of its held run (a pending
// event is in one of them): its cost is the number of sources with pending
// events, not the events.
func (e *Engine) Backlog() (map[string]Backlog, error) {
	out := map[string]Backlog{}
	err := e.view(func(tx *bolt.Tx) error {
		due, held := tx.Bucket(bDue).Cursor(), tx.Bucket(bHeld).Cursor()
		// first returns the time that follows prefix in the first key
		// under it.
		first := func(c *bolt.Cursor, prefix []byte) (int64, bool) {
			k, _ := c.Seek(prefix)
			if k == nil || !bytes.HasPrefix(k, prefix) || len(k) < len(prefix)+8 {
				return 0, false
			}
			return timeOf(k[len(prefix):]), true
		}
		c := tx.Bucket(bCounters).Cursor()
		prefix := []byte{counterPending}
		for k, v := c.Seek(prefix); k != nil && k[0] == counterPending; k, v = c.Next() {
			if len(k) < 2 || len(v) != 8 {
				return fmt.Errorf("%w: counter %q", ErrCorrupt, k)
			}
			src := k[1:]
			b := Backlog{Pending: int(binary.BigEndian.Uint64(v))}
			for _, at := range []struct {
				c      *bolt.Cursor
				prefix []byte
			}{{due, dueRunPrefix(src)}, {held, append(bytes.Clone(src), 0)}} {
				if t, ok := first(at.c, at.prefix); ok && (b.OldestPendingAt == 0 || t < b.OldestPendingAt) {
					b.OldestPendingAt = t
				}
			}
			out[string(src)] = b
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
