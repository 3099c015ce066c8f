package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
	"oncehook/failpoint"
)

// Apply proposes commands on behalf of any caller: through the log when this
// node leads, through the leader otherwise. Results come back in order. A
// command only the leader may propose (relayable) fails with ErrNotLeader
// on any other node, before it joins a relayed batch: the leader refuses
// such a batch whole, other callers' claims with it.
func (n *Node) Apply(ctx context.Context, cmds ...engine.Command) ([]engine.Result, error) {
	leaderOnly := slices.ContainsFunc(cmds, func(c engine.Command) bool { return !relayable(c.Op) })
	return n.propose(ctx, cmds, leaderOnly)
}

func (n *Node) propose(ctx context.Context, cmds []engine.Command, leaderOnly bool) ([]engine.Result, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	return n.prop.submit(ctx, cmds, leaderOnly)
}

func (n *Node) applyOne(ctx context.Context, c engine.Command, leaderOnly bool) (engine.Result, error) {
	return n.prop.submitOne(ctx, c, leaderOnly, false)
}

// Claim commits a claim on a majority and reports whether it created the event.
// A duplicate is Result.Created == false, not an error.
func (n *Node) Claim(ctx context.Context, c engine.Command) (engine.Result, error) {
	if n.removedBy.Load() != nil || n.removedWhileRunning() {
		// No leader will ever answer: say so at once, not after the
		// wait for one.
		return engine.Result{}, fmt.Errorf("claim %s: %w", c.Key, ErrRemoved)
	}
	c.Op = engine.OpClaim
	r, err := n.applyOne(ctx, c, false)
	if err != nil {
		return r, fmt.Errorf("claim %s: %w", c.Key, err)
	}
	if r.Err != nil {
		return r, fmt.Errorf("claim %s: %w", c.Key, r.Err)
	}
	failpoint.Inject(failpoint.AfterClaimApplyBeforeResponse)
	return r, nil
}

// Lease, Complete, Fail, Reclaim and Expire belong to the leader's delivery
// work; on any other node they fail with ErrNotLeader and are never relayed,
// and the leader refuses them from a peer (relayable), so a deposed leader
// cannot act through its successor.

// Lease moves up to max due events to processing under a new fencing token.
func (n *Node) Lease(ctx context.Context, max int, leaseFor time.Duration) ([]engine.Event, error) {
	evs, _, err := n.LeaseFrom(ctx, max, leaseFor, nil, nil, 0, 0)
	return evs, err
}

// LeaseFrom is Lease taking from each source no more than quotas, share and
// spare allow (engine.Command.Quotas, Share and Spare). It also returns the
// sources with due events the lease did not take (engine.Result.Waiting).
func (n *Node) LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) ([]engine.Event, []string, error) {
	// Nothing due (the usual case when idle, and under load when claims
	// lease their own events): no entry. The forwarder leases on every poll
	// tick, so an idle cluster would otherwise commit, and fsync on every
	// node, an entry a second. An event committed but not yet applied here
	// is not missed: its claim wakes the forwarder after it is applied.
	if n.raft.State() != raft.Leader {
		return nil, nil, fmt.Errorf("%s: %w", engine.OpLease, ErrNotLeader)
	}
	if due, err := n.eng.LeaseDue(n.now().UnixNano(), quotas); err == nil && !due {
		return nil, nil, nil
	}
	r, err := n.applyOne(ctx, engine.Command{Op: engine.OpLease, Max: max, LeaseFor: int64(leaseFor), Leases: leases, Quotas: quotas, Share: share, Spare: spare}, true)
	if err != nil {
		return nil, nil, fmt.Errorf("lease: %w", err)
	}
	if r.Err != nil {
		return nil, nil, fmt.Errorf("lease: %w", r.Err)
	}
	return r.Events, r.Waiting, nil
}

// Complete marks key done under token, storing the handler's step when it is
// not ""; engine.ErrStaleToken when fenced. The payload is dropped
// payloadKeep from now.
func (n *Node) Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, payloadKeep time.Duration) error {
	return n.leaderCmd(ctx, engine.Command{Op: engine.OpComplete, Key: key, Token: token, Response: resp, Step: step,
		PayloadRetention: int64(payloadKeep)})
}

// Fail records a failed attempt (and the handler's step when it is not "",
// and at in the attempt history when it is not nil); the engine decides
// pending or dead (then kept deadKeep from now).
func (n *Node) Fail(ctx context.Context, key string, token uint64, retryIn time.Duration, maxAttempts int, reason, step string, deadKeep time.Duration, at *engine.Attempt) error {
	return n.leaderCmd(ctx, engine.Command{Op: engine.OpFail, Key: key, Token: token, RetryIn: int64(retryIn), MaxAttempts: maxAttempts,
		Reason: reason, Step: step, DeadRetention: int64(deadKeep), Attempt: at})
}

// HandBack returns a leased event whose attempt never started (a rate
// limit, its source no longer configured) to pending retryIn from now, and
// takes back the attempt its lease counted (engine Command.Refund).
func (n *Node) HandBack(ctx context.Context, key string, token uint64, retryIn time.Duration, reason string) error {
	return n.leaderCmd(ctx, engine.Command{Op: engine.OpFail, Key: key, Token: token, RetryIn: int64(retryIn),
		Reason: reason, Refund: true})
}

// Reclaim returns expired leases to pending, after repairing schedules more
// than horizon ahead (0: none; engine Command.Horizon).
func (n *Node) Reclaim(ctx context.Context, horizon time.Duration) (int, error) {
	if n.raft.State() != raft.Leader {
		return 0, fmt.Errorf("%s: %w", engine.OpReclaim, ErrNotLeader)
	}
	// Nothing to reclaim or repair (the usual case): no entry. An idle
	// cluster would otherwise commit one every sweep. The leader's applied
	// state may trail its commits by an entry; what that hides is found at
	// the next sweep.
	if due, err := n.eng.ReclaimDue(n.now().UnixNano(), int64(horizon)); err == nil && !due {
		return 0, nil
	}
	return n.countCmd(ctx, engine.Command{Op: engine.OpReclaim, Horizon: int64(horizon)}, true)
}

// Expire ends every retention bucket that has ended: how many events went,
// and the dead letters among them. It goes ExpireBatch entries of the
// buckets a command, so that claims commit between them.
func (n *Node) Expire(ctx context.Context) (int, []engine.Event, error) {
	var total int
	var dead []engine.Event
	if n.raft.State() == raft.Leader && n.clockHeld(ctx) != "" {
		return 0, nil, nil // logged and shown in Status.ClockHeld
	}
	for {
		r, err := n.applyOne(ctx, engine.Command{Op: engine.OpExpire, Max: ExpireBatch}, true)
		if err != nil {
			return total, dead, fmt.Errorf("expire: %w", err)
		}
		total += r.N
		dead = append(dead, r.Events...)
		if r.Err != nil || !r.More {
			return total, dead, r.Err
		}
	}
}

// ExpireBatch is how many entries of the ended retention buckets one expire
// command visits: about 25 ms of apply on the reference machine (12 µs an
// event deleted), so a claim waits at most that behind one.
const ExpireBatch = 2000

// DropPayloads drops the payloads of done events whose drop time passed, at
// most max (0: all); those completed without one (before drop times were
// recorded) when done longer than legacyAge (0: never).
//
// Nothing due (engine.PayloadsDue on the leader's applied state): no entry,
// so that the sweeper may ask every second and an idle cluster still
// commits nothing.
func (n *Node) DropPayloads(ctx context.Context, legacyAge time.Duration, max int) (int, error) {
	now := n.now()
	since := int64(1) // keeps them: no event completed in the first nanosecond of 1970
	if legacyAge > 0 {
		since = now.Add(-legacyAge).UnixNano()
	}
	if n.raft.State() == raft.Leader {
		if due, err := n.eng.PayloadsDue(now.UnixNano(), since); err == nil && !due {
			return 0, nil
		}
		if n.clockHeld(ctx) != "" {
			return 0, nil // logged and shown in Status.ClockHeld
		}
	}
	return n.countCmd(ctx, engine.Command{Op: engine.OpDropPayloads, Before: now.UnixNano(), Since: since, Max: max}, true)
}

// Replay moves dead or done events back to pending with an audit record. It
// may run on any node.
func (n *Node) Replay(ctx context.Context, c engine.Command) (engine.Result, error) {
	c.Op = engine.OpReplay
	r, err := n.applyOne(ctx, c, false)
	if err != nil {
		return r, fmt.Errorf("replay: %w", err)
	}
	return r, r.Err
}

// Pause holds source: its pending events are not leased until Resume. It
// may run on any node, like Replay. changed is false when the source was
// already paused.
func (n *Node) Pause(ctx context.Context, source, who, reason string) (bool, error) {
	return n.sourceCmd(ctx, engine.OpPause, source, who, reason)
}

// Resume releases a paused source; its held events go out oldest first. It
// may run on any node. changed is false when the source was not paused.
func (n *Node) Resume(ctx context.Context, source, who, reason string) (bool, error) {
	return n.sourceCmd(ctx, engine.OpResume, source, who, reason)
}

func (n *Node) sourceCmd(ctx context.Context, op engine.Op, source, who, reason string) (bool, error) {
	r, err := n.applyOne(ctx, engine.Command{Op: op, Source: source, Who: who, Reason: reason}, false)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", op, source, err)
	}
	return r.N > 0, nil
}

// Sources reads the paused sources from this node's applied state.
func (n *Node) Sources() (map[string]engine.SourceState, error) { return n.eng.Sources() }

// Backlog reads the pending events per source from this node's applied
// state (counters and a seek or two per source: see engine.Backlog).
func (n *Node) Backlog() (map[string]engine.Backlog, error) { return n.eng.Backlog() }

func (n *Node) leaderCmd(ctx context.Context, c engine.Command) error {
	// An outcome rides with the next claim (proposer.ride), but for a sync
	// source's completion (it carries the cached response): its provider is
	// waiting for that answer. (A sync source's failure may wait RideFor.)
	riding := (c.Op == engine.OpComplete && c.Response == nil) || c.Op == engine.OpFail
	r, err := n.prop.submitOne(ctx, c, true, riding)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.Op, c.Key, err)
	}
	if r.Err != nil {
		return fmt.Errorf("%s %s: %w", c.Op, c.Key, r.Err)
	}
	return nil
}

func (n *Node) countCmd(ctx context.Context, c engine.Command, leaderOnly bool) (int, error) {
	r, err := n.applyOne(ctx, c, leaderOnly)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.Op, err)
	}
	return r.N, r.Err
}

// Lookup reads this node's applied state. A key found here is committed, so
// the intake may answer a duplicate from it without a Raft round; a key not
// found here proves nothing (this node may lag), and the claim decides.
// While a restore this node leads is unconfirmed its state is not yet
// committed, and after a start it may predate a restore (current.go): it
// finds nothing then, and claims decide.
func (n *Node) Lookup(key string) (engine.State, bool, error) {
	if n.restoring.Load() || !n.isCurrent() {
		return 0, false, nil // the claim decides, on the cluster's state (current.go)
	}
	return n.eng.Exists(key)
}

// Get reads one event from this node's applied state.
func (n *Node) Get(key string, withPayload bool) (engine.Event, error) {
	return n.eng.Get(key, withPayload)
}

// List reads events from this node's applied state.
func (n *Node) List(f engine.ListFilter) ([]engine.Event, error) { return n.eng.List(f) }

// Counts reads event counts by state and by source from this node's applied state.
func (n *Node) Counts() (map[engine.State]int, map[string]int, error) { return n.eng.Counts() }

// Wake is signalled (coalesced) when new work may be due: a claim, a replay
// or a reclaim was applied.
func (n *Node) Wake() <-chan struct{} { return n.wake }

// Wait blocks until final holds of key's event on this node's applied
// state, or ctx ends; it returns the event as applied. It looks again when
// the event is created, completed or failed here. Used by sync sources, and
// by a follower's intake for an event its relayed duplicate found on the
// leader.
func (n *Node) Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error) {
	for {
		ch := make(chan struct{})
		n.waitMu.Lock()
		n.waiters[key] = append(n.waiters[key], ch)
		n.waitedKeys.Store(int64(len(n.waiters)))
		n.waitMu.Unlock()
		ev, err := n.eng.Get(key, false)
		if err == nil && final(ev) {
			n.dropWaiter(key, ch)
			return ev, nil
		}
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			n.dropWaiter(key, ch)
			return ev, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			n.dropWaiter(key, ch)
			return ev, ctx.Err()
		}
	}
}

func (n *Node) dropWaiter(key string, ch chan struct{}) {
	n.waitMu.Lock()
	defer n.waitMu.Unlock()
	ws := n.waiters[key]
	for i, w := range ws {
		if w == ch {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(n.waiters, key)
	} else {
		n.waiters[key] = ws
	}
	n.waitedKeys.Store(int64(len(n.waiters)))
}

// raftRefusalsSaid names the peers whose cluster handshake refused this
// node's raft connections lately ("" for none): a node whose token differs
// from the others' otherwise reads only as waiting for a quorum.
func (n *Node) raftRefusalsSaid() string {
	if n.mux == nil {
		return ""
	}
	addrs := n.mux.refusedRaft(30 * time.Second)
	if len(addrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(addrs))
	for _, a := range addrs {
		name := a
		for _, p := range n.cfg.Peers {
			if p.Addr == a {
				name = p.ID + " (" + a + ")"
			}
		}
		names = append(names, name)
	}
	return "; " + strings.Join(names, ", ") + " refused this node's cluster handshake: its cluster token_file or certificates differ from theirs, or they run an older release (see their log)"
}

// IsLeader reports whether this node currently believes it leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Ready reports whether the node can serve intake: it knows a leader, has
// applied everything it knows to be committed and, when it leads, has
// committed an entry of its own term. The reason says why not.
func (n *Node) Ready() (bool, string) {
	if why := n.foreign.Load(); why != nil {
		return false, *why
	}
	if n.removed() {
		return false, "not a member of the cluster configuration (removed): it takes no part in commits"
	}
	if by := n.removedBy.Load(); by != nil {
		return false, "not a member of the cluster configuration (removed, says " + *by + "): it takes no part in commits"
	}
	addr, id := n.raft.LeaderWithID()
	if why := n.storeTrouble.Load(); why != nil {
		// Its commit index stops where its log does: applied == commit
		// would read as caught up.
		return false, "cannot store what the leader sends (behind the cluster until it can; a full disk?): " + *why
	}
	if addr == "" {
		if n.voters() > 1 {
			return false, "no leader: waiting for a quorum of peers" + n.raftRefusalsSaid()
		}
		return false, "no leader yet"
	}
	applied, commit := n.raft.AppliedIndex(), n.raft.CommitIndex()
	if commit == 0 {
		// A leader is known but nothing is committed yet (the first moments
		// of a new cluster): applied = commit = 0 would read as caught up.
		return false, fmt.Sprintf("no entry committed yet (leader %s)", id)
	}
	if applied < commit && !n.awaitApplied(commit) {
		return false, fmt.Sprintf("catching up: applied %d of %d (leader %s)", n.raft.AppliedIndex(), commit, id)
	}
	if why := n.leaderCannotCommit(commit); why != "" {
		return false, why
	}
	if why := n.leaderRefuses(addr, id); why != "" {
		return false, why
	}
	if why := n.behindLeader(addr, id); why != "" {
		return false, why
	}
	return true, "leader " + string(id)
}

// readyApplyWait is how long Ready waits for the apply to reach the commit
// index it read. Under load every node applies a little behind its commit:
// raft hands committed entries to the state machine through a queue, and
// counts them applied only once they are in it, so while an engine commit
// holds the state machine (tens of milliseconds) a full queue leaves the
// applied index behind. A probe meeting that moment read a healthy node as
// not ready and a load balancer took it out of rotation. A node replaying its
// log, or one whose state machine is stuck, does not reach the index in
// that time and stays not ready; the bound is by time, not by a count of
// entries, so a node far behind is never taken for caught up.
const readyApplyWait = 250 * time.Millisecond

// applyWait is the one wait for the apply that every readiness probe meeting
// the node behind shares: the intake's /readyz answers anyone, and a flood
// of probes each with its own poll would take CPU from the apply they wait
// for. The first probe polls until the applied index reaches the highest
// commit index any of them read (target) or the last of their waits ends
// (until); done closes then, and each answers by its own index. Its fields
// are guarded by Node.readyMu, under which probes join and the poll ends.
type applyWait struct {
	target uint64
	until  time.Time
	joined int // probes that joined the first one's wait
	done   chan struct{}
}

// awaitApplied reports whether raft's applied index reaches index within
// the ready wait (shared: applyWait). Raft has no notification for it; one
// poll per node is cheap.
func (n *Node) awaitApplied(index uint64) bool {
	until := n.cfg.Now().Add(n.cfg.readyWait)
	n.readyMu.Lock()
	w := n.applyWaiting
	first := w == nil
	if first {
		w = &applyWait{done: make(chan struct{})}
		n.applyWaiting = w
	} else {
		w.joined++
	}
	w.target = max(w.target, index)
	if until.After(w.until) {
		w.until = until
	}
	n.readyMu.Unlock()
	if first {
		if n.cfg.readyWaiting != nil {
			n.cfg.readyWaiting()
		}
		n.pollApplied(w)
	} else {
		select {
		case <-w.done:
		case <-n.probeCtx.Done():
			return false
		}
	}
	return n.raft.AppliedIndex() >= index
}

// pollApplied polls until w's target is applied or its wait ends, and ends
// the wait. The check and the end are under readyMu, where probes join: a
// probe that raised the target or the wait's end is never left out.
func (n *Node) pollApplied(w *applyWait) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		n.readyMu.Lock()
		if n.raft.AppliedIndex() >= w.target || !n.cfg.Now().Before(w.until) || n.probeCtx.Err() != nil {
			n.applyWaiting = nil
			close(w.done)
			n.readyMu.Unlock()
			return
		}
		n.readyMu.Unlock()
		select {
		case <-tick.C:
		case <-n.probeCtx.Done():
		}
	}
}

// leaderCannotCommit says why a leader is not ready until an entry of its own
// term is committed: a new leader's commit index is the one it learnt as a
// follower, and raft advances it only once an entry of the new term (the
// no-op raft appends on election) is stored on a majority. Without this a
// leader elected by voters that then cannot store its entries read as
// caught up, and its claims waited for a commit that never came. Empty when
// the node does not lead, or leads and has committed in its term.
func (n *Node) leaderCannotCommit(commit uint64) string {
	if n.raft.State() != raft.Leader {
		return ""
	}
	term := n.raft.CurrentTerm()
	var l raft.Log
	entryTerm := uint64(0)
	if err := n.logs.GetLog(commit, &l); err == nil {
		entryTerm = l.Term
	} else {
		// No entry at the commit index: a node that installed a snapshot
		// holds none until the next one arrives, and its commit index is
		// the snapshot's. The snapshot's term tells. Anything else (an
		// entry compacted since) is older than a snapshot this leader
		// took, past an entry of its own term.
		st := n.raft.Stats()
		idx, _ := strconv.ParseUint(st["last_snapshot_index"], 10, 64)
		if idx != commit {
			return ""
		}
		entryTerm, _ = strconv.ParseUint(st["last_snapshot_term"], 10, 64)
	}
	if entryTerm >= term {
		return ""
	}
	return fmt.Sprintf("leader of term %d: no entry of its term committed yet (commit index %d; a quorum storing its entries?)", term, commit)
}

// Server is one member as the status API reports it. State is the member's
// role from this node's point of view; the fields after it are the member's
// own answer, filled by ClusterStatus only.
type Server struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
	State    string `json:"state"` // leader|follower|unknown from this node's point of view (itself: candidate too)

	// Role is what the member says it is: leader, follower or candidate;
	// unknown when it did not answer (Error says why).
	Role         string `json:"role,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	CommitIndex  uint64 `json:"commit_index,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	// LastContact is how long since the member last heard from the leader:
	// "0s" on the leader, "never" if it never did.
	LastContact string `json:"last_contact,omitempty"`
	// Format is the data format the member's binary writes
	// (engine.FormatVersion): during a rolling upgrade it shows which nodes
	// run the new binary. 0: the member's binary predates the field.
	Format uint64 `json:"format,omitempty"`
	// Admin is the member's admin API as it reports it (Config.AdminURL);
	// empty when unknown or the member's binary predates the field.
	Admin string `json:"admin,omitempty"`
	Error string `json:"error,omitempty"`
}

// Status is this node's view of the cluster.
type Status struct {
	NodeID        string `json:"node_id"`
	State         string `json:"state"`
	LeaderID      string `json:"leader_id"`
	LeaderAddress string `json:"leader_address"`
	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commit_index"`
	AppliedIndex  uint64 `json:"applied_index"`
	LastContact   string `json:"last_contact"`
	LeaderChanges uint64 `json:"leader_changes"`
	// Unreachable is, on the leader, the members its heartbeats have
	// failed to reach in the last minute (peerreach.go); 0 elsewhere.
	Unreachable int `json:"unreachable_peers"`
	// ClockHeld is, on the leader, why it does not end retention buckets
	// nor drop payloads now: its clock lacks a majority of the voters
	// (clockcheck.go). "" when it does, and on other nodes.
	ClockHeld string `json:"clock_held,omitempty"`
	// StoreFailing is why this node's last raft log append, snapshot or
	// snapshot install failed, while no append has succeeded since (a full
	// disk); "" otherwise. StoreErrors counts such failures since start.
	StoreFailing string `json:"store_failing,omitempty"`
	StoreErrors  uint64 `json:"store_errors"`
	// PeersNotStoring is, on the leader, the followers that refused the
	// last append it sent them because they could not store it, and that it
	// is sending it to again (patient.go); empty elsewhere.
	PeersNotStoring []string `json:"peers_not_storing,omitempty"`
	// ClusterID is the id the cluster named itself with ("": not yet;
	// identity.go): a node of another cluster reports another one.
	ClusterID string   `json:"cluster_id"`
	Nodes     []Server `json:"nodes"`
	// Batching: how many commands this node packed per log entry it proposed
	// (as leader) and per batch it relayed (as follower).
	Proposed BatchStats `json:"proposed"`
	Relayed  BatchStats `json:"relayed"`
	// ClaimLeases: claims this node proposed as leader while a worker was
	// free (offered), and those that leased their event (claimlease.go).
	ClaimLeases ClaimLeaseStats `json:"claim_leases"`
}

// ClaimLeaseStats counts claims that carried a lease.
type ClaimLeaseStats struct {
	Offered uint64 `json:"offered"`
	Leased  uint64 `json:"leased"`
}

// BatchStats counts batches and the commands in them.
type BatchStats struct {
	Batches  uint64 `json:"batches"`
	Commands uint64 `json:"commands"`
}

// appliedIndex is the last index applied to this node's state, as status
// shows it. After a restart raft counts from its newest snapshot until the
// leader tells it the commit index, while the engine, which persists, holds
// every entry it applied before: a node cut off from the leader (removed,
// say) would show applied 0 next to the events it holds.
func (n *Node) appliedIndex() uint64 {
	return max(n.raft.AppliedIndex(), n.eng.LastApplied())
}

// Status reports role, indexes and membership as this node sees them.
func (n *Node) Status() Status {
	addr, id := n.raft.LeaderWithID()
	st := Status{
		NodeID:        n.cfg.ID,
		State:         stateName(n.raft.State()),
		LeaderID:      string(id),
		LeaderAddress: string(addr),
		Term:          n.raft.CurrentTerm(),
		CommitIndex:   n.raft.CommitIndex(),
		AppliedIndex:  n.appliedIndex(),
		ClusterID:     n.clusterID(),
	}
	st.Proposed = BatchStats{n.prop.entries.Load(), n.prop.commands.Load()}
	st.Relayed = BatchStats{n.prop.relays.Load(), n.prop.relayed.Load()}
	st.ClaimLeases = ClaimLeaseStats{n.prop.claimLeases.Load(), n.prop.claimLeased.Load()}
	st.LeaderChanges = n.leaders.leaderChanges()
	if why := n.storeTrouble.Load(); why != nil {
		st.StoreFailing = *why
	}
	st.StoreErrors = n.storeErrors.Load()
	if st.State == "leader" {
		st.LastContact = "0s"
		st.ClockHeld = n.clock.heldReason(st.Term)
		if n.patient != nil {
			st.PeersNotStoring = n.patient.peersNotStoring()
		}
	} else if lc := n.raft.LastContact(); !lc.IsZero() {
		st.LastContact = time.Since(lc).Round(time.Millisecond).String()
	} else {
		st.LastContact = "never"
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		if st.State == "leader" {
			st.Unreachable = n.reach.unreachable(f.Configuration().Servers, time.Now())
		}
		for _, s := range f.Configuration().Servers {
			role := "follower"
			switch {
			case s.ID == id:
				role = "leader"
			case string(s.ID) == n.cfg.ID:
				role = st.State // this node knows its own role without a leader
			case id == "":
				role = "unknown"
			}
			st.Nodes = append(st.Nodes, Server{ID: string(s.ID), Address: string(s.Address), Suffrage: s.Suffrage.String(), State: role})
		}
	}
	if n.cfg.Bind == "" && n.cfg.Transport == nil {
		// A node without [cluster] runs raft in memory, where its address
		// is its id: it has no cluster address to show.
		st.LeaderAddress = ""
		for i := range st.Nodes {
			st.Nodes[i].Address = ""
		}
	}
	return st
}

// memberStats is one member's answer to rpcStats, and the member fields of
// Server that come from it.
type memberStats struct {
	ID           string `json:"id"`
	Role         string `json:"role"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	// LastLogTerm and LastLogIndex end the member's raft log (0: a release
	// that does not say); a node with no data gives its vote to no candidate
	// less up-to-date (voteguard.go).
	LastLogTerm  uint64 `json:"last_log_term,omitempty"`
	LastLogIndex uint64 `json:"last_log_index,omitempty"`
	LastContact  string `json:"last_contact"`
	Format       uint64 `json:"format,omitempty"`
	Admin        string `json:"admin,omitempty"`
	// Members are the ids of the member's latest configuration, and
	// Leader the leader it knows ("": none): a node the others removed
	// learns it from them (membership.go).
	Members []string `json:"members,omitempty"`
	Leader  string   `json:"leader,omitempty"`
	// Cluster is the id the member's cluster named itself with ("": none
	// yet, or a node with no history; identity.go).
	Cluster string `json:"cluster,omitempty"`
	// Fresh: the member started with no raft state and is asking to be
	// added (Node.fresh).
	Fresh bool `json:"fresh,omitempty"`
	// Clock is the member's clock as it answered, unix ns (0: a release
	// that does not say; clockcheck.go).
	Clock int64 `json:"clock,omitempty"`
}

// holdsHistory reports whether the member has taken part in a cluster: a
// cluster id, a commit index past the bootstrap entry (index 1, term 1),
// or a raft log that goes past it. A new node has none of these. A follower
// restarted before it learned what its leader committed reports commit 0
// and, its engine behind, maybe no cluster id; its log says it all the same
// (a wiped node and it are no majority that starts afresh).
func (ms *memberStats) holdsHistory() bool {
	return ms.Cluster != "" || ms.CommitIndex > 1 || ms.LastLogIndex > 1 || ms.LastLogTerm > 1
}

// ownStats is this node's memberStats.
func (n *Node) ownStats() memberStats {
	ms := memberStats{
		ID:           n.cfg.ID,
		Role:         stateName(n.raft.State()),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.appliedIndex(),

		Format:  engine.FormatVersion,
		Admin:   n.cfg.AdminURL,
		Cluster: n.clusterID(),
		Fresh:   n.fresh.Load(),
		Clock:   n.now().UnixNano(),
	}
	if n.cfg.format != 0 {
		ms.Format = n.cfg.format
	}
	end := n.ownLogEnd()
	ms.LastLogTerm, ms.LastLogIndex = end.term, end.index
	if n.removedBy.Load() != nil {
		// Its own configuration still lists it as a voter (it never got the
		// entry that removed it): its role says what it is.
		ms.Role = "removed"
	}
	if _, id := n.raft.LeaderWithID(); id != "" {
		ms.Leader = string(id)
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			ms.Members = append(ms.Members, string(s.ID))
		}
	}
	switch age := n.LastContactAge(); {
	case age < 0:
		ms.LastContact = "never"
	default:
		ms.LastContact = age.Round(time.Millisecond).String()
	}
	return ms
}

// memberStatsTimeout bounds how long ClusterStatus waits for a member.
const memberStatsTimeout = 2 * time.Second

// ClusterStatus is Status with every member's own role, term, indexes and
// last contact with the leader, asked over the cluster port in parallel (this
// node answers for itself). A member that does not answer within
// memberStatsTimeout, or is another member than its address says, is
// reported with role unknown and an error. Status stays free of network
// calls: the metrics collector reads it on every scrape.
func (n *Node) ClusterStatus(ctx context.Context) Status {
	st := n.Status()
	ctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range st.Nodes {
		s := &st.Nodes[i]
		if s.ID == n.cfg.ID {
			s.setStats(n.ownStats())
			continue
		}
		wg.Go(func() {
			ms, err := n.askStats(ctx, s.Address)
			if err == nil && ms.ID != s.ID {
				err = fmt.Errorf("%s answers as %q", s.Address, ms.ID)
			}
			if err != nil {
				s.Role, s.Error = "unknown", err.Error()
				return
			}
			s.setStats(ms)
		})
	}
	wg.Wait()
	return st
}

func (s *Server) setStats(ms memberStats) {
	s.Role, s.Term, s.CommitIndex, s.AppliedIndex, s.LastContact = ms.Role, ms.Term, ms.CommitIndex, ms.AppliedIndex, ms.LastContact
	s.Format, s.Admin = ms.Format, ms.Admin
}

// statsRefused is a member's answer to rpcStats from a release that does
// not know the request.
type statsRefused string

func (e statsRefused) Error() string { return string(e) }

// statsAnswer is the error of an rpcStats answered with status.
func statsAnswer(addr string, status byte, msg []byte) error {
	if status == rpcBadRequest && string(msg) == "unknown op" {
		return statsRefused(addr + " answered: " + string(msg))
	}
	return fmt.Errorf("%s answered: %s", addr, msg)
}

// askStats asks the member at addr for its memberStats on a stream of its
// own (the relayer's pooled streams are for the leader).
func (n *Node) askStats(ctx context.Context, addr string) (memberStats, error) {
	var ms memberStats
	var body []byte
	if n.inproc != nil {
		peer := n.inproc(addr)
		if peer == nil {
			return ms, fmt.Errorf("%s: %w", addr, errUnreachable)
		}
		status, resp := peer.handleRPC(ctx, rpcStats, nil, nil)
		if status != rpcOK {
			return ms, statsAnswer(addr, status, resp)
		}
		body = resp
	} else {
		if n.mux == nil {
			return ms, errors.New("no cluster port")
		}
		c, err := n.mux.dial(ctx, addr, kindRelay, memberStatsTimeout)
		if err != nil {
			return ms, err
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		if d, ok := ctx.Deadline(); ok {
			_ = c.SetDeadline(d)
		}
		// ctx's end closes c as its deadline passes: either may end the
		// call first, and a timeout must read as one (Join tells a node
		// slow to answer from one that cannot be a member by it).
		ended := func(err error) error {
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w (%v)", addr, context.Cause(ctx), err)
			}
			return err
		}
		if err := writeFrame(bufio.NewWriter(c), rpcStats, nil); err != nil {
			return ms, ended(err)
		}
		status, resp, err := readFrame(bufio.NewReader(c), nil)
		if err != nil {
			return ms, ended(err)
		}
		if status != rpcOK {
			return ms, statsAnswer(addr, status, resp)
		}
		body = resp
	}
	if err := json.Unmarshal(body, &ms); err != nil {
		return ms, fmt.Errorf("%s: bad stats answer: %w", addr, err)
	}
	return ms, nil
}

// LastContactAge is how long since this follower heard from the leader (0 on the leader).
func (n *Node) LastContactAge() time.Duration {
	if n.raft.State() == raft.Leader {
		return 0
	}
	lc := n.raft.LastContact()
	if lc.IsZero() {
		return -1
	}
	return time.Since(lc)
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// Join adds (or re-adds) a voter. On a follower it is relayed to the leader.
// A node that comes back with the same id but no data is first removed, so that
// its lost vote record cannot count in a configuration it is still part of;
// a voter asked for again at its own address, with its data, is left as it is.
// added is false when the configuration was left as it was: id is a voter at
// addr already (an operator's retry answers so, not as a change).
func (n *Node) Join(ctx context.Context, id, addr string) (added bool, err error) {
	if n.mux == nil && n.inproc == nil {
		return false, fmt.Errorf("join %s: %w", id, ErrStandalone)
	}
	if err := n.checkMember(id, addr); err != nil {
		return false, fmt.Errorf("join %q: %w", id, err)
	}
	if n.raft.State() != raft.Leader {
		laddr, _ := n.raft.LeaderWithID()
		if laddr == "" {
			return false, fmt.Errorf("join %s: %w", id, ErrNoLeader)
		}
		resp, err := n.relay.call(ctx, string(laddr), rpcJoin, encodeJoin(id, addr))
		if bad, ok := badMemberErr(id, err); ok {
			return false, bad
		}
		if err != nil {
			return false, err
		}
		// A leader of an earlier release answers nothing either way.
		return string(resp) != joinUnchanged, nil
	}
	if id == n.cfg.ID {
		// Removing the leader to add it again would end its leadership
		// halfway: the join would fail and leave it out of the cluster.
		if addr == string(n.trans.LocalAddr()) {
			return false, nil // it is a member, at that address
		}
		return false, fmt.Errorf("join %s: %w: it is this cluster's leader, at %s (move leadership away first to change its address)", id, ErrBadMember, n.trans.LocalAddr())
	}
	// The node must answer at that address as that id before it counts
	// toward the quorum: a typo, or a node not started yet, would
	// otherwise stop every commit of a small cluster (docs/operations.md,
	// "Adding a node").
	pctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	ms, err := n.askStats(pctx, addr)
	cancel()
	if err != nil && !isDialError(err) && isTimeout(err) {
		// It took the connection but was slow to answer: a node that is
		// starting on a busy host, most often the one asking to be added.
		// Not a refusal (ErrBadMember ends a starting node): it asks again.
		return false, fmt.Errorf("join %s: %w: its cluster port at %s took the connection but gave no answer in %v; ask again: %v", id, ErrMemberSlow, addr, memberStatsTimeout, err)
	}
	if err != nil {
		return false, fmt.Errorf("join %s: %w: no answer on its cluster port at %s (start it first): %v", id, ErrBadMember, addr, err)
	}
	if ms.ID != id {
		return false, fmt.Errorf("join %s: %w: the node at %s is %q", id, ErrBadMember, addr, ms.ID)
	}
	// A binary older than this state's format could not install the
	// snapshot it is sent, nor apply the entries: a voter that never catches
	// up, and one fault from a lost quorum.
	if state, err := n.eng.Format(); err == nil && ms.Format < state {
		return false, fmt.Errorf("join %s: %w: the node at %s runs data format %d and this cluster's state is format %d, which it cannot read: upgrade its binary first (docs/operations.md, Upgrades)",
			id, ErrBadMember, addr, ms.Format, state)
	}
	if err := n.sameCluster(ms); err != nil {
		return false, fmt.Errorf("join %s: %w: the node at %s %v", id, ErrBadMember, addr, err)
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, fmt.Errorf("join %s: %w", id, err)
	}
	conf := f.Configuration()
	var old *raft.Server // id's entry, if it has one
	for i := range conf.Servers {
		if conf.Servers[i].ID == raft.ServerID(id) {
			old = &conf.Servers[i]
		}
	}
	sameAddr := old != nil && old.Address == raft.ServerAddress(addr)
	if old != nil && old.Suffrage == raft.Voter && sameAddr && !ms.Fresh {
		// A voter with its history, asked again (an operator's retry).
		return false, nil
	}
	// A voter that lost its data (Fresh) is removed before it is added
	// back. A voter with its history named at another address keeps its
	// entry: AddVoter moves a voter's address in place, where removing a
	// live voter first would leave the configuration without a majority
	// up whenever another voter is down (no commit, its re-adding
	// included, until that one returns).
	removeOld := old != nil && old.Suffrage == raft.Voter && ms.Fresh
	if removeOld {
		if live, need := n.quorumWithout(ctx, conf, old.ID); live < need {
			// It stays the voter it is (its lost vote record matters only
			// in the term it was lost in).
			n.log.Warn("node back with no data kept as a voter without removing it first: the others alone are no quorum",
				"id", id, "address", addr, "up", live, "quorum", need)
			if sameAddr {
				return false, nil
			}
			removeOld = false
		}
	}
	for _, s := range conf.Servers {
		// Another id at addr is not running there (the node at addr
		// answered as id): its entry goes, or the configuration would
		// name one address twice.
		if (s.ID == raft.ServerID(id) && removeOld) || (s.ID != raft.ServerID(id) && s.Address == raft.ServerAddress(addr)) {
			if err := n.raft.RemoveServer(s.ID, 0, 10*time.Second).Error(); err != nil {
				return false, fmt.Errorf("join %s: remove old entry: %w", id, translateApplyErr(err))
			}
		}
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 10*time.Second).Error(); err != nil {
		return false, fmt.Errorf("join %s: %w", id, translateApplyErr(err))
	}
	if old != nil && old.Suffrage == raft.Voter && !removeOld {
		n.log.Info("voter's address changed", "id", id, "address", addr, "was", old.Address)
	} else {
		n.log.Info("voter added", "id", id, "address", addr)
	}
	return true, nil
}

// storedRestore reports whether the store's newest snapshot is an operator's
// restore raft stored after the log's index last: raft numbers a restore
// past the log's end (a snapshot it takes itself never is) and writes the
// backup's bytes whole. A store that cannot be listed counts as stored: the
// node then stops rather than risk keeping a restore nobody confirmed.
func (n *Node) storedRestore(last uint64, size int64) bool {
	list, err := n.fsm.snaps.List()
	if err != nil {
		return true
	}
	return len(list) > 0 && list[0].Index > last && list[0].Size == size
}

// quorumWithout counts the voters of conf other than id that are up (this
// leader, and each other voter that answers over the cluster port within
// memberStatsTimeout) and the quorum of conf without id.
func (n *Node) quorumWithout(ctx context.Context, conf raft.Configuration, id raft.ServerID) (live, need int) {
	ctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	voters := 0
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter || s.ID == id {
			continue
		}
		voters++
		if string(s.ID) == n.cfg.ID {
			mu.Lock()
			live++
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			if ms, err := n.askStats(ctx, string(s.Address)); err == nil && ms.ID == string(s.ID) {
				mu.Lock()
				live++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return live, voters/2 + 1
}

// UseTLS replaces the cluster's certificate, key and CA (a renewal, on
// SIGHUP): connections opened from then on present and check the new ones.
// A node started without TLS refuses it.
func (n *Node) UseTLS(l *LoadedTLS) error {
	if n.mux == nil {
		return errors.New("cluster tls: this node has no cluster port")
	}
	return n.mux.useTLS(l.pair)
}

// LeaderOnly is nil on the leader and, elsewhere, the ErrNotLeader that a
// leader-only operation op would return (naming the leader): for a caller
// that should refuse before costly work, such as receiving an upload.
func (n *Node) LeaderOnly(ctx context.Context, op string) error {
	if n.raft.State() == raft.Leader {
		return nil
	}
	return n.notLeader(ctx, op)
}

// notLeader is ErrNotLeader for an operator's leader-only operation, naming
// the leader this node knows of so that the operator knows where to run it:
// its admin API when the leader says (it is asked, briefly), else its
// cluster address.
func (n *Node) notLeader(ctx context.Context, op string) error {
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return fmt.Errorf("%s: %w; no leader is known (election in progress or no quorum)", op, ErrNotLeader)
	}
	ctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
	defer cancel()
	if ms, err := n.askStats(ctx, string(addr)); err == nil && ms.ID == string(id) && ms.Admin != "" {
		return fmt.Errorf("%s: %w; run it on the leader, %s (admin %s)", op, ErrNotLeader, id, ms.Admin)
	}
	return fmt.Errorf("%s: %w; run it on the leader, %s (cluster address %s)", op, ErrNotLeader, id, addr)
}

// RemovePeer removes a server from the configuration (leader only).
func (n *Node) RemovePeer(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader(ctx, "remove "+id)
	}
	// raft removes an id it does not know without a word: a typo would
	// report success and leave the dead machine counting toward quorum.
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, translateApplyErr(err))
	}
	if !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) }) {
		return fmt.Errorf("remove %s: %w", id, ErrNotMember)
	}
	// raft takes the new configuration as it appends it: without a
	// majority of it up, the leader steps down at once and nothing commits
	// until they are back (a mistyped id while another voter is down, or
	// the last voter).
	if live, need := n.quorumWithout(ctx, f.Configuration(), raft.ServerID(id)); live < need {
		return fmt.Errorf("remove %s: %w: %d of the voters left answer, %d needed; removed now, the cluster would commit nothing until more are back. "+
			"Bring the others back first, or remove the members that are down", id, ErrNoQuorumLeft, live, need)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
		return fmt.Errorf("remove %s: %w", id, translateApplyErr(err))
	}
	return nil
}

// badMemberErr gives a join refusal (ErrBadMember, ErrMemberSlow) that
// crossed the internal channel as text back its sentinel (ok false: err is
// not one).
func badMemberErr(id string, err error) (error, bool) {
	if err == nil {
		return nil, false
	}
	msg := err.Error()
	for _, sentinel := range []error{ErrBadMember, ErrMemberSlow} {
		if i := strings.Index(msg, sentinel.Error()); i >= 0 {
			return fmt.Errorf("join %s: %w%s", id, sentinel, msg[i+len(sentinel.Error()):]), true
		}
	}
	return err, false
}

// checkMember refuses an id the configuration would refuse and, on a
// cluster port, an address that is not host:port with a port or that is a
// wildcard.
func (n *Node) checkMember(id, addr string) error {
	if !validMemberID(id) {
		return fmt.Errorf("%w: invalid id: want 1-64 letters, digits, '_', '.', '-'", ErrBadMember)
	}
	if n.mux == nil {
		return nil // in-process transports name nodes by id
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%w: address %q: want host:port", ErrBadMember, addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: address %q: bad port", ErrBadMember, addr)
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: address %q: a wildcard, not an address peers can dial", ErrBadMember, addr)
	}
	return nil
}

// validMemberID is the node id rule of the configuration (node.id).
func validMemberID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// Backup writes a consistent copy of this node's engine state.
func (n *Node) Backup(w io.Writer) (int64, error) {
	s, err := n.eng.BeginSnapshot()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	return s.WriteTo(w)
}

// Hash digests this node's engine state (replica comparison in tests and status).
func (n *Node) Hash() ([32]byte, error) { return n.eng.Hash() }

// AppliedIndex is the index of the last entry applied to this node's engine.
func (n *Node) AppliedIndex() uint64 { return n.raft.AppliedIndex() }

// Barrier waits until every entry committed before it is applied here (leader only).
func (n *Node) Barrier(timeout time.Duration) error {
	if err := n.raft.Barrier(timeout).Error(); err != nil {
		return translateApplyErr(err)
	}
	return nil
}

// Restore replaces the whole cluster's state with an engine backup (a file
// written by Backup / GET /v1/backup). It runs on the leader, which takes the
// backup's state and sends it to the followers as a snapshot; deliveries under
// way are fenced by the new tokens, above every token issued before and every
// token the backup holds. For disaster recovery, not routine use.
func (n *Node) Restore(ctx context.Context, path string) error {
	if n.raft.State() != raft.Leader {
		return n.notLeader(ctx, "restore")
	}
	if !n.restoreBusy.CompareAndSwap(false, true) {
		return fmt.Errorf("restore: %w: another restore is running on this node; wait for its answer", ErrRestoreNotBegun)
	}
	defer func() {
		// An unconfirmed restore leaves restoring set and the node stops:
		// no other restore may begin (and clear its marker) meanwhile.
		if !n.restoring.Load() {
			n.restoreBusy.Store(false)
		}
	}()
	if err := engine.CheckFile(path); err != nil {
		return fmt.Errorf("restore: not a usable backup: %w", err)
	}
	// Leases after the restore must take tokens above every token issued so
	// far and every token the backup holds (engine/tokenbase.go): the file
	// (the admin's own copy of the upload) carries the base to every replica.
	base, err := n.eng.TokenBase()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	cluster, err := n.eng.ClusterID()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := engine.PrepareRestore(path, n.raft.LastIndex()+base, cluster); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	timeout := time.Duration(0)
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: st.Size()}
	if n.voters() < 2 {
		if err := n.raft.Restore(meta, f, timeout); err != nil {
			return fmt.Errorf("restore: %w", translateApplyErr(err))
		}
		n.log.Warn("cluster state replaced from a backup", "bytes", st.Size())
		return nil
	}
	// With followers the restore is not committed until a majority has
	// installed it (restoreguard.go).
	done, err := n.beginRestore()
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	// Until a majority confirms it, the restored state is this node's
	// alone: a duplicate answered from it could be of an event the
	// cluster never holds (the node stops and sets it aside when the
	// restore does not take). It stays set then: the node stops.
	n.restoring.Store(true)
	restored, last := n.fsm.restores.Load(), n.raft.LastIndex()
	if err := n.raft.Restore(meta, f, timeout); err != nil {
		// raft refuses a restore before it takes anything (a leadership
		// transfer under way, leadership lost since the check above, a
		// configuration change not committed yet, the snapshot not
		// written) and then the state is this node's own still: the
		// operator may simply try again. Once the engine holds the backup
		// (raft restores the engine last, and a failed engine restore stops
		// the process) it is unconfirmed, and so it is once raft has stored
		// the backup as its newest snapshot (its sink can fail after that,
		// and the next start would take it), or when a shutdown may have
		// fallen between the two.
		if n.fsm.restores.Load() == restored && !n.storedRestore(last, st.Size()) && !errors.Is(err, raft.ErrRaftShutdown) {
			_ = done()
			n.restoring.Store(false)
			return fmt.Errorf("restore: %w: %v", ErrRestoreNotBegun, err)
		}
		err = fmt.Errorf("restore: %w: %v", ErrRestoreUnconfirmed, translateApplyErr(err))
		n.restoreUnconfirmed(err)
		return err
	}
	confirm := 60 * time.Second
	if d, ok := ctx.Deadline(); ok {
		confirm = max(time.Until(d), 10*time.Second)
	}
	if err := n.confirmRestore(confirm); err != nil {
		err = fmt.Errorf("restore: %w", err)
		n.restoreUnconfirmed(err)
		return err
	}
	n.restoring.Store(false)
	if err := done(); err != nil {
		return fmt.Errorf("restore: confirmed, but %w", err)
	}
	n.log.Warn("cluster state replaced from a backup", "bytes", st.Size())
	return nil
}
