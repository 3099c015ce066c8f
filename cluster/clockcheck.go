package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The leader's clock stamps every command (proposer.go), and the engine
// trusts it: an expire ends the retention buckets that ended by that time,
// a payload drop drops what was due by it. A leader whose clock runs days
// ahead (a bad RTC, NTP stepping late) would, at its first sweep, forget
// keys their providers may still retry and the dead letters kept for
// dead_retention. Nothing a follower applies can refuse it (apply must not
// read a clock), so the leader asks first: before it proposes an expire or
// a payload drop it compares its clock with the voters' (each member's
// rpcStats answer carries its clock) and holds both while fewer than a
// majority of the voters, itself included, agree with it within
// maxClockOffset. Keys kept longer only cost disk; the hold is logged at
// error and shown in Status.ClockHeld (docs/architecture.md, "Delivery").
//
// A member that cannot be asked does not count as agreeing; one of a
// release that does not report its clock does (it cannot say, and an
// upgrade must not stop expiry). A single node has nobody to ask.
const (
	maxClockOffset  = time.Minute
	clockCheckEvery = 30 * time.Second
	// clockStep is how far the clock may move against the monotonic one
	// since the last comparison before it is made again: a step (NTP, a
	// VM resumed) right after a comparison that passed must not ride on it.
	clockStep = 5 * time.Second
	// clockHeldLogEvery spaces the error logged while a hold lasts.
	clockHeldLogEvery = 10 * time.Minute
)

// clockCheck caches the leader's last comparison of clocks.
type clockCheck struct {
	mu     sync.Mutex // one check at a time
	at     time.Time  // when the cached verdict was made (local monotonic clock)
	wall   int64      // and the node's clock then, unix ns (no monotonic reading)
	term   uint64     // the term it was made in: a new leadership asks again
	logged time.Time  // when the current hold was last logged
	held   atomic.Pointer[clockVerdict]
}

// clockVerdict is a comparison's outcome: why expiry is held ("": it is
// not), in which term.
type clockVerdict struct {
	reason string
	term   uint64
}

// heldReason is the hold in term ("" when none, or decided in another term).
func (c *clockCheck) heldReason(term uint64) string {
	if v := c.held.Load(); v != nil && v.term == term {
		return v.reason
	}
	return ""
}

// clockHeld reports why this leader must not end retention buckets or drop
// payloads now ("" when its clock agrees with a majority of the voters). It
// asks the voters at most every clockCheckEvery, each within
// memberStatsTimeout, and again at once when its clock stepped since.
func (n *Node) clockHeld(ctx context.Context) string {
	if n.mux == nil && n.inproc == nil {
		return "" // no way to ask a peer (a test's own transport): nothing to compare
	}
	c := &n.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	term := n.raft.CurrentTerm()
	if !c.at.IsZero() && c.term == term {
		mono := time.Since(c.at)
		step := time.Duration(n.now().UnixNano()-c.wall) - mono
		if mono < n.cfg.clockEvery && step.Abs() <= clockStep {
			return c.heldReason(term)
		}
	}
	// The baseline is taken before the voters are asked: a step while they
	// answer is then seen at the next call, not built into the verdict.
	at, wall := time.Now(), n.now().UnixNano()
	reason := ""
	if f := n.raft.GetConfiguration(); f.Error() != nil {
		reason = "the cluster configuration cannot be read to ask the voters: " + f.Error().Error()
	} else {
		var peers []raft.Server
		voters := 0
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter {
				continue
			}
			voters++
			if string(s.ID) != n.cfg.ID {
				peers = append(peers, s)
			}
		}
		if len(peers) > 0 {
			reason = n.compareClocks(ctx, peers, voters)
			if ctx.Err() != nil {
				// Cut short (leadership lost, the node stopping): the
				// voters' silence says nothing of the clocks. Nothing is
				// kept nor logged (a false "disagrees" at ERROR, then an
				// "agrees again" a term later), and the caller, ending
				// too, still holds.
				return "the clock comparison was cut short: " + ctx.Err().Error()
			}
		}
	}
	prev := c.heldReason(c.term)
	c.at, c.wall, c.term = at, wall, term
	c.held.Store(&clockVerdict{reason: reason, term: term})
	switch {
	case reason != "" && (prev == "" || time.Since(c.logged) >= clockHeldLogEvery):
		c.logged = time.Now()
		n.cfg.Logger.Error("leader's clock disagrees with the cluster: retention buckets are not ended and payloads not dropped until it agrees",
			"reason", reason)
	case reason == "" && prev != "":
		n.cfg.Logger.Info("leader's clock agrees with the cluster again: retention buckets end and payloads drop as usual")
	}
	return reason
}

// peerClock is one voter's answer to compareClocks.
type peerClock struct {
	agrees bool
	note   string // why not
}

// compareClocks asks peers for their clocks and returns why this node's
// clock lacks a majority of the voters ("" when it has one). It stops
// asking once a majority agrees: a voter that does not answer must not hold
// the sweeper for the whole timeout every time.
func (n *Node) compareClocks(ctx context.Context, peers []raft.Server, voters int) string {
	ctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: deferred calls run last first
	defer cancel()
	results := make(chan peerClock, len(peers))
	for _, s := range peers {
		wg.Go(func() {
			mine := n.now()
			start := time.Now()
			ms, err := n.askStats(ctx, string(s.Address))
			rtt := time.Since(start)
			switch {
			case err != nil:
				results <- peerClock{note: fmt.Sprintf("%s: not asked (%v)", s.ID, err)}
			case ms.ID != string(s.ID):
				results <- peerClock{note: fmt.Sprintf("%s: %s answers as %q", s.ID, s.Address, ms.ID)}
			case ms.Clock == 0:
				results <- peerClock{agrees: true} // a release that does not report its clock
			default:
				// The peer read its clock somewhere in the round trip: its
				// middle is the best guess, half of it the uncertainty.
				off := time.Unix(0, ms.Clock).Sub(mine.Add(rtt / 2))
				if off.Abs() <= maxClockOffset+rtt/2 {
					results <- peerClock{agrees: true}
					return
				}
				results <- peerClock{note: fmt.Sprintf("%s: this leader's clock is %s %s of its", s.ID, off.Abs().Round(time.Second), aheadOrBehind(off))}
			}
		})
	}
	agree := 1 // this node
	var why []string
	for range peers {
		r := <-results
		if !r.agrees {
			why = append(why, r.note)
			continue
		}
		if agree++; agree > voters/2 {
			return ""
		}
	}
	slices.Sort(why)
	return fmt.Sprintf("%d of %d voters agree with this leader's clock within %s (%s)", agree, voters, maxClockOffset, strings.Join(why, "; "))
}

// aheadOrBehind names the leader's side of a peer's offset off (the peer's
// clock minus the leader's).
func aheadOrBehind(off time.Duration) string {
	if off < 0 {
		return "ahead"
	}
	return "behind"
}
