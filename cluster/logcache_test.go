package cluster

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"weak"

	"github.com/hashicorp/raft"
)

// TestRecentLogsBoundedInBytes: the cache of the newest entries keeps at
// most maxEntries and maxBytes of them, the newest, and answers the rest
// from the store; an entry larger than the budget is not kept; a rewrite
// of the tail or a delete drops what it holds, never answering an entry
// the store no longer has.
func TestRecentLogsBoundedInBytes(t *testing.T) {
	store := raft.NewInmemStore()
	c := newRecentLogs(store, 4, 100)
	entry := func(i uint64, size int) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)}
	}
	cached := func() (n int, b int) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return len(c.logs), c.bytes
	}
	get := func(i uint64) *raft.Log {
		t.Helper()
		var l raft.Log
		if err := c.GetLog(i, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		return &l
	}

	for i := uint64(1); i <= 6; i++ {
		if err := c.StoreLogs([]*raft.Log{entry(i, 10)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := cached(); n != 4 || b != 40 {
		t.Fatalf("cached %d entries, %d bytes; want the newest 4, 40", n, b)
	}
	for i := uint64(1); i <= 6; i++ { // the older from the store, the newer from memory
		if l := get(i); l.Index != i || len(l.Data) != 10 || l.Data[0] != byte(i) {
			t.Fatalf("entry %d = %+v", i, l)
		}
	}

	// Bytes bind before the count: 60 + 60 > 100 keeps the newest alone.
	if err := c.StoreLogs([]*raft.Log{entry(7, 60), entry(8, 60)}); err != nil {
		t.Fatal(err)
	}
	if n, b := cached(); n != 1 || b != 60 {
		t.Fatalf("cached %d entries, %d bytes; want 1, 60", n, b)
	}
	// Larger than the whole budget: not kept, still stored.
	if err := c.StoreLogs([]*raft.Log{entry(9, 500)}); err != nil {
		t.Fatal(err)
	}
	if n, b := cached(); n != 0 || b != 0 {
		t.Fatalf("cached %d entries, %d bytes after an oversized one; want none", n, b)
	}
	if l := get(9); len(l.Data) != 500 {
		t.Fatalf("oversized entry from the store: %d bytes", len(l.Data))
	}

	// raft rewrites its tail from index 9: what followed is not answered
	// from memory.
	c.StoreLogs([]*raft.Log{entry(10, 10), entry(11, 10)})
	if err := store.DeleteRange(10, 11); err != nil { // as the tail's rewrite does, under the cache
		t.Fatal(err)
	}
	if err := c.StoreLogs([]*raft.Log{entry(10, 20)}); err != nil {
		t.Fatal(err)
	}
	if n, _ := cached(); n != 1 {
		t.Fatalf("cached %d entries after a rewrite; want only the new one", n)
	}
	if l := get(10); len(l.Data) != 20 {
		t.Fatalf("rewritten entry 10 = %d bytes, want 20", len(l.Data))
	}
	var l raft.Log
	if err := c.GetLog(11, &l); err == nil {
		t.Fatalf("entry 11, deleted, still answered: %+v", l)
	}

	if err := c.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	if n, b := cached(); n != 0 || b != 0 {
		t.Fatalf("cached %d entries, %d bytes after a delete; want none", n, b)
	}
	if err := c.GetLog(3, &l); err == nil {
		t.Fatal("deleted entry 3 still answered")
	}
}

// failingStore refuses every write with err.
type failingStore struct {
	raft.LogStore
	err error
}

func (s failingStore) StoreLogs([]*raft.Log) error { return s.err }

// TestRecentLogsKeepsTheStoresError: a write the store refuses is not
// cached, and its error reaches raft with its cause (errors.Is), not as text.
func TestRecentLogsKeepsTheStoresError(t *testing.T) {
	full := errors.New("no space left on device")
	c := newRecentLogs(failingStore{raft.NewInmemStore(), full}, 4, 100)
	err := c.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Data: []byte("x")}})
	if !errors.Is(err, full) {
		t.Fatalf("StoreLogs = %v, want the store's error", err)
	}
	var l raft.Log
	if c.GetLog(1, &l) == nil {
		t.Fatal("a refused entry is answered from memory")
	}
}

// discardStore stores nothing: what keeps an entry alive in a test is the
// cache, not the store (raft's InmemStore keeps the pointers it gets).
type discardStore struct{ raft.LogStore }

func (discardStore) StoreLogs([]*raft.Log) error { return nil }

// TestRecentLogsKeepsNoFuture: the cache keeps a copy of each entry, not the
// pointer StoreLogs got. On the leader that pointer is into the entry's
// apply future, which holds the state machine's answer (for a lease, every
// leased event's body): kept, it kept them all alive.
func TestRecentLogsKeepsNoFuture(t *testing.T) {
	type future struct { // as raft's logFuture: the Log inside, the answer beside it
		log      raft.Log
		response []byte
	}
	c := newRecentLogs(discardStore{}, 512, 32<<20)
	f := &future{log: raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte("lease")}, response: make([]byte, 1<<20)}
	gone := weak.Make(f)
	if err := c.StoreLogs([]*raft.Log{&f.log}); err != nil {
		t.Fatal(err)
	}
	f = nil
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the cache keeps the future of an entry it holds alive, and the answer with it")
	}
	var l raft.Log
	if err := c.GetLog(1, &l); err != nil || string(l.Data) != "lease" {
		t.Fatalf("the cached entry: %+v, %v", l, err)
	}
}
