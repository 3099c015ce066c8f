package cluster

import (
	"testing"
	"time"
)

// TestPauseOnAFollowerHoldsOnEveryNode: a follower proposes the pause through
// the leader; every replica then holds the source (the leader leases nothing
// of it) until a resume, also proposed by a follower.
func TestPauseOnAFollowerHoldsOnEveryNode(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	l, f := c.nodes[leader], c.nodes[c.follower(leader)]
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	if changed, err := f.Pause(ctx, "src", "ops", "handler down"); err != nil || !changed {
		t.Fatalf("pause on a follower: %v %v", changed, err)
	}
	if changed, err := f.Pause(ctx, "src", "ops", "again"); err != nil || changed {
		t.Fatalf("second pause: changed %v, err %v; want no change", changed, err)
	}
	if _, err := l.Claim(ctx, claimCmd("src:b")); err != nil {
		t.Fatal(err)
	}
	if evs, err := l.Lease(ctx, 10, time.Minute); err != nil || len(evs) != 0 {
		t.Fatalf("lease of a paused source: %v %v", evs, err)
	}
	c.waitConverged()
	for _, n := range c.nodes {
		s, err := n.Sources()
		if err != nil || !s["src"].Paused || s["src"].Who != "ops" || s["src"].Reason != "handler down" {
			t.Fatalf("%s: Sources = %+v, %v", n.cfg.ID, s, err)
		}
		if bl, err := n.Backlog(); err != nil || bl["src"].Pending != 2 {
			t.Fatalf("%s: Backlog = %+v, %v", n.cfg.ID, bl, err)
		}
	}
	if changed, err := f.Resume(ctx, "src", "ops", "fixed"); err != nil || !changed {
		t.Fatalf("resume on a follower: %v %v", changed, err)
	}
	evs, err := l.Lease(ctx, 10, time.Minute)
	if err != nil || len(evs) != 2 || evs[0].Key != "src:a" || evs[1].Key != "src:b" {
		t.Fatalf("lease after resume: %v %v", evs, err)
	}
	c.waitConverged()
}

// TestPausedClaimWakesNoLease: a claim of a paused source does not wake the
// forwarder. Its lease would find nothing to take, and under load that was
// one more log entry for every claim of a paused source.
func TestPausedClaimWakesNoLease(t *testing.T) {
	n := openSolo(t, t.TempDir(), nil)
	defer n.Close()
	ctx := ctxT(t, 10*time.Second)
	woken := func() bool {
		select {
		case <-n.Wake():
			return true
		default:
			return false
		}
	}
	// The apply that signals runs before Claim returns, so the signal is
	// there, or not, when it does.
	woken()
	if _, err := n.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("a claim of a running source woke no lease")
	}
	if _, err := n.Pause(ctx, "src", "ops", "handler down"); err != nil {
		t.Fatal(err)
	}
	woken()
	for _, key := range []string{"src:b", "src:c"} {
		if r, err := n.Claim(ctx, claimCmd(key)); err != nil || !r.Created {
			t.Fatalf("claim %s: %+v %v", key, r, err)
		}
		if woken() {
			t.Fatalf("the claim of %s, a paused source, woke a lease", key)
		}
	}
	if _, err := n.Resume(ctx, "src", "ops", "fixed"); err != nil {
		t.Fatal(err)
	}
	if !woken() {
		t.Fatal("the resume woke no lease for the held events")
	}
}
