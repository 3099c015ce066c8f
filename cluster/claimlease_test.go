package cluster

import (
	"errors"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
)

// fakeSlots is a forwarder's workers as the proposer sees them: free of them
// are free, and what the claims leased is kept.
type fakeSlots struct {
	mu                 sync.Mutex
	free               int
	reserved, released int
	got                []engine.Event
}

func (s *fakeSlots) ReserveSlot(source string) (time.Duration, uint64, bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free == 0 {
		return 0, 0, false, false
	}
	s.free--
	s.reserved++
	return time.Minute, 7, true, true
}

func (s *fakeSlots) DeliverLeased(ticket uint64, ev engine.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ticket != 7 {
		panic("wrong ticket")
	}
	s.got = append(s.got, ev)
}

func (s *fakeSlots) ReleaseSlot(ticket uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ticket != 7 {
		panic("wrong ticket")
	}
	s.free++
	s.released++
}

func (s *fakeSlots) state() (reserved, released int, got []engine.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved, s.released, append([]engine.Event(nil), s.got...)
}

// TestClaimCarriesLeaseOnLeader: a claim proposed by the leader while its
// forwarder has a free worker leases the event in the claim's own entry, on
// every node, whichever node took the claim; the leader's forwarder gets
// the event; the next claim, with no worker free, stays pending.
func TestClaimCarriesLeaseOnLeader(t *testing.T) {
	for _, via := range []string{"leader", "follower"} {
		t.Run(via, func(t *testing.T) {
			c := newTestCluster(t, 3, nil)
			leader := c.waitLeader(-1)
			l := c.nodes[leader]
			entry := l
			if via == "follower" {
				entry = c.nodes[c.follower(leader)]
			}
			slots := &fakeSlots{free: 1}
			l.SetLeaseSlots(slots)
			ctx := ctxT(t, 10*time.Second)
			before := l.Status().Proposed.Batches

			res, err := entry.Claim(ctx, claimCmd("src:a"))
			if err != nil || !res.Created || res.State != engine.StateProcessing {
				t.Fatalf("claim: %+v %v; want created processing", res, err)
			}
			if n := l.Status().Proposed.Batches - before; n != 1 {
				t.Errorf("%d entries for one claim, want 1", n)
			}
			_, _, got := slots.state()
			if len(got) != 1 || got[0].Key != "src:a" || got[0].Attempts != 1 || string(got[0].Payload) != `{"id":"src:a"}` {
				t.Fatalf("forwarder got %+v", got)
			}
			token := got[0].Token

			res, err = entry.Claim(ctx, claimCmd("src:b"))
			if err != nil || res.State != engine.StatePending {
				t.Fatalf("claim with no worker free: %+v %v; want pending", res, err)
			}
			c.waitConverged()
			for _, n := range c.nodes {
				ev, err := n.Get("src:a", false)
				if err != nil || ev.State != engine.StateProcessing || ev.Token != token || ev.LeaseUntil == 0 {
					t.Fatalf("%s: %+v %v", n.cfg.ID, ev, err)
				}
				// The claim came with the intake's 30 s; it is leased
				// for, and keeps, the leader's length (its forwarder's).
				if ev.LeaseFor != int64(time.Minute) || ev.LeaseUntil-ev.UpdatedAt != int64(time.Minute) {
					t.Fatalf("%s: leased for %v (stored %v), want the leader's %v", n.cfg.ID,
						time.Duration(ev.LeaseUntil-ev.UpdatedAt), time.Duration(ev.LeaseFor), time.Minute)
				}
			}
			if err := l.Complete(ctx, "src:a", token, nil, "", 0); err != nil {
				t.Fatalf("complete under the claim's token: %v", err)
			}
			st := l.Status().ClaimLeases
			if st.Offered != 1 || st.Leased != 1 {
				t.Errorf("claim lease stats %+v, want 1 offered, 1 leased", st)
			}
		})
	}
}

// TestClaimLeaseDeclinedReleasesWorker: a claim that may not lease (a
// duplicate, a paused source) gives its worker back and stays as a lease
// would leave it; a follower's own slots are never used; a LeaseNow set by
// the caller is not the leader's decision and is dropped.
func TestClaimLeaseDeclinedReleasesWorker(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	l, f := c.nodes[leader], c.nodes[c.follower(leader)]
	ctx := ctxT(t, 10*time.Second)
	// Only the leader's proposer decides a claim's lease: one a caller put
	// in the command is dropped.
	first := claimCmd("src:a")
	first.LeaseNow = int64(time.Minute)
	if res, err := f.Claim(ctx, first); err != nil || res.State != engine.StatePending {
		t.Fatalf("claim with a caller's LeaseNow: %+v %v; want pending", res, err)
	}
	if _, err := l.Pause(ctx, "paused", "ops", "down"); err != nil {
		t.Fatal(err)
	}
	slots, fslots := &fakeSlots{free: 4}, &fakeSlots{free: 4}
	l.SetLeaseSlots(slots)
	f.SetLeaseSlots(fslots)

	if res, err := f.Claim(ctx, claimCmd("src:a")); err != nil || res.Created || res.State != engine.StatePending {
		t.Fatalf("duplicate: %+v %v", res, err)
	}
	held := claimCmd("paused:x")
	held.Source = "paused"
	if res, err := f.Claim(ctx, held); err != nil || !res.Created || res.State != engine.StatePending {
		t.Fatalf("claim of a paused source: %+v %v; want pending (held)", res, err)
	}
	reserved, released, got := slots.state()
	if reserved != 2 || released != 2 || len(got) != 0 {
		t.Errorf("leader's slots: %d reserved, %d released, %d events; want 2, 2, 0", reserved, released, len(got))
	}
	if reserved, _, _ := fslots.state(); reserved != 0 {
		t.Errorf("a follower's slots were reserved %d times", reserved)
	}
}

// TestClaimLeasedOnLostLeaderIsReclaimed: an event a claim leased for a
// leader whose forwarder never got it (the leader was cut off) is reclaimed
// by the next leader once its lease ends; the first lease's token is fenced.
func TestClaimLeasedOnLostLeaderIsReclaimed(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	l := c.nodes[leader]
	slots := &fakeSlots{free: 1}
	l.SetLeaseSlots(slots)
	ctx := ctxT(t, 20*time.Second)
	res, err := l.Claim(ctx, claimCmd("src:a"))
	if err != nil || res.State != engine.StateProcessing {
		t.Fatalf("claim: %+v %v", res, err)
	}
	_, _, got := slots.state()
	first := got[0].Token
	c.waitConverged()

	c.partition(leader)
	next := c.nodes[c.waitLeader(leader)]
	waitFor(t, "the new leader's barrier", func() bool {
		_, err := next.Lease(ctxT(t, 5*time.Second), 10, time.Minute)
		return err == nil
	})
	if n, err := next.Reclaim(ctx, 0); err != nil || n != 0 {
		t.Fatalf("reclaim before the lease ended: %d %v", n, err)
	}
	c.clock.advance(2 * time.Minute)
	if n, err := next.Reclaim(ctx, 0); err != nil || n != 1 {
		t.Fatalf("reclaim after the lease ended: %d %v", n, err)
	}
	evs, err := next.Lease(ctx, 10, time.Minute)
	if err != nil || len(evs) != 1 || evs[0].Token <= first || evs[0].Attempts != 2 {
		t.Fatalf("lease on the new leader: %+v %v (first token %d)", evs, err, first)
	}
	if err := next.Complete(ctx, "src:a", first, nil, "", 0); !errors.Is(err, engine.ErrStaleToken) {
		t.Fatalf("completion under the claim's token: %v, want ErrStaleToken", err)
	}
	if err := next.Complete(ctx, "src:a", evs[0].Token, nil, "", 0); err != nil {
		t.Fatal(err)
	}
	c.heal()
}

// TestCompletionsRideWithClaims: leader-only commands (completions) queued
// while an entry is outstanding go into the next entry together with the
// claims queued meanwhile.
func TestCompletionsRideWithClaims(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.nodes[c.waitLeader(-1)]
	slots := &fakeSlots{free: 1}
	l.SetLeaseSlots(slots)
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	_, _, got := slots.state()
	token := got[0].Token

	// Hold the proposer's one entry slot, as an entry being committed does.
	l.prop.slots <- struct{}{}
	before := l.Status().Proposed
	complete := &proposal{cmds: []engine.Command{{Op: engine.OpComplete, Key: "src:a", Token: token}}, leaderOnly: true,
		done: make(chan struct{}, 1)}
	claim := &proposal{cmds: []engine.Command{claimCmd("src:b")}, done: make(chan struct{}, 1)}
	l.prop.queue <- complete
	// The proposer takes the completion and waits for the slot...
	waitFor(t, "the completion taken", func() bool { return len(l.prop.queue) == 0 })
	// ...while the claim queues behind it.
	l.prop.queue <- claim
	<-l.prop.slots
	for _, pr := range []*proposal{complete, claim} {
		<-pr.done
		if pr.err != nil || len(pr.res) != 1 || pr.res[0].Err != nil {
			t.Fatalf("%v: %v %+v", pr.cmds[0].Op, pr.err, pr.res)
		}
	}
	after := l.Status().Proposed
	if d := after.Batches - before.Batches; d != 1 || after.Commands-before.Commands != 2 {
		t.Errorf("%d entries for %d commands, want 1 entry for 2", d, after.Commands-before.Commands)
	}
	ev, err := l.Get("src:a", false)
	if err != nil || ev.State != engine.StateDone {
		t.Fatalf("src:a: %+v %v", ev, err)
	}
}
