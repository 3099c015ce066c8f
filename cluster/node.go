package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"oncehook/connlimit"
	"oncehook/engine"
)

// Peer is one voter of the bootstrap configuration.
type Peer struct {
	ID   string
	Addr string
}

// Config describes one node. Zero values are documented per field.
type Config struct {
	ID  string // raft server id; required
	Dir string // data directory: fsm.db, raft/logs.db, raft/snapshots; required

	// Bind is the cluster port (raft and the internal channel). Empty: a
	// single node on an in-memory transport, reachable by nobody else.
	Bind      string
	Advertise string     // address peers dial; default Bind
	Peers     []Peer     // bootstrap voters; empty: this node alone
	Token     []byte     // cluster token, at least MinTokenLen bytes; required with Bind unless TLS is set
	TLS       *TLSConfig // mutual TLS between nodes; with it Token is optional

	// Transport replaces the TCP transport (tests: raft.InmemTransport). With it,
	// ConnectInmem names the other nodes so that followers can reach the leader in
	// process.
	Transport raft.Transport

	// PreAuth caps the cluster port's connections that have not
	// authenticated yet, in all and per client network; zero: the caps
	// connlimit.CapsFor gives for the process's file descriptor limit.
	// Members' authenticated connections are not capped.
	PreAuth connlimit.Limits

	// AdminURL is where an operator reaches this node's admin API
	// ("http://10.0.0.2:7071"), for hints only: a follower asked for a
	// leader-only operation names the leader's. Empty: not known.
	AdminURL string

	// Logger takes the node's lines and raft's (component=raft, at
	// RaftLogLevel and above: raftslog.go); default slog.Default().
	Logger       *slog.Logger
	RaftLogLevel string // the raft library's level; default "warn"

	// Now is the leader's clock, read only by the proposer; default time.Now.
	Now func() time.Time

	// OnLeader runs leader-only work (delivery, sweeping). It is started after
	// a Barrier once this node leads and its ctx is cancelled when leadership is
	// lost or the node closes; Open waits for it to return before a new term.
	OnLeader func(ctx context.Context)

	// Tuning; zero means the default in parentheses.
	HeartbeatTimeout   time.Duration // 1s
	ElectionTimeout    time.Duration // 1s
	LeaderLeaseTimeout time.Duration // 500ms
	CommitTimeout      time.Duration // 5ms
	SnapshotThreshold  uint64        // 4096 entries; more once the state is large (snappolicy.go)
	TrailingLogs       uint64        // 2048 entries
	SnapshotInterval   time.Duration // 30s
	MaxBatch           int           // commands per log entry (1024)
	Inflight           int           // log entries outstanding at once (1)
	Linger             time.Duration // how long a batch waits for more commands under load (200µs; <0 never)
	RideFor            time.Duration // how long a delivery outcome waits for a claim to share its entry (2ms; <0 never)

	// RelayTimeout bounds one batch a follower hands to the leader over the
	// internal channel (10s). It matters only for a leader that stays the one
	// this node knows but does not answer: a leader change ends the calls to
	// the old leader at once (see leaderWatch).
	RelayTimeout time.Duration

	// inproc is set by tests on raft.InmemTransport; see Node.inproc.
	inproc func(addr string) *Node
	// answering, in tests on raft.InmemTransport, is told the node as soon
	// as it answers on the internal channel, before it bootstraps or asks
	// to rejoin, as a node's cluster port answers over TCP: a leader asked
	// to add it back reaches it.
	answering func(*Node)
	// rejoinPatience, in tests, replaces rejoinPatience.
	rejoinPatience time.Duration
	// voteGraceFor replaces voteGrace (0: voteGrace; voteguard.go).
	voteGraceFor time.Duration
	// unnamed, in tests, keeps the cluster from naming itself, as a
	// cluster of an older release.
	unnamed bool
	// wrapConn, in tests, wraps every cluster connection this node accepts or
	// dials (to freeze a node's network the way SIGSTOP does).
	wrapConn func(net.Conn) net.Conn
	// dropDial, in tests, fails this node's dials to an address with the
	// error it returns (a firewall dropping them); nil error: dial.
	dropDial func(addr string) error
	// relayKept, in tests, is told the capacity of the buffer a relay stream
	// keeps after answering each frame (serveRelay).
	relayKept func(capacity int)
	// format, in tests, is the data format this node says its binary writes
	// (0: engine.FormatVersion), as a node of another release would.
	format uint64
	// fragment, in tests, is the most bytes of an entry one log entry
	// carries (0: engine.FragmentChunk), so small claims travel in fragments.
	fragment int
	// wrapLogs, in tests, wraps the raft log store (to fail a write).
	wrapLogs func(raft.LogStore) raft.LogStore
	// onFatal, in tests, replaces the process exit of a fatal storage error.
	onFatal func(error)
	// reachWindow, in tests, replaces how long a failed heartbeat counts
	// against a peer (peerreach.go).
	reachWindow time.Duration
	// sinkClosed, in tests, is called once raft closed a snapshot sink
	// without an error; an error it returns is the Close's (raft's own can
	// fail so after the snapshot is in place: syncing the directory,
	// removing older snapshots).
	sinkClosed func() error
	// snapshotFloor, in tests, replaces the state size from which the
	// snapshot threshold grows with the state (snappolicy.go).
	snapshotFloor int64
	// noTransfer skips the leadership transfer on Close (in-memory test
	// clusters: InmemTransport's TimeoutNow call outlives a closed peer by its
	// 5s RPC timeout, which goleak would report).
	noTransfer bool
	// clockEvery, in tests, replaces how long the leader keeps its
	// comparison of clocks (clockCheckEvery; clockcheck.go).
	clockEvery time.Duration
	// holdApply, in tests, runs before the state machine applies each
	// batch (blocking in it stalls the apply as a slow engine would).
	holdApply func()
	// readyWait, in tests, replaces readyApplyWait; readyWaiting is told
	// when Ready starts waiting for the apply.
	readyWait    time.Duration
	readyWaiting func()

	// SyncEngine fsyncs the engine file on every commit as well as the raft
	// log. Off by default: see durability.go for why the log alone suffices.
	SyncEngine bool
	// BucketWidth is the retention bucket width of an engine file this node
	// creates, a rebuilt one included (0: the engine's default). Test
	// builds only: every replica must use the same (engine.Options).
	BucketWidth time.Duration

	// NoSync skips fsync on the log and the engine. Tests only: a crash can
	// lose acknowledged claims.
	NoSync bool
}

// Node is one member of the cluster: a raft instance with the engine as its FSM.
type Node struct {
	cfg      Config
	log      *slog.Logger
	eng      *engine.Engine
	fsm      *fsm
	raft     *raft.Raft
	logStore *raftboltdb.BoltStore
	logs     raft.LogStore // what raft reads and writes: logStore behind the cache and guards
	trans    raft.Transport
	patient  *patientTransport // n.trans over TCP; nil in process
	// votes and guarded hold the votes of a node that started with no raft
	// state (voteguard.go); nil otherwise. votesStop ends its watch.
	votes     *voteGuard
	guarded   *guardedTransport
	votesStop chan struct{}
	votesDone chan struct{}
	mux       *mux
	prop      *proposer
	relay     *relayer
	drainer   atomic.Pointer[drainerRef] // the leader's deliveries (transfer.go)
	// handoverUntil (unix ns): until then this node is handing its
	// leadership over, and raft's logger drops the ERROR that causes.
	handoverUntil atomic.Int64
	now           func() time.Time

	// leaders is the leader this node observes, fed by a raft observer; a
	// change cancels the relays in flight to the previous one.
	leaders   *leaderWatch
	leaderObs *raft.Observer
	reach     peerReach  // the peers the leader's heartbeats fail to reach
	clock     clockCheck // the leader's clock against the voters' (clockcheck.go)
	watchDone chan struct{}
	// removedBy is the member that said this leaderless node is not in its
	// configuration (membership.go); nil while that is not known.
	removedBy atomic.Pointer[string]
	// storeTrouble is the error of this node's last raft log append or
	// snapshot install, when it failed (a full disk): raft keeps the node
	// running and the leader sends again, but until one succeeds the node
	// is behind the cluster without knowing by how much (its commit index
	// stops where its log does), so it is not ready. nil once one succeeds.
	storeTrouble atomic.Pointer[string]
	// storeErrors counts the failures storing hears: a snapshot that failed
	// is cleared from storeTrouble by the next append that succeeds, and
	// only this count keeps it.
	storeErrors atomic.Uint64
	// refusedBy is the leader whose cluster port last refused this node's
	// handshake on a relay (handshake.go): claims here cannot reach it
	// (readiness.go).
	refusedBy atomic.Pointer[relayRefusal]
	// probing is set while probeLeader's dial runs (probes: its
	// goroutine; probeCtx ends at Close).
	probing   atomic.Bool
	probeMu   sync.Mutex // orders probes.Go before Close's probes.Wait
	probes    sync.WaitGroup
	probeCtx  context.Context
	probeStop context.CancelFunc
	// applyWaiting is the readiness probes' shared wait for the apply while
	// one runs (awaitApplied); readyMu guards it.
	readyMu      sync.Mutex
	applyWaiting *applyWait
	// leaderCommit is the leader's commit index as the leader last gave it
	// to this follower's readiness (readiness.go); asking is the ask in
	// flight, which other probes join (askMu guards it).
	leaderCommit atomic.Pointer[leaderCommit]
	askMu        sync.Mutex
	asking       *commitAsk
	// statsUnknown, set by tests, makes this node answer rpcStats as a
	// release that does not know it ("unknown op").
	statsUnknown atomic.Bool
	// statsDelay, set by tests, makes this node answer rpcStats this many
	// nanoseconds late (a node starting on a busy host).
	statsDelay atomic.Int64
	// restoring is set while a restore this node leads is not confirmed:
	// its state may hold events no majority committed (Lookup).
	restoring atomic.Bool
	// restoreBusy is set while Restore runs: a second restore at once
	// would land inside the first's confirmation (raft aborts what is in
	// flight when it restores) and stop the node.
	restoreBusy atomic.Bool
	// current is set once this node's applied state has caught up with the
	// cluster since the start (current.go): Lookup answers from it only then.
	current      atomic.Bool
	currentAt    atomic.Uint64 // the leader's commit index watchCurrent got; 0: not yet
	memberDone   chan struct{}
	relayTimeout time.Duration

	wake chan struct{}

	waitMu  sync.Mutex
	waiters map[string][]chan struct{}
	// waitedKeys is len(waiters), set under waitMu: the apply path reads
	// it to skip the lock when nobody waits, the usual case.
	waitedKeys atomic.Int64

	leaderMu     sync.Mutex
	leaderCancel context.CancelFunc
	leaderDone   chan struct{}
	stopObserve  chan struct{}
	observeDone  chan struct{}

	// inproc, in tests on raft.InmemTransport, finds the node behind a raft
	// address so the internal channel runs without TCP.
	inproc func(addr string) *Node

	boot     string // kernel boot id; see durability.go
	unsynced bool   // the engine commits without fsync (the raft log is the durable copy)

	// started is set once raft and the proposer run; the cluster port accepts
	// connections before that, and the internal channel refuses until then.
	started atomic.Bool
	// fresh: this node started with no raft state and has not joined or
	// bootstrapped yet. A leader asked to add it removes its old entry
	// first (Join); a member with its history is left as it is.
	fresh atomic.Bool
	// foreign, when set, says why this node's state is another cluster's
	// than its leader's (checkLeaderIdentity).
	foreign atomic.Pointer[string]

	fatalOnce sync.Once
	closeOnce sync.Once
	closeErr  error
}

// Open starts a node: opens the engine and the raft stores, joins or
// bootstraps the cluster, and returns once raft runs. Being ready (a leader
// known, the commit index applied) comes later; see Ready.
func Open(cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.Dir == "" {
		return nil, errors.New("cluster: ID and Dir are required")
	}
	if cfg.Bind != "" && cfg.Transport == nil {
		if err := checkAuth(cfg.Token, cfg.TLS); err != nil {
			return nil, err
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.clockEvery <= 0 {
		cfg.clockEvery = clockCheckEvery
	}
	if cfg.readyWait <= 0 {
		cfg.readyWait = readyApplyWait
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1024
	}
	if cfg.Inflight <= 0 {
		cfg.Inflight = 1
	}
	if cfg.Linger == 0 {
		cfg.Linger = 200 * time.Microsecond
	}
	if cfg.RideFor == 0 {
		cfg.RideFor = 2 * time.Millisecond
	}
	if cfg.Advertise == "" {
		cfg.Advertise = cfg.Bind
	}
	n := &Node{
		cfg:          cfg,
		log:          cfg.Logger,
		now:          cfg.Now,
		wake:         make(chan struct{}, 1),
		waiters:      make(map[string][]chan struct{}),
		stopObserve:  make(chan struct{}),
		observeDone:  make(chan struct{}),
		watchDone:    make(chan struct{}),
		memberDone:   make(chan struct{}),
		votesStop:    make(chan struct{}),
		votesDone:    make(chan struct{}),
		relayTimeout: orDur(cfg.RelayTimeout, 10*time.Second),
	}
	n.probeCtx, n.probeStop = context.WithCancel(context.Background())
	n.reach.window = cfg.reachWindow
	n.relay = &relayer{n: n}
	n.leaders = newLeaderWatch(func() (raft.ServerAddress, raft.ServerID) { return n.raft.LeaderWithID() },
		func() uint64 { return n.raft.CurrentTerm() })
	n.inproc = cfg.inproc
	if err := n.open(); err != nil {
		n.cleanup()
		return nil, dataDirHint(cfg.Dir, err)
	}
	return n, nil
}

// open opens the node's stores and transport, starts raft on them and, on
// a node with no raft state yet, bootstraps the cluster. What it opened
// before a failure is on n, for cleanup.
func (n *Node) open() error {
	raftDir := filepath.Join(n.cfg.Dir, "raft")
	if err := abandonUnconfirmedRestore(n.cfg.Dir, n.log); err != nil {
		return err
	}
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(n.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := claimDataDir(n.cfg.Dir, n.cfg.ID); err != nil {
		return err
	}
	if err := n.openEngine(); err != nil {
		return err
	}
	logs, err := n.openLog(raftDir)
	if err != nil {
		return err
	}
	n.logs = logs
	// An unreachable peer would otherwise fill the log (raftlog.go).
	hl := newRaftLogger(n.log, orDefault(n.cfg.RaftLogLevel, "warn"), n.raftLogFilter().exclude)
	hl.firstIndex = logs.FirstIndex
	snaps, err := openSnapshots(raftDir, hl, n.storing)
	if err != nil {
		return err
	}
	if n.cfg.sinkClosed != nil {
		ps := snaps.(privateSnapshots)
		ps.sinkClosed = n.cfg.sinkClosed
		snaps = ps
	}
	n.fsm.snaps = snaps
	// The engine is persistent. raft would restore the newest snapshot over it
	// at start; instead we restore only when the engine is behind that snapshot
	// (e.g. fsm.db was lost), and let raft replay the log after it, which the
	// engine skips up to its own last applied index.
	if err := n.catchUpFromSnapshot(snaps); err != nil {
		return err
	}
	if err := n.checkLogKept(snaps); err != nil {
		return err
	}
	if err := n.openTransport(hl); err != nil {
		return err
	}

	existing, err := raft.HasExistingState(logs, n.logStore, snaps)
	if err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	n.fresh.Store(!existing)
	rc := n.raftConfig(hl)
	if rc.SnapshotThreshold, err = n.fsm.policy.resume(snaps, logs); err != nil {
		return fmt.Errorf("snapshot threshold: %w", err)
	}
	trans := n.trans
	if guard, err := n.guardVotes(existing); err != nil {
		return err
	} else if guard {
		// No raft state (or none caught up yet since it had none): its
		// votes wait until it knows how far the cluster's history reaches
		// (voteguard.go).
		n.votes = newVoteGuard()
		n.guarded = newGuardedTransport(n.trans, n.votes, n.cfg.ID)
		trans = n.guarded.forRaft()
	}
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.logStore, snaps, trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	if n.votes != nil {
		go func() {
			defer close(n.votesDone)
			n.watchVotes(n.votes, n.votesStop)
		}()
	} else {
		close(n.votesDone)
	}
	if n.patient != nil {
		n.patient.raft.Store(n.raft)
	}
	n.fsm.policy.attach(n.raft)
	n.prop = newProposer(n, n.cfg.Inflight, n.cfg.MaxBatch, maxEntryBytes, n.cfg.Linger, n.cfg.RideFor)
	n.started.Store(true)
	if n.cfg.answering != nil {
		n.cfg.answering(n)
	}
	go n.observeLeadership()
	// Raft drops observations for a full channel; watchLeader reads the
	// current leader on each, so a dropped one only delays it to the next.
	obsCh := make(chan raft.Observation, 16)
	n.leaderObs = raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(n.leaderObs)
	go n.watchLeader(obsCh)
	go n.watchMembership()
	n.startWatchCurrent()

	if !existing {
		if err := n.bootstrap(); err != nil {
			return err
		}
		n.fresh.Store(false)
	}
	return nil
}

// openEngine opens the engine's file as the FSM. A file written without
// fsync that a machine restart may have torn is set aside first, to be
// rebuilt from the newest snapshot and the raft log (durability.go).
func (n *Node) openEngine() error {
	cfg := n.cfg
	n.boot = bootID()
	unsynced := !cfg.SyncEngine && n.boot != ""
	if !engineTrusted(cfg.Dir, n.boot) {
		n.log.Warn("the machine restarted since the engine file was last written without a clean close; rebuilding it from the newest snapshot and the raft log")
		if err := setAside(cfg.Dir); err != nil {
			return err
		}
	}
	path := filepath.Join(cfg.Dir, "fsm.db")
	eng, err := engine.Open(path, engine.Options{NoSync: cfg.NoSync || unsynced, BucketWidth: cfg.BucketWidth})
	if errors.Is(err, engine.ErrCorrupt) {
		// The engine file is a product of the snapshot and the log: without
		// it the node rebuilds it (catchUpFromSnapshot), and checkLogKept
		// refuses a log the snapshot no longer covers.
		return fmt.Errorf("open engine: %w; stop the node and move %s away (mv %s %s.damaged): "+
			"at its next start the node rebuilds it from the newest snapshot and the raft log", err, path, path, path)
	}
	if err != nil {
		return fmt.Errorf("open engine: %w", err)
	}
	n.eng = eng
	if unsynced {
		if err := writeMarker(cfg.Dir, n.boot, "dirty"); err != nil {
			return err
		}
		n.unsynced = true
	}
	floor := n.cfg.snapshotFloor
	if floor <= 0 {
		floor = snapshotFloor
	}
	policy := newSnapshotPolicy(orU64(n.cfg.SnapshotThreshold, defaultSnapshotThreshold), floor, n.log)
	n.fsm = &fsm{eng: eng, fatal: n.fatal, storing: n.storing, notify: n.afterApply, policy: policy, hold: n.cfg.holdApply}
	return nil
}

// openLog opens the raft log (also the stable store) and returns it behind
// a cache of the newest entries.
func (n *Node) openLog(raftDir string) (raft.LogStore, error) {
	path := filepath.Join(raftDir, "logs.db")
	// bbolt would fault on a truncated file (SIGBUS) and panic on a damaged
	// page, crashes that name nothing; the engine's checks refuse both with
	// the file's name.
	if err := engine.CheckPages(path); err != nil {
		return nil, fmt.Errorf("open raft log: %w; %s", err, rejoinHint)
	}
	var err error
	n.logStore, err = raftboltdb.New(raftboltdb.Options{
		Path:   path,
		NoSync: n.cfg.NoSync,
		BoltOptions: &bbolt.Options{
			Timeout:        time.Second,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	var logStore raft.LogStore = n.logStore
	if n.cfg.wrapLogs != nil {
		logStore = n.cfg.wrapLogs(logStore)
	}
	logStore = &suffixGuard{LogStore: logStore, fatal: n.fatal, storing: n.storing}
	return newRecentLogs(logStore, recentLogEntries, recentLogBytes), nil
}

// The newest log entries kept in memory (logcache.go): at 1 KiB bodies under
// load an entry carries about 64 KiB, so the bytes rarely bind; with large
// bodies they do.
const (
	recentLogEntries = 512
	recentLogBytes   = 32 << 20
)

// openTransport sets n.trans: the configured one (tests), an in-memory one
// without a bind address, or else raft's network transport over the
// node's authenticated listener (transport.go), which also serves relays.
func (n *Node) openTransport(hl hclog.Logger) error {
	cfg := n.cfg
	switch {
	case cfg.Transport != nil:
		n.trans = cfg.Transport
	case cfg.Bind == "":
		_, n.trans = raft.NewInmemTransport(raft.ServerAddress(cfg.ID))
	default:
		ln, err := net.Listen("tcp", cfg.Bind)
		if err != nil {
			return fmt.Errorf("cluster listen %s: %w", cfg.Bind, err)
		}
		n.mux, err = newMux(ln, cfg.Advertise, cfg.Token, cfg.TLS, n.log)
		if err != nil {
			ln.Close()
			return err
		}
		n.mux.wrap = cfg.wrapConn
		n.mux.dropDial = cfg.dropDial
		n.mux.preAuth = connlimit.NewCounter(orLimits(cfg.PreAuth))
		n.mux.memberAuth = connlimit.NewCounter(orLimits(cfg.PreAuth))
		n.mux.onRelay = n.serveRelay
		n.mux.serve()
		n.patient = newPatientTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  raftLayer{n.mux},
			MaxPool: 4,
			Timeout: 10 * time.Second,
			Logger:  hl,
			// One AppendEntries in flight per follower: no pipelining.
			// hashicorp/raft's pipeline deadlocks when a follower rejects an
			// append (a failed log write such as ENOSPC, or a log mismatch
			// after a leader change): pipelineDecode returns on the
			// rejection, the decoder then blocks handing over the next
			// answer, and the sender blocks handing it the next request, so
			// that follower gets heartbeats but never another entry until
			// the leader changes (hashicorp/raft#612, open). 1 is the
			// documented way to turn pipelining off. The proposer keeps one
			// entry in flight, so there is little to overlap: raft's own
			// measurements (#541) and our bench A/B (3 nodes, 64 clients)
			// showed no throughput loss.
			MaxRPCsInFlight: 1,
		}), patientFor, patientUntil)
		// A peer whose port refuses is retried here, not failed to raft:
		// raft observes no failed heartbeat, so the transport says it.
		n.patient.reach = &n.reach
		n.patient.onStore = n.logPeerStoring
		n.trans = n.patient
	}
	return nil
}

// logPeerStoring says on the leader when a follower starts refusing appends
// it cannot store, and when that ends (patientTransport.storing).
func (n *Node) logPeerStoring(id raft.ServerID, since time.Time, err error) {
	switch {
	case since.IsZero():
		n.log.Warn("follower cannot store the entries it is sent (a full or read-only disk?): sending them again every "+storeRetryEvery.String()+"; its own log and /readyz say why",
			"node", n.cfg.ID, "peer", string(id))
	case err == nil:
		n.log.Info("follower stores entries again", "node", n.cfg.ID, "peer", string(id), "after", time.Since(since).Round(time.Millisecond).String())
	default:
		n.log.Info("stopped sending entries again to a follower that could not store them", "node", n.cfg.ID, "peer", string(id),
			"after", time.Since(since).Round(time.Millisecond).String(), "why", stopWhy(err))
	}
}

// stopWhy says why a run of resends ended without the follower storing.
func stopWhy(err error) string {
	switch {
	case errors.Is(err, errCannotStore):
		return "this node no longer leads with it, is shutting down, or resent for an hour (raft tries again later)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "its cluster port refuses connections now (it went down): sent again once it is back"
	}
	return err.Error()
}

// raftConfig is raft's configuration for this node: the engine restores
// snapshots itself (open), and the timeouts and thresholds are the
// configured ones or their defaults.
func (n *Node) raftConfig(hl hclog.Logger) *raft.Config {
	cfg := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hl
	rc.NoSnapshotRestoreOnStart = true
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 64
	rc.HeartbeatTimeout = orDur(cfg.HeartbeatTimeout, time.Second)
	rc.ElectionTimeout = orDur(cfg.ElectionTimeout, time.Second)
	rc.LeaderLeaseTimeout = orDur(cfg.LeaderLeaseTimeout, 500*time.Millisecond)
	rc.CommitTimeout = orDur(cfg.CommitTimeout, 5*time.Millisecond)
	rc.SnapshotThreshold = orU64(cfg.SnapshotThreshold, defaultSnapshotThreshold)
	rc.TrailingLogs = orU64(cfg.TrailingLogs, 2048)
	rc.SnapshotInterval = orDur(cfg.SnapshotInterval, 30*time.Second)
	rc.ShutdownOnRemove = false
	return rc
}

// bootstrap starts a brand-new cluster from the configured peers. Every node
// is given the identical list, so every node may call this; raft tolerates the
// repeats. A node whose data was wiped must not bootstrap again while the
// others still hold a cluster with it as a voter: it asks them first and, if a
// leader answers, rejoins through it (remove, then add) instead.
func (n *Node) bootstrap() error {
	self := raft.Server{ID: raft.ServerID(n.cfg.ID), Address: n.trans.LocalAddr(), Suffrage: raft.Voter}
	conf := raft.Configuration{}
	seen := false
	for _, p := range n.cfg.Peers {
		if p.ID == n.cfg.ID {
			seen = true
			conf.Servers = append(conf.Servers, self)
			continue
		}
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr), Suffrage: raft.Voter})
	}
	if !seen {
		conf.Servers = append(conf.Servers, self)
	}
	if len(conf.Servers) > 1 && (n.mux != nil || n.inproc != nil) {
		joined, err := n.rejoinExisting()
		if err != nil {
			return err
		}
		if joined {
			return nil
		}
	}
	err := n.raft.BootstrapCluster(conf).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// rejoinExisting asks each peer to re-add this node. It returns true when a
// running cluster accepted it, an error when its leader refused to
// (ErrBadMember), and ErrUnauthorized when every peer that could
// be reached refused this node's token or certificate: such a node must not
// bootstrap. Its history of one would never meet the real cluster's, and
// fixing the credentials afterwards would not make it join (docs/operations.md,
// Adding a node). Peers that cannot be reached at all, or that answer that
// they know no leader and hold no history (peerHoldsHistory), are the
// normal first start of a cluster, and one peer that answers is enough to
// go on. A peer that took the request but whose answer is unknown (a
// timeout, a leader change part way) is a running cluster still at work on
// it: the node asks again, for up to rejoinPatience, and never bootstraps
// after such an answer; the leader may have removed this id already and be
// about to add it back.
func (n *Node) rejoinExisting() (bool, error) {
	body := encodeJoin(n.cfg.ID, string(n.trans.LocalAddr()))
	patience := n.cfg.rejoinPatience
	if patience == 0 {
		patience = rejoinPatience
	}
	deadline := time.Now().Add(patience)
	for {
		var refused []string
		var unsure error
		joining := false // a peer took the request to add this node
		answered := false
		busy := false // a peer's cap of unproved connections is full
		for _, p := range n.cfg.Peers {
			if p.ID == n.cfg.ID {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := n.relay.call(ctx, p.Addr, rpcJoin, body)
			cancel()
			n.relay.closeAll()
			switch {
			case err == nil:
				n.log.Info("joined the running cluster", "via", p.ID)
				return true, nil
			case errors.Is(err, ErrPeerBusy):
				// It said nothing of this node's credentials, nor of a
				// cluster: something on this host holds its connections.
				// Ask again, and never bootstrap beside it.
				answered, busy = true, true
				unsure = fmt.Errorf("%s: %w", p.ID, err)
			case peerRefused(err):
				n.log.Error("peer refused this node's cluster credentials", "peer", p.ID, "address", p.Addr, "err", err)
				refused = append(refused, p.ID)
			case errors.Is(err, ErrBadMember) || strings.Contains(err.Error(), ErrBadMember.Error()):
				// A leader answered and will not add this node: the cluster
				// runs, and counts this id as a voter. A cluster of its own
				// here would vote again in terms this node's lost data may
				// have voted in.
				return false, fmt.Errorf("bootstrap: the running cluster refused to add this node (asked %s): %w. "+
					"Not starting a cluster of its own: mend what the refusal names (the id and advertise address the leader reaches it by, or its binary's data format) and start again", p.ID, err)
			case isDialError(err):
			case errors.Is(err, ErrNoLeader):
				answered = true // it spoke the protocol: no leader yet, say
				if why := n.peerHoldsHistory(p.Addr); why != nil {
					unsure = fmt.Errorf("%s: %w", p.ID, why)
				}
			default:
				answered = true
				joining = true
				unsure = fmt.Errorf("%s: %w", p.ID, err)
			}
		}
		if unsure == nil {
			if len(refused) > 0 && !answered {
				return false, fmt.Errorf("bootstrap: %w: %s refused this node's token or TLS handshake; "+
					"its cluster token_file or certificates differ from theirs (or they run an older release: docs/operations.md, Upgrades; "+
					"or what answers at an address in peers is not an oncehook cluster port and closed the connection). Not starting a cluster of its own: fix them and start again",
					ErrUnauthorized, strings.Join(refused, ", "))
			}
			return false, nil
		}
		if time.Now().After(deadline) {
			if busy && !joining {
				also := ""
				if len(refused) > 0 {
					also = fmt.Sprintf("; %s refused this node's token or TLS handshake", strings.Join(refused, ", "))
				}
				return false, fmt.Errorf("bootstrap: for %v a peer would take no connection from this address (last: %w%s). "+
					"Not starting a cluster of its own: find what on this host holds connections to the peers' cluster ports (their logs name the address), and start again", patience, unsure, also)
			}
			advice := "start again, or check the leader's log"
			if errors.Is(unsure, ErrMemberSlow) || strings.Contains(unsure.Error(), ErrMemberSlow.Error()) {
				advice = "the leader reached this node's advertise address but got no answer in time: check that advertise names this node, and the host's load, then start again"
			}
			return false, fmt.Errorf("bootstrap: the running cluster took the request to add this node but did not confirm it within %v (last: %v). "+
				"Not starting a cluster of its own: %s", patience, unsure, advice)
		}
		switch {
		case joining:
			n.log.Warn("the running cluster has not confirmed adding this node yet; asking again", "err", unsure)
		case busy:
			n.log.Warn("a peer takes no more cluster connections from this address; asking again", "err", unsure)
		default:
			// Peers starting at the same time as this node, the usual first
			// start of a cluster: nothing is wrong yet.
			n.log.Info("waiting for the peers to say whether a cluster already runs; asking again", "why", unsure)
		}
		time.Sleep(time.Second)
	}
}

// peerHoldsHistory is nil when the peer at addr, which knows no leader,
// has no cluster history either: a first start, where every node
// bootstraps the same configuration. A peer that holds one (a cluster id,
// entries committed under a leader, or a log past the bootstrap entry:
// memberStats.holdsHistory) is a running cluster that lost its
// quorum for now (two of three nodes wiped at once, or a survivor
// stalled): nodes that bootstrapped beside it would form a second majority
// of its configuration and accept events it never sees. The node waits for
// it to lead instead (it grants the survivor its vote meanwhile). A peer
// that does not answer the question counts as one that holds a history.
func (n *Node) peerHoldsHistory(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
	defer cancel()
	ms, err := n.askStats(ctx, addr)
	switch {
	case isDialError(err) || errors.Is(err, errUnreachable):
		return nil // gone since it answered: it tells nothing, as a peer never reached
	case err != nil:
		return fmt.Errorf("knows no leader, and did not say whether it holds the cluster's history: %w", err)
	case ms.holdsHistory():
		return fmt.Errorf("knows no leader now, but holds the cluster's history (cluster id %q, commit index %d, log to %d in term %d)",
			ms.Cluster, ms.CommitIndex, ms.LastLogIndex, ms.LastLogTerm)
	}
	return nil
}

// rejoinPatience bounds how long a node with no data keeps asking a running
// cluster whose answers are unknown to add it (rejoinExisting).
const rejoinPatience = 30 * time.Second

// peerRefused tells a peer that refused this node from one that is down: its
// answer to the token handshake proved another token (or it closed the
// connection on it: an older release, which knows only the token preamble,
// or the close a wrong token gets), it dropped the connection after
// accepting it, sent a TLS alert (this node's certificate is
// expired or from another authority: crypto/tls reports an alert received
// as a net.OpError "remote error"), or its own certificate failed this
// node's check.
func peerRefused(err error) bool {
	var op *net.OpError
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	return errors.Is(err, ErrPeerUnproven) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &op) && op.Op == "remote error" ||
		errors.As(err, &verify) || errors.As(err, &unknownCA)
}

// errUnreachable: an in-process peer that is not running (the in-memory
// transport's dial error).
var errUnreachable = errors.New("unreachable")

// isDialError: the peer could not be reached (refused, unroutable, timed out).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (n *Node) catchUpFromSnapshot(snaps raft.SnapshotStore) error {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	newest := list[0]
	if n.eng.LastApplied() >= newest.Index {
		return nil
	}
	_, rc, err := snaps.Open(newest.ID)
	if err != nil {
		return fmt.Errorf("open snapshot %s: %w", newest.ID, err)
	}
	defer rc.Close()
	n.log.Warn("engine is behind the newest snapshot; restoring it", "engine_index", n.eng.LastApplied(), "snapshot_index", newest.Index)
	if err := n.eng.RestoreAt(rc, newest.Index); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", newest.ID, err)
	}
	return nil
}

// rejoinHint is what an operator does about a node whose raft log cannot be
// trusted (docs/operations.md, "A node's raft log is damaged or lost").
const rejoinHint = "stop the node, move its data directory away and start it empty: " +
	"in a cluster it rejoins and takes the cluster's state; a single node then takes its old " +
	"engine file back with `oncehook snapshot restore OLD_DIR/fsm.db`"

// checkLogKept refuses to start on a raft log that was lost, emptied or
// replaced by an older copy while the engine file stayed: the engine has
// applied entries the log no longer holds, or the log has no term although
// this node has taken part in a cluster. Raft would go on from the shorter
// log: it would vote as if it lacked entries it acknowledged (an election
// that can drop committed claims) or vote twice in one term, and a single
// node would hand out indexes again that the engine takes for entries
// already applied, so new claims would be skipped. An applied index is
// never past the node's own log or newest snapshot otherwise: an entry is
// stored (fsync) before it can be applied, and a snapshot's install or
// restore sets the engine's index to the snapshot's (fsm.Restore).
func (n *Node) checkLogKept(snaps raft.SnapshotStore) error {
	applied := n.eng.LastApplied()
	var snapIndex uint64
	if list, err := snaps.List(); err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	} else if len(list) > 0 {
		snapIndex = list[0].Index
	}
	// Raft applies the entries after its newest snapshot at start: a log
	// compacted past a snapshot that is gone (deleted, its meta.json
	// damaged: raft does not list it) would panic raft on the first entry
	// it lacks.
	first, err := n.logStore.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log: first index: %w", err)
	}
	if first > 1 && first > snapIndex+1 {
		newest := fmt.Sprintf("the newest snapshot ends at index %d", snapIndex)
		if snapIndex == 0 {
			newest = "there is no snapshot raft can read (it lists those whose meta.json reads)"
		}
		return fmt.Errorf("raft log %s starts at index %d and %s under %s: the entries before are in no snapshot, "+
			"and raft cannot start without them; put the snapshot back if it was moved, else %s",
			filepath.Join(n.cfg.Dir, "raft", "logs.db"), first, newest, filepath.Join(n.cfg.Dir, "raft", "snapshots"), rejoinHint)
	}
	if applied == 0 && snapIndex == 0 {
		return nil // a new node, or one whose whole data directory was emptied
	}
	last, err := n.logStore.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log: last index: %w", err)
	}
	path := filepath.Join(n.cfg.Dir, "raft", "logs.db")
	if applied > max(last, snapIndex) {
		return fmt.Errorf("raft log %s ends at index %d (newest snapshot %d) but the engine file has applied up to %d: "+
			"the log was lost, emptied or replaced by an older copy, and starting on it could lose acknowledged events; %s",
			path, last, snapIndex, applied, rejoinHint)
	}
	term, err := n.logStore.GetUint64([]byte("CurrentTerm")) // raft's own key
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return fmt.Errorf("raft log: current term: %w", err)
	}
	if term == 0 {
		return fmt.Errorf("raft log %s holds no term although this node has applied up to index %d (newest snapshot %d): "+
			"the log was lost or replaced, and starting on it could let this node vote twice in one term; %s",
			path, applied, snapIndex, rejoinHint)
	}
	return nil
}

// storing records the outcome of a raft log append or a snapshot install
// (storeTrouble): err, or nil for a success.
func (n *Node) storing(err error) {
	if err == nil {
		if n.storeTrouble.Load() != nil {
			n.storeTrouble.Store(nil)
		}
		return
	}
	msg := err.Error()
	n.storeTrouble.Store(&msg)
	n.storeErrors.Add(1)
}

// fatal stops the process (exit status 2) after one ERROR line saying why:
// this replica must not go on. The line says everything an operator needs;
// a panic's goroutine dump (hundreds of lines) would bury it.
func (n *Node) fatal(err error) {
	n.fatalOnce.Do(func() {
		n.log.Error("fatal storage error; stopping the process so this replica cannot diverge", "err", err)
		if n.cfg.onFatal != nil {
			n.cfg.onFatal(err)
			return
		}
		os.Exit(2)
	})
}

// afterApply runs on every node after each applied batch.
func (n *Node) afterApply(cmds [][]engine.Command, res [][]engine.Result) {
	wake := false
	for i := range cmds {
		for j := range cmds[i] {
			c, r := &cmds[i][j], &res[i][j]
			if r.Err != nil {
				continue
			}
			switch c.Op {
			case engine.OpClaim:
				// A claim whose event no lease can take yet (its source is
				// paused, or it waits behind its object's head) wakes no
				// lease: it would find nothing, and cost an entry per claim.
				if r.Created && r.State == engine.StatePending && !r.Held {
					wake = true
				}
				if r.Created && n.waitedKeys.Load() > 0 {
					// A follower's intake waits for an event its relayed
					// duplicate found on the leader (intake, awaitApplied).
					n.notifyKey(c.Key)
				}
			case engine.OpReplay, engine.OpReclaim, engine.OpResume:
				if r.N > 0 {
					wake = true
				}
			case engine.OpComplete, engine.OpFail:
				n.notifyKey(c.Key)
			case engine.OpPurge:
				n.auditPurge(c, r)
			}
		}
	}
	if wake {
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
}

func (n *Node) notifyKey(key string) {
	n.waitMu.Lock()
	ws := n.waiters[key]
	delete(n.waiters, key)
	n.waitedKeys.Store(int64(len(n.waiters)))
	n.waitMu.Unlock()
	for _, w := range ws {
		close(w)
	}
}

// observeLeadership starts leader-only work when this node wins an election
// and stops it when leadership is lost.
func (n *Node) observeLeadership() {
	defer close(n.observeDone)
	ch := n.raft.LeaderCh()
	for {
		select {
		case <-n.stopObserve:
			n.stopLeaderWork()
			return
		case isLeader := <-ch:
			if isLeader {
				n.startLeaderWork()
			} else {
				n.stopLeaderWork()
			}
		}
	}
}

// watchLeader reads the leader watch on every leader observation, so that a
// change cancels the relays in flight even when no new claim arrives.
func (n *Node) watchLeader(ch <-chan raft.Observation) {
	defer close(n.watchDone)
	n.leaders.current() // a change before the observer was registered
	for {
		select {
		case <-n.stopObserve:
			return
		case o := <-ch:
			switch o.Data.(type) {
			case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
				n.reach.observe(o.Data, time.Now())
				continue
			}
			// The watch reads raft's current leader, not the observation's:
			// after a dropped observation, the next one still brings it up
			// to date.
			n.leaders.current()
		}
	}
}

func (n *Node) startLeaderWork() {
	n.stopLeaderWork()
	n.reach.reset()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.leaderMu.Lock()
	n.leaderCancel, n.leaderDone = cancel, done
	n.leaderMu.Unlock()
	go func() {
		defer close(done)
		var watch sync.WaitGroup
		defer watch.Wait()
		if !n.caughtUpAsLeader(ctx) {
			return
		}
		n.current.Store(true) // its log holds every committed entry, and it applied them
		watch.Go(func() { n.endAbandonedEntries(ctx) })
		watch.Go(func() { n.nameCluster(ctx) })
		n.log.Info("leading: delivery and sweeping started", "node", n.cfg.ID)
		if n.cfg.OnLeader != nil {
			n.cfg.OnLeader(ctx)
		}
	}()
}

// caughtUpAsLeader waits until the FSM has applied every entry this new
// leader's log held when it won (entries of earlier terms may be committed
// but not yet applied here), so that nothing is leased or swept from an
// older state. It reports false when ctx ends or leadership is lost first.
//
// It polls instead of waiting on a raft Barrier: a barrier's future ends only
// once it commits, and a leader that keeps its followers' heartbeats but
// cannot commit (a voter that cannot store what it is sent) would hold this
// goroutine, and the node's shutdown behind it, for as long as it leads.
func (n *Node) caughtUpAsLeader(ctx context.Context) bool {
	target := n.raft.LastIndex()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for n.raft.AppliedIndex() < target {
		if n.raft.State() != raft.Leader {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// endAbandonedEntries proposes a no-op, while this node leads, whenever the
// FSM holds fragments of an entry no proposer is still sending: a previous
// leader lost its place part way through (what this leader found in its log
// after the barrier), or raft refused this leader's own fragments part way
// (a leadership transfer that then failed). Every replica keeps those
// fragments, and puts off its snapshots, until a command follows them
// (fsm.joinFragment); on an idle cluster none would. The no-op goes through
// the proposer, so it never lands between the fragments of an entry being
// proposed. Runs until ctx ends.
func (n *Node) endAbandonedEntries(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if n.fsm.joining() && n.prop.openRuns.Load() == 0 {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := n.prop.submit(pctx, []engine.Command{{Op: engine.OpNoop}}, true)
			cancel()
			if err == nil {
				n.log.Info("ended an entry whose last fragments never came", "node", n.cfg.ID)
			} else if ctx.Err() == nil {
				n.log.Debug("end an entry whose last fragments never came", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (n *Node) stopLeaderWork() {
	n.leaderMu.Lock()
	cancel, done := n.leaderCancel, n.leaderDone
	n.leaderCancel, n.leaderDone = nil, nil
	n.leaderMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// raftLogFilter is the Exclude hook of raft's logger (raftlog.go).
func (n *Node) raftLogFilter() *repeatFilter {
	f := newRepeatFilter(repeatWindow, nil)
	f.handingOver = func() bool { return time.Now().UnixNano() < n.handoverUntil.Load() }
	return f
}

// handingOver marks the next d as a leadership hand-over for raft's logger.
func (n *Node) handingOver(d time.Duration) {
	n.handoverUntil.Store(time.Now().Add(d).UnixNano())
}

// Close leaves the cluster gracefully: leadership moves to another voter
// first (so intake elsewhere barely notices), then leader work drains, then
// raft and the stores close.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		if n.raft != nil && n.raft.State() == raft.Leader {
			// Even alone: an answer that arrives after raft stops cannot be
			// recorded, and its event would run again after the restart.
			n.drainDeliveries(context.Background())
		}
		if n.raft != nil && !n.cfg.noTransfer && n.raft.State() == raft.Leader && n.voters() > 1 {
			n.handingOver(time.Hour) // until the process ends
			if err := n.handOver().Error(); err != nil {
				n.log.Warn("leadership transfer on shutdown", "err", err)
			} else if id := n.newLeader(context.Background()); id != "" {
				n.log.Info("leadership handed over on shutdown", "to", id)
			} else { // no message from the new leader within two election timeouts
				n.log.Info("leadership handed over on shutdown", "to", "not yet known")
			}
		}
		n.closeErr = n.cleanup()
	})
	return n.closeErr
}

// handOver starts the shutdown's leadership transfer: to the most
// up-to-date voter, or during a rolling upgrade to one whose data format
// halts no other voter (formatSafeTarget).
func (n *Node) handOver() raft.Future {
	ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
	defer cancel()
	id, err := n.formatSafeTarget(ctx, true)
	if err != nil || id == "" {
		return n.raft.LeadershipTransfer()
	}
	f := n.raft.GetConfiguration()
	if f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == id {
				return n.raft.LeadershipTransferToServer(s.ID, s.Address)
			}
		}
	}
	return n.raft.LeadershipTransfer()
}

func (n *Node) cleanup() error {
	var errs []error
	if n.raft != nil {
		close(n.votesStop)
		<-n.votesDone
		close(n.stopObserve)
		<-n.observeDone
		<-n.watchDone
		<-n.memberDone
		n.raft.DeregisterObserver(n.leaderObs)
		// Let entries in flight finish while raft still runs (it answers no
		// future that is queued or mid-apply when it shuts down), then stop raft.
		if n.prop != nil && !n.prop.drain(5*time.Second) {
			n.log.Warn("shutdown: entries still in flight after 5s; their callers get no answer")
		}
		// Relays still waiting for a leader that does not answer end now
		// (outcome unknown to their callers) instead of at their timeout.
		n.leaders.close()
		if n.patient != nil {
			n.patient.stop() // raft waits for its replication goroutines
		}
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
		if n.guarded != nil {
			n.guarded.stop()
		}
		if n.prop != nil {
			n.prop.close()
		}
	}
	n.probeMu.Lock()
	n.probeStop()
	n.probeMu.Unlock()
	n.probes.Wait()
	n.relay.closeAll()
	if n.mux != nil {
		n.mux.close()
	}
	if c, ok := n.trans.(io.Closer); ok && n.cfg.Transport == nil {
		c.Close()
	}
	if n.logStore != nil {
		if err := n.logStore.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.eng != nil {
		clean := n.unsynced && n.eng.Sync() == nil
		if err := n.eng.Close(); err != nil {
			errs = append(errs, err)
			clean = false
		}
		if clean {
			if err := writeMarker(n.cfg.Dir, n.boot, "clean"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removed reports whether this node saw a configuration without itself: it
// was removed, and raft lets it neither vote nor campaign (a node removed
// while it was down cannot know, and looks like one without a leader).
func (n *Node) removed() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	return len(servers) > 0 && !slices.ContainsFunc(servers, func(s raft.Server) bool { return s.ID == raft.ServerID(n.cfg.ID) })
}

// removedWhileRunning: this node has no leader and its own configuration
// no longer holds it (it applied its removal). The configuration is read
// only when no leader is known, off the path of a node that has one.
func (n *Node) removedWhileRunning() bool {
	if addr, _ := n.raft.LeaderWithID(); addr != "" {
		return false
	}
	return n.removed()
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	v := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			v++
		}
	}
	return v
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orWriter(w, d io.Writer) io.Writer {
	if w == nil {
		return d
	}
	return w
}

func orDur(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}

func orU64(v, d uint64) uint64 {
	if v == 0 {
		return d
	}
	return v
}

// orLimits is l, or the default pre-authentication caps when l is zero.
func orLimits(l connlimit.Limits) connlimit.Limits {
	if l == (connlimit.Limits{}) {
		return connlimit.CapsFor(connlimit.FDLimit(), 0).ClusterUnauthenticated
	}
	return l
}

// OpenConns is the number of connections open on the cluster port (0
// without one).
func (n *Node) OpenConns() int {
	if n.mux == nil {
		return 0
	}
	return n.mux.openConns()
}

// RefusedConns is the number of connections the cluster port closed at
// once: over its caps or not authenticated.
func (n *Node) RefusedConns() uint64 {
	if n.mux == nil {
		return 0
	}
	return n.mux.rejections()
}
