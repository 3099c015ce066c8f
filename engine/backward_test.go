package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// within runs fn and ends the test binary if it has not returned after
// limit: the walks below hung before (bbolt's Cursor.Last), spinning with
// the engine's lock held, so that neither a failed test's cleanup (closing
// the engine) nor a panic's could end, and the suite would wait for its own
// timeout. The bound is far above what the walks take.
func within(t *testing.T, limit time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		fmt.Fprintf(os.Stderr, "--- FAIL: %s: did not return within %v (a walk that never ends)\n", t.Name(), limit)
		os.Exit(1)
	}
}

// walkKey is the i-th key of the walk tests' buckets: 8 bytes of big-endian
// i, then text, as the engine's time-ordered keys are.
func walkKey(i int) []byte {
	k := make([]byte, 8, 12)
	binary.BigEndian.PutUint64(k, uint64(i))
	return append(k, "/src"...)
}

// openFilled commits a bucket holding key(i) for i < n, each with a value of
// vlen bytes, and returns it in a write transaction begun after that commit
// (rolled back, and the file closed, when the test ends).
func openFilled(t *testing.T, n, vlen int, key func(int) []byte) *bolt.Bucket {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Put(key(i), make([]byte, vlen)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	return tx.Bucket([]byte("b"))
}

// forwardKeys lists b's keys by a forward walk, which bbolt does right.
func forwardKeys(b *bolt.Bucket) [][]byte {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	return keys
}

// backwardKeys lists b's keys, in key order, by a walk from lastKey back
// with prevKey.
func backwardKeys(b *bolt.Bucket) [][]byte {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := lastKey(c); k != nil; k, _ = prevKey(c, k) {
		keys = append(keys, bytes.Clone(k))
	}
	slices.Reverse(keys)
	return keys
}

// TestBackwardWalksOverEmptiedLeaves: inside a write transaction whose
// deletes emptied leaves, lastKey, seekBefore and prevKey find what a
// forward walk (which bbolt does right) finds. bbolt v1.5.0's Cursor.Last
// never returns when every leaf from the end back to the first was
// emptied, and Prev returns nil at an emptied leaf with keys before it.
func TestBackwardWalksOverEmptiedLeaves(t *testing.T) {
	const n = 5000
	key := walkKey
	tests := []struct {
		name string
		gone func(i int) bool // the keys the transaction deletes
	}{
		{"none deleted", func(int) bool { return false }},
		{"every key", func(int) bool { return true }},
		{"every key but the first", func(i int) bool { return i > 0 }},
		{"the last half", func(i int) bool { return i >= n/2 }},
		{"the first half", func(i int) bool { return i < n/2 }},
		{"a middle range", func(i int) bool { return i >= n/4 && i < 3*n/4 }},
		{"all but every thousandth", func(i int) bool { return i%1000 != 999 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := openFilled(t, n, 40, key)
			for i := range n {
				if tt.gone(i) {
					if err := b.Delete(key(i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			forward := forwardKeys(b)
			// The last key below bound, by the forward walk.
			below := func(bound []byte) []byte {
				var last []byte
				for _, k := range forward {
					if bound != nil && bytes.Compare(k, bound) >= 0 {
						break
					}
					last = k
				}
				return last
			}
			within(t, 30*time.Second, func() {
				if k, _ := lastKey(b.Cursor()); !bytes.Equal(k, below(nil)) {
					t.Errorf("lastKey = %x, want %x", k, below(nil))
				}
				for _, i := range []int{0, 1, n / 4, n/4 + 1, n / 2, 3*n/4 - 1, 3 * n / 4, n - 1, n, n + 10} {
					bound := key(i)
					if k, _ := seekBefore(b.Cursor(), bound); !bytes.Equal(k, below(bound)) {
						t.Errorf("seekBefore(%d) = %x, want %x", i, k, below(bound))
					}
				}
				if backward := backwardKeys(b); !slices.EqualFunc(backward, forward, bytes.Equal) {
					t.Errorf("the backward walk found %d keys, the forward walk %d", len(backward), len(forward))
				}
			})
		})
	}
}

// TestOrderedClaimAfterItsObjectsEmptied: ordered events of many objects
// complete within one group of entries (the engine's write transaction
// stays open across them), emptying the leaves of the objects' queues;
// the next ordered claim finds its object's tail and is claimed, instead of
// hanging the state machine in bbolt's Cursor.Last.
func TestOrderedClaimAfterItsObjectsEmptied(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	const n = 3000
	var claims []Command
	for i := range n {
		claims = append(claims, orderedClaim(fmt.Sprintf("src:e%05d", i), t0, fmt.Sprintf("obj%05d", i), int64(i+1)))
	}
	idx := uint64(1)
	rs, err := e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: claims}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[0] {
		if r.Err != nil || !r.Created {
			t.Fatalf("claim %d: %+v", i, r)
		}
	}
	if err := e.Flush(); err != nil { // the queues on committed pages
		t.Fatal(err)
	}
	idx++
	rs, err = e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: []Command{leaseCmd(t0+sec, n)}}})
	if err != nil || len(rs[0][0].Events) != n {
		t.Fatalf("lease: %d events, %v", len(rs[0][0].Events), err)
	}
	var done []Command
	for _, ev := range rs[0][0].Events {
		done = append(done, completeCmd(ev.Key, ev.Token, t0+2*sec))
	}
	idx++
	rs, err = e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: done}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[0] {
		if r.Err != nil {
			t.Fatalf("complete %d: %v", i, r.Err)
		}
	}
	// Still in the same transaction: a claim of an object after every one
	// of them, and one of an object among them.
	within(t, 30*time.Second, func() {
		idx++
		rs, err = e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: []Command{
			orderedClaim("src:late", t0+3*sec, "zzz", 1),
			orderedClaim("src:again", t0+3*sec, "obj01500", n+1),
		}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs[0] {
		if r.Err != nil || !r.Created || r.State != StatePending {
			t.Fatalf("claim %d after the queues emptied: %+v", i, r)
		}
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	idx++
	ls, err := e.Apply(idx, leaseCmd(t0+4*sec, 10))
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedLeased(ls[0]); !slices.Equal(got, []string{"src:again", "src:late"}) {
		t.Fatalf("leased %v, want both new events", got)
	}
}

// TestBackwardWalksRandom: random trees (up to 30,000 keys, three levels)
// and random runs of deletes, with a few inserts among them, in one write
// transaction; lastKey, seekBefore at random bounds, walks back from them
// with prevKey, and the whole backward walk all agree with a forward walk.
// Many of the seeds leave emptied leaves a plain Prev stops at.
func TestBackwardWalksRandom(t *testing.T) {
	seeds := int64(60)
	if testing.Short() {
		seeds = 15
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { backwardRandom(t, seed) })
	}
}

// backwardRandom is one seed of TestBackwardWalksRandom.
func backwardRandom(t *testing.T, seed int64) {
	key := walkKey
	rng := rand.New(rand.NewSource(seed))
	n := []int{1, 10, 200, 3000, 30000}[seed%5]
	vlen := []int{0, 8, 40, 300}[rng.Intn(4)]
	b := openFilled(t, n, vlen, func(i int) []byte { return key(2 * i) })
	for range 1 + rng.Intn(6) {
		lo := rng.Intn(n)
		hi := lo + rng.Intn(n-lo+1)
		mode := rng.Intn(4)
		for i := lo; i < hi; i++ {
			var err error
			switch {
			case mode == 2 && rng.Intn(50) == 0:
				err = b.Put(key(2*i+1), nil)
			case mode == 3 && rng.Intn(3) == 0:
			default:
				err = b.Delete(key(2 * i))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	forward := forwardKeys(b)
	below := func(bound []byte) [][]byte { // the keys below bound, last first
		var keys [][]byte
		for i := len(forward) - 1; i >= 0; i-- {
			if bound == nil || bytes.Compare(forward[i], bound) < 0 {
				keys = append(keys, forward[i])
			}
		}
		return keys
	}
	first := func(keys [][]byte) []byte {
		if len(keys) == 0 {
			return nil
		}
		return keys[0]
	}
	within(t, 60*time.Second, func() {
		if k, _ := lastKey(b.Cursor()); !bytes.Equal(k, first(below(nil))) {
			t.Errorf("seed %d: lastKey = %x, want %x", seed, k, first(below(nil)))
		}
		for range 200 {
			bound := key(rng.Intn(2*n + 4))
			want := below(bound)
			c := b.Cursor()
			k, _ := seekBefore(c, bound)
			if !bytes.Equal(k, first(want)) {
				t.Errorf("seed %d: seekBefore(%x) = %x, want %x", seed, bound, k, first(want))
				continue
			}
			var got [][]byte
			for ; k != nil && len(got) < 50; k, _ = prevKey(c, k) {
				got = append(got, bytes.Clone(k))
			}
			if want = want[:min(len(want), 50)]; !slices.EqualFunc(got, want, bytes.Equal) {
				t.Errorf("seed %d: the walk back from %x found %d keys, want %d", seed, bound, len(got), len(want))
			}
		}
		if backward := backwardKeys(b); !slices.EqualFunc(backward, forward, bytes.Equal) {
			t.Errorf("seed %d: the backward walk found %d keys, the forward walk %d", seed, len(backward), len(forward))
		}
	})
}
