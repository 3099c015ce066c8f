package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// proposal is one caller's commands waiting for their results.
type proposal struct {
	cmds       []engine.Command
	leaderOnly bool // never relay: leases and completions belong to this leader's term
	// riding: an outcome nobody waits on (docs/architecture.md, "Delivery"):
	// it may wait up to rideFor for a claim to share its entry.
	riding bool
	res    []engine.Result
	err    error
	done   chan struct{}
	one    [1]engine.Command // cmds of a single-command proposal (submitOne)
}

// maxEntryBytes bounds the commands the proposer packs into one entry, or
// one batch relayed to the leader: it stops adding proposals once a batch
// holds this many bytes, so a batch is at most this plus one proposal.
const maxEntryBytes = 8 << 20

var proposalPool = sync.Pool{New: func() any { return &proposal{done: make(chan struct{}, 1)} }}

// proposer is group commit in front of Raft: commands that arrive while earlier
// entries are being stored and applied are packed into one log entry, so a burst
// of claims costs one entry, one log fsync and one engine transaction instead of
// one each. At most `inflight` entries are outstanding at a time; that bound is
// what lets the next batch grow while the previous one commits.
type proposer struct {
	n        *Node
	queue    chan *proposal
	slots    chan struct{} // raft entries in flight (leader)
	fwdSlots chan struct{} // batches in flight to the leader (follower)
	maxCmds  int
	maxBytes int
	fragment int // bytes of an entry per fragment (engine.SplitEntry; 0: its default)
	linger   time.Duration
	rideFor  time.Duration // how long riding proposals wait for a claim
	closing  chan struct{} // no new proposals are taken
	stop     chan struct{} // raft is shut down; goroutines exit
	closed   chan struct{} // close has failed what was queued; later arrivals fail themselves
	wg       sync.WaitGroup
	relayWG  sync.WaitGroup // relays in flight
	settled  chan struct{}  // closed when complete() returns

	pending chan pendingApply // raft futures, completed in log order

	entryCmds []engine.Command // dispatch's scratch: the commands of the entry being encoded (loop goroutine only)

	entries  atomic.Uint64 // log entries proposed by this node
	commands atomic.Uint64 // commands in them
	relays   atomic.Uint64 // batches sent to the leader
	relayed  atomic.Uint64 // commands in them
	riders   atomic.Int64  // batches of outcomes waiting in ride (tests watch it)
	// openRuns counts entries proposed as fragments and not yet settled:
	// while it is 0, fragments the FSM is still joining were abandoned
	// (Node.endAbandonedEntries).
	openRuns atomic.Int32

	leaseSlots atomic.Pointer[slotsRef] // the leader's free workers (claimlease.go)
	claimLeaseCounters
}

type pendingApply struct {
	future  raft.ApplyFuture
	split   bool // the entry went as fragments: counted in openRuns until settled
	batch   []*proposal
	release func()
	slots   LeaseSlots         // with leases: the workers the entry's claims reserved
	leases  []leaseReservation // (claimlease.go)
}

func newProposer(n *Node, inflight, maxCmds, maxBytes int, linger, rideFor time.Duration) *proposer {
	p := &proposer{
		rideFor:  rideFor,
		n:        n,
		queue:    make(chan *proposal, 4096),
		slots:    make(chan struct{}, inflight),
		fwdSlots: make(chan struct{}, 4),
		maxCmds:  maxCmds,
		maxBytes: maxBytes,
		linger:   linger,
		closing:  make(chan struct{}),
		stop:     make(chan struct{}),
		closed:   make(chan struct{}),
		settled:  make(chan struct{}),
		pending:  make(chan pendingApply, inflight),
	}
	if n != nil { // tests build a proposer without a node
		p.fragment = n.cfg.fragment
	}
	p.wg.Add(1)
	go p.loop()
	go p.complete()
	return p
}

// drain stops taking proposals and waits, up to timeout, for the entries in
// flight to be answered. It must run while raft still runs: raft answers no
// future that is still queued or being applied when it shuts down.
func (p *proposer) drain(timeout time.Duration) bool {
	close(p.closing)
	deadline := time.Now().Add(timeout)
	for len(p.slots)+len(p.fwdSlots) > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// close ends the goroutines after raft has shut down and fails whatever is
// still queued.
func (p *proposer) close() {
	close(p.stop)
	p.wg.Wait()
	p.relayWG.Wait() // the node's leader watch is closed: they end at once
	select {
	case <-p.settled:
	case <-time.After(2 * time.Second):
		// A future raft never answered (it was queued when raft shut down);
		// its waiter is abandoned rather than blocking shutdown forever.
	}
	p.failQueued()
	close(p.closed)
}

// failQueued answers ErrShutdown to every proposal still queued. Nothing
// takes from the queue once the loop has stopped: close calls it, and so
// does a caller whose proposal went in after close had emptied the queue
// (its send raced with stop, see wait).
func (p *proposer) failQueued() {
	for {
		select {
		case pr := <-p.queue:
			pr.err = ErrShutdown
			pr.done <- struct{}{}
		default:
			return
		}
	}
}

// submit queues cmds and waits for their results or ctx. A caller that gives up
// gets ErrIndeterminate: its commands may still commit.
func (p *proposer) submit(ctx context.Context, cmds []engine.Command, leaderOnly bool) ([]engine.Result, error) {
	return p.submitAs(ctx, cmds, leaderOnly, false)
}

// submitAs is submit; riding proposals may wait up to rideFor for another
// proposal to share their entry (see ride).
func (p *proposer) submitAs(ctx context.Context, cmds []engine.Command, leaderOnly, riding bool) ([]engine.Result, error) {
	pr := proposalPool.Get().(*proposal)
	pr.cmds, pr.leaderOnly, pr.riding, pr.res, pr.err = cmds, leaderOnly, riding, nil, nil
	if err := p.wait(ctx, pr); err != nil {
		return nil, err
	}
	res, err := pr.res, pr.err
	pr.cmds, pr.res = nil, nil
	proposalPool.Put(pr)
	return res, err
}

// submitOne is submitAs for one command, which is what nearly every caller
// (a claim, a delivery's outcome) proposes: the command travels in the
// pooled proposal rather than in a slice of its own.
func (p *proposer) submitOne(ctx context.Context, c engine.Command, leaderOnly, riding bool) (engine.Result, error) {
	pr := proposalPool.Get().(*proposal)
	pr.one[0] = c
	pr.cmds, pr.leaderOnly, pr.riding, pr.res, pr.err = pr.one[:], leaderOnly, riding, nil, nil
	if err := p.wait(ctx, pr); err != nil {
		return engine.Result{}, err
	}
	var r engine.Result
	err := pr.err
	if err == nil {
		r = pr.res[0]
	}
	pr.one[0] = engine.Command{} // the pool must not keep the payload alive
	pr.cmds, pr.res = nil, nil
	proposalPool.Put(pr)
	return r, err
}

// wait queues pr and waits until the proposer answers it (nil: pr.res and
// pr.err hold the answer) or ctx ends. On an error pr is no longer the
// caller's: it went back to the pool, or it still belongs to the proposer
// and its commands may yet commit.
func (p *proposer) wait(ctx context.Context, pr *proposal) error {
	select {
	case p.queue <- pr:
	case <-ctx.Done():
		err := fmt.Errorf("queue command: %v: %w", ctx.Err(), ErrNoLeader)
		pr.one[0], pr.cmds = engine.Command{}, nil
		proposalPool.Put(pr)
		return err
	case <-p.stop:
		pr.one[0], pr.cmds = engine.Command{}, nil
		proposalPool.Put(pr)
		return ErrShutdown
	}
	select {
	case <-pr.done:
		return nil
	case <-p.closed:
		// The send above may have won against stop after close emptied the
		// queue: then nobody else will ever answer pr.
		p.failQueued()
		select {
		case <-pr.done:
			return nil
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	// The proposal still belongs to the proposer; it is not returned to the pool.
	return fmt.Errorf("wait for commit: %v: %w", ctx.Err(), ErrIndeterminate)
}

func (p *proposer) loop() {
	defer p.wg.Done()
	var batch []*proposal
	lastCmds := 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var first *proposal
		select {
		case first = <-p.queue:
		case <-p.stop:
			return
		}
		select {
		case <-p.closing:
			first.err = ErrShutdown
			first.done <- struct{}{}
			continue
		default:
		}
		// Wait for a free slot before draining: while entries are in flight the
		// queue keeps filling, and the next entry carries all of it.
		// A follower's batches go to the leader over the internal channel, several
		// at once: the leader packs them into its own entries anyway.
		leader, sem, ok := p.acquire()
		if !ok {
			first.err = ErrShutdown
			first.done <- struct{}{}
			return
		}
		batch = append(batch[:0], first)
		ncmds, nbytes := len(first.cmds), cmdBytes(first.cmds)
		// Under load, callers answered by the previous entry send their next
		// command within a few hundred microseconds. Waiting that long for them
		// (only while the previous entry was large) keeps entries large instead
		// of alternating one small entry and one large one.
		want := min(lastCmds, p.maxCmds)
		var linger <-chan time.Time
		if p.linger > 0 && want > 8 {
			timer.Reset(p.linger)
			linger = timer.C
		}
	drain:
		for ncmds < p.maxCmds && nbytes < p.maxBytes {
			select {
			case pr := <-p.queue:
				batch = append(batch, pr)
				ncmds += len(pr.cmds)
				nbytes += cmdBytes(pr.cmds)
				continue
			default:
			}
			if linger == nil || ncmds >= want {
				break
			}
			select {
			case pr := <-p.queue:
				batch = append(batch, pr)
				ncmds += len(pr.cmds)
				nbytes += cmdBytes(pr.cmds)
			case <-linger:
				linger = nil
				break drain
			}
		}
		if linger != nil {
			timer.Stop() // Go 1.23+ timers: no stale tick is delivered after Stop
		}
		if leader && p.rideFor > 0 && onlyRiding(batch) {
			batch, ncmds, nbytes = p.ride(batch, ncmds, nbytes, timer)
		}
		lastCmds = ncmds
		p.dispatch(append([]*proposal(nil), batch...), ncmds, leader, sem)
	}
}

// onlyRiding reports whether every proposal of batch is riding.
func onlyRiding(batch []*proposal) bool {
	for _, pr := range batch {
		if !pr.riding {
			return false
		}
	}
	return true
}

// ride holds a batch of outcomes only (Complete, Fail: nobody waits on
// them, the event stays leased until they commit) up to rideFor for another
// proposal, then takes whatever else is queued. Under light traffic an
// outcome otherwise takes an entry of its own, just as the provider's next
// claim arrives, and that claim waits a whole commit for it: at one client
// every event cost two entries in a row. With it the outcome goes in the
// next claim's entry. Under load claims are always queued and nothing waits.
func (p *proposer) ride(batch []*proposal, ncmds, nbytes int, timer *time.Timer) ([]*proposal, int, int) {
	timer.Reset(p.rideFor)
	defer timer.Stop()
	p.riders.Add(1)
	defer p.riders.Add(-1)
	for ncmds < p.maxCmds && nbytes < p.maxBytes {
		select {
		case pr := <-p.queue:
			batch = append(batch, pr)
			ncmds += len(pr.cmds)
			nbytes += cmdBytes(pr.cmds)
			if pr.riding {
				continue
			}
			// A claim (or any proposal someone waits on): it goes now, with
			// whatever queued behind it.
			for ncmds < p.maxCmds && nbytes < p.maxBytes {
				select {
				case pr := <-p.queue:
					batch = append(batch, pr)
					ncmds += len(pr.cmds)
					nbytes += cmdBytes(pr.cmds)
					continue
				default:
				}
				break
			}
			return batch, ncmds, nbytes
		case <-timer.C:
			return batch, ncmds, nbytes
		case <-p.closing:
			return batch, ncmds, nbytes
		}
	}
	return batch, ncmds, nbytes
}

// acquire takes a slot: an entry slot when this node leads, a relay slot
// otherwise, and says which. It decides again whenever the observed leader
// changes: relay slots held by calls to a leader that froze are freed by
// that change (see leaderWatch), and a node that has just won the election
// must not keep waiting for relay slots at all. ok is false when the
// proposer stops.
func (p *proposer) acquire() (leader bool, sem chan struct{}, ok bool) {
	for {
		// The watch before the state: raft sets its state before it reports
		// the new leader, so a change after this line wakes the select.
		_, changed := p.n.leaders.current()
		leader = p.n.raft.State() == raft.Leader
		sem = p.fwdSlots
		if leader {
			sem = p.slots
		}
		select {
		case sem <- struct{}{}:
			return leader, sem, true
		case <-changed.Done():
			if errors.Is(context.Cause(changed), ErrShutdown) {
				<-p.stop // closing: the watch will not change again
				return false, nil, false
			}
		case <-p.stop:
			return false, nil, false
		}
	}
}

func cmdBytes(cmds []engine.Command) int {
	n := 0
	for i := range cmds {
		n += 64 + len(cmds[i].Key) + len(cmds[i].Payload)
		for _, h := range cmds[i].Headers {
			n += len(h.Name) + len(h.Value)
		}
	}
	return n
}

func finish(batch []*proposal, err error) {
	for _, pr := range batch {
		pr.err = err
		pr.done <- struct{}{}
	}
}

// dispatch sends one batch: into the log when this node led as the slot was
// taken, to the leader over the internal channel otherwise.
func (p *proposer) dispatch(batch []*proposal, ncmds int, leader bool, sem chan struct{}) {
	release := func() { <-sem }
	r := p.n.raft
	if leader {
		now := p.n.now().UnixNano()
		cmds := slices.Grow(p.entryCmds[:0], ncmds)
		for _, pr := range batch {
			for _, c := range pr.cmds {
				c.Now = now
				cmds = append(cmds, c)
			}
		}
		slots, leases := p.reserveLeases(cmds)
		data := engine.EncodeEntry(nil, cmds)
		clear(cmds) // the encoding is all raft keeps; the payloads may go
		p.entryCmds = cmds[:0]
		p.commands.Add(uint64(len(cmds)))
		// Only this goroutine proposes commands, so the fragments of a large
		// entry enter the log one after the other (fsm.joinFragment).
		var f raft.ApplyFuture
		frags := engine.SplitEntry(data, p.fragment)
		if frags != nil {
			data = nil // the fragments hold copies; Apply may wait for room
			p.openRuns.Add(1)
			for _, fr := range frags {
				f = r.Apply(fr, 0)
			}
		} else {
			f = r.Apply(data, 0)
		}
		p.entries.Add(1)
		select {
		case p.pending <- pendingApply{future: f, split: frags != nil, batch: batch, release: release, slots: slots, leases: leases}:
		case <-p.stop:
			if frags != nil {
				p.openRuns.Add(-1)
			}
			release()
			if slots != nil {
				p.handOver(slots, leases, nil)
			}
			finish(batch, ErrShutdown)
		}
		return
	}
	// Not the leader: leader-only proposals fail here, the rest travel together.
	var fwd []*proposal
	for _, pr := range batch {
		if pr.leaderOnly {
			pr.err = ErrNotLeader
			pr.done <- struct{}{}
			continue
		}
		fwd = append(fwd, pr)
	}
	if len(fwd) == 0 {
		release()
		return
	}
	p.relayWG.Add(1)
	go func() {
		defer p.relayWG.Done()
		defer release()
		// The leader as of now, with the context that ends when it changes.
		addr, epoch := p.awaitLeader()
		if addr == "" {
			finish(fwd, ErrNoLeader)
			return
		}
		p.relays.Add(1)
		for _, pr := range fwd {
			p.relayed.Add(uint64(len(pr.cmds)))
		}
		if err := p.n.relayBatch(epoch, addr, fwd); err != nil {
			finish(fwd, err)
		}
	}()
}

// awaitLeader returns the observed leader, waiting up to two election
// timeouts when none is known: an election in progress, or a follower that
// has not yet heard its first heartbeat, usually settles within one, and
// failing at once would only turn that moment into 503s senders must retry.
func (p *proposer) awaitLeader() (raft.ServerAddress, context.Context) {
	addr, epoch := p.n.leaders.current()
	if addr != "" {
		return addr, epoch
	}
	t := time.NewTimer(2 * orDur(p.n.cfg.ElectionTimeout, time.Second))
	defer t.Stop()
	for addr == "" {
		select {
		case <-epoch.Done(): // the observer saw a change
		case <-t.C:
			return "", nil
		case <-p.stop:
			return "", nil
		}
		if errors.Is(context.Cause(epoch), ErrShutdown) {
			return "", nil
		}
		addr, epoch = p.n.leaders.current()
	}
	return addr, epoch
}

// complete waits for raft futures in order and hands each proposal its results.
func (p *proposer) complete() {
	defer close(p.settled)
	for {
		var pa pendingApply
		select {
		case pa = <-p.pending:
		case <-p.stop:
			// Futures still outstanding are answered by raft's shutdown.
			for {
				select {
				case pa := <-p.pending:
					p.settle(pa)
				default:
					return
				}
			}
		}
		p.settle(pa)
	}
}

func (p *proposer) settle(pa pendingApply) {
	defer pa.release()
	if pa.split {
		// The last fragment's future is done: the run is in the log whole,
		// or was cut where raft refused a fragment.
		defer p.openRuns.Add(-1)
	}
	defer func() {
		if pa.slots != nil { // the entry failed: its claims leased nothing here
			p.handOver(pa.slots, pa.leases, nil)
		}
	}()
	if err := pa.future.Error(); err != nil {
		finish(pa.batch, translateApplyErr(err))
		return
	}
	a, ok := pa.future.Response().(*applied)
	if !ok || a == nil {
		finish(pa.batch, fmt.Errorf("unexpected fsm response %T", pa.future.Response()))
		return
	}
	if a.err != nil {
		if errors.Is(a.err, errFragment) {
			// The entry's first fragments were dropped on every replica
			// (a leader change, or raft refusing the rest, cut them off):
			// applied nowhere, so the callers may say so and the senders
			// retry.
			a.err = fmt.Errorf("%w: %w", ErrNoLeader, a.err)
		}
		finish(pa.batch, a.err)
		return
	}
	if pa.slots != nil {
		// Workers first: the deliveries start while the callers are answered.
		p.handOver(pa.slots, pa.leases, a.results)
		pa.slots = nil
	}
	i := 0
	for _, pr := range pa.batch {
		k := len(pr.cmds)
		if i+k > len(a.results) {
			pr.err = errors.New("fsm returned fewer results than commands")
		} else {
			pr.res = a.results[i : i+k : i+k]
		}
		i += k
		pr.done <- struct{}{}
	}
}

func translateApplyErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Never entered the log (a leader handing over refuses new entries
		// before it appends them).
		return fmt.Errorf("apply: %v: %w", err, ErrNoLeader)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("apply: %v: %w", err, ErrIndeterminate)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("apply: %v: %w", err, ErrShutdown)
	}
	return fmt.Errorf("apply: %v: %w", err, ErrIndeterminate)
}

// relayBatch sends a follower's batch to the leader at addr and hands out
// the results. epoch ends when this node sees the leader change: the call
// ends then too, with the outcome unknown (the old leader may commit it).
func (n *Node) relayBatch(epoch context.Context, addr raft.ServerAddress, batch []*proposal) error {
	k := 0
	for _, pr := range batch {
		k += len(pr.cmds)
	}
	cmds := make([]engine.Command, 0, k)
	for _, pr := range batch {
		cmds = append(cmds, pr.cmds...)
	}
	ctx, cancel := context.WithTimeout(epoch, n.relayTimeout)
	defer cancel()
	body, err := n.relay.call(ctx, string(addr), rpcApply, engine.EncodeRelayEntry(nil, cmds))
	if err != nil {
		return err
	}
	res, err := decodeResults(body)
	if err != nil {
		return fmt.Errorf("leader answer: %v: %w", err, ErrIndeterminate)
	}
	if len(res) != len(cmds) {
		return fmt.Errorf("leader answered %d results for %d commands: %w", len(res), len(cmds), ErrIndeterminate)
	}
	i := 0
	for _, pr := range batch {
		k := len(pr.cmds)
		pr.res = res[i : i+k : i+k]
		i += k
		pr.done <- struct{}{}
	}
	return nil
}
