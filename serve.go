package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/admin"
	"oncehook/cluster"
	"oncehook/config"
	"oncehook/connlimit"
	"oncehook/engine"
	"oncehook/failpoint"
	"oncehook/forward"
	"oncehook/intake"
	"oncehook/keyset"
	"oncehook/metrics"
	"oncehook/providers"
)

// node is one running oncehook process: the intake, the admin API, the cluster
// node and (while leading) the forwarder.
type node struct {
	cfg atomic.Pointer[config.Config]
	// started is the config the node started with: what a restart-only key
	// (listen addresses, cluster settings) still runs with, whatever the
	// file said at the reloads since.
	started *config.Config
	log     *slog.Logger
	level   *slog.LevelVar
	metrics *metrics.Metrics
	cluster *cluster.Node
	intake  *intake.Server
	keys    *keyset.Manager // keys_url sources' fetched keys
	targets atomic.Pointer[map[string]forward.Target]
	limited atomic.Pointer[[]string]             // the sources of targets with a max_rate (setTargets)
	leases  atomic.Pointer[[]engine.LeaseLength] // every target's lease length, by source (setTargets)
	// forwarder delivers while this node leads (lead); nil otherwise.
	forwarder atomic.Pointer[forward.Forwarder]

	httpSrv *fasthttp.Server
	httpLn  net.Listener
	admin   *admin.Server
	adminLn net.Listener
	served  chan error
	// wired is closed once startNode has set every field lead uses: raft
	// may make this node leader while cluster.Open still runs (a wiped
	// node elected while it waits to be added back), before n.cluster is
	// set.
	wired chan struct{}

	// The admin listener's settings (admin_wiring.go).
	adminTimeouts admin.Timeouts
	authClock     func() time.Time // the admin authentication backoff's clock

	// tlsSums hash the admin's and the cluster's TLS files as last loaded
	// (reload only): a reload names them as applied when they changed.
	adminTLSSum, clusterTLSSum [sha256.Size]byte
	// schemaSums hash each source's schema_file as last loaded, by source
	// name: a reload names a schema whose contents changed under the same
	// path, which config.Diff cannot see.
	schemaSums map[string][sha256.Size]byte
}

// schemaSums hashes the schema file of every source that names one.
func schemaSums(cfg *config.Config) map[string][sha256.Size]byte {
	sums := map[string][sha256.Size]byte{}
	for i := range cfg.Sources {
		if s := &cfg.Sources[i]; s.SchemaFile != "" {
			sums[s.Name] = filesSum(s.SchemaFile)
		}
	}
	return sums
}

// filesSum hashes the contents of the files at paths (an unreadable one
// counts as empty: the load that follows reports it).
func filesSum(paths ...string) [sha256.Size]byte {
	h := sha256.New()
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return [sha256.Size]byte(h.Sum(nil))
}

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stdout, stderr)
	cfgPath := fs.String("config", os.Getenv("ONCEHOOK_CONFIG"), "config file; none: demo mode (single node on ./data, demo source and sink)")
	demoDir := fs.String("data", "./data", "data directory in demo mode")
	demoListen := fs.String("listen", "127.0.0.1:8080", "demo mode: the intake's address")
	demoAdmin := fs.String("admin-listen", "127.0.0.1:7071", "demo mode: the admin listener's address")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	hint := "give the file with -config F"
	if *cfgPath != "" {
		hint = ""
	}
	if err := noArgs(fs, hint); err != nil {
		return err
	}
	if *cfgPath != "" {
		var demoOnly []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "data" || f.Name == "listen" || f.Name == "admin-listen" {
				demoOnly = append(demoOnly, "-"+f.Name)
			}
		})
		if len(demoOnly) > 0 {
			return usageError{fmt.Sprintf("serve %s: for demo mode only; with a config file (-config or ONCEHOOK_CONFIG), the file sets data_dir and the addresses", strings.Join(demoOnly, " "))}
		}
	}
	var cfg *config.Config
	var demo *demoSetup
	dataDir := *demoDir
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
		dataDir = cfg.Node.DataDir
	}
	// Before anything reads or writes in it, the demo's files included.
	lock, err := cluster.LockDataDir(dataDir)
	if err != nil {
		if cfg != nil {
			return dataDirError(*cfgPath, cfg, err)
		}
		return err
	}
	defer lock.Close()
	if *cfgPath == "" {
		var err error
		demo, err = startDemo(ctx, *demoDir, *demoListen, *demoAdmin, stderr)
		if err != nil {
			return err
		}
		defer demo.close()
		cfg = demo.cfg
	}
	level := new(slog.LevelVar)
	log := newLogger(cfg.Node.LogFormat, level, stderr)
	setLevel(level, cfg.Node.LogLevel)
	logWarnings(log, cfg)

	n, err := startNode(cfg, log, level, stderr)
	if err != nil {
		var se *intake.SourceError
		if errors.As(err, &se) && *cfgPath != "" {
			return sourceErrorAt(*cfgPath, cfg, err)
		}
		return err
	}
	if demo != nil {
		demo.announce(log, n.httpLn.Addr().String())
	}
	// Catch SIGHUP before READY=1: systemd may send
	// ExecReload's HUP as soon as it sees READY, and an uncaught HUP ends
	// the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	notifySystemd("READY=1")
	log.Info("oncehook serving", "node", cfg.Node.ID, "listen", n.httpLn.Addr().String(), "admin", n.adminLn.Addr().String(), "admin_tls", n.admin.TLS(), "data_dir", cfg.Node.DataDir, "version", version)

	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-n.served:
			serveErr = err
			break loop
		case <-hup:
			if *cfgPath != "" {
				notifySystemd("RELOADING=1")
				n.reload(*cfgPath)
				notifySystemd("READY=1")
			}
		}
	}
	notifySystemd("STOPPING=1")
	log.Info("shutting down")
	if err := n.shutdown(); err != nil {
		return err
	}
	return serveErr
}

// startNode binds the listeners first (a port conflict fails before any state
// is touched), then opens the cluster node, then serves.
func startNode(cfg *config.Config, log *slog.Logger, level *slog.LevelVar, stderr io.Writer, opts ...nodeOption) (*node, error) {
	n := &node{log: log, level: level, metrics: metrics.New(), served: make(chan error, 2), wired: make(chan struct{}),
		adminTimeouts: admin.DefaultTimeouts, authClock: time.Now}
	for _, o := range opts {
		o(n)
	}
	n.cfg.Store(cfg)
	n.started = cfg
	n.schemaSums = schemaSums(cfg)
	if cfg.Admin.TLS() {
		n.adminTLSSum = filesSum(cfg.Admin.TLSCert, cfg.Admin.TLSKey)
	}
	if cfg.Cluster != nil && cfg.Cluster.TLS() {
		n.clusterTLSSum = filesSum(cfg.Cluster.TLSCert, cfg.Cluster.TLSKey, cfg.Cluster.TLSCA)
	}
	// Raft's own go-metrics into the same registry, bridged before raft
	// starts so its first samples are kept.
	if err := n.metrics.BridgeRaft(); err != nil {
		log.Warn("raft metrics bridge disabled", "err", err)
	}
	set, targets, err := compileSources(cfg)
	if err != nil {
		return nil, err
	}
	n.setTargets(targets)
	if n.admin, err = n.newAdminServer(cfg); err != nil {
		return nil, err
	}

	if n.httpLn, err = net.Listen("tcp", cfg.Node.Listen); err != nil {
		return nil, fmt.Errorf("intake listen %s: %w", cfg.Node.Listen, err)
	}
	if n.adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
		n.httpLn.Close()
		return nil, fmt.Errorf("admin listen %s: %w", cfg.Admin.Listen, err)
	}

	// Caps and an accept that outlasts a descriptor shortage: a connection
	// flood on any port must not end the process (connlimit).
	caps := connlimit.CapsFor(connlimit.FDLimit(), cfg.Node.MaxConnsPerIP)
	intakeLn := connlimit.Wrap(n.httpLn, caps.Intake, connlimit.Options{Name: "intake", Logger: log, Refuse: intake.RefuseConn})
	adminLn := connlimit.Wrap(n.adminLn, caps.Admin, connlimit.Options{Name: "admin", Logger: log})
	n.httpLn, n.adminLn = intakeLn, adminLn
	n.metrics.Listener("intake", intakeLn.Open, intakeLn.Refused)
	n.metrics.Listener("admin", adminLn.Open, adminLn.Refused)
	n.metrics.IdleClosed("intake", intakeLn.Reaped)
	n.metrics.IdleClosed("admin", adminLn.Reaped)

	removeStaleUploads(cfg.Node.DataDir, log)

	ccfg := cluster.Config{
		ID:       cfg.Node.ID,
		Dir:      cfg.Node.DataDir,
		Logger:   log,
		OnLeader: n.lead,
		AdminURL: adminURL(cfg, n.adminLn.Addr()),
		PreAuth:  caps.ClusterUnauthenticated,
	}
	if failpoint.Enabled { // chaos builds only: the test clock offset (S11)
		ccfg.Now = failpoint.Now
		// and the test bucket width, for an engine file rebuilt after a
		// simulated machine restart as for the first one (createTestEngine)
		ccfg.BucketWidth = failpoint.BucketWidth()
	}
	if c := cfg.Cluster; c != nil {
		clusterSettings(&ccfg, c)
	}
	err = createTestEngine(ccfg.Dir, failpoint.BucketWidth) // failpoints builds only (testknobs.go)
	if err == nil {
		n.cluster, err = cluster.Open(ccfg)
	}
	if err != nil {
		n.httpLn.Close()
		n.adminLn.Close()
		return nil, err
	}

	// Raft and event-state gauges, read at scrape time.
	n.metrics.Registry().MustRegister(metrics.NewRaftCollector(n.cluster, version))
	n.metrics.Listener("cluster", n.cluster.OpenConns, n.cluster.RefusedConns)
	// Per-source pause state and backlog, read at scrape time.
	n.metrics.Registry().MustRegister(admin.NewSourceCollector(n.cluster, n.configuredSourceNames))
	n.metrics.Registry().MustRegister(metrics.NewDeadCollector(n.cluster, n.configuredSourceNames))
	n.metrics.Registry().MustRegister(metrics.NewInFlightCollector(n.deliveryInFlight, n.configuredSourceNames))
	n.metrics.ConfiguredSources(n.configuredSourceNames())
	// Published keys: keys_url sources verify with the fetched keys.
	n.keys = keyset.NewManager(cfg.Node.DataDir, log, n.metrics.Keys(), version)
	if err := n.keys.Attach(set, cfg); err != nil {
		n.keys.Close()
		n.cluster.Close()
		n.httpLn.Close()
		n.adminLn.Close()
		return nil, err
	}
	iopts := intake.Options{Store: n.cluster, Sources: set, Logger: log, Metrics: n.metrics,
		MaxConnsPerIP: cfg.Node.MaxConnsPerIP, NotCommitted: claimNotCommitted}
	if failpoint.Enabled { // chaos builds only: signatures checked against the test clock (S11)
		iopts.Now = failpoint.Now
	}
	n.intake = intake.New(iopts)
	n.httpSrv = n.intake.HTTPServer()
	// connlimit refuses a network past max_conns_per_ip at accept, with the
	// JSON 429 and counted. fasthttp's own count of the same cap is lowered
	// only after a closed connection gave connlimit its slot back, so a
	// connection accepted in between got fasthttp's plain-text 429, not
	// counted: one count, connlimit's.
	n.httpSrv.MaxConnsPerIP = 0
	n.httpSrv.ConnState = intakeIdleHook(intakeLn)
	n.httpSrv.Handler = intakeServing(intakeLn, n.httpSrv.Handler)
	go func() {
		if err := n.httpSrv.Serve(n.httpLn); err != nil {
			n.served <- fmt.Errorf("intake: %w", err)
		}
	}()
	go func() {
		if err := n.serveAdmin(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.served <- fmt.Errorf("admin: %w", err)
		}
	}()
	close(n.wired)
	return n, nil
}

// deliveryInFlight is, per source, the events holding a delivery worker
// (oncehook_delivery_in_flight); nil when this node does not lead.
func (n *node) deliveryInFlight() map[string]int {
	if f := n.forwarder.Load(); f != nil {
		return f.InFlight()
	}
	return nil
}

// lead is the leader-only work for one term: deliveries and sweeping.
func (n *node) lead(ctx context.Context) {
	select {
	case <-n.wired:
	case <-ctx.Done():
		return // leadership ended, or the node failed to start
	}
	f := forward.New(forward.Options{
		Store:   n.cluster,
		Targets: n.target,
		// With several sources, a slow one never holds the pool's last
		// eighth: another source's first events start at once.
		Sources: func() int { return len(*n.targets.Load()) },
		// A new leader caps a rate-limited backlog from its first lease.
		LimitedSources: func() []string {
			if l := n.limited.Load(); l != nil {
				return *l
			}
			return nil
		},
		// Events claimed before a reload that changed their source's
		// lease are leased for the new one.
		Leases: func() []engine.LeaseLength {
			if l := n.leases.Load(); l != nil {
				return *l
			}
			return nil
		},
		// Requests to handlers at once. A worker is held from its event's
		// lease to the handler's answer (a claim's commit holds a
		// reservation, counted apart, and the outcome commits in the
		// background): at 3,000 events/s and 25 ms commits under load
		// that was 75 workers; 64 made delivery fall seconds behind
		// intake there. A handler that takes 200 ms caps
		// 256 workers at 1,280 events/s, so the pool grows toward 1,024
		// while a slow handler answers more for it (forward/poolsize.go).
		Workers:    256,
		MaxWorkers: 1024,
		OnWorkers:  n.metrics.DeliveryWorkers,
		Wake:       n.cluster.Wake(),
		Logger:     n.log,
		Observe:    n.metrics.Delivery,
		// Deliveries that waited for their source's max_rate or a handler's
		// Retry-After.
		RateLimited: n.metrics.RateLimited,
		// A throttled source's parked events stop at a pause too.
		Paused: func(source string) bool {
			ss, err := n.cluster.Sources()
			return err == nil && ss[source].Paused
		},
		// Retention (retention.go): schedule repair, payload drops, dead
		// letters deleted after dead_retention.
		Limits:          n.sweepLimits,
		DeadExpired:     n.metrics.DeadExpired,
		PayloadsDropped: n.metrics.PayloadsDropped,
		LeasesReclaimed: n.metrics.LeasesReclaimed,
		// Zero, the default, unless a failpoints build is told otherwise
		// (failpoint/doc.go).
		ExpireInterval: failpoint.ExpireInterval(),
	})
	n.forwarder.Store(f)
	defer n.forwarder.Store(nil)
	// Claims proposed while a worker is free lease their event themselves.
	n.cluster.SetLeaseSlots(f)
	defer n.cluster.SetLeaseSlots(nil)
	// A hand-over (shutdown, or an operator's transfer) lets its deliveries
	// in flight finish first.
	n.cluster.SetDrainer(drainer{f, n})
	defer n.cluster.SetDrainer(nil)
	if err := f.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Error("forwarder stopped", "err", err)
	}
}

// drainer is the forwarder as the cluster drains it before a hand-over,
// for as long as the slowest source's handler may take.
type drainer struct {
	*forward.Forwarder
	n *node
}

// DrainLimit is the longest forward_timeout of the running sources, and a
// second for the outcome's commit (cluster.DrainLimiter).
func (d drainer) DrainLimit() time.Duration {
	longest := time.Duration(0)
	for _, t := range *d.n.targets.Load() {
		longest = max(longest, t.Timeout)
	}
	return longest + time.Second
}

// setTargets puts the forwarder's targets in force, with the list of the
// rate-limited sources among them.
func (n *node) setTargets(targets map[string]forward.Target) {
	var limited []string
	for src, t := range targets {
		if t.MaxRate > 0 {
			limited = append(limited, src)
		}
	}
	slices.Sort(limited)
	leases := leaseLengths(targets)
	n.limited.Store(&limited)
	n.leases.Store(&leases)
	n.targets.Store(&targets)
}

// leaseLengths lists the targets' lease lengths as a lease command carries
// them (engine.Command.Leases): sorted by source, at most engine.MaxQuotas
// (the sources past it keep the length stored at their events' claim).
func leaseLengths(targets map[string]forward.Target) []engine.LeaseLength {
	var leases []engine.LeaseLength
	for src, t := range targets {
		if t.Lease > 0 {
			leases = append(leases, engine.LeaseLength{Source: src, For: int64(t.Lease)})
		}
	}
	slices.SortFunc(leases, func(a, b engine.LeaseLength) int { return strings.Compare(a.Source, b.Source) })
	if len(leases) > engine.MaxQuotas {
		leases = leases[:engine.MaxQuotas]
	}
	return leases
}

func (n *node) target(source string) (forward.Target, bool) {
	t, ok := (*n.targets.Load())[source]
	return t, ok
}

// shutdown closes the front door first, then the cluster node (which lets
// a leader's deliveries in flight finish, hands leadership over and stops
// deliveries), then the admin API.
func (n *node) shutdown() error {
	var errs []error
	if err := n.httpSrv.ShutdownWithContext(timeoutCtx(10 * time.Second)); err != nil {
		errs = append(errs, fmt.Errorf("intake shutdown: %w", err))
	}
	n.keys.Close()
	if err := n.cluster.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cluster close: %w", err))
	}
	if err := n.admin.Shutdown(timeoutCtx(5 * time.Second)); err != nil {
		errs = append(errs, fmt.Errorf("admin shutdown: %w", err))
	}
	return errors.Join(errs...)
}

func timeoutCtx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_ = cancel // released when the deadline passes
	return ctx
}

// reload re-reads sources, secrets and the log level. An invalid file is
// rejected and the running configuration kept.
func (n *node) reload(path string) {
	old := n.cfg.Load()
	cfg, err := config.Load(path)
	if err != nil {
		n.metrics.ConfigReloaded(false)
		n.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	// The data dir as the next start will find it: a file that start (and
	// validate) would refuse is refused now, while the operator is at it,
	// not at the next restart (a node id whose data dir holds another
	// node's state, a data_dir others may write).
	err = cluster.CheckDataDir(cfg.Node.DataDir)
	if err == nil {
		err = cluster.CheckDataDirOwner(cfg.Node.DataDir, cfg.Node.ID)
	}
	if err != nil {
		err = fmt.Errorf("%s: node.data_dir: %w", path, err)
	}
	var set *intake.Set
	var targets map[string]forward.Target
	if err == nil {
		set, targets, err = compileSources(cfg)
		if err != nil {
			err = sourceErrorAt(path, cfg, err)
		}
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = n.reloadAdminCert(cfg)
	}
	var clusterTLS *cluster.LoadedTLS
	if err == nil {
		clusterTLS, err = n.reloadClusterTLS(n.started, cfg)
	}
	if err == nil {
		err = n.keys.Attach(set, cfg)
	}
	if err != nil {
		n.metrics.ConfigReloaded(false)
		n.log.Error("reload rejected; keeping the running configuration", "err", err)
		return
	}
	// What changed since the last reload applies now; what needs a restart
	// is judged against what runs, so a second reload neither forgets a
	// pending restart nor claims one for a file put back as it was.
	live, _ := config.Diff(old, cfg)
	_, restart := config.Diff(n.started, cfg)
	// Targets first: a claim of a source this reload adds, taken the
	// moment the intake knows it, finds its handler (the other way round it
	// was handed back as unconfigured). A claim of a removed source taken in
	// between is held like that source's other events.
	n.setTargets(targets)
	n.intake.SetSources(set)
	setLevel(n.level, cfg.Node.LogLevel)
	// What needs a restart keeps its running value until then: the admin
	// API reads the node's id and data_dir from here.
	n.cfg.Store(config.Running(n.started, cfg))
	if cert != nil {
		n.admin.UseCert(cert)
		if sum := filesSum(cfg.Admin.TLSCert, cfg.Admin.TLSKey); sum != n.adminTLSSum {
			n.adminTLSSum = sum
			live = append(live, "admin tls files (re-read)")
		}
	}
	if clusterTLS != nil {
		if err := n.cluster.UseTLS(clusterTLS); err != nil {
			n.log.Error("cluster tls not reloaded", "err", err)
		} else if sum := filesSum(cfg.Cluster.TLSCert, cfg.Cluster.TLSKey, cfg.Cluster.TLSCA); sum != n.clusterTLSSum {
			n.clusterTLSSum = sum
			live = append(live, "cluster tls files (re-read)")
		}
	}
	sums := schemaSums(cfg)
	for i := range cfg.Sources {
		src := &cfg.Sources[i]
		prev, had := n.schemaSums[src.Name]
		if sum, ok := sums[src.Name]; ok && had && sum != prev && !slices.Contains(live, "source["+src.Name+"].schema_file") {
			live = append(live, "source["+src.Name+"].schema_file (contents)")
		}
	}
	n.schemaSums = sums
	n.metrics.ConfigReloaded(true)
	// A source the reload added gets its series at 0, as one configured at
	// start does: an alert on increase() sees its first dead letter expire.
	n.metrics.ConfiguredSources(n.configuredSourceNames())
	logWarnings(n.log, cfg)
	for _, w := range keyChanges(old, cfg) {
		n.log.Warn(w)
	}
	for _, w := range guardChanges(old, cfg) {
		n.log.Warn(w)
	}
	if len(restart) > 0 {
		// Warn: at log_level warn or error an Info line would hide that
		// the file holds changes the node does not run yet.
		n.log.Warn("configuration reloaded; some changes need a restart", "applied", live, "needs_restart", restart)
		return
	}
	n.log.Info("configuration reloaded", "applied", live, "needs_restart", restart)
}

// guardChanges warns, for each source whose replay guard stays on across a
// reload but now hashes other fields with the body (a shopify source that
// gains or loses accept_types, or reads its topic elsewhere), that the
// bodies held before the reload are not matched by the new hash: a captured
// delivery resent afterwards can make one more new event (docs/operations.md,
// Upgrades).
func guardChanges(old, cfg *config.Config) []string {
	if old == nil {
		return nil
	}
	before := make(map[string]string, len(old.Sources))
	for i := range old.Sources {
		before[old.Sources[i].Name] = guardForm(&old.Sources[i])
	}
	var w []string
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		prev, ok := before[s.Name]
		now := guardForm(s)
		if ok && prev != "" && now != "" && prev != now {
			w = append(w, fmt.Sprintf("source %s: replay guard now holds %s (before: %s): the bodies it held before this reload may no longer be matched, "+
				"so a captured delivery resent within their retention can be claimed as a new event", s.Name, now, prev))
		}
	}
	return w
}

// guardForm names what a source's replay guard hashes, "" when it is off;
// it mirrors intake.compileSource's choice.
func guardForm(s *config.Source) string {
	if s.ReplayGuard != config.ReplayGuardBody {
		return ""
	}
	if sch, ok := providers.Lookup(s.Provider); ok && sch.Defaults().GuardByType && len(s.AcceptTypes) > 0 {
		typ := s.Type
		if name, ok := strings.CutPrefix(typ, "header:"); ok {
			typ = "header:" + http.CanonicalHeaderKey(name) // header names are read regardless of case
		}
		return "the body with the topic (" + typ + ")"
	}
	if s.HMAC != nil && s.HMAC.TimestampHeader != "" {
		// Only the header's value is hashed: renaming the header keeps it.
		return "the body with the signed timestamp"
	}
	return "the body"
}

// keyChanges warns, for each source whose key a reload changed (its own,
// or its provider's default it follows), that deduplication starts anew for
// it: an event claimed before the reload has its key the old way, so a
// provider's retry of it, keyed the new way, is a new event and reaches the
// handler again (README.md, Configuration).
func keyChanges(old, cfg *config.Config) []string {
	if old == nil {
		return nil
	}
	before := make(map[string][]string, len(old.Sources))
	for i := range old.Sources {
		before[old.Sources[i].Name] = old.Sources[i].Key
	}
	var w []string
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		if k, ok := before[s.Name]; ok && !slices.Equal(k, s.Key) {
			w = append(w, fmt.Sprintf("source %s: key changed (%s -> %s): events claimed before this reload keep keys made the old way, "+
				"so a provider's retry of one of them is a new event and reaches the handler again", s.Name, keyList(k), keyList(s.Key)))
		}
	}
	return w
}

// keyList writes a key as the file does: a list of parts, each quoted (a
// part may itself hold alternatives, a|b).
func keyList(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = strconv.Quote(p)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// removeStaleUploads deletes the restore uploads (POST /v1/restore spools
// one into data_dir) and the engine's restore files that a process stopped
// in the middle of a restore left behind: none can be in use before the node
// starts, and each may be as large as a backup.
func removeStaleUploads(dataDir string, log *slog.Logger) {
	for _, pattern := range []string{"restore-*.db", "fsm.db.restore-*"} {
		paths, _ := filepath.Glob(filepath.Join(dataDir, pattern))
		for _, p := range paths {
			if err := os.Remove(p); err == nil {
				log.Info("removed a restore file left by an earlier run", "path", p)
			}
		}
	}
}

// clusterSettings copies the [cluster] table into the cluster's config.
func clusterSettings(ccfg *cluster.Config, c *config.Cluster) {
	ccfg.Bind = c.RaftListen
	ccfg.Advertise = c.Advertise
	ccfg.Token = c.Token
	ccfg.HeartbeatTimeout = time.Duration(c.HeartbeatTimeout)
	ccfg.ElectionTimeout = time.Duration(c.ElectionTimeout)
	// The leader's lease is half the heartbeat timeout (500 ms at the
	// default): raised with it, so that a leader on a slow host does not
	// step down more readily than its followers call elections.
	ccfg.LeaderLeaseTimeout = time.Duration(c.HeartbeatTimeout) / 2
	for _, p := range c.Peers {
		ccfg.Peers = append(ccfg.Peers, cluster.Peer{ID: p.ID, Addr: p.Addr})
	}
	if c.TLSCert != "" {
		ccfg.TLS = &cluster.TLSConfig{CertFile: c.TLSCert, KeyFile: c.TLSKey, CAFile: c.TLSCA}
	}
}

// reloadClusterTLS reads the cluster's certificate files again when TLS is
// on in the running node (started) and in the new file (nil otherwise:
// turning it on or off waits for a restart, which config.Diff reports). A
// renewed certificate thus needs no restart; a file that does not load
// rejects the reload.
func (n *node) reloadClusterTLS(running, cfg *config.Config) (*cluster.LoadedTLS, error) {
	if n.cluster == nil || running.Cluster == nil || cfg.Cluster == nil || !running.Cluster.TLS() || !cfg.Cluster.TLS() {
		return nil, nil
	}
	c := cfg.Cluster
	return (&cluster.TLSConfig{CertFile: c.TLSCert, KeyFile: c.TLSKey, CAFile: c.TLSCA}).Load()
}

// compileSources turns config sources into the intake's hot-path form
// (intake.Compile, one intake.CompileSource per source) and the forwarder's
// targets. Start, reload and `oncehook validate` all call it, so validate
// refuses what serve would.
func compileSources(cfg *config.Config) (*intake.Set, map[string]forward.Target, error) {
	set, err := intake.Compile(cfg.Sources)
	if err != nil {
		return nil, nil, err
	}
	targets := make(map[string]forward.Target, len(cfg.Sources))
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		targets[s.Name] = forward.Target{
			URL:         s.Forward,
			Timeout:     time.Duration(s.ForwardTimeout),
			BackoffMin:  time.Duration(s.BackoffMin),
			BackoffMax:  time.Duration(s.BackoffMax),
			MaxAttempts: s.MaxAttempts,
			Sync:        s.Mode == "sync",
			MaxRate:     s.MaxRate,
			Burst:       s.MaxRateBurst,

			DeadRetention:    time.Duration(s.DeadRetention),
			PayloadRetention: time.Duration(s.PayloadRetention),
			Lease:            time.Duration(s.Lease),
		}
	}
	return set, targets, nil
}

func newLogger(format string, level *slog.LevelVar, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func setLevel(v *slog.LevelVar, name string) {
	switch name {
	case "debug":
		v.Set(slog.LevelDebug)
	case "warn":
		v.Set(slog.LevelWarn)
	case "error":
		v.Set(slog.LevelError)
	default:
		v.Set(slog.LevelInfo)
	}
}

// notifySystemd sends one sd_notify message when run under systemd with
// Type=notify; elsewhere it does nothing.
func notifySystemd(state string) {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return
	}
	if sock[0] == '@' {
		sock = "\x00" + sock[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// logWarnings logs the config's warnings, each with the file and line it
// is about, as validate prints them.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		if n := cfg.WarningLine(w); n > 0 {
			log.Warn(w, "file", cfg.Path, "line", n)
			continue
		}
		log.Warn(w, "file", cfg.Path)
	}
}

// intakeIdleHook tells the intake's listener which of its connections wait
// for a request head: a full intake closes the one waiting longest to take a
// new one (connlimit.Listener.ConnState). A connection waits from its accept
// and from each answer (StateIdle) until its handler runs (intakeServing):
// fasthttp's StateActive comes at the first byte, and a head trickled a
// byte at a time must still count as waiting.
func intakeIdleHook(ln *connlimit.Listener) func(net.Conn, fasthttp.ConnState) {
	return func(c net.Conn, st fasthttp.ConnState) {
		switch st {
		case fasthttp.StateIdle:
			ln.ConnState(c, true)
		case fasthttp.StateHijacked:
			ln.ConnState(c, false)
		}
	}
}

// intakeServing wraps the intake's handler: its request's head is whole,
// the connection serves it (intakeIdleHook).
func intakeServing(ln *connlimit.Listener, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ln.ConnState(ctx.Conn(), false)
		h(ctx)
	}
}
