package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// freezer stops a node's cluster network the way SIGSTOP stops the process,
// as its peers see it: connections stay open and nothing is read or written
// until thaw. Config.wrapConn = f.wrap puts every stream of the node behind it.
type freezer struct {
	mu     sync.Mutex
	thawed chan struct{} // closed while not frozen
}

func newFreezer() *freezer {
	f := &freezer{thawed: make(chan struct{})}
	close(f.thawed)
	return f
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
		f.thawed = make(chan struct{})
	default:
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.thawed:
	default:
		close(f.thawed)
	}
}

func (f *freezer) gate() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.thawed
}

func (f *freezer) wrap(c net.Conn) net.Conn {
	return &frozenConn{Conn: c, f: f, closed: make(chan struct{})}
}

// frozenConn is a stream that goes silent while its freezer is frozen: a
// read or a write waits for the thaw, as over a link that drops every
// packet, and, as on such a link, ends at the deadline the stream was given
// (else a caller that bounds its wait with a deadline, a dial's handshake,
// waits forever).
type frozenConn struct {
	net.Conn
	f      *freezer
	once   sync.Once
	closed chan struct{}

	mu           sync.Mutex
	rdead, wdead time.Time
}

func (c *frozenConn) wait(deadline time.Time) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-c.f.gate():
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-expired:
		return os.ErrDeadlineExceeded
	}
}

func (c *frozenConn) deadlines() (r, w time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rdead, c.wdead
}

func (c *frozenConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdead, c.wdead = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *frozenConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdead = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *frozenConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdead = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *frozenConn) Read(b []byte) (int, error) {
	r, _ := c.deadlines()
	if err := c.wait(r); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *frozenConn) Write(b []byte) (int, error) {
	_, w := c.deadlines()
	if err := c.wait(w); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// A follower's relays to a leader that froze must end when the follower
// sees the leader change, not at RelayTimeout: until then they hold the
// follower's relay slots, and no claim through it can reach the new leader.
// RelayTimeout is a minute here and every wait in the test far shorter, so
// only the leader change can free the slots in time.
func TestRelaysToAFrozenLeaderEndWhenTheLeaderChanges(t *testing.T) {
	freezers := make([]*freezer, 3)
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		freezers[i] = newFreezer()
		cfg.wrapConn = freezers[i].wrap
		cfg.RelayTimeout = time.Minute
	})
	// Registered after tcpCluster's cleanup, so it runs first: nodes close thawed.
	t.Cleanup(func() {
		for _, f := range freezers {
			f.thaw()
		}
	})
	old := leaderOf(t, nodes)
	f := (old + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[f].Ready(); return ok })
	if _, err := nodes[f].Claim(ctxT(t, 5*time.Second), claimCmd("src:before")); err != nil {
		t.Fatalf("claim through the follower before the freeze: %v", err)
	}

	freezers[old].freeze()
	// A stream of claims through the follower, one every few milliseconds, as
	// providers keep sending: the first batches go to the frozen leader and,
	// without the fix, hold all four relay slots.
	const stuck = 40
	errs := make(chan error, stuck)
	for i := 0; i < stuck; i++ {
		go func() {
			_, err := nodes[f].Claim(ctxT(t, 2*time.Minute), claimCmd(fmt.Sprintf("src:during-%d", i)))
			errs <- err
		}()
		time.Sleep(5 * time.Millisecond)
	}

	var next int
	waitFor(t, "a new leader that the follower knows", func() bool {
		for i, n := range nodes {
			if i != old && n.IsLeader() {
				addr, _ := nodes[f].raft.LeaderWithID()
				if addr == n.trans.LocalAddr() {
					next = i
					return true
				}
			}
		}
		return false
	})
	// Every claim sent during the freeze has its answer well before the
	// relay timeout: committed through the new leader, or a retryable
	// error (the intake's 503) whose outcome is unknown or not sent.
	for i := 0; i < stuck; i++ {
		select {
		case err := <-errs:
			if err != nil && !errors.Is(err, ErrIndeterminate) && !errors.Is(err, ErrNoLeader) {
				t.Errorf("claim during the freeze: %v; want success, ErrIndeterminate or ErrNoLeader", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d claims sent during the freeze still wait after a new leader (%s) was elected: relays to the frozen leader hold the slots", stuck-i, nodes[next].cfg.ID)
		}
	}
	if !claimThrough(t, nodes[f], "src:after") {
		t.Fatalf("claim through %s after %s took over: not created", nodes[f].cfg.ID, nodes[next].cfg.ID)
	}

	// The old leader rejoins and converges: nothing it received while frozen
	// was committed behind the new leader's back.
	freezers[old].thaw()
	// raft moves AppliedIndex when it hands entries to the FSM, before they
	// are applied: wait on the key itself (waitFor fails if it never comes).
	waitFor(t, "the old leader holds the claim committed after it froze", func() bool {
		_, ok, _ := nodes[old].Lookup("src:after")
		return ok && !nodes[old].IsLeader()
	})
}

// failingLogs fails the next `fail` log writes the way a full disk does.
type failingLogs struct {
	raft.LogStore
	fail atomic.Int32
}

func (l *failingLogs) failed() bool {
	for {
		n := l.fail.Load()
		if n <= 0 {
			return false
		}
		if l.fail.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (l *failingLogs) StoreLog(log *raft.Log) error {
	if l.failed() {
		return fmt.Errorf("store log %d: %w", log.Index, syscall.ENOSPC)
	}
	return l.LogStore.StoreLog(log)
}

func (l *failingLogs) StoreLogs(logs []*raft.Log) error {
	if l.failed() {
		return fmt.Errorf("store logs %d..: %w", logs[0].Index, syscall.ENOSPC)
	}
	return l.LogStore.StoreLogs(logs)
}

// A follower whose log write failed (ENOSPC) rejects that append; the leader
// must keep replicating to it. With hashicorp/raft's pipelined replication the
// rejection could deadlock the pipeline (hashicorp/raft#612): the follower got
// heartbeats and no entry until the next leader change.
func TestFollowerCatchesUpAfterAFailedLogWrite(t *testing.T) {
	logs := make([]*failingLogs, 3)
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		cfg.wrapLogs = func(s raft.LogStore) raft.LogStore {
			logs[i] = &failingLogs{LogStore: s}
			return logs[i]
		}
	})
	leader := leaderOf(t, nodes)
	f := (leader + 1) % 3

	// Steady claims on the leader, so that replication runs flat out while
	// the follower's writes fail a few times.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var committed atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd(fmt.Sprintf("src:w%d-%d", w, i))); err == nil {
					committed.Add(1)
				}
			}
		}()
	}
	waitFor(t, "claims under way", func() bool { return committed.Load() > 200 })
	// Each rejection is a chance for the pipeline deadlock (about one in
	// four before pipelining was turned off): ten make it near certain.
	for k := 0; k < 10; k++ {
		logs[f].fail.Store(1)
		waitFor(t, "the failed write", func() bool { return logs[f].fail.Load() == 0 })
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	waitFor(t, "the follower catches up", func() bool {
		return nodes[f].AppliedIndex() == nodes[leader].AppliedIndex()
	})
	want, _ := nodes[leader].Hash()
	waitFor(t, "the same state on the follower", func() bool {
		h, _ := nodes[f].Hash()
		return h == want
	})
}

// TestRelayRefusesTheLeadersOwnWork: the leader takes from a peer only the
// commands a follower relays for its callers (claims, replays, pauses,
// purges). A lease, an outcome, a reclaim, an expiry or a payload drop
// relayed by a peer (a deposed leader's worker, a buggy or hostile member)
// is refused and changes nothing: relayed, a Complete with the token a
// follower's copy shows would end an event the leader's worker is still
// delivering.
func TestRelayRefusesTheLeadersOwnWork(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	const key = "src:relayed"
	l := c.mustClaim(key, -1)
	ctx := ctxT(t, 30*time.Second)
	evs, err := c.nodes[l].Lease(ctx, 10, time.Hour)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v, %d events", err, len(evs))
	}
	tok := evs[0].Token
	far := time.Now().Add(1000 * time.Hour).UnixNano()
	for _, cmd := range []engine.Command{
		{Op: engine.OpComplete, Key: key, Token: tok},
		{Op: engine.OpFail, Key: key, Token: tok, MaxAttempts: 1, Reason: "relayed"},
		{Op: engine.OpLease, Max: 10, LeaseFor: int64(time.Hour)},
		{Op: engine.OpReclaim, Now: far},
		{Op: engine.OpExpire, Now: far},
		{Op: engine.OpDropPayloads, Before: far},
		{Op: engine.OpIdentify, Key: "00112233445566778899aabbccddeeff"},
	} {
		t.Run(cmd.Op.String(), func(t *testing.T) {
			applied := c.nodes[l].AppliedIndex()
			body := engine.EncodeRelayEntry(nil, []engine.Command{{Op: engine.OpClaim, Key: "src:beside", Source: "src", Payload: []byte("x")}, cmd})
			status, resp := c.nodes[l].handleRPC(ctx, rpcApply, body, nil)
			if status != rpcBadRequest || !strings.Contains(string(resp), "never relayed") {
				t.Fatalf("relayed %s: status %d %q, want a refusal", cmd.Op, status, resp)
			}
			if got := c.nodes[l].AppliedIndex(); got != applied {
				t.Errorf("applied index %d -> %d: the refused entry (or part of it) went to the log", applied, got)
			}
			ev, err := c.nodes[l].Get(key, true)
			if err != nil || ev.State != engine.StateProcessing || ev.Token != tok || len(ev.Payload) == 0 {
				t.Errorf("event after a relayed %s: %v state %s token %d payload %d bytes", cmd.Op, err, ev.State, ev.Token, len(ev.Payload))
			}
		})
	}
	// What a follower does relay still passes.
	body := engine.EncodeRelayEntry(nil, []engine.Command{{Op: engine.OpClaim, Key: "src:relayed-claim", Source: "src", Payload: []byte("x")}})
	if status, resp := c.nodes[l].handleRPC(ctx, rpcApply, body, nil); status != rpcOK {
		t.Fatalf("relayed claim: status %d %q", status, resp)
	}
}

// TestFollowerApplyOfALeaderOpFailsAlone: Node.Apply of a command only the
// leader may propose, on a follower, fails with ErrNotLeader there; it
// never joins a relayed batch, which the leader would refuse whole, other
// callers' claims with it.
func TestFollowerApplyOfALeaderOpFailsAlone(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	f := c.follower(leader)
	c.waitConverged()
	var failed atomic.Int32
	var firstErr atomic.Value
	for round := range 5 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 40 {
			wg.Go(func() {
				<-start
				_, err := c.nodes[f].Apply(ctxT(t, 10*time.Second), claimCmd(fmt.Sprintf("src:r%d-%d", round, i)))
				if err != nil && strings.Contains(err.Error(), "never relayed") {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			})
		}
		wg.Go(func() {
			<-start
			if _, err := c.nodes[f].Apply(ctxT(t, 10*time.Second), engine.Command{Op: engine.OpExpire, Max: 10}); !errors.Is(err, ErrNotLeader) {
				t.Errorf("Apply of an expire on a follower: %v, want ErrNotLeader", err)
			}
		})
		close(start)
		wg.Wait()
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d claims of other callers failed with the refusal of a batched leader-only op: %v", n, firstErr.Load())
	}
}
