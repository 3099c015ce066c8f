package main

import (
	"sync"
	"testing"
)

// TestKeyLedger: claims and receipts of the same keys, noted concurrently in
// any order, count each key claimed and received exactly once; a key
// received but never claimed counts for nothing, a key claimed twice once.
func TestKeyLedger(t *testing.T) {
	const n = 3 << ledgerChunkBits << ledgerSeqBits / 2 // keys over a chunk boundary
	l := newKeyLedger()
	var wg sync.WaitGroup
	firsts := make([]int64, 4)
	for g := range 4 {
		wg.Go(func() {
			for seq := int64(g); seq < n; seq += 4 {
				switch seq % 3 {
				case 0: // claimed and received, either first
					if seq%2 == 0 {
						l.claim(seq)
					}
					if l.receive(seq) {
						firsts[g]++
					}
					l.claim(seq)
				case 1: // received only, twice
					if l.receive(seq) {
						firsts[g]++
					}
					l.receive(seq)
				}
			}
		})
		wg.Go(func() { // the same keys' other side, from another goroutine
			for seq := int64(g); seq < n; seq += 4 {
				if seq%3 == 0 {
					l.claim(seq) // a second 2xx of the key
				}
			}
		})
	}
	wg.Wait()
	var first int64
	for _, f := range firsts {
		first += f
	}
	claimed, delivered := l.counts()
	want := int64((n + 2) / 3)
	if claimed != want || delivered != want || l.pending() != 0 || first != want+int64((n+1)/3) {
		t.Fatalf("claimed %d, delivered %d, pending %d, first receipts %d; want %d, %d, 0, %d",
			claimed, delivered, l.pending(), first, want, want, want+int64((n+1)/3))
	}
	l.claim(n + 1)
	if l.pending() != 1 {
		t.Fatalf("pending %d after a claim not received, want 1", l.pending())
	}
	l.claim(maxSeq) // beyond what the sink counts: pending for good
	if !l.receive(n+1) || l.receive(maxSeq) || l.pending() != 1 {
		t.Fatalf("pending %d, want 1", l.pending())
	}
	if a := testing.AllocsPerRun(100, func() { l.claim(5); l.receive(6) }); a != 0 {
		t.Fatalf("%v allocations per claim and receipt, want 0", a)
	}
	var nilLedger *keyLedger
	nilLedger.claim(1) // no sink: nothing to note
	if nilLedger.pending() != 0 {
		t.Fatal("a nil ledger has pending keys")
	}
}
