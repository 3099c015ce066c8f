package engine

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// Attempt history. A Fail that carries an Attempt appends it to the event's
// history, kept in the attempts bucket under time(CreatedAt) key (like the
// payload), and flags the record (flagHistory). A successful attempt writes
// nothing there. The history keeps the newest maxHistory attempts; a reclaim
// and a replay keep it; deleting the event deletes it.

// Limits of the history.
const (
	maxHistory     = 10  // attempts kept per event; the oldest are dropped
	MaxAttemptBody = 256 // bytes of a handler's answer kept per attempt
	maxAttemptErr  = 256 // bytes of an attempt's error kept (cut on a rune boundary)
)

// The history value:
//
//	byte     version (1)
//	uvarint  number of attempts, then each:
//	varint   at, took, status
//	string   error
//	bytes    body
const historyVersion = 1

// appendAttempt appends one attempt (also the encoding of fieldAttempt).
func appendAttempt(dst []byte, at *Attempt) []byte {
	dst = binary.AppendVarint(dst, at.At)
	dst = binary.AppendVarint(dst, at.Took)
	dst = binary.AppendVarint(dst, int64(at.Status))
	dst = appendString(dst, at.Error)
	return appendBytes(dst, at.Body)
}

func appendHistory(dst []byte, h []Attempt) []byte {
	dst = append(dst, historyVersion)
	dst = binary.AppendUvarint(dst, uint64(len(h)))
	for i := range h {
		dst = appendAttempt(dst, &h[i])
	}
	return dst
}

func historySize(h []Attempt) int {
	n := 1 + binary.MaxVarintLen64
	for i := range h {
		n += 5*binary.MaxVarintLen64 + len(h[i].Error) + len(h[i].Body)
	}
	return n
}

// decodeHistory decodes a history value; nothing returned aliases b.
func decodeHistory(key, b []byte) ([]Attempt, error) {
	d := decoder{b: b}
	if v := d.byte("history version"); d.err == nil && v != historyVersion {
		d.fail(fmt.Sprintf("history version %d", v))
	}
	n := d.count("attempts", 5)
	var h []Attempt
	if n > 0 {
		h = make([]Attempt, n)
	}
	for i := range h {
		at := &h[i]
		at.At = d.varint("attempt at")
		at.Took = d.varint("attempt took")
		at.Status = int(d.varint("attempt status"))
		at.Error = string(d.bytes("attempt error"))
		if body := d.bytes("attempt body"); len(body) > 0 {
			at.Body = append([]byte(nil), body...)
		}
	}
	if d.err == nil && (n == 0 || len(d.b) != 0) {
		d.fail("attempts")
	}
	if d.err != nil {
		return nil, fmt.Errorf("history %q: %w", clip(key), d.err)
	}
	return h, nil
}

// clipAttempt returns at with its body cut to MaxAttemptBody bytes and its
// error to maxAttemptErr bytes (on a rune boundary).
func clipAttempt(at Attempt) Attempt {
	if len(at.Body) > MaxAttemptBody {
		at.Body = at.Body[:MaxAttemptBody]
	}
	if len(at.Error) > maxAttemptErr {
		n := maxAttemptErr
		for n > 0 && !utf8.RuneStart(at.Error[n]) {
			n--
		}
		at.Error = at.Error[:n]
	}
	return at
}

// validAttempt reports whether a Fail's attempt can be stored.
func validAttempt(at *Attempt) bool {
	return at.At > -maxTime && at.At < maxTime && validDuration(at.Took) &&
		at.Status >= 0 && at.Status <= 999 && len(at.Body) <= MaxPayloadLen
}

// histBucket returns the attempts bucket, opened on first use (a batch
// without failed attempts never pays for it).
func (a *applier) histBucket() *bolt.Bucket {
	if a.attempts == nil {
		a.attempts = a.tx.Bucket(bAttempts)
	}
	return a.attempts
}

// histPoint returns the kept cursor of the attempts bucket, made on first use.
func (a *applier) histPoint() point {
	if a.histp.c == nil {
		a.histp = point{a.histBucket().Cursor()}
	}
	return a.histp
}

// lastAttemptRunning reports whether ev's last attempt timed out and its
// lease still runs at c.Now (LastAttemptWait, with c.LeaseFor the source's
// lease). ev is flagged with a history.
func (a *applier) lastAttemptRunning(ev *Event, c *Command) (bool, error) {
	v := a.histPoint().get(a.tk(ev.CreatedAt, ev.Key))
	if v == nil {
		return false, fmt.Errorf("%w: event %q: flagged with a history, none stored", ErrCorrupt, clip(strBytes(ev.Key)))
	}
	h, err := decodeHistory(strBytes(ev.Key), v)
	if err != nil {
		return false, err
	}
	return LastAttemptWait(h[len(h)-1], ev.LeaseFor, c.LeaseFor, c.Now) > 0, nil
}

// recordAttempt appends c.Attempt to ev's history (the newest maxHistory
// kept) and returns the record flags with flagHistory.
func (a *applier) recordAttempt(ev *Event, flags byte, at *Attempt) (byte, error) {
	hk := a.tk(ev.CreatedAt, ev.Key)
	var h []Attempt
	if flags&flagHistory != 0 {
		v := a.histPoint().get(hk)
		if v == nil {
			return 0, fmt.Errorf("%w: event %q: flagged with a history, none stored", ErrCorrupt, clip(strBytes(ev.Key)))
		}
		var err error
		if h, err = decodeHistory(strBytes(ev.Key), v); err != nil {
			return 0, err
		}
	}
	if len(h) >= maxHistory {
		h = h[len(h)-maxHistory+1:]
	}
	h = append(h, clipAttempt(*at))
	v := appendHistory(a.arena.make(historySize(h)), h)
	if err := a.histBucket().Put(a.tk(ev.CreatedAt, ev.Key), v); err != nil {
		return 0, err
	}
	return flags | flagHistory, nil
}
