package engine

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Walking a bucket backwards inside a write transaction.
//
// The engine keeps its write transaction open across entries (ApplyBatchDeferred)
// and deletes many index keys in it. bbolt empties the leaf nodes those
// deletes hit and removes them only when the transaction commits. bbolt's
// Cursor.Next and Seek step over such an emptied leaf; Cursor.Last and
// Cursor.Prev (bbolt v1.5.0) do not:
//   - Last, when every leaf from the end back to the bucket's first one is
//     emptied, never returns: it steps back with prev, which at the bucket's
//     start goes to the first leaf, emptied too, and starts again. A node
//     whose objects or indexes were emptied within one group of entries
//     (every ordered event of a burst completed, say) hung its state machine.
//   - Prev, stepping back into an emptied leaf, returns nil as if the bucket
//     began there, while keys lie before it.
//
// So the engine never calls Last, and calls Prev only through prevKey,
// which steps over emptied leaves. Read-only transactions see committed
// pages, which hold no emptied leaf, and may use either.

// aboveEveryKey sorts after the keys the engine stores: each begins with a
// few bytes of fixed-width binary (a length, a time, an index) and goes on
// with a source or an event key, which do not begin with 64 bytes of 0xff.
// A key that did would be found anyway (lastKey walks forwards then).
var aboveEveryKey = bytes.Repeat([]byte{0xff}, 64)

// prevKey moves c to the key before the one it is at, from (nil: c is past
// the bucket's last key), and returns it; nil when there is none.
func prevKey(c *bolt.Cursor, from []byte) ([]byte, []byte) {
	var first []byte // the bucket's first key, once a Prev returned nil
	for stepped := 0; ; stepped++ {
		k, v := c.Prev()
		if k != nil {
			return k, v
		}
		// The bucket's start, or an emptied leaf: a key before from says
		// which. First steps over emptied leaves (once per call: walking
		// them again at every step was quadratic in them).
		if stepped == 0 {
			if first, _ = c.Bucket().Cursor().First(); first == nil {
				return nil, nil
			}
		}
		if from != nil && bytes.Compare(first, from) >= 0 {
			return nil, nil
		}
		// Each Prev that returns nil with keys left before from has stepped
		// back over one emptied leaf, so the walk ends. Should it not (a
		// later bbolt that moves otherwise), the keys are walked forwards.
		if stepped == maxEmptiedLeaves {
			return forwardBefore(c, first, from)
		}
	}
}

// maxEmptiedLeaves bounds the emptied leaves prevKey steps over one by one:
// a write transaction of the engine touches far fewer leaves.
const maxEmptiedLeaves = 1 << 16

// forwardBefore moves c to the last key below from (nil: the last key),
// walking forwards from first, the bucket's first key.
func forwardBefore(c *bolt.Cursor, first, from []byte) ([]byte, []byte) {
	last := bytes.Clone(first)
	for k, _ := c.Seek(first); k != nil && (from == nil || bytes.Compare(k, from) < 0); k, _ = c.Next() {
		last = append(last[:0], k...)
	}
	return c.Seek(last)
}

// lastKey moves c to the bucket's last key and returns it; nil when the
// bucket holds none. It stands for Cursor.Last (see above).
func lastKey(c *bolt.Cursor) ([]byte, []byte) {
	if k, _ := c.Seek(aboveEveryKey); k != nil {
		// A key above aboveEveryKey, which the engine never writes: walk to
		// the end forwards, which is safe.
		return forwardBefore(c, k, nil)
	}
	// Seek left c past the last key, on the last leaf (or the emptied one
	// the walk ended in).
	return prevKey(c, nil)
}

// seekBefore moves c to the last key below bound and returns it; nil when
// there is none.
func seekBefore(c *bolt.Cursor, bound []byte) ([]byte, []byte) {
	if k, _ := c.Seek(bound); k == nil {
		return lastKey(c)
	}
	return prevKey(c, bound)
}
