package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Drainer lets a leader's delivery work finish before leadership moves:
// Drain stops leasing and returns once every delivery in flight has its
// outcome recorded, or when ctx ends (forward.Forwarder implements it). A
// handler's answer that arrives after the hand-over cannot be recorded, and
// its event would run again when its lease ends.
type Drainer interface {
	Drain(ctx context.Context) error
	// Undrain ends a drain: the hand-over failed and this node still leads.
	Undrain()
}

// drainTimeout bounds a drain before a hand-over, unless the Drainer says
// its deliveries may take longer (DrainLimiter): a handler slower than that
// is left to its lease (its event runs again when the lease ends). With the
// intake's own shutdown it fits the systemd unit's TimeoutStopSec.
const drainTimeout = 10 * time.Second

// DrainLimiter is a Drainer that knows how long a delivery in flight may
// still take (the longest forward_timeout): a drain waits that long rather
// than drainTimeout when it is longer, so that no delivery a handler is
// still allowed to finish is cut off and sent again.
type DrainLimiter interface {
	DrainLimit() time.Duration
}

// SetDrainer makes d what this node drains before it hands leadership over
// (nil: nothing). Set it while leading, unset it when delivery stops.
func (n *Node) SetDrainer(d Drainer) {
	if d == nil {
		n.drainer.Store(nil)
		return
	}
	n.drainer.Store(&drainerRef{d})
}

type drainerRef struct{ Drainer }

// drainDeliveries drains the delivery work, if any, for at most drainTimeout
// (or the Drainer's DrainLimit) or until ctx ends (then it logs what it left to the leases).
func (n *Node) drainDeliveries(ctx context.Context) {
	ref := n.drainer.Load()
	if ref == nil {
		return
	}
	limit := drainTimeout
	if dl, ok := ref.Drainer.(DrainLimiter); ok {
		limit = max(limit, dl.DrainLimit())
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := ref.Drain(ctx); err != nil {
		n.log.Warn("draining deliveries: deliveries still in flight; their events run again when their leases end",
			"err", err)
	}
}

// ErrSingleVoter is returned by TransferLeadership when no other voter can
// take over; ErrNotVoter when the node named is not another voter.
var (
	ErrSingleVoter = errors.New("no other voter to take leadership")
	ErrNotVoter    = errors.New("not another voter of the cluster")
	// ErrNotMember is returned by RemovePeer for an id the cluster does
	// not have.
	ErrNotMember = errors.New("not a member of the cluster")
	// ErrBehind is returned by TransferLeadership when the node named has
	// not caught up with the leader's log within catchUpLimit.
	ErrBehind = errors.New("not caught up with the leader's log")
	// ErrNewerFormat is returned by TransferLeadership when the node named
	// runs a newer data format than another voter: as leader it would halt
	// that voter (docs/operations.md, Upgrades).
	ErrNewerFormat = errors.New("runs a newer data format than another voter")
)

// catchUpLimit bounds how long a hand-over to a named node waits for it to
// catch up with the log (a node restarted moments ago replays and
// receives what it missed). Raft's own transfer gives the target one
// election timeout, during which this leader takes no new entries: a
// target still far behind would only fail it, after holding every claim
// for that second.
const catchUpLimit = 30 * time.Second

// TransferLeadership hands leadership to another voter (to, or the most
// up-to-date one when to is ""), after this leader's deliveries in flight
// finished (Drainer). It returns the new leader's id. Leader only:
// ErrNotLeader elsewhere.
func (n *Node) TransferLeadership(ctx context.Context, to string) (string, error) {
	if n.raft.State() != raft.Leader {
		return "", n.notLeader(ctx, "transfer leadership")
	}
	if n.voters() < 2 {
		return "", fmt.Errorf("transfer leadership: %w", ErrSingleVoter)
	}
	if to == "" {
		// raft's own choice is the most up-to-date voter, whatever it runs.
		id, err := n.formatSafeTarget(ctx, false)
		if err != nil {
			return "", fmt.Errorf("transfer leadership: %w", err)
		}
		to = id
	}
	var addr raft.ServerAddress
	if to != "" {
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return "", fmt.Errorf("transfer leadership: %w", err)
		}
		for _, s := range f.Configuration().Servers {
			if s.ID == raft.ServerID(to) && s.Suffrage == raft.Voter {
				addr = s.Address
			}
		}
		if addr == "" || to == n.cfg.ID {
			return "", fmt.Errorf("transfer leadership to %q: %w", to, ErrNotVoter)
		}
		if err := n.checkFormats(ctx, to); err != nil {
			return "", err
		}
		if err := n.waitCaughtUp(ctx, to, addr); err != nil {
			return "", err
		}
	}
	n.drainDeliveries(ctx)
	// The new leader's term reaches this node's replication a moment after
	// the transfer returns.
	n.handingOver(time.Minute)
	// If leadership did not move, deliveries go on here.
	defer func() {
		if ref := n.drainer.Load(); ref != nil && n.raft.State() == raft.Leader {
			ref.Undrain()
		}
	}()
	var fut raft.Future
	if to == "" {
		fut = n.raft.LeadershipTransfer()
	} else {
		fut = n.raft.LeadershipTransferToServer(raft.ServerID(to), addr)
	}
	if err := fut.Error(); err != nil {
		return "", fmt.Errorf("transfer leadership: %w", translateApplyErr(err))
	}
	id := n.newLeader(ctx)
	n.log.Info("leadership handed over", "to", id)
	return id, nil
}

// newLeader waits, up to two election timeouts or ctx, until this node knows
// another leader, and returns its id ("" when none is known by then).
func (n *Node) newLeader(ctx context.Context) string {
	t := time.NewTimer(2 * orDur(n.cfg.ElectionTimeout, time.Second))
	defer t.Stop()
	for {
		_, epoch := n.leaders.current()
		if _, id := n.raft.LeaderWithID(); id != "" && string(id) != n.cfg.ID {
			return string(id)
		}
		select {
		case <-epoch.Done(): // the observer saw a change
		case <-t.C:
			return ""
		case <-ctx.Done():
			return ""
		}
	}
}

// catchUpPoll is how often waitCaughtUp asks the target how far it is.
const catchUpPoll = 100 * time.Millisecond

// refusedAsks is how many asks in a row that find nothing listening on the
// target's cluster port (a second's worth) make waitCaughtUp give up on it.
const refusedAsks = 10

// refusedAsk returns the count of asks in a row that found nothing
// listening, after one that ended with err.
func refusedAsk(err error, n int) int {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return n + 1
	}
	return 0
}

// waitCaughtUp waits until the voter id (at addr) has committed everything
// this leader had committed when it last asked, catchUpPoll earlier: it
// keeps up with the log. It gives up after catchUpLimit, or when ctx ends,
// with ErrBehind and both indexes.
func (n *Node) waitCaughtUp(ctx context.Context, id string, addr raft.ServerAddress) error {
	ctx, cancel := context.WithTimeout(ctx, catchUpLimit)
	defer cancel()
	var last memberStats
	var lastErr error
	refused := 0 // asks in a row that found nothing listening
	for {
		mark := n.raft.CommitIndex()
		ms, err := n.askStats(ctx, string(addr))
		if err == nil && ms.ID != id {
			err = fmt.Errorf("%s answers as %q", addr, ms.ID)
		}
		if err == nil {
			if ms.CommitIndex >= mark {
				return nil
			}
			last = ms
		}
		lastErr = err
		if refused = refusedAsk(err, refused); refused >= refusedAsks && last.ID == "" {
			// Not running (or not yet: a restart takes longer than this);
			// no point in waiting the whole catchUpLimit for it.
			return fmt.Errorf("transfer leadership to %q: %w: it is not running: nothing listens on its cluster port (%v)", id, ErrBehind, err)
		}
		t := time.NewTimer(catchUpPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if last.ID == "" && lastErr != nil {
				return fmt.Errorf("transfer leadership to %q: %w: it did not answer (%v)", id, ErrBehind, lastErr)
			}
			return fmt.Errorf("transfer leadership to %q: %w: it has committed entry %d, the leader %d; try again once `oncehook status` shows it near the leader",
				id, ErrBehind, last.CommitIndex, n.raft.CommitIndex())
		}
	}
}

// checkFormats refuses a hand-over to a voter whose binary writes a newer
// data format than another voter's: its entries would halt that voter, and
// with two such voters the cluster (upgrades go followers first, the leader
// last). A member that does not answer is not counted against it.
func (n *Node) checkFormats(ctx context.Context, to string) error {
	st := n.ClusterStatus(ctx)
	var target uint64
	for _, s := range st.Nodes {
		if s.ID == to {
			target = s.Format
		}
	}
	var older, followers []string
	for _, s := range st.Nodes {
		if s.ID != to && s.Suffrage == "Voter" && s.Format != 0 && target > s.Format {
			name := fmt.Sprintf("%s (format %d", s.ID, s.Format)
			if s.ID == n.cfg.ID {
				name += ", this leader"
			} else {
				followers = append(followers, s.ID)
			}
			older = append(older, name+")")
		}
	}
	if len(older) == 0 {
		return nil
	}
	// The leader is upgraded last (docs/operations.md, Upgrades): the
	// advice names the followers to upgrade first, if any.
	next := "upgrade " + strings.Join(followers, ", ") + " first, the leader last"
	if len(followers) == 0 {
		next = "the followers are upgraded: upgrade this leader now (stop it; the cluster elects another)"
	}
	return fmt.Errorf("transfer leadership to %q: %w: it writes format %d, and %s would halt on its entries; %s",
		to, ErrNewerFormat, target, strings.Join(older, ", "), next)
}

// formatSafeTarget names the voter a hand-over without a named target goes
// to while the voters' binaries write different data formats (a rolling
// upgrade): one whose format is no newer than any other voter's, so that
// as leader it halts none of them (docs/operations.md, Upgrades); of
// several, the one that has committed most. leaving leaves this node out of
// the comparison: it is stopping, and its binary is the one being replaced.
// It returns "" when every voter that answered writes one format (raft's
// own choice, the most up-to-date voter, is then safe), and ErrNewerFormat
// when every candidate would halt another voter. A member that does not
// answer is neither a candidate nor compared with.
func (n *Node) formatSafeTarget(ctx context.Context, leaving bool) (string, error) {
	st := n.ClusterStatus(ctx)
	var voters []Server
	formats := map[uint64]bool{}
	for _, s := range st.Nodes {
		if s.Suffrage == "Voter" && s.Error == "" {
			voters = append(voters, s)
			formats[s.Format] = true // 0: a binary older than the field
		}
	}
	if len(formats) < 2 {
		return "", nil
	}
	var best *Server
	var blocker Server
	for i := range voters {
		c := &voters[i]
		if c.ID == n.cfg.ID {
			continue
		}
		safe := true
		for _, o := range voters {
			if o.ID != c.ID && !(leaving && o.ID == n.cfg.ID) && c.Format > o.Format {
				safe, blocker = false, o
				break
			}
		}
		if safe && (best == nil || c.CommitIndex > best.CommitIndex) {
			best = c
		}
	}
	if best == nil {
		return "", fmt.Errorf("%w: every other voter does, %s writes format %d; upgrade %s first",
			ErrNewerFormat, blocker.ID, blocker.Format, blocker.ID)
	}
	return best.ID, nil
}
