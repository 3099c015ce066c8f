package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// whose log is at least as up-to-date (raft's order: last term, then last
// index) as the most up-to-date log a peer told it of: every candidate
// that holds all committed entries is. It knows once
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

// logPos is the end of a raft log: its last entry's term and index.
type logPos struct{ term, index uint64 }

// atLeast is raft's "at least as up-to-date": a later last term, or the
// same and a last index as high.
func (p logPos) atLeast(q logPos) bool {
	return p.term > q.term || p.term == q.term && p.index >= q.index
}

// voteGuard holds a fresh node's votes (held) until it knows the floor a
// candidate's log must reach, then refuses a candidate below it.
//
// Beside the floor it keeps the highest commit index a peer told it
// (committed): a candidate's log must reach that index too. A peer of an
// earlier release tells no log end, only its commit index, and every
// candidate holding all committed entries reaches it.
type voteGuard struct {
	mu        sync.Mutex
	held      bool
	floor     logPos
	committed uint64
}

func newVoteGuard() *voteGuard { return &voteGuard{held: true} }

func (g *voteGuard) refuses(candidate logPos) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held || !candidate.atLeast(g.floor) || candidate.index < g.committed
}

func (g *voteGuard) set(held bool, floor logPos, committed uint64) {
	g.mu.Lock()
	g.held, g.floor, g.committed = held, floor, committed
	g.mu.Unlock()
}

func (g *voteGuard) state() (bool, logPos) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.floor
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
		if t.guard.refuses(logPos{req.LastLogTerm, req.LastLogIndex}) {
			t.refused.Add(1)
			rpc.Respond(&raft.RequestVoteResponse{RPCHeader: t.self, Term: req.Term}, nil)
			return true
		}
	case *raft.RequestPreVoteRequest:
		if t.guard.refuses(logPos{req.LastLogTerm, req.LastLogIndex}) {
			t.refused.Add(1)
			rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: t.self, Term: req.Term}, nil)
			return true
		}
	}
	return false
}

// preVoteTransport is a guardedTransport over a transport with pre-vote:
// raft asks the transport it is given whether it has one, and a guard over
// one without must not say it does.
type preVoteTransport struct {
	*guardedTransport
	pv raft.WithPreVote
}

func (t preVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.pv.RequestPreVote(id, target, args, resp)
}

// forRaft is the transport raft is given: g, with pre-vote when the wrapped
// transport has it.
func (t *guardedTransport) forRaft() raft.Transport {
	if pv, ok := t.Transport.(raft.WithPreVote); ok {
		return preVoteTransport{t, pv}
	}
	return t
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

// voteGuardPoll is how often a node whose votes are guarded asks its peers.
const voteGuardPoll = 200 * time.Millisecond

// voteGrace is how long a node with no data waits to hear from every peer
// before it votes by what the peers that answered told it; a peer silent
// that long no longer counts toward the floor.
const voteGrace = 10 * time.Second

func (c *Config) voteGrace() time.Duration {
	if c.voteGraceFor > 0 {
		return c.voteGraceFor
	}
	return voteGrace
}

// votesHeldFile marks a data dir whose node guards its votes: written
// before raft first writes there, removed once the node's own log reaches
// the floor. A restart in between (its log holds a bootstrap entry, or a
// heartbeat's term, so raft reads it as a node with a history) guards the
// votes again instead of letting that short log vote.
const votesHeldFile = "votes-held"

// peerHeard is what watchVotes last heard from a peer.
type peerHeard struct {
	end       logPos // {0 0} from a release that does not say
	committed uint64
	at        time.Time
	history   bool
}

// guardPeers is whom watchVotes asks: the configured peers, and the
// members of the node's own latest raft configuration (a restart's list may
// name members replaced since), but itself.
func (n *Node) guardPeers() []Peer {
	var peers []Peer
	seen := map[string]bool{n.cfg.ID: true}
	for _, p := range n.cfg.Peers {
		if !seen[p.ID] {
			seen[p.ID] = true
			peers = append(peers, p)
		}
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if id := string(s.ID); !seen[id] {
				seen[id] = true
				peers = append(peers, Peer{ID: id, Addr: string(s.Address)})
			}
		}
	}
	return peers
}

// watchVotes guards the node's votes (see above), asking the peers every
// voteGuardPoll. It releases them once the floor is known, keeps the floor
// to the peers heard within voteGrace (so that a peer lost after it
// answered cannot hold the vote from the others for good), and ends once
// the node's own log reaches the floor (raft's own rule covers the rest:
// it removes votesHeldFile then), or when stop closes.
func (n *Node) watchVotes(g *voteGuard, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	grace := n.cfg.voteGrace()
	heard := map[string]peerHeard{}
	start := time.Now()
	var outSince time.Time // when a member first said this node is not one
	tick := time.NewTicker(voteGuardPoll)
	defer tick.Stop()
	for {
		if n.removed() || n.removedBy.Load() != nil {
			return // out of the cluster: no vote of its own counts
		}
		peers := n.guardPeers()
		majority := (len(peers)+1)/2 + 1
		held, _ := g.state()
		leaderCommit, leaderTerm := uint64(0), uint64(0)
		for _, p := range peers {
			pctx, pcancel := context.WithTimeout(ctx, memberStatsTimeout)
			ms, err := n.askStats(pctx, p.Addr)
			pcancel()
			if err != nil {
				continue
			}
			if ms.Leader != "" && len(ms.Members) > 0 {
				// Not a member, says one that knows a leader, for a grace
				// on end (a rejoin removes and adds it back within
				// moments): removed, no vote of its own counts.
				switch {
				case slices.Contains(ms.Members, n.cfg.ID):
					outSince = time.Time{}
				case outSince.IsZero():
					outSince = time.Now()
				case time.Since(outSince) >= grace:
					return
				}
			}
			heard[p.ID] = peerHeard{end: logPos{ms.LastLogTerm, ms.LastLogIndex}, committed: ms.CommitIndex,
				at: time.Now(), history: ms.holdsHistory()}
			if ms.Role == "leader" {
				leaderCommit, leaderTerm = ms.CommitIndex, ms.Term
			}
		}
		if ctx.Err() != nil {
			return
		}
		var floor logPos
		var committed uint64
		history, all := false, true
		for _, p := range peers {
			h, ok := heard[p.ID]
			all = all && ok
			history = history || h.history
			if ok && time.Since(h.at) <= grace {
				if h.end.atLeast(floor) {
					floor = h.end
				}
				committed = max(committed, h.committed)
			}
		}
		own := n.ownLogEnd()
		if held {
			why := ""
			switch {
			case all:
				why = "every peer told its log"
			case !history && len(heard)+1 >= majority:
				why = "a majority starts afresh"
			case leaderCommit > 0 && own.term == leaderTerm && own.index >= leaderCommit:
				why = "caught up with the leader"
				floor = own
			case history && time.Since(start) >= grace:
				var silent []string
				for _, p := range peers {
					if _, ok := heard[p.ID]; !ok {
						silent = append(silent, p.ID)
					}
				}
				n.log.Warn("votes released without hearing from every peer: a leader elected now lacks what only they hold, if anything",
					"silent", silent, "waited", time.Since(start).Round(time.Second))
				why = "the silent peers are taken for lost"
			}
			if why != "" {
				held = false
				n.log.Info("votes released", "why", why, "floor_term", floor.term, "floor_index", floor.index, "peers_heard", len(heard))
			}
		}
		g.set(held, floor, committed)
		if !held && own.atLeast(floor) && own.index >= committed {
			// Its own log reaches the floor: raft's own rule refuses all
			// the guard would, and every request goes to raft again.
			g.set(false, logPos{}, 0)
			if err := os.Remove(filepath.Join(n.cfg.Dir, votesHeldFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				n.log.Warn("could not remove the vote guard's marker; the next start guards the votes again", "err", err)
			}
			return
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// ownLogEnd is the end of this node's log as raft's vote compares it: the
// last entry's term and index, or the newest snapshot's when later (a
// snapshot install does not move the log's end).
func (n *Node) ownLogEnd() logPos {
	st := n.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	end := logPos{num("last_log_term"), num("last_log_index")}
	if snap := (logPos{num("last_snapshot_term"), num("last_snapshot_index")}); snap.index > end.index {
		end = snap
	}
	return end
}

// guardVotes reports whether this start guards the node's votes: it has
// peers, and no raft state (the marker is written first, durably) or the
// marker of a start that had none and has not caught up since.
func (n *Node) guardVotes(existing bool) (bool, error) {
	marker := filepath.Join(n.cfg.Dir, votesHeldFile)
	if len(n.cfg.Peers) <= 1 {
		if err := os.Remove(marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("vote guard: %w", err)
		}
		return false, nil
	}
	if existing {
		_, err := os.Stat(marker)
		return err == nil, nil
	}
	if err := writeDurably(marker, nil); err != nil {
		return false, fmt.Errorf("vote guard: %w", err)
	}
	return true, nil
}
