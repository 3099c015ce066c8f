package cluster

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerReachWindow is how long a failed heartbeat counts. raft retries a
// failing peer with a back-off of at most about ten seconds (plus the dial's
// own timeout), so a peer that stays down fails again well within it, and a
// failure whose "resumed" observation was dropped stops counting after it.
const peerReachWindow = 60 * time.Second

// peerReach remembers, on the leader, the peers its heartbeats fail to
// reach, from raft's heartbeat observations and the refused tries the
// patient transport makes in raft's place (patient.go): a cluster of three with one
// member down still answers and every other metric looks healthy, but one
// more failure stops it (docs/operations.md, "Metrics").
type peerReach struct {
	window  time.Duration // how long a failure counts; 0: peerReachWindow
	mu      sync.Mutex
	failing map[raft.ServerID]time.Time // last failed heartbeat
}

func (p *peerReach) observe(o any, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch o := o.(type) {
	case raft.FailedHeartbeatObservation:
		if p.failing == nil {
			p.failing = make(map[raft.ServerID]time.Time)
		}
		p.failing[o.PeerID] = now
	case raft.ResumedHeartbeatObservation:
		delete(p.failing, o.PeerID)
	}
}

// reset forgets every failure: a new leadership starts with its own
// heartbeats.
func (p *peerReach) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.failing)
}

// unreachable counts the members of servers whose last heartbeat failed
// within the window before now.
func (p *peerReach) unreachable(servers []raft.Server, now time.Time) int {
	window := p.window
	if window <= 0 {
		window = peerReachWindow
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for id, at := range p.failing {
		if now.Sub(at) < window && slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == id }) {
			n++
		}
	}
	return n
}
