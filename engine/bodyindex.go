package engine

import (
	"crypto/sha256"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"
)

// The replay guard (Command.BodyKey) needs "which live event holds this
// body?" on every guarded claim. A bbolt bucket keyed by the body hash would
// answer it, but every insert would land on a random page: one more page
// written per claim, as much again as the event record itself. So the
// bodies bucket is keyed like the payloads, time(CreatedAt) key -> body key,
// and appends; the lookup by body goes through an in-memory index rebuilt
// from that bucket at Open and Restore. The index is derived state: the same
// file gives the same index on every node, and only what the bucket holds
// decides a claim (a hit is confirmed there), so apply stays deterministic.

// bodyHash is the index key of a body key: the first 16 bytes of its
// SHA-256, the same on every node.
type bodyHash [16]byte

func hashBodyKey(bk []byte) bodyHash {
	s := sha256.Sum256(bk)
	return bodyHash(s[:16])
}

// bodyIndex maps the body keys of the bodies bucket to the CreatedAt of the
// event holding each. Memory: 30-60 bytes per guarded event (a Go map of
// 24-byte slots, with its growth slack).
type bodyIndex map[bodyHash]int64

// bodyGone marks, in an applier's pending changes, a body key deleted by the
// pending transaction (no real time is that small: |t| < maxTime).
const bodyGone = math.MinInt64

// loadBodyIndex reads the bodies bucket into a new index.
func loadBodyIndex(tx *bolt.Tx) (bodyIndex, error) {
	idx := bodyIndex{}
	b := tx.Bucket(bBodies)
	if b == nil {
		return idx, nil // a file from before the bucket: nothing guarded yet
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) < 9 || len(v) == 0 {
			return nil, fmt.Errorf("%w: bodies entry %x", ErrCorrupt, clip(k))
		}
		idx[hashBodyKey(v)] = timeOf(k)
	}
	return idx, nil
}

// merge applies a committed transaction's changes.
func (idx bodyIndex) merge(pend map[bodyHash]int64) {
	for h, t := range pend {
		if t == bodyGone {
			delete(idx, h)
		} else {
			idx[h] = t
		}
	}
}

// bodyAt returns the CreatedAt of the event holding body key h, as of the
// applier's transaction.
func (a *applier) bodyAt(h bodyHash) (int64, bool) {
	if t, ok := a.bodyPend[h]; ok {
		return t, t != bodyGone
	}
	t, ok := a.bodyIdx[h]
	return t, ok
}

// setBody records a change of the index in the pending transaction.
func (a *applier) setBody(h bodyHash, t int64) {
	if a.bodyPend == nil {
		a.bodyPend = make(map[bodyHash]int64)
	}
	a.bodyPend[h] = t
}

// bodyHolder returns the key of the event holding body key bk, or nil. The
// index names a time; the bodies entries of that time say which key, if any,
// holds exactly bk (two body keys sharing a hash prefix stay apart).
func (a *applier) bodyHolder(bk string) []byte {
	t, ok := a.bodyAt(hashBodyKey(strBytes(bk)))
	if !ok {
		return nil
	}
	prefix := appendTime(a.nbuf[:0], t)
	c := a.bodies.Cursor()
	for k, v := c.Seek(prefix); k != nil && len(k) > 8 && timeOf(k) == t; k, v = c.Next() {
		if string(v) == bk {
			return k[8:]
		}
	}
	return nil
}

// holdBody records that the new event key, created at t, holds body key bk.
func (a *applier) holdBody(key, bk string, t int64) error {
	v := append(a.arena.make(len(bk)), bk...)
	if err := a.bodies.Put(a.tk(t, key), v); err != nil {
		return err
	}
	a.setBody(hashBodyKey(v), t)
	return nil
}

// releaseBody deletes the body entry of an event being deleted.
func (a *applier) releaseBody(key string, created int64) error {
	k := a.tk(created, key)
	v := a.bodyp.get(k)
	if v == nil {
		return fmt.Errorf("%w: event %q holds no body entry", ErrCorrupt, clip(strBytes(key)))
	}
	// Only if the index names this event: with a shared hash prefix, a
	// later event may have taken the index entry over.
	if h := hashBodyKey(v); a.bodyIdxNames(h, created) {
		a.setBody(h, bodyGone)
	}
	return a.bodyp.del(k)
}

func (a *applier) bodyIdxNames(h bodyHash, created int64) bool {
	t, ok := a.bodyAt(h)
	return ok && t == created
}
