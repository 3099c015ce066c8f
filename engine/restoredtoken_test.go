package engine

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestRestoredEventsLeaseAtOnce: events restored from another cluster's
// backup carry that cluster's tokens, larger than this log's indexes. They
// are leased at once, each under a token above its old one (a handler's
// fencing needs tokens that only grow), never twice in one entry, and their
// outcomes are recorded under the new tokens.
func TestRestoredEventsLeaseAtOnce(t *testing.T) {
	src := newHarness(t, Options{NoSync: true})
	src.idx = 5000 // the other cluster's log is long
	src.one(claimCmd("src:a", t0))
	src.one(claimCmd("src:b", t0))
	r := src.one(leaseCmd(t0, 2))
	if r.N != 2 {
		t.Fatalf("source lease = %+v", r)
	}
	old := r.Events[0].Token
	for _, ev := range r.Events {
		src.one(failCmd(ev.Key, ev.Token, t0, 10)) // waiting for a retry, as a crash or a backup leaves them
	}
	var snap bytes.Buffer
	if _, err := src.e.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}

	dst := &harness{tb: t, e: mustOpenPath(t, filepath.Join(t.TempDir(), "fsm.db"), Options{NoSync: true})}
	dst.idx = 7 // a new cluster: its log is short
	if err := dst.e.RestoreAt(bytes.NewReader(snap.Bytes()), dst.idx); err != nil {
		t.Fatal(err)
	}
	due := t0 + hour
	// An entry of a binary before formatRestoredTokens leases them only
	// once the log has passed their tokens, as that binary computes it:
	// replicas running either binary during an upgrade stay identical.
	older := &harness{tb: t, e: mustOpenPath(t, filepath.Join(t.TempDir(), "fsm.db"), Options{NoSync: true})}
	older.idx = dst.idx
	if err := older.e.RestoreAt(bytes.NewReader(snap.Bytes()), older.idx); err != nil {
		t.Fatal(err)
	}
	oldLease := leaseCmd(due, 2)
	oldLease.format = formatRestoredTokens - 1
	if r := older.one(oldLease); r.N != 0 {
		t.Fatalf("a format %d lease = %+v, want none", oldLease.format, r)
	}
	// One entry: lease a, reclaim, lease again: a must not be leased twice.
	lease1 := leaseCmd(due, 1)
	rs := dst.apply(lease1, Command{Op: OpReclaim, Now: due + hour}, leaseCmd(due+hour, 2))
	if rs[0].N != 1 || rs[0].Events[0].Token != old+1 {
		t.Fatalf("first lease after the restore = %+v, want one event under token %d", rs[0], old+1)
	}
	first := rs[0].Events[0].Key
	if rs[2].N != 1 || rs[2].Events[0].Key == first || rs[2].Events[0].Token != old+1 {
		t.Fatalf("second lease in the entry = %+v, want only the other event, under token %d", rs[2], old+1)
	}
	// Its outcome is recorded under the new token; the old one is stale.
	other := rs[2].Events[0]
	if r := dst.one(completeCmd(other.Key, old, due+hour)); r.Err == nil {
		t.Fatalf("the old cluster's token completed %s", other.Key)
	}
	if r := dst.one(completeCmd(other.Key, other.Token, due+hour)); r.Err != nil {
		t.Fatalf("complete under the new token: %v", r.Err)
	}
	// The reclaimed one is leased again, its token growing again.
	if r := dst.one(leaseCmd(due+hour, 1)); r.N != 1 || r.Events[0].Key != first || r.Events[0].Token != old+2 {
		t.Fatalf("next lease = %+v, want %s under token %d", r, first, old+2)
	}
}
