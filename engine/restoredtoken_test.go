package engine

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTokensGrowAcrossRestores: after a restore, leases take tokens above
// every token the backup holds and every token issued before it, whether
// the backup comes from another cluster whose log was longer (its events
// used to wait for this log to pass their tokens) or from this cluster's
// past, restored again (which would hand out tokens already issued). An
// event is still never leased twice in one entry, and an outcome is
// recorded only under the lease's own token.
func TestTokensGrowAcrossRestores(t *testing.T) {
	issued := map[string]uint64{} // the highest token each key was leased under
	lease := func(h *harness, now int64, max int) Result {
		t.Helper()
		r := h.one(leaseCmd(now, max))
		for _, ev := range r.Events {
			if ev.Token <= issued[ev.Key] {
				t.Fatalf("%s leased under token %d, not above %d it had before", ev.Key, ev.Token, issued[ev.Key])
			}
			issued[ev.Key] = ev.Token
		}
		return r
	}

	src := newHarness(t, Options{NoSync: true})
	src.idx = 5000 // the other cluster's log is long
	src.one(claimCmd("src:a", t0))
	src.one(claimCmd("src:b", t0))
	r := lease(src, t0, 2)
	for _, ev := range r.Events {
		src.one(failCmd(ev.Key, ev.Token, t0, 10)) // waiting for a retry, as a crash or a backup leaves them
	}
	fromOther := backupFile(t, src)

	dst := &harness{tb: t, e: mustOpenPath(t, filepath.Join(t.TempDir(), "fsm.db"), Options{NoSync: true})}
	dst.idx = 7 // a new cluster: its log is short
	restoreIssued(t, dst, fromOther)
	due := t0 + hour
	// At once, and never twice in one entry: lease a, reclaim, lease again.
	rs := dst.apply(leaseCmd(due, 1), Command{Op: OpReclaim, Now: due + hour}, leaseCmd(due+hour, 2))
	if rs[0].N != 1 || rs[2].N != 1 || rs[2].Events[0].Key == rs[0].Events[0].Key {
		t.Fatalf("leases in one entry after the restore = %+v and %+v, want one event each, not the same", rs[0], rs[2])
	}
	for _, ev := range []Event{rs[0].Events[0], rs[2].Events[0]} {
		if ev.Token <= issued[ev.Key] {
			t.Fatalf("%s leased under token %d, not above %d", ev.Key, ev.Token, issued[ev.Key])
		}
		issued[ev.Key] = ev.Token
	}
	other := rs[2].Events[0]
	if r := dst.one(completeCmd(other.Key, other.Token-1, due+hour)); r.Err == nil {
		t.Fatalf("an older token completed %s", other.Key)
	}
	if r := dst.one(failCmd(other.Key, other.Token, due+hour, 10)); r.Err != nil {
		t.Fatalf("fail under the lease's token: %v", r.Err)
	}
	lease(dst, due+2*hour, 2) // both, tokens growing again

	// This cluster's own past: a backup taken now, more leases, then that
	// backup restored, twice; then the other cluster's backup again.
	ownPast := backupFile(t, dst)
	for _, ev := range lease(dst, due+3*hour, 2).Events {
		dst.one(failCmd(ev.Key, ev.Token, due+3*hour, 10))
	}
	lease(dst, due+4*hour, 2)
	for _, path := range []string{ownPast, ownPast, fromOther} {
		restoreIssued(t, dst, path)
		dst.one(Command{Op: OpReclaim, Now: due + 5*hour}) // leases the backup holds have ended
		if r := lease(dst, due+5*hour, 2); r.N == 0 {
			t.Fatalf("nothing leased after restoring %s", path)
		}
	}
}

// TestTokenBaseIsFormat12: an entry of a binary before formatTokenBase
// leases under the entry's index alone, as that binary computes it, so
// that replicas running either binary during an upgrade stay identical.
func TestTokenBaseIsFormat12(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	h.one(claimCmd("src:b", t0))
	restoreFrom(t, h, backupFile(t, h), 1000)
	old := leaseCmd(t0, 1)
	old.format = formatTokenBase - 1
	if r := h.one(old); r.N != 1 || r.Events[0].Token != h.idx {
		t.Fatalf("a format %d lease = %+v, want token %d (the index)", old.format, r, h.idx)
	}
	if r := h.one(leaseCmd(t0, 1)); r.N != 1 || r.Events[0].Token != h.idx+1000+restoreMargin {
		t.Fatalf("a format %d lease = %+v, want token %d (index plus base)", FormatVersion, r, h.idx+1000+restoreMargin)
	}
}

// TestRestoreOfALaggingSurvivor: a backup taken from a node that lagged
// (the survivor of a lost majority) lacks the last entries the leader
// applied, and the tokens they issued; leases after its restore still take
// tokens above those.
func TestRestoreOfALaggingSurvivor(t *testing.T) {
	leader := newHarness(t, Options{NoSync: true})
	leader.one(claimCmd("src:a", t0))
	survivor := backupFile(t, leader)
	// The leader goes on without the survivor, then is lost.
	var last uint64
	for i := range 1000 {
		r := leader.one(leaseCmd(t0+int64(i)*hour, 1))
		if r.N != 1 {
			t.Fatalf("lease %d on the leader: %+v", i, r)
		}
		last = r.Events[0].Token
		leader.one(failCmd("src:a", last, t0+int64(i)*hour, 0))
	}

	fresh := &harness{tb: t, e: mustOpenPath(t, filepath.Join(t.TempDir(), "fsm.db"), Options{NoSync: true})}
	fresh.idx = 2
	restoreFrom(t, fresh, survivor, 0)
	if r := fresh.one(leaseCmd(t0, 1)); r.N != 1 || r.Events[0].Token <= last {
		t.Fatalf("lease after the survivor's restore = %+v, want a token above %d, the lost leader's last", r, last)
	}
}

// backupFile writes h's engine as a backup file and returns its path.
func backupFile(t *testing.T, h *harness) string {
	t.Helper()
	var snap bytes.Buffer
	if _, err := h.e.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(path, snap.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// restoreFrom restores the backup at path into h as its next entry, as the
// leader does: on a copy of the upload, PrepareRestore with issued, then
// RestoreAt.
func restoreFrom(t *testing.T, h *harness, path string, issued uint64) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	upload := filepath.Join(t.TempDir(), "upload.db")
	if err := os.WriteFile(upload, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := PrepareRestore(upload, issued, ""); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(upload)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.idx++
	if err := h.e.RestoreAt(f, h.idx); err != nil {
		t.Fatal(err)
	}
}

// restoreIssued is restoreFrom with what h has issued: its last index plus
// its token base.
func restoreIssued(t *testing.T, h *harness, path string) {
	t.Helper()
	base, err := h.e.TokenBase()
	if err != nil {
		t.Fatal(err)
	}
	restoreFrom(t, h, path, h.idx+base)
}
