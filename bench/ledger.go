package main

import (
	"sync"
	"sync/atomic"
)

// keyLedger is what bench knows of each key of one run, by event number:
// whether the node claimed it, and whether the sink received it. A key is
// claimed once a request for it is answered 2xx: a 202 takes it as new, and
// a 200 says the node holds it as well (a storm's copy whose 202 was lost,
// a resend). Pending, the claimed keys the sink has not received, counts
// claims, not deliveries: a key received but never claimed (a request the
// node committed though its answer failed, as during a soak's restarts; a
// late delivery of another bench process's run) does not hide a claimed key
// that never came.
//
// Each key has two bits in a word, set with an atomic Or: the generator's
// workers note claims without a lock, and whichever side sets a key's second
// bit counts it, once, as claimed and delivered. Two bits per event keep a
// -fill of millions of events to a few MiB; no allocation but a chunk per
// half a million events.
type keyLedger struct {
	chunks [maxSeq >> (ledgerChunkBits + ledgerSeqBits)]atomic.Pointer[ledgerChunk]
	grow   sync.Mutex // serializes chunk allocation

	claimed   atomic.Int64 // keys claimed
	delivered atomic.Int64 // keys claimed and received
}

const (
	maxSeq          = 1 << 30 // event numbers below it, as the sink and the matcher count them
	ledgerSeqBits   = 5       // 32 keys of 2 bits per word
	ledgerChunkBits = 14      // words per chunk: 128 KiB, 512 Ki keys
)

type ledgerChunk [1 << ledgerChunkBits]atomic.Uint64

func newKeyLedger() *keyLedger { return &keyLedger{} }

// word returns the word of event seq and its claimed bit (the received bit
// is the next one up), allocating the chunk on first use; nil when seq is out
// of range.
func (l *keyLedger) word(seq int64) (*atomic.Uint64, uint64) {
	if seq < 0 || seq >= maxSeq {
		return nil, 0
	}
	w := seq >> ledgerSeqBits
	i := w >> ledgerChunkBits
	c := l.chunks[i].Load()
	if c == nil {
		l.grow.Lock()
		if c = l.chunks[i].Load(); c == nil {
			c = new(ledgerChunk)
			l.chunks[i].Store(c)
		}
		l.grow.Unlock()
	}
	return &c[w&(1<<ledgerChunkBits-1)], 1 << (2 * uint(seq&(1<<ledgerSeqBits-1)))
}

// claim notes that the node answered a request for event seq 2xx. A nil
// ledger (no sink) notes nothing.
func (l *keyLedger) claim(seq int64) {
	if l == nil {
		return
	}
	w, bit := l.word(seq)
	if w == nil {
		// Beyond what the sink counts: it can never be seen delivered, so
		// it stays pending rather than pass unchecked.
		l.claimed.Add(1)
		return
	}
	// Counted before the bit is set, so that a receive seeing the bit
	// never counts a delivery of a claim not counted yet (delivered never
	// passes claimed); taken back when the key was claimed already.
	l.claimed.Add(1)
	old := w.Or(bit)
	if old&bit != 0 {
		l.claimed.Add(-1)
		return
	}
	if old&(bit<<1) != 0 {
		l.delivered.Add(1)
	}
}

// receive notes a delivery of event seq and reports whether it is the key's
// first.
func (l *keyLedger) receive(seq int64) bool {
	w, bit := l.word(seq)
	if w == nil {
		return false
	}
	old := w.Or(bit << 1)
	if old&(bit<<1) != 0 {
		return false
	}
	if old&bit != 0 {
		l.delivered.Add(1)
	}
	return true
}

// counts returns the keys claimed and, of them, the keys received.
func (l *keyLedger) counts() (claimed, delivered int64) {
	if l == nil {
		return 0, 0
	}
	// delivered first: a claim noted in between can only raise pending.
	delivered = l.delivered.Load()
	return l.claimed.Load(), delivered
}

// pending is the number of claimed keys not received yet.
func (l *keyLedger) pending() int64 {
	c, d := l.counts()
	return max(0, c-d)
}
