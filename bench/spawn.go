package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"oncehook/internal/testcluster"
	"oncehook/providers"
)

// Bounds on the spawned nodes' lifecycle.
const (
	readyTimeout = 60 * time.Second // from exec to /readyz 200, each node
	stopTimeout  = 10 * time.Second // from SIGTERM to SIGKILL
)

// env is what the load runs against: intake URLs, the source and its secret,
// and optionally the sink and the spawned nodes.
type env struct {
	targets    []string // intake base URLs, e.g. http://127.0.0.1:18080
	source     string
	secret     []byte
	adminURL   string // "" when unknown
	adminToken string
	sink       *sink   // nil: no delivery measurement
	neighbour  *sink   // -neighbour: the second source's handler
	nodes      []*proc // spawned nodes; nil with -target
	dir        string  // temporary dir of spawned nodes
	keep       bool    // keep dir (configs, data, logs) at the end
}

// setup builds the env for o: spawned nodes with the sink as their handler,
// or the given targets (with the sink when -sink is set).
func setup(ctx context.Context, o *options, stderr io.Writer) (*env, error) {
	e := &env{source: o.source, keep: o.keep}
	if o.spawn == 0 {
		if err := e.useTargets(o); err != nil {
			return nil, errors.Join(err, e.close(stderr))
		}
		if err := e.waitReady(ctx); err != nil {
			return nil, errors.Join(err, e.close(stderr))
		}
		return e, nil
	}
	var err error
	if e.sink, err = startSink("127.0.0.1:0", o.handlerDelay); err != nil {
		return nil, err
	}
	if e.neighbour, err = neighbourSinkFor(o); err != nil {
		return nil, errors.Join(err, e.close(stderr))
	}
	if err = e.spawn(ctx, o); err != nil {
		return nil, errors.Join(err, e.close(stderr))
	}
	if o.leaderOnly {
		l := e.leader()
		if l == nil {
			return nil, errors.Join(errors.New("-leader-only: no node reports a leader"), e.close(stderr))
		}
		e.targets = []string{"http://" + l.listen}
	}
	return e, nil
}

func (e *env) useTargets(o *options) error {
	e.targets = o.targets
	var err error
	if e.secret, err = readSecretFile(o.secretFile); err != nil {
		return err
	}
	if o.adminURL != "" {
		e.adminURL = strings.TrimRight(o.adminURL, "/")
	}
	if o.adminTokenFile != "" {
		tok, err := readSecretFile(o.adminTokenFile)
		if err != nil {
			return err
		}
		e.adminToken = string(tok)
	}
	if o.sinkAddr != "" {
		if e.sink, err = startSink(o.sinkAddr, o.handlerDelay); err != nil {
			return err
		}
	}
	return nil
}

func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	return b, nil
}

// close stops the nodes (SIGTERM, then SIGQUIT and SIGKILL after
// stopTimeout), the sink, and removes the temporary dir unless -keep. A node
// that was slow to stop is a warning on stderr (the results stand); a node that
// exited by itself is an error.
func (e *env) close(stderr io.Writer) error {
	var errs []error
	done := make(chan error, len(e.nodes))
	for _, p := range e.nodes {
		go func() { done <- p.stop() }()
	}
	for range e.nodes {
		err := <-done
		var slow *slowStopError
		if errors.As(err, &slow) {
			hint := "rerun with -keep to keep its goroutine dump"
			if e.keep {
				hint = "goroutine dump in " + slow.log
			}
			fmt.Fprintf(stderr, "bench: warning: %s did not stop within %s of SIGTERM; %s\n", slow.id, stopTimeout, hint)
			continue
		}
		errs = append(errs, err)
	}
	if e.sink != nil {
		errs = append(errs, e.sink.close())
	}
	if e.neighbour != nil {
		errs = append(errs, e.neighbour.close())
	}
	if e.dir != "" && !e.keep {
		errs = append(errs, os.RemoveAll(e.dir))
	}
	return errors.Join(errs...)
}

// slowStopError is a node that had to be killed.
type slowStopError struct{ id, log string }

func (s *slowStopError) Error() string { return s.id + " did not stop after SIGTERM" }

// proc is one spawned oncehook node.
type proc struct {
	id      string
	listen  string // intake host:port
	admin   string // admin host:port
	raft    string // raft host:port (cluster only)
	dataDir string
	logPath string
	p       *testcluster.Proc // nil until started
	told    bool              // an early exit was already reported
}

// spawn writes secrets, tokens and configs into a temporary dir, starts
// o.spawn nodes and waits until every one answers /readyz.
func (e *env) spawn(ctx context.Context, o *options) error {
	if _, err := os.Stat(o.bin); err != nil {
		return fmt.Errorf("-bin %s: %w (build it first: go build -o bin/oncehook .)", o.bin, err)
	}
	var err error
	if e.dir, err = os.MkdirTemp("", "oncehook-bench-"); err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(o.stderr, "keeping the nodes' configs, data and logs in %s\n", e.dir)
	}
	secret, err := providers.GenerateSecret(o.provider)
	if err != nil {
		return err
	}
	e.secret = []byte(secret)
	e.adminToken = randomHex(24)
	files := map[string]string{"bench.secret": secret, "admin.token": e.adminToken, "cluster.token": randomHex(24)}
	for name, v := range files {
		if err := testcluster.WriteSecret(filepath.Join(e.dir, name), v); err != nil {
			return err
		}
	}
	ports, err := testcluster.ReservePorts(3 * o.spawn)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	for i := range o.spawn {
		id := fmt.Sprintf("node%d", i+1)
		e.nodes = append(e.nodes, &proc{
			id:      id,
			listen:  addr(3 * i),
			admin:   addr(3*i + 1),
			raft:    addr(3*i + 2),
			dataDir: filepath.Join(e.dir, id),
			logPath: filepath.Join(e.dir, id+".log"),
		})
	}
	for _, p := range e.nodes {
		path := filepath.Join(e.dir, p.id+".toml")
		if err := testcluster.WriteSecret(path, e.config(p, o)); err != nil {
			return err
		}
		if err := p.start(o.bin, path); err != nil {
			return err
		}
		e.targets = append(e.targets, "http://"+p.listen)
	}
	e.adminURL = "http://" + e.nodes[0].admin
	return e.waitReady(ctx)
}

// config renders one node's TOML. The source's max_body covers -size.
func (e *env) config(p *proc, o *options) string {
	c := testcluster.NodeConfig{ID: p.id, DataDir: p.dataDir, Listen: p.listen, LogLevel: "warn",
		AdminListen: p.admin, AdminTokenName: "bench", AdminTokenFile: filepath.Join(e.dir, "admin.token")}
	if len(e.nodes) > 1 {
		c.RaftListen, c.Advertise = p.raft, p.raft
		c.ClusterTokenFile = filepath.Join(e.dir, "cluster.token")
		for _, n := range e.nodes {
			c.Peers = append(c.Peers, n.id+"="+n.raft)
		}
	}
	extra := fmt.Sprintf("max_body = \"%d\"\n", max(1<<20, o.size+64<<10))
	if o.replayGuard != "" {
		extra += fmt.Sprintf("replay_guard = %q\n", o.replayGuard)
	}
	if o.payloadRetention != "" {
		extra += fmt.Sprintf("payload_retention = %q\n", o.payloadRetention)
	}
	if o.soak.retention != "" {
		extra += fmt.Sprintf("retention = %q\n", o.soak.retention)
	}
	c.Sources = []testcluster.SourceConfig{{Name: o.source, Provider: o.provider,
		SecretFile: filepath.Join(e.dir, "bench.secret"), Forward: e.sink.url() + "/" + o.source, Extra: extra}}
	if e.neighbour != nil {
		c.Sources = append(c.Sources, testcluster.SourceConfig{Name: neighbourSource, Provider: o.provider,
			SecretFile: filepath.Join(e.dir, "bench.secret"), Forward: e.neighbour.url() + "/" + neighbourSource})
	}
	return c.TOML()
}

// start launches the node on its config (again, after a stop: the soak's
// leader changes), its output appended to its log.
func (p *proc) start(bin, cfgPath string) error {
	var err error
	p.p, err = testcluster.Launch(testcluster.Spec{Name: p.id, Log: p.logPath,
		Argv: []string{bin, "serve", "-config", cfgPath}})
	p.told = false
	return err
}

// stop sends SIGTERM, waits up to stopTimeout, then SIGQUIT (the goroutine
// dump lands in the node's log: the record of what held the shutdown up)
// and, 2s later, SIGKILL.
func (p *proc) stop() error {
	if p.p == nil {
		return nil
	}
	if !p.p.Running() {
		if p.told {
			return nil
		}
		return p.exitError()
	}
	if p.p.StopDump(stopTimeout, 2*time.Second) {
		return nil // a clean stop after SIGTERM is the expected end
	}
	return &slowStopError{id: p.id, log: p.logPath}
}

// exitError describes a node that exited before bench stopped it.
func (p *proc) exitError() error {
	p.told = true
	return fmt.Errorf("%s exited early (%v); log:\n%s", p.id, p.p.Err(), p.p.Tail(15))
}

// waitReady polls every target's intake /readyz until all answer 200; for
// spawned nodes it also notices one that exits and shows its log.
func (e *env) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for i, t := range e.targets {
		probe := func() bool { return testcluster.Ready(ctx, client, t+"/readyz") }
		if i >= len(e.nodes) {
			if err := testcluster.Await(ctx, t+"/readyz", readyTimeout, func() (bool, error) { return probe(), nil }); err != nil {
				return err
			}
			continue
		}
		p := e.nodes[i]
		if err := testcluster.AwaitReady(ctx, p.id, p.p, readyTimeout, probe); err != nil {
			if !p.p.Running() {
				p.told = true
				return err
			}
			return fmt.Errorf("%w; log tail:\n%s", err, p.p.Tail(15))
		}
	}
	return nil
}

// leaderAdmin returns the admin URL of the current leader of the spawned
// nodes, or the first node's when that cannot be told.
func (e *env) leaderAdmin() string {
	if l := e.leader(); l != nil {
		return "http://" + l.admin
	}
	return e.adminURL
}

// leader returns the spawned node that the first node names as leader (the
// only node when there is one), or nil when that cannot be told.
func (e *env) leader() *proc {
	if len(e.nodes) == 1 {
		return e.nodes[0]
	}
	if len(e.nodes) == 0 {
		return nil
	}
	c := &http.Client{Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	st, err := testcluster.FetchStatus(context.Background(), c, e.adminURL, e.adminToken)
	if err != nil {
		return nil
	}
	for _, p := range e.nodes {
		if p.id == st.LeaderID {
			return p
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// cpuSample is the CPU time used so far by this process, by each node and
// by the whole machine.
type cpuSample struct {
	at      time.Time
	self    time.Duration
	nodes   []time.Duration
	machine machineSample
}

func (e *env) cpuSample() cpuSample {
	s := cpuSample{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		s.machine = parseProcStat(b)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, p := range e.nodes {
		s.nodes = append(s.nodes, procCPU(p.p.Pid()))
	}
	return s
}

// clkTck is USER_HZ on Linux, the unit of /proc's CPU times.
const clkTck = 100

// procCPU reads utime+stime of pid from /proc (Linux; 0 elsewhere).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of stat
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return time.Duration(ut+st) * time.Second / clkTck
}

// machineSample is the machine's CPU time so far, from /proc/stat.
type machineSample struct {
	ok           bool
	cores        int
	busy, iowait time.Duration
}

// parseProcStat reads the aggregate "cpu" line of /proc/stat (user nice
// system idle iowait irq softirq steal ..., in USER_HZ ticks) and counts
// the "cpuN" lines; guest time is already inside user and nice.
func parseProcStat(b []byte) machineSample {
	var m machineSample
	tick := func(f string) time.Duration {
		v, err := strconv.ParseUint(f, 10, 63)
		if err != nil {
			return -1
		}
		return time.Duration(v) * time.Second / clkTck
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			m.cores++
			continue
		}
		if len(f) < 9 {
			return machineSample{}
		}
		var t [8]time.Duration
		for i := range t {
			if t[i] = tick(f[i+1]); t[i] < 0 {
				return machineSample{}
			}
		}
		m.busy = t[0] + t[1] + t[2] + t[5] + t[6] + t[7]
		m.iowait = t[4]
		m.ok = true
	}
	if m.cores == 0 {
		m.ok = false
	}
	return m
}

// nodeStats reads each spawned node's resident memory and data dir size.
func (e *env) nodeStats() []NodeStat {
	var out []NodeStat
	for _, p := range e.nodes {
		ns := NodeStat{ID: p.id, DataBytes: dirSize(p.dataDir),
			EngineBytes:   dirSize(filepath.Join(p.dataDir, "fsm.db")),
			LogBytes:      dirSize(filepath.Join(p.dataDir, "raft", "logs.db")),
			SnapshotBytes: dirSize(filepath.Join(p.dataDir, "raft", "snapshots"))}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.p.Pid())); err == nil {
			ns.RSSBytes = statusBytes(b, "VmRSS:")
			ns.RSSFileBytes = statusBytes(b, "RssFile:")
		}
		ns.Exited = !p.p.Running()
		out = append(out, ns)
	}
	return out
}

// statusBytes returns the field of a /proc/PID/status text, given in kB, in
// bytes; 0 when it is missing.
func statusBytes(status []byte, field string) int64 {
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dirSize is the bytes of the files under dir, or of dir when it is a file.
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// drain waits until the sink has received every key the run claimed (keys
// it did not claim do not count), or until limit passed, and reports what it
// saw.
func (e *env) drain(ctx context.Context, limit time.Duration) *drainResult {
	if e.sink == nil {
		return nil
	}
	start := time.Now()
	// Whether every event came or not, the snapshot says what did.
	if limit > 0 {
		_ = testcluster.Await(ctx, "the deliveries", limit, func() (bool, error) { return e.sink.pending() == 0, nil })
	}
	return &drainResult{waited: time.Since(start), snap: e.sink.snapshot()}
}

// drainResult is the sink's view after the drain.
type drainResult struct {
	waited time.Duration
	snap   sinkSnapshot
	metric map[int]int64 // the node's oncehook_backlog by second, when scraped
}

// profileJob fetches a CPU profile from a node's admin pprof while the load
// runs.
type profileJob struct {
	done chan error // nil: no profile asked for
}

func startProfile(ctx context.Context, o *options, e *env) *profileJob {
	j := &profileJob{}
	if o.cpuprofile == "" {
		return j
	}
	admin := e.adminURL
	if len(e.nodes) > 1 {
		admin = e.leaderAdmin()
	}
	secs := int(math.Ceil(o.duration.Seconds()))
	j.done = make(chan error, 1)
	go func() { j.done <- fetchProfile(ctx, admin, e.adminToken, secs, o.cpuprofile) }()
	return j
}

func (j *profileJob) wait() error {
	if j.done == nil {
		return nil
	}
	return <-j.done
}

// fetchProfile GETs admin/debug/pprof/profile?seconds=secs into path.
func fetchProfile(ctx context.Context, admin, token string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	c := &http.Client{}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(msg))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
