package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/failpoint"
	"oncehook/internal/testcluster"
	"oncehook/internal/testproc"
)

const (
	intakePort = "8080"
	adminPort  = "7071"
	raftPort   = "7070"
	lease      = 3 * time.Second
	fwdTimeout = 2 * time.Second
	adminToken = "chaos-admin-token-0123456789abcdef"
	clusterTok = "chaos-cluster-token-0123456789abcdef"
)

// proc is a process of the suite: a testcluster process, which dies with the
// test binary and is signalled only by its process group.
type proc = testcluster.Proc

// startProc starts argv with its output appended to logPath; the test's
// cleanup kills it.
func startProc(t testing.TB, name, logPath string, argv ...string) *proc {
	t.Helper()
	return testcluster.StartSpec(t, testcluster.Spec{Name: name, Log: logPath, Argv: argv})
}

// cnode is one oncehook node of the cluster.
type cnode struct {
	i     int
	id    string
	ip    string
	dir   string // data dir
	cfg   string
	logs  string // log file, appended over restarts
	start int
	// Control files of the failpoints build (see package failpoint), one
	// pair per node: the armed failpoints and the test clock offset.
	fpFile, clockFile string
	loop              *loopDisk // the data dir's own throttleable disk (S13), or nil

	mu   sync.Mutex
	proc *proc // the current process; replaced on restart
}

// p is the node's current process.
func (n *cnode) p() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

func (n *cnode) intakeURL() string { return "http://" + n.ip + ":" + intakePort }
func (n *cnode) adminURL() string  { return "http://" + n.ip + ":" + adminPort }

// cluster is three oncehook processes in their namespaces plus the handler in
// the client namespace.
type cluster struct {
	t       testing.TB
	tp      *topo
	root    string
	secret  string
	nodes   []*cnode
	handler *proc
	hlog    string
	http    *http.Client // dials from the client namespace
	admin   *http.Client
}

type clusterOpts struct {
	tmpfsBytes int64 // > 0: every node's data dir is its own tmpfs of this size (disk-full scenarios)
	loopDisk   bool  // every node's data dir is its own loop-mounted ext4 (slow-disk scenarios)
}

func newCluster(t testing.TB, tp *topo, o clusterOpts) *cluster {
	t.Helper()
	root := t.TempDir()
	c := &cluster{t: t, tp: tp, root: root, secret: canarySecret, hlog: filepath.Join(root, "handler-runs.jsonl")}
	tr := &http.Transport{DialContext: tp.dial.DialContext, MaxIdleConnsPerHost: 64, MaxIdleConns: 256,
		IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	c.http = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	atr := &http.Transport{DialContext: tp.dial.DialContext, MaxIdleConnsPerHost: 4, DisableCompression: true}
	c.admin = &http.Client{Transport: atr, Timeout: 5 * time.Second}
	t.Cleanup(func() { tr.CloseIdleConnections(); atr.CloseIdleConnections() })

	writeSecret(t, filepath.Join(root, "cluster.token"), clusterTok)
	writeSecret(t, filepath.Join(root, "admin.token"), adminToken)
	writeSecret(t, filepath.Join(root, "orders.secret"), c.secret)
	var peers []string
	for i := 0; i < 3; i++ {
		peers = append(peers, fmt.Sprintf("node%d=%s:%s", i+1, nodeIP(i), raftPort))
	}
	var nodeMap []string
	for i := 0; i < 3; i++ {
		n := &cnode{i: i, id: fmt.Sprintf("node%d", i+1), ip: nodeIP(i)}
		n.dir = filepath.Join(root, n.id, "data")
		n.cfg = filepath.Join(root, n.id+".toml")
		n.logs = filepath.Join(root, n.id+".log")
		n.fpFile = filepath.Join(root, n.id+".failpoints")
		n.clockFile = filepath.Join(root, n.id+".clock")
		if err := os.MkdirAll(filepath.Dir(n.dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if o.tmpfsBytes > 0 {
			if err := os.MkdirAll(n.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			dir := n.dir
			// Registered before the mount (and before the node's process
			// cleanup: cleanups run in reverse, so the unmount comes after
			// every process is gone); also run on SIGINT/SIGTERM.
			testproc.Cleanup(t, func() { nsRun("umount", "-l", dir) })
			if _, err := nsRun("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", o.tmpfsBytes), "tmpfs", n.dir); err != nil {
				t.Skipf("chaos: disk-full scenario skipped: cannot mount a tmpfs: %v", err)
			}
		}
		if o.loopDisk {
			n.loop = newLoopDisk(t, filepath.Join(root, n.id+".img"), n.dir, 512<<20)
		}
		nc := testcluster.NodeConfig{
			ID: n.id, DataDir: n.dir, Listen: n.ip + ":" + intakePort,
			RaftListen: n.ip + ":" + raftPort, Advertise: n.ip + ":" + raftPort, Peers: peers,
			ClusterTokenFile: filepath.Join(root, "cluster.token"),
			AdminListen:      n.ip + ":" + adminPort, AdminTokenName: "chaos", AdminTokenFile: filepath.Join(root, "admin.token"),
			Sources: []testcluster.SourceConfig{{
				Name: "orders", Provider: "standard", SecretFile: filepath.Join(root, "orders.secret"),
				Forward: "http://" + clientIP + ":9000/orders", Lease: lease.String(), ForwardTimeout: fwdTimeout.String(),
				BackoffMin: "50ms", BackoffMax: "500ms", MaxAttempts: 100,
			}},
		}
		if err := nc.Write(n.cfg); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
		nodeMap = append(nodeMap, n.ip+"="+n.id)
	}
	c.handler = startProc(t, "handler", filepath.Join(root, "handler.log"),
		"ip", "netns", "exec", tp.client, handlerBin, "-listen", clientIP+":9000", "-log", c.hlog,
		"-nodes", strings.Join(nodeMap, ","))
	for _, n := range c.nodes {
		c.startNode(n)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// Keep the whole logs of a failed run next to the report.
			os.MkdirAll(vizDir(), 0o755)
			tag := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
			for _, n := range c.nodes {
				b, _ := os.ReadFile(n.logs)
				t.Logf("--- last lines of %s ---\n%s", n.id, lastLines(string(b), 40))
				os.WriteFile(filepath.Join(vizDir(), tag+"-"+n.id+".log"), b, 0o644)
			}
		}
	})
	for _, n := range c.nodes {
		c.waitReady(n, 60*time.Second)
	}
	return c
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeSecret(t testing.TB, path, content string) { writeFile(t, path, content+"\n") }

func (c *cluster) startNode(n *cnode) {
	n.start++
	// The control files are read only by a failpoints build (the suite builds
	// one; a release binary ignores the variables).
	p := testcluster.StartSpec(c.t, testcluster.Spec{
		Name: fmt.Sprintf("%s#%d", n.id, n.start), Log: n.logs,
		Wrap: []string{"ip", "netns", "exec", c.tp.nodes[n.i]},
		Argv: []string{oncehookBin, "serve", "-config", n.cfg},
		Env:  []string{failpoint.EnvFile + "=" + n.fpFile, failpoint.EnvClockFile + "=" + n.clockFile},
	})
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
}

// arm replaces the failpoints armed on n ("" disarms them); the node re-reads
// the file within 100 ms.
func (n *cnode) arm(t testing.TB, spec string) {
	t.Helper()
	atomicWrite(t, n.fpFile, spec)
}

// setClock sets n's test clock offset; the node re-reads it within 100 ms.
func (n *cnode) setClock(t testing.TB, d time.Duration) {
	t.Helper()
	atomicWrite(t, n.clockFile, d.String())
}

// atomicWrite replaces path's content in one rename, so a reader never sees
// half a file.
func atomicWrite(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) waitReady(n *cnode, d time.Duration) {
	c.t.Helper()
	ctx := context.Background()
	if err := testcluster.AwaitReady(ctx, n.id, n.p(), d, func() bool {
		return testcluster.Ready(ctx, c.admin, n.intakeURL()+"/readyz")
	}); err != nil {
		c.t.Fatalf("%v", err)
	}
}

func (c *cluster) get(url string, auth bool) (int, []byte) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := c.admin.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type nodeStatus = testcluster.Status

func (c *cluster) status(n *cnode) (nodeStatus, bool) {
	if !n.p().Running() {
		return nodeStatus{}, false
	}
	st, err := testcluster.FetchStatus(context.Background(), c.admin, n.adminURL(), adminToken)
	return st, err == nil
}

// statuses reads every node's status at about the same time.
func (c *cluster) statuses() []*nodeStatus {
	out := make([]*nodeStatus, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, ok := c.status(n); ok {
				out[i] = &st
			}
		}()
	}
	wg.Wait()
	return out
}

// leader returns the node that says it leads and that the others follow, or nil.
func (c *cluster) leader() *cnode {
	if i := testcluster.AgreedLeader(c.statuses()); i >= 0 {
		return c.nodes[i]
	}
	return nil
}

func (c *cluster) waitLeader(d time.Duration) *cnode {
	c.t.Helper()
	var l *cnode
	testcluster.WaitFor(c.t, "a leader the others follow", d, func() bool {
		l = c.leader()
		return l != nil
	})
	return l
}

func (c *cluster) followers(l *cnode) []*cnode {
	var out []*cnode
	for _, n := range c.nodes {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// finalEvent is one event of the final state, as the admin API lists it.
type finalEvent struct {
	Key      string `json:"key"`
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	Token    uint64 `json:"token"`
	// RFC 3339 times, "" when unset (see stamp).
	CreatedAt     string `json:"created_at"`
	ExpiresAt     string `json:"expires_at"`
	NextAttemptAt string `json:"next_attempt_at"`
	LeaseUntil    string `json:"lease_until"`
}

// stamp parses one of finalEvent's times; the zero time when unset.
func stamp(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// events lists every event a node holds, by key, 1000 a page. It pages with
// the last key itself rather than the answer's "next" (see
// TestAdminListPagingBeyondTheEngineCap: "next" is missing when limit > 1000).
func (c *cluster) events(n *cnode) (map[string]finalEvent, error) {
	out := map[string]finalEvent{}
	after := ""
	for page := 0; page < 10000; page++ {
		code, b := c.get(n.adminURL()+"/v1/events?limit=1000&after="+url.QueryEscape(after), true)
		if code != 200 {
			return nil, fmt.Errorf("list events on %s: %d %s", n.id, code, b)
		}
		var res struct {
			Events []finalEvent `json:"events"`
		}
		if err := json.Unmarshal(b, &res); err != nil {
			return nil, err
		}
		for _, ev := range res.Events {
			out[ev.Key] = ev
		}
		if len(res.Events) < 1000 {
			return out, nil
		}
		after = res.Events[len(res.Events)-1].Key
	}
	return nil, fmt.Errorf("too many pages")
}

// backup fetches a node's engine file (GET /v1/backup, one read transaction)
// and returns its last applied index, content hash and consistency check.
type engineView struct {
	applied uint64
	hash    [32]byte
	check   error
	err     error
}

func (c *cluster) engineView(n *cnode) engineView {
	req, _ := http.NewRequest(http.MethodGet, n.adminURL()+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	cl := &http.Client{Transport: c.admin.Transport, Timeout: 60 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		return engineView{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return engineView{err: fmt.Errorf("backup %s: %d", n.id, resp.StatusCode)}
	}
	path := filepath.Join(c.root, fmt.Sprintf("backup-%s-%d.db", n.id, time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		return engineView{err: err}
	}
	defer os.Remove(path)
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return engineView{err: err}
	}
	f.Close()
	e, err := engine.Open(path, engine.Options{})
	if err != nil {
		return engineView{err: err}
	}
	defer e.Close()
	v := engineView{applied: e.LastApplied()}
	v.hash, v.err = e.Hash()
	v.check = e.Check()
	return v
}

// metric sums a Prometheus counter's samples whose labels contain match.
func (c *cluster) metric(n *cnode, name, match string) float64 {
	code, b := c.get(n.adminURL()+"/metrics", false)
	if code != 200 {
		return 0
	}
	return sumMetric(b, name, match)
}

func sumMetric(b []byte, name, match string) float64 {
	total := 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total
}

// handlerControl sets the handler's run time for every key (0: normal).
func (c *cluster) handlerControl(slow time.Duration) error {
	code, _ := c.get(fmt.Sprintf("http://%s:9000/control?slow=%s", clientIP, slow), false)
	if code != 200 {
		return fmt.Errorf("handler control: %d", code)
	}
	return nil
}

// handlerRuns stops the handler and reads its run log.
func (c *cluster) handlerRuns() ([]hrun, error) {
	c.handler.Stop(10 * time.Second)
	f, err := os.Open(c.hlog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []hrun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r hrun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("handler log: %v", err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// hrun is one line of the handler's log (see cmd/chaoshandler).
type hrun struct {
	Key      string `json:"key"`
	Node     string `json:"node"`
	Attempt  int    `json:"attempt"`
	Token    uint64 `json:"token"`
	Start    int64  `json:"start"`
	End      int64  `json:"end"`
	Outcome  string `json:"outcome"`
	Status   int    `json:"status"`
	Late     bool   `json:"abandoned_late"`
	MaxToken uint64 `json:"max_token_seen"`
}

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
