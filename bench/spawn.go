package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"oncehook/providers"
)

// Bounds on the spawned nodes' lifecycle.
const (
	readyTimeout = 60 * time.Second // from exec to /readyz 200 on every node
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
	if e.sink, err = startSink("127.0.0.1:0"); err != nil {
		return nil, err
	}
	if err = e.spawn(ctx, o); err != nil {
		return nil, errors.Join(err, e.close(stderr))
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
		if e.sink, err = startSink(o.sinkAddr); err != nil {
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
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the process has been waited for
	err     error         // Wait's result, valid after exited is closed
	told    bool          // an early exit was already reported
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
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(v), 0o600); err != nil {
			return err
		}
	}
	ports, err := freePorts(3 * o.spawn)
	if err != nil {
		return err
	}
	for i := range o.spawn {
		id := fmt.Sprintf("node%d", i+1)
		e.nodes = append(e.nodes, &proc{
			id:      id,
			listen:  ports[3*i],
			admin:   ports[3*i+1],
			raft:    ports[3*i+2],
			dataDir: filepath.Join(e.dir, id),
			logPath: filepath.Join(e.dir, id+".log"),
		})
	}
	for _, p := range e.nodes {
		cfg := e.config(p, o)
		path := filepath.Join(e.dir, p.id+".toml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
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
	var b strings.Builder
	q := strconv.Quote
	fmt.Fprintf(&b, "[node]\nid = %s\ndata_dir = %s\nlisten = %s\nlog_level = \"warn\"\n\n", q(p.id), q(p.dataDir), q(p.listen))
	if len(e.nodes) > 1 {
		var peers []string
		for _, n := range e.nodes {
			peers = append(peers, q(n.id+"="+n.raft))
		}
		fmt.Fprintf(&b, "[cluster]\nraft_listen = %s\nadvertise = %s\npeers = [%s]\ntoken_file = %s\n\n",
			q(p.raft), q(p.raft), strings.Join(peers, ", "), q(filepath.Join(e.dir, "cluster.token")))
	}
	fmt.Fprintf(&b, "[admin]\nlisten = %s\ntokens = [{ name = \"bench\", token_file = %s }]\n\n",
		q(p.admin), q(filepath.Join(e.dir, "admin.token")))
	maxBody := max(1<<20, o.size+64<<10)
	fmt.Fprintf(&b, "[[source]]\nname = %s\nprovider = %s\nsecret_files = [%s]\nmax_body = \"%d\"\nforward = %s\n",
		q(o.source), q(o.provider), q(filepath.Join(e.dir, "bench.secret")), maxBody, q(e.sink.url()+"/"+o.source))
	if o.replayGuard != "" {
		fmt.Fprintf(&b, "replay_guard = %s\n", q(o.replayGuard))
	}
	if o.payloadRetention != "" {
		fmt.Fprintf(&b, "payload_retention = %s\n", q(o.payloadRetention))
	}
	if o.soak.retention != "" {
		fmt.Fprintf(&b, "retention = %s\n", q(o.soak.retention))
	}
	return b.String()
}

func (p *proc) start(bin, cfgPath string) error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	p.cmd = exec.Command(bin, "serve", "-config", cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// A process group of its own: a Ctrl-C on the terminal reaches bench
	// only, which then reports and stops the nodes itself. On Linux the
	// node also dies if bench is killed outright (procattr_linux.go).
	p.cmd.SysProcAttr = nodeAttr()
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.id, err)
	}
	p.exited = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return nil
}

// stop sends SIGTERM, waits up to stopTimeout, then SIGQUIT and, 2s later,
// SIGKILL; by PID only.
func (p *proc) stop() error {
	if p.cmd == nil || p.exited == nil {
		return nil
	}
	select {
	case <-p.exited:
		if p.told {
			return nil
		}
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil // a clean stop after SIGTERM is the expected end
	case <-time.After(stopTimeout):
	}
	// SIGQUIT makes a Go process write every goroutine's stack to its log
	// before it exits: the record of what held the shutdown up.
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return &slowStopError{id: p.id, log: p.logPath}
}

// exitError describes a node that exited before bench stopped it.
func (p *proc) exitError() error {
	p.told = true
	return fmt.Errorf("%s exited early (%v); log:\n%s", p.id, p.err, tail(p.logPath, 15))
}

// waitReady polls every target's intake /readyz until all answer 200; for
// spawned nodes it also notices one that exits and shows its log.
func (e *env) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	for i, t := range e.targets {
		var p *proc
		exited := make(<-chan struct{}) // never ready for a target we did not start
		if i < len(e.nodes) {
			p = e.nodes[i]
			exited = p.exited
		}
		for !ready(ctx, client, t+"/readyz") {
			select {
			case <-exited:
				return p.exitError()
			case <-ctx.Done():
				if p != nil {
					return fmt.Errorf("%s not ready after %s: %w; log tail:\n%s", p.id, readyTimeout, ctx.Err(), tail(p.logPath, 15))
				}
				return fmt.Errorf("%s/readyz: not ready after %s: %w", t, readyTimeout, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func ready(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// leaderAdmin returns the admin URL of the current leader of the spawned
// nodes, or the first node's when that cannot be told.
func (e *env) leaderAdmin() string {
	if len(e.nodes) < 2 {
		return e.adminURL
	}
	var st struct {
		LeaderID string `json:"leader_id"`
	}
	req, _ := http.NewRequest(http.MethodGet, e.adminURL+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+e.adminToken)
	c := &http.Client{Timeout: 2 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return e.adminURL
	}
	defer resp.Body.Close()
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return e.adminURL
	}
	for _, p := range e.nodes {
		if p.id == st.LeaderID {
			return "http://" + p.admin
		}
	}
	return e.adminURL
}

// freePorts reserves n distinct loopback ports by listening on :0 (all held
// open together so none repeats), then releases them for the nodes.
func freePorts(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tail returns the last n lines of the file at path, or, when the process
// panicked, n lines from the panic message on.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	panicked := false
	for sc.Scan() {
		l := sc.Text()
		if !panicked && (strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ")) {
			panicked, lines = true, lines[:0]
		}
		if panicked && len(lines) >= n {
			continue
		}
		lines = append(lines, l)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// cpuSample is the CPU time used so far by this process and by each node.
type cpuSample struct {
	at    time.Time
	self  time.Duration
	nodes []time.Duration
}

func (e *env) cpuSample() cpuSample {
	s := cpuSample{at: time.Now()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, p := range e.nodes {
		s.nodes = append(s.nodes, procCPU(p.cmd.Process.Pid))
	}
	return s
}

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
	const clkTck = 100                       // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck
}

// nodeStats reads each spawned node's resident memory and data dir size.
func (e *env) nodeStats() []NodeStat {
	var out []NodeStat
	for _, p := range e.nodes {
		ns := NodeStat{ID: p.id, DataBytes: dirSize(p.dataDir)}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
					kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					ns.RSSBytes = kb << 10
				}
			}
		}
		select {
		case <-p.exited:
			ns.Exited = true
		default:
		}
		out = append(out, ns)
	}
	return out
}

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

// drain waits until the sink has received claims distinct events, or until
// limit passed, and reports what it saw.
func (e *env) drain(ctx context.Context, claims int64, limit time.Duration) *drainResult {
	if e.sink == nil {
		return nil
	}
	start := time.Now()
	deadline := start.Add(limit)
	for e.sink.unique() < claims && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
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
