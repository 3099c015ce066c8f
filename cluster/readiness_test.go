package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// olderListener makes a node's cluster port refuse the token handshake
// while set, as a node of an older release does (it knows only the token
// preamble, and closes a stream that opens with another magic).
type olderListener struct{ on atomic.Bool }

func (o *olderListener) wrap(c net.Conn) net.Conn { return &olderConn{Conn: c, o: o} }

type olderConn struct {
	net.Conn
	o    *olderListener
	read bool
}

func (c *olderConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read {
		c.read = true
		// A dialed stream's first bytes are the peer's random nonce: four
		// of them spell the magic once in 2^32 streams.
		if c.o.on.Load() && bytes.HasPrefix(p[:n], challengeMagic[:]) {
			c.Conn.Close()
			return 0, io.EOF
		}
	}
	return n, err
}

// TestFollowerRefusedByTheLeaderIsNotReady: a follower whose claims cannot
// reach the leader, because the leader's cluster port refuses its handshake
// (an older leader during a rolling upgrade), reports itself not ready,
// saying why, instead of answering every claim 503 while it looks healthy;
// once the leader accepts it again it is ready by itself, without a claim
// to show it.
func TestFollowerRefusedByTheLeaderIsNotReady(t *testing.T) {
	older := []*olderListener{{}, {}, {}}
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) { cfg.wrapConn = older[i].wrap })
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	f := nodes[fi]
	waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:before")); err != nil {
		t.Fatalf("claim through the follower: %v", err)
	}

	older[li].on.Store(true)
	f.relay.closeAll() // the next claim opens a stream
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:refused")); !errors.Is(err, ErrNoLeader) || !errors.Is(err, ErrPeerUnproven) {
		t.Fatalf("claim through the follower while the leader refuses it: %v, want ErrNoLeader naming the refused handshake", err)
	}
	if ok, why := f.Ready(); ok || !strings.Contains(why, "refuses this node's cluster handshake") {
		t.Fatalf("ready %v (%q), want not ready naming the refused handshake", ok, why)
	}
	if ok, why := nodes[li].Ready(); !ok {
		t.Fatalf("the leader is not ready: %s", why)
	}

	older[li].on.Store(false)
	waitFor(t, "the follower ready again once the leader accepts it", func() bool { ok, _ := f.Ready(); return ok })
	claimThrough(t, f, "src:after") // a claim through the follower afterwards
}

// termGatedLogs fails, as a full disk does, every write of entries of a term
// after the one in gate (0: off).
type termGatedLogs struct {
	raft.LogStore
	gate *atomic.Uint64
}

func (l *termGatedLogs) refuses(logs ...*raft.Log) error {
	if g := l.gate.Load(); g != 0 {
		for _, e := range logs {
			if e.Term > g {
				return fmt.Errorf("store log %d of term %d: %w", e.Index, e.Term, syscall.ENOSPC)
			}
		}
	}
	return nil
}

func (l *termGatedLogs) StoreLog(log *raft.Log) error {
	if err := l.refuses(log); err != nil {
		return err
	}
	return l.LogStore.StoreLog(log)
}

func (l *termGatedLogs) StoreLogs(logs []*raft.Log) error {
	if err := l.refuses(logs...); err != nil {
		return err
	}
	return l.LogStore.StoreLogs(logs)
}

// gatedN3Cluster starts three nodes, n3's log store behind gate
// (termGatedLogs), and returns the cluster and its leader, moved off n3:
// n3 must stay a voter of the next term.
func gatedN3Cluster(t *testing.T, gate *atomic.Uint64, tune func(*Config)) (*testCluster, int) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		if tune != nil {
			tune(cfg)
		}
		if cfg.ID == "n3" {
			cfg.wrapLogs = func(s raft.LogStore) raft.LogStore { return &termGatedLogs{LogStore: s, gate: gate} }
		}
	})
	old := c.waitLeader(-1)
	if old == 2 {
		c.partition(2)
		old = c.waitLeader(2)
		c.heal()
		c.waitConverged()
	}
	return c, old
}

// A leader elected by voters that then cannot store its entries keeps their
// heartbeats, and its leadership, but commits nothing of its term. Its commit
// index is the one it learnt as a follower, all applied: it must not read as
// ready, or a load balancer sends it claims that wait for a commit that never
// comes.
func TestLeaderThatCannotCommitIsNotReady(t *testing.T) {
	var gate atomic.Uint64
	c, old := gatedN3Cluster(t, &gate, nil)
	// n3 stores nothing of a later term; the old leader goes. The other
	// survivor wins (n3, elected, fails to store its own first entry and
	// steps down) and can commit nothing without n3.
	survivor := 1 - old // of positions 0 and 1, the one that is not old
	gate.Store(c.nodes[survivor].raft.CurrentTerm())
	c.partition(old)
	waitFor(t, "a leader that cannot commit", func() bool {
		n := c.nodes[survivor]
		ok, why := n.Ready()
		return n.IsLeader() && !ok && strings.Contains(why, "no entry of its term committed")
	})
	if _, err := c.nodes[survivor].Claim(ctxT(t, 300*time.Millisecond), claimCmd("src:stuck")); err == nil {
		t.Fatal("a claim committed on a leader whose voters store nothing")
	}
	// n3 stores again: the term's entries commit and the leader is ready.
	gate.Store(0)
	waitFor(t, "the leader ready once it commits", func() bool {
		ok, _ := c.nodes[survivor].Ready()
		return ok || !c.nodes[survivor].IsLeader()
	})
	c.heal()
}

// The same, for a leader whose commit index is a snapshot it installed: it
// holds no entry there, so only the snapshot's term (older than its own)
// tells that it has committed nothing of its term.
func TestLeaderFromASnapshotThatCannotCommitIsNotReady(t *testing.T) {
	var gate atomic.Uint64
	c, old := gatedN3Cluster(t, &gate, func(cfg *Config) {
		cfg.SnapshotThreshold = 1 << 20 // only the snapshot the test takes
		cfg.TrailingLogs = 4
	})
	survivor := 1 - old
	// The survivor misses enough entries that it catches up by snapshot.
	c.partition(survivor)
	for i := range 40 {
		c.mustClaim(fmt.Sprintf("src:s%d", i), survivor)
	}
	leader := c.nodes[old]
	if err := leader.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snapIdx := leader.raft.LastIndex()
	c.heal()
	n := c.nodes[survivor]
	waitFor(t, "the survivor installs the snapshot", func() bool {
		st := n.raft.Stats()
		return st["last_snapshot_index"] == strconv.FormatUint(snapIdx, 10) && n.raft.CommitIndex() == snapIdx
	})
	var l raft.Log
	if err := n.logs.GetLog(snapIdx, &l); err == nil {
		t.Fatalf("the survivor holds entry %d: the test would not reach the snapshot's term", snapIdx)
	}

	gate.Store(n.raft.CurrentTerm())
	c.partition(old)
	waitFor(t, "a leader from a snapshot that cannot commit", func() bool {
		ok, why := n.Ready()
		return n.IsLeader() && !ok && strings.Contains(why, "no entry of its term committed") && n.raft.CommitIndex() == snapIdx
	})
	gate.Store(0)
	waitFor(t, "the leader ready once it commits", func() bool {
		ok, _ := n.Ready()
		return ok || !n.IsLeader()
	})
	c.heal()
}

// TestFollowerThatCannotReachTheLeaderIsNotReady: a firewall that drops the
// connections a follower opens to the leader, while the leader's reach it,
// leaves the follower hearing the leader and caught up, and every claim on
// it waiting for a dial that never answers. It reports itself not ready,
// saying why; a claim right after a failed dial fails at once instead of
// dialing again; once the way is open it is ready by itself.
func TestFollowerThatCannotReachTheLeaderIsNotReady(t *testing.T) {
	var drop atomic.Pointer[string] // the address the victim's dials fail to
	var victim atomic.Int32         // its index + 1
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		cfg.dropDial = func(addr string) error {
			if p := drop.Load(); p != nil && *p == addr && victim.Load() == int32(i)+1 {
				return os.ErrDeadlineExceeded // as a dial whose SYN a firewall drops
			}
			return nil
		}
	})
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	victim.Store(int32(fi) + 1)
	f := nodes[fi]
	waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
	addr := nodes[li].cfg.Advertise
	drop.Store(&addr)
	f.relay.closeAll()
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:dropped")); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("claim through the follower while its dials are dropped: %v, want ErrNoLeader", err)
	}
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:dropped2")); !errors.Is(err, ErrNoLeader) || !strings.Contains(err.Error(), "a moment ago") {
		t.Fatalf("claim right after: %v, want ErrNoLeader without another dial", err)
	}
	if ok, why := f.Ready(); ok || !strings.Contains(why, "cannot be reached on its cluster port from this node") {
		t.Fatalf("ready %v (%q), want not ready naming the unreachable leader", ok, why)
	}
	if ok, why := nodes[li].Ready(); !ok {
		t.Fatalf("the leader is not ready: %s", why)
	}
	drop.Store(nil)
	waitFor(t, "the follower ready again once it reaches the leader", func() bool { ok, _ := f.Ready(); return ok })
	claimThrough(t, f, "src:after") // a claim through the follower afterwards
}

// TestFollowerWhoseOpenRelayGoesSilentIsNotReady: a firewall that goes up
// while a follower holds relay streams to the leader leaves them open and
// silent; only a new dial would fail. A relay that gets no answer in time
// makes the follower dial the leader once in the background, so it reports
// itself not ready without waiting for a claim to open a stream; once the
// way is open it is ready again by itself.
func TestFollowerWhoseOpenRelayGoesSilentIsNotReady(t *testing.T) {
	var drop atomic.Pointer[string]
	var victim atomic.Int32 // index + 1
	freezers := make([]*freezer, 3)
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		freezers[i] = newFreezer()
		_, bindPort, _ := net.SplitHostPort(cfg.Bind)
		cfg.wrapConn = func(c net.Conn) net.Conn {
			if _, local, _ := net.SplitHostPort(c.LocalAddr().String()); local != bindPort {
				return freezers[i].wrap(c) // a stream this node dialed
			}
			return c
		}
		cfg.dropDial = func(addr string) error {
			if p := drop.Load(); p != nil && *p == addr && victim.Load() == int32(i)+1 {
				return os.ErrDeadlineExceeded
			}
			return nil
		}
	})
	t.Cleanup(func() {
		for _, f := range freezers {
			f.thaw()
		}
	})
	// A leader and a follower of it that relayed a claim to it: an
	// election under load may move leadership under a claim, so until the
	// leader is the same before and after one.
	var li, fi int
	var f *Node
	for i := 0; ; i++ {
		li = leaderOf(t, nodes)
		fi = (li + 1) % 3
		f = nodes[fi]
		waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
		claimThrough(t, f, fmt.Sprintf("src:before%d", i))
		if leaderOf(t, nodes) == li {
			break
		}
	}
	// The firewall: the follower's streams to the leader go silent, and
	// its new dials to it get no answer.
	addr := nodes[li].cfg.Advertise
	victim.Store(int32(fi) + 1)
	drop.Store(&addr)
	freezers[fi].freeze()
	if _, err := f.Claim(ctxT(t, 3*time.Second), claimCmd("src:silent")); err == nil {
		t.Fatal("a claim through a silent relay stream succeeded")
	}
	waitFor(t, "the follower not ready, naming the unreachable leader", func() bool {
		ok, why := f.Ready()
		return !ok && strings.Contains(why, "cannot be reached on its cluster port from this node")
	})
	drop.Store(nil)
	freezers[fi].thaw()
	waitFor(t, "the follower ready again", func() bool { ok, _ := f.Ready(); return ok })
	claimThrough(t, f, "src:after") // a claim through the follower afterwards
	// A dial refused (the leader went down) reads as that, not as a firewall.
	f.refusedBy.Store(&relayRefusal{addr: addr, since: time.Now(), unreachable: true})
	if ok, why := f.Ready(); ok || !strings.Contains(why, "refuses connections from this node") || !strings.Contains(why, "it went down") {
		t.Fatalf("ready %v (%q) after a refused dial", ok, why)
	}
}

// TestRefusalRecheckTakesTheNewCause: readiness's recheck of a standing
// refusal takes the cause its new dial meets (refused or timed out), for
// the reason it gives and for the fail-fast of relays (unreachableNow).
func TestRefusalRecheckTakesTheNewCause(t *testing.T) {
	var dropErr atomic.Pointer[error]
	var victim atomic.Int32
	var leaderAddr atomic.Pointer[string]
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		cfg.dropDial = func(addr string) error {
			if p := leaderAddr.Load(); p != nil && *p == addr && victim.Load() == int32(i)+1 {
				if e := dropErr.Load(); e != nil {
					return *e
				}
			}
			return nil
		}
	})
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	f := nodes[fi]
	waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
	addr := nodes[li].cfg.Advertise
	leaderAddr.Store(&addr)
	victim.Store(int32(fi) + 1)

	// Case 1: the leader refused connections a while ago (went down, say),
	// and now a firewall drops them: every dial times out.
	e1 := error(os.ErrDeadlineExceeded)
	dropErr.Store(&e1)
	f.refusedBy.Store(&relayRefusal{addr: addr, since: time.Now().Add(-3 * time.Second), unreachable: true})
	ok, why := f.Ready() // rechecks: the dial times out
	if ok || !strings.Contains(why, "cannot be reached on its cluster port") || !f.unreachableNow(addr) {
		t.Errorf("after a recheck whose dial timed out: ready %v, %q, unreachableNow %v; want the timed-out reason and fail-fast", ok, why, f.unreachableNow(addr))
	}

	// Case 2: the reverse: it timed out before, and now it is refused.
	e2 := error(syscall.ECONNREFUSED)
	dropErr.Store(&e2)
	f.refusedBy.Store(&relayRefusal{addr: addr, since: time.Now().Add(-3 * time.Second), unreachable: true, timedOut: true})
	ok, why = f.Ready()
	if ok || !strings.Contains(why, "refuses connections from this node") {
		t.Errorf("after a recheck whose dial was refused: ready %v, %q; want the refused reason", ok, why)
	}
	dropErr.Store(nil)
}

// laggingApply is a single node whose state machine can be stalled:
// behind() holds the apply and commits claims one by one until raft's queue
// to it is full, so that the commit index runs ahead of the applied one;
// resume() lets it catch up and checks the claims. waiting hears every
// Ready that starts waiting for the apply; the wait lasts readyWait.
type laggingApply struct {
	t       *testing.T
	n       *Node
	clock   *testClock // the node's clock, which times the ready wait
	held    atomic.Bool
	release chan struct{}
	unhold  sync.Once
	waiting chan struct{}
	errs    chan error
	claims  int
}

func newLaggingApply(t *testing.T, readyWait time.Duration) *laggingApply {
	l := &laggingApply{t: t, clock: &testClock{}, release: make(chan struct{}), waiting: make(chan struct{}, 16), errs: make(chan error, 1024)}
	l.n = openSolo(t, t.TempDir(), func(cfg *Config) {
		cfg.Now = l.clock.now
		cfg.NoSync = true
		cfg.Inflight = 1024 // every claim its own entry, none waiting for the apply
		cfg.holdApply = func() {
			if l.held.Load() {
				<-l.release
			}
		}
		cfg.readyWait = readyWait
		cfg.readyWaiting = func() {
			select {
			case l.waiting <- struct{}{}:
			default: // more waits than a test counts
			}
		}
	})
	// Resumed before the Close: a failed test leaves nothing stuck.
	t.Cleanup(func() { l.resume(); l.n.Close() })
	return l
}

func (l *laggingApply) behind() {
	t, n := l.t, l.n
	t.Helper()
	// A node just opened may still apply its first entries: a lag that
	// clears with the apply held would not be the test's.
	waitFor(t, "the node applied its log", func() bool { return n.raft.AppliedIndex() >= n.raft.CommitIndex() })
	l.held.Store(true)
	ctx := ctxT(t, time.Minute)
	// The lag must be the full queue's, not the moment between raft's
	// commit and its hand-over of the entry, which clears by itself.
	for !queueFull(n) || n.raft.AppliedIndex() >= n.raft.CommitIndex() {
		if l.claims == cap(l.errs) {
			t.Fatalf("applied index still at the commit (%d) after %d claims with the apply held", n.raft.CommitIndex(), l.claims)
		}
		before := n.raft.CommitIndex()
		l.claims++
		go func(key string) {
			_, err := n.Claim(ctx, claimCmd(key))
			l.errs <- err
		}(fmt.Sprintf("src:lag-%d", l.claims))
		waitFor(t, "the claim commits", func() bool { return n.raft.CommitIndex() > before })
	}
}

// queueFull reports whether raft's queue to the state machine is full.
func queueFull(n *Node) bool { return n.raft.Stats()["fsm_pending"] == "128" }

func (l *laggingApply) resume() {
	l.unhold.Do(func() { l.held.Store(false); close(l.release) })
}

// claimsApplied checks that every claim made while behind was applied.
func (l *laggingApply) claimsApplied() {
	l.t.Helper()
	for i := 0; i < l.claims; i++ {
		if err := <-l.errs; err != nil {
			l.t.Errorf("claim: %v", err)
		}
	}
}

// waited waits for a Ready to start waiting for the apply.
func (l *laggingApply) waited() {
	l.t.Helper()
	select {
	case <-l.waiting:
	case <-time.After(30 * time.Second):
		l.t.Fatal("Ready never waited for the apply")
	}
}

// TestReadyWaitsOutAnApplyInFlight: raft counts an entry applied only once
// the state machine's queue took it, so under load a probe could meet the
// applied index behind the commit for a moment and read a healthy node as
// not ready. Ready waits a short while for the apply to reach the commit it
// read: a lag that clears meanwhile is ready, one that does not (a state
// machine that is stuck, a node replaying its log) is not.
func TestReadyWaitsOutAnApplyInFlight(t *testing.T) {
	l := newLaggingApply(t, time.Second)
	if ok, why := l.n.Ready(); !ok {
		t.Fatalf("idle node not ready: %s", why)
	}
	l.behind()

	// Stuck for longer than the wait: not ready, and says so.
	ok, why := l.n.Ready()
	if ok || !strings.Contains(why, "catching up") {
		t.Fatalf("node with a stuck apply: Ready() = %v, %q; want not ready, catching up", ok, why)
	}
	l.waited() // that call's wait

	// Behind when the probe reads the indexes, caught up within the wait.
	type answer struct {
		ok  bool
		why string
	}
	got := make(chan answer, 1)
	go func() {
		ok, why := l.n.Ready()
		got <- answer{ok, why}
	}()
	l.waited()
	l.resume()
	if a := <-got; !a.ok {
		t.Fatalf("node whose apply caught up within the wait: not ready: %s", a.why)
	}
	l.claimsApplied()
}

// TestReadyProbesShareOneWait: probes that meet the node behind share one
// wait for the apply (the intake's /readyz answers anyone: a flood of probes
// with a poll each would take CPU from the apply they wait for), and each
// answers ready once the apply caught up, however many came (a bound on
// the waits that answered the rest at once read a healthy node as not
// ready for anyone who sent nine).
func TestReadyProbesShareOneWait(t *testing.T) {
	const probes = 20
	l := newLaggingApply(t, time.Minute)
	l.behind()
	answers := make(chan bool, probes)
	for i := 0; i < probes; i++ {
		go func() { ok, _ := l.n.Ready(); answers <- ok }()
	}
	l.waited()
	waitFor(t, "every probe joined the wait", func() bool {
		l.n.readyMu.Lock()
		defer l.n.readyMu.Unlock()
		return l.n.applyWaiting != nil && l.n.applyWaiting.joined == probes-1
	})
	select {
	case <-l.waiting:
		t.Fatal("a second wait for the apply started")
	default:
	}
	l.resume()
	for i := 0; i < probes; i++ {
		if !<-answers {
			t.Error("a probe was not ready once the apply caught up")
		}
	}
	l.claimsApplied()
}

// TestReadyWaitLastsForEachProbe: a probe that joins the shared wait late,
// with a higher commit index than the first read, gets its own whole wait:
// the wait ends at the last probe's end, not the first's, and each answers
// by its own index (with the first's end, the late one answered not ready
// a moment before its index was applied).
func TestReadyWaitLastsForEachProbe(t *testing.T) {
	l := newLaggingApply(t, time.Minute)
	l.behind()
	c := l.n.raft.CommitIndex()
	first, late := make(chan bool, 1), make(chan bool, 1)
	go func() { first <- l.n.awaitApplied(c) }()
	l.waited()
	l.clock.advance(50 * time.Second)
	go func() { late <- l.n.awaitApplied(c + 1) }() // an entry still to come
	joined := func() bool {
		l.n.readyMu.Lock()
		defer l.n.readyMu.Unlock()
		return l.n.applyWaiting != nil && l.n.applyWaiting.joined == 1
	}
	waitFor(t, "the late probe joined", joined)
	l.clock.advance(20 * time.Second) // past the first probe's wait, within the late one's
	// Absence of an end: a few of the poll's ticks.
	time.Sleep(20 * time.Millisecond)
	if !joined() {
		t.Fatal("the wait ended with the first probe's, the late probe's still running")
	}
	l.resume()
	l.claimsApplied()
	if _, err := l.n.Claim(ctxT(t, time.Minute), claimCmd("src:after")); err != nil {
		t.Fatal(err)
	}
	if !<-first || !<-late {
		t.Fatal("a probe was not ready once its index was applied within its wait")
	}
}

// TestReadyNamesAPeerRefusingTheToken: a node started again with another
// cluster token than its peers' hears no one; its readiness names the peers
// that refuse its handshake and the likely cause, not only the missing
// quorum.
func TestReadyNamesAPeerRefusingTheToken(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	f := (leader + 1) % 3
	cfg := nodes[f].cfg
	if err := nodes[f].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[f] = nil
	cfg.Token = bytes.Repeat([]byte("z"), MinTokenLen)
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes[f] = n
	waitFor(t, "the node names the peers that refuse its token", func() bool {
		_, why := n.Ready()
		return strings.Contains(why, "refused this node's cluster handshake") && strings.Contains(why, nodes[leader].cfg.ID+" (")
	})
	if ok, why := n.Ready(); ok || !strings.HasPrefix(why, "no leader: waiting for a quorum of peers; ") {
		t.Fatalf("ready %v %q", ok, why)
	}
}

// heartbeatsOnly lets through only the heartbeats a node's raft sends to
// the peer named in to (none while empty): that peer keeps hearing its
// leader, as a follower resumed after a freeze or a cut does, while none of
// the entries or commit indexes it missed reach it.
type heartbeatsOnly struct {
	*raft.InmemTransport
	to *atomic.Pointer[string]
}

func (h *heartbeatsOnly) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if to := h.to.Load(); to != nil && *to == string(id) &&
		(len(args.Entries) > 0 || args.LeaderCommitIndex > 0 || args.PrevLogEntry > 0) {
		return errors.New("test: only heartbeats reach " + *to)
	}
	return h.InmemTransport.AppendEntries(id, target, args, resp)
}

// AppendEntriesPipeline is refused, so that every append goes through
// AppendEntries above.
func (h *heartbeatsOnly) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// TestFollowerBehindItsLeaderIsNotReady: a follower that hears the
// leader's heartbeats but none of its appends (a node resumed after a
// freeze, before replication's back-off lets the entries through) has
// applied all it knows to be committed, and read ready while the leader
// was entries ahead. Its readiness asks the leader how far it has
// committed.
func TestFollowerBehindItsLeaderIsNotReady(t *testing.T) {
	var to atomic.Pointer[string]
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.Transport = &heartbeatsOnly{InmemTransport: cfg.Transport.(*raft.InmemTransport), to: &to}
	})
	l := c.waitLeader(-1)
	f := c.follower(l)
	c.mustClaim("src:before", -1)
	c.waitConverged()
	waitFor(t, "the caught-up follower ready", func() bool { ok, _ := c.nodes[f].Ready(); return ok })

	id := c.ids[f]
	to.Store(&id)
	t.Cleanup(func() { to.Store(nil) })
	for i := range 5 {
		if _, err := c.nodes[l].Claim(ctxT(t, 10*time.Second), claimCmd(fmt.Sprintf("src:missed-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	commit := c.nodes[l].raft.CommitIndex()
	waitFor(t, "the follower behind its leader not ready, saying so", func() bool {
		ok, why := c.nodes[f].Ready()
		return !ok && strings.Contains(why, "catching up") && strings.Contains(why, fmt.Sprintf("of the leader's %d", commit))
	})
	if got := c.nodes[f].raft.CommitIndex(); got >= commit {
		t.Fatalf("the follower's commit index %d reached the leader's %d: only heartbeats were to reach it", got, commit)
	}
	if _, id := c.nodes[f].raft.LeaderWithID(); string(id) != c.ids[l] {
		t.Fatalf("the follower knows leader %q, want %s: the test needs it to hear the leader", id, c.ids[l])
	}

	to.Store(nil)
	waitFor(t, "the follower ready once it has applied what the leader committed", func() bool {
		ok, _ := c.nodes[f].Ready()
		return ok && c.nodes[f].raft.AppliedIndex() >= commit
	})
}

// heldDials holds a victim node's dials to one address until released, and
// says when one began: a connect that takes its time (a dropped SYN is sent
// again after a second; a leader too busy to accept).
type heldDials struct {
	victim  atomic.Int32 // index + 1
	to      atomic.Pointer[string]
	began   chan struct{}
	release chan struct{}
}

func newHeldDials() *heldDials {
	return &heldDials{began: make(chan struct{}, 16), release: make(chan struct{})}
}

func (h *heldDials) tune(i int, cfg *Config) {
	cfg.dropDial = func(addr string) error {
		if p := h.to.Load(); p != nil && *p == addr && h.victim.Load() == int32(i)+1 {
			select { // raft's and the relay's dials are held too
			case h.began <- struct{}{}:
			default:
			}
			<-h.release
			return os.ErrDeadlineExceeded
		}
		return nil
	}
}

// aged makes f's last answer of the leader's commit index due for asking
// again, as it is a second after it came.
func aged(f *Node) {
	c := *f.leaderCommit.Load()
	c.at, c.answered = time.Now().Add(-2*leaderCommitAge), time.Now()
	f.leaderCommit.Store(&c)
}

// TestReadinessAskDoesNotHoldProbesOrClaims: one probe at a time asks the
// leader how far it has committed. An ask that takes its time holds
// neither the other probes (they go by the last answer, or say they are
// asking when there is none) nor, once it fails, this node's claims: a
// timed-out ask is not the leader refusing this node, and the last answer
// stands until it is leaderCommitStale old.
func TestReadinessAskDoesNotHoldProbesOrClaims(t *testing.T) {
	h := newHeldDials()
	nodes := tcpCluster(t, 3, h.tune)
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	h.victim.Store(int32(fi) + 1)
	f := nodes[fi]
	waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:before")); err != nil {
		t.Fatal(err)
	}
	addr := nodes[li].cfg.Advertise
	released := false
	release := func() {
		if !released {
			released = true
			close(h.release)
		}
	}
	t.Cleanup(release)

	aged(f)
	h.to.Store(&addr)
	asker := make(chan string, 1)
	go func() { _, why := f.Ready(); asker <- why }()
	select {
	case <-h.began:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe did not ask the leader")
	}
	// readyNow is f.Ready, failing the test if it waits for the held ask.
	readyNow := func() (bool, string) {
		type answer struct {
			ok  bool
			why string
		}
		got := make(chan answer, 1)
		go func() { ok, why := f.Ready(); got <- answer{ok, why} }()
		select {
		case a := <-got:
			return a.ok, a.why
		case <-time.After(10 * time.Second):
			t.Fatal("a probe waited for another probe's ask")
			return false, ""
		}
	}
	if ok, why := readyNow(); !ok {
		t.Fatalf("a probe while another asks: not ready (%s); want the last answer to stand", why)
	}
	last := f.leaderCommit.Load()
	f.leaderCommit.Store(nil)
	if ok, why := readyNow(); ok || !strings.Contains(why, "asking the leader") {
		t.Fatalf("a probe while another asks, with no answer yet: %v (%s); want not ready, asking", ok, why)
	}
	f.leaderCommit.Store(last)
	release()
	if why := <-asker; !strings.HasPrefix(why, "leader ") {
		t.Fatalf("the probe whose ask failed: %q; want ready on the last answer", why)
	}
	if c := f.leaderCommit.Load(); c.err == nil {
		t.Fatalf("the failed ask was not recorded: %+v", c)
	}
	h.to.Store(nil)
	if r := f.refusedBy.Load(); r != nil {
		t.Fatalf("a timed-out ask was taken for the leader refusing this node: %+v", r)
	}
	f.relay.closeAll()
	claimThrough(t, f, "src:after") // a claim through the follower right after its ask timed out
}

// TestReadinessOfAFollowerOfAnOlderLeader: a leader of a release that does
// not know the request for its commit index answers "unknown op"; the
// follower goes by its own commit index, as before.
func TestReadinessOfAFollowerOfAnOlderLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.waitLeader(-1)
	f := c.follower(l)
	c.waitKnowsLeader(f, l)
	c.nodes[l].statsUnknown.Store(true)
	c.nodes[f].leaderCommit.Store(nil)
	c.mustClaim("src:a", -1)
	c.waitConverged()
	waitFor(t, "the follower of an older leader ready", func() bool { ok, _ := c.nodes[f].Ready(); return ok })
	if lc := c.nodes[f].leaderCommit.Load(); lc == nil || lc.err != nil || lc.answered.IsZero() || lc.index != 0 {
		t.Fatalf("the older leader's answer as recorded: %+v; want an answer with nothing to compare", lc)
	}
}
