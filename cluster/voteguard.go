package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The vote guard (docs/architecture.md, Membership: a node with no data).
//
// Raft's safety rests on every voter remembering what it acknowledged. A
// node that starts with no raft state breaks that when it is a member whose
// data dir was lost: raft, with an empty log and no configuration, grants
// its vote to the first candidate that asks. A follower that lagged behind
// the old leader then wins with that vote alone, although the up-to-date
// follower refuses it, and the entries the old leader committed with the
// up-to-date follower (acknowledged webhooks) are cut from that follower's
// log; its engine, which had applied them, no longer agrees with the others.
//
// So a node that starts with no raft state votes for no one until it knows
// how far the cluster's history reaches, and then only for a candidate
// whose log reaches that far: every candidate that holds all committed
// entries does. It knows once
//   - every other peer has told it its last log and commit index (the floor
//     is the highest of them), or
//   - enough peers to make a majority with it said they hold no history (a
//     first start: there is nothing to lose), or
//   - a leader told it its commit index and its own log reaches it (it holds
//     everything committed until then; what is committed later, it
//     acknowledges itself), or
//   - voteGrace has passed and a peer holding history has answered: a peer
//     silent that long is taken for lost, and the node votes by what the
//     others told it.
// The last is the one guess. A member wiped while another is down for
// longer than voteGrace is two failures, which three nodes do not survive
// whole: if the silent one held entries the answering ones lack, a leader
// elected without it does not have them. The node says so in its log. Until
// then, the answering peers' floor keeps a lagging candidate out.

// voteGuard holds a fresh node's votes (held) until it knows the floor a
// candidate's last log index must reach.
type voteGuard struct {
	held  atomic.Bool
	floor atomic.Uint64
}

func newVoteGuard() *voteGuard {
	g := &voteGuard{}
	g.held.Store(true)
	return g
}

// raise lifts the floor to i when it is higher.
func (g *voteGuard) raise(i uint64) {
	for {
		f := g.floor.Load()
		if i <= f || g.floor.CompareAndSwap(f, i) {
			return
		}
	}
}

// refuses reports whether a candidate whose log ends at lastLogIndex must
// not get this node's vote.
func (g *voteGuard) refuses(lastLogIndex uint64) bool {
	return g.held.Load() || lastLogIndex < g.floor.Load()
}

// guardedTransport passes raft its RPCs but the votes the guard refuses,
// which it answers itself: not granted, in the candidate's own term (this
// node's term does not move for a candidate it will not follow).
type guardedTransport struct {
	raft.Transport
	guard   *voteGuard
	self    raft.RPCHeader
	refused atomic.Int64 // votes and pre-votes refused

	once     sync.Once // starts the forwarding
	haltOnce sync.Once
	out      chan raft.RPC
	halt     chan struct{}
	done     chan struct{}
}

func newGuardedTransport(t raft.Transport, g *voteGuard, id string) *guardedTransport {
	return &guardedTransport{
		Transport: t,
		guard:     g,
		self:      raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(t.LocalAddr())},
		out:       make(chan raft.RPC),
		halt:      make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// Consumer is raft's channel of incoming RPCs, fed from the wrapped
// transport's.
func (t *guardedTransport) Consumer() <-chan raft.RPC {
	t.once.Do(func() { go t.forward(t.Transport.Consumer()) })
	return t.out
}

func (t *guardedTransport) forward(in <-chan raft.RPC) {
	defer close(t.done)
	for {
		select {
		case rpc := <-in:
			if t.answered(rpc) {
				continue
			}
			select {
			case t.out <- rpc:
			case <-t.halt:
				return
			}
		case <-t.halt:
			return
		}
	}
}

// answered refuses rpc itself when it asks for a vote (or a pre-vote) the
// guard refuses.
func (t *guardedTransport) answered(rpc raft.RPC) bool {
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if t.guard.refuses(req.LastLogIndex) {
			t.refused.Add(1)
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: t.self, Term: req.Term}, nil)
			return true
		}
	case *raft.RequestPreVoteRequest:
		if t.guard.refuses(req.LastLogIndex) {
			t.refused.Add(1)
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: t.self, Term: req.Term}, nil)
			return true
		}
	}
	return false
}

// RequestPreVote keeps the wrapped transport's pre-vote (raft asks the
// transport it is given whether it has one).
func (t *guardedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("transport has no pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// stop ends the forwarding and waits for it.
func (t *guardedTransport) stop() {
	t.haltOnce.Do(func() { close(t.halt) })
	t.once.Do(func() { close(t.done) }) // never started: nothing to wait for
	<-t.done
}

// Close closes the wrapped transport, as raft closes the one it is given
// when it shuts down.
func (t *guardedTransport) Close() error {
	t.stop()
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// voteGuardPoll is how often a node whose votes are held asks its peers.
const voteGuardPoll = 200 * time.Millisecond

// voteGrace is how long a node with no data waits to hear from every peer
// before it votes by what the peers that answered told it.
const voteGrace = 10 * time.Second

func (c *Config) voteGrace() time.Duration {
	if c.voteGraceFor > 0 {
		return c.voteGraceFor
	}
	return voteGrace
}

// watchVotes releases the guard once the node knows the floor (see above),
// asking the peers every voteGuardPoll; it ends then, or when stop closes.
func (n *Node) watchVotes(g *voteGuard, stop <-chan struct{}) {
	others := 0
	for _, p := range n.cfg.Peers {
		if p.ID != n.cfg.ID {
			others++
		}
	}
	majority := (others+1)/2 + 1
	heard := map[string]bool{}
	history := false
	start := time.Now()
	tick := time.NewTicker(voteGuardPoll)
	defer tick.Stop()
	for {
		for _, p := range n.cfg.Peers {
			if p.ID == n.cfg.ID {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
			ms, err := n.askStats(ctx, p.Addr)
			cancel()
			if err != nil {
				continue
			}
			heard[p.ID] = true
			if ms.Cluster != "" || ms.CommitIndex > 1 {
				history = true
			}
			if ms.Role == "leader" && ms.CommitIndex > 0 && n.raft.LastIndex() >= ms.CommitIndex {
				g.raise(ms.CommitIndex)
				n.releaseVotes(g, "caught up with the leader", len(heard))
				return
			}
			g.raise(max(ms.CommitIndex, ms.LastLogIndex))
		}
		switch {
		case len(heard) == others:
			n.releaseVotes(g, "every peer told its history", len(heard))
			return
		case !history && len(heard)+1 >= majority:
			n.releaseVotes(g, "a majority starts afresh", len(heard))
			return
		case history && time.Since(start) >= n.cfg.voteGrace():
			var silent []string
			for _, p := range n.cfg.Peers {
				if p.ID != n.cfg.ID && !heard[p.ID] {
					silent = append(silent, p.ID)
				}
			}
			n.log.Warn("votes released without hearing from every peer: a leader elected now lacks what only they hold, if anything",
				"silent", silent, "waited", time.Since(start).Round(time.Second))
			n.releaseVotes(g, "the silent peers are taken for lost", len(heard))
			return
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func (n *Node) releaseVotes(g *voteGuard, why string, heard int) {
	g.held.Store(false)
	n.log.Info("votes released", "why", why, "floor", g.floor.Load(), "peers_heard", heard)
}
