package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/internal/testproc"
	"oncehook/providers"
)

var binary string

// TestMain runs inside a testproc run directory: the binary, every test's
// TempDir and data dir live under it, a SIGINT or SIGTERM still cleans up,
// and what a killed run leaves is swept by the next one (package testproc).
func TestMain(m *testing.M) {
	run, err := testproc.Begin("systest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(run.Dir(), "oncehook")
	build := exec.Command("go", "build", "-o", binary, "oncehook")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := testproc.Run(build); err != nil {
		fmt.Fprintln(os.Stderr, "build oncehook:", err)
		run.End()
		os.Exit(1)
	}
	code := m.Run()
	run.End()
	os.Exit(code)
}

// proc is one oncehook process we started (testproc.Start: it dies with the
// test binary); we stop only these, by process group.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	p    *testproc.Proc
	out  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, name, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, out: &lockedBuffer{}}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	var err error
	if p.p, err = testproc.Start(p.cmd); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.out.String())
		}
	})
	return p
}

func (p *proc) running() bool { return p.p.Running() }

func (p *proc) kill() { p.p.Kill() }

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	if !p.p.Stop(30 * time.Second) {
		p.t.Fatalf("%s did not stop within 30s of SIGTERM", p.name)
	}
}

func run(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	out, err := testproc.CombinedOutput(cmd)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return string(out), code
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

func get(url, token string) (int, []byte) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// recorder is the test's handler: it records every delivery.
type recorder struct {
	mu   sync.Mutex
	runs map[string]int
	url  string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{runs: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.runs[req.Header.Get("Idempotency-Key")]++
	r.mu.Unlock()
	w.WriteHeader(200)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[key]
}

// clusterNode is one process of a test cluster.
type clusterNode struct {
	id      string
	dir     string
	cfg     string
	intake  string
	admin   string
	proc    *proc
	started int
}

type testCluster struct {
	t      *testing.T
	nodes  []*clusterNode
	token  string
	secret string
}

// startCluster writes a config per node (identical peers) and starts n processes.
func startCluster(t *testing.T, n int, handler string) *testCluster {
	t.Helper()
	root := t.TempDir()
	ports := freePorts(t, 3*n)
	c := &testCluster{t: t, token: "systest-admin-token-0123456789abcdef"}
	c.secret, _ = providers.GenerateSecret("standard")
	writeFile(t, filepath.Join(root, "cluster.token"), "systest-cluster-token-0123456789abcdef\n")
	writeFile(t, filepath.Join(root, "admin.token"), c.token+"\n")
	writeFile(t, filepath.Join(root, "orders.secret"), c.secret+"\n")
	var peers []string
	for i := 0; i < n; i++ {
		peers = append(peers, fmt.Sprintf("%q", fmt.Sprintf("node%d=127.0.0.1:%d", i+1, ports[3*i+2])))
	}
	for i := 0; i < n; i++ {
		nd := &clusterNode{id: fmt.Sprintf("node%d", i+1), dir: filepath.Join(root, fmt.Sprintf("node%d", i+1))}
		nd.intake = fmt.Sprintf("127.0.0.1:%d", ports[3*i])
		nd.admin = fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])
		nd.cfg = filepath.Join(root, nd.id+".toml")
		writeFile(t, nd.cfg, fmt.Sprintf(`[node]
id = %q
data_dir = %q
listen = %q
log_level = "info"

[cluster]
raft_listen = "127.0.0.1:%d"
peers = [%s]
token_file = "cluster.token"

[admin]
listen = %q
tokens = [{ name = "systest", token_file = "admin.token" }]

[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%s/orders"
lease = "3s"
forward_timeout = "2s"
backoff_min = "50ms"
backoff_max = "500ms"
`, nd.id, nd.dir, nd.intake, ports[3*i+2], strings.Join(peers, ", "), nd.admin, handler))
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		c.startNode(nd)
	}
	for _, nd := range c.nodes {
		c.waitReady(nd)
	}
	return c
}

func (c *testCluster) startNode(nd *clusterNode) {
	nd.started++
	nd.proc = start(c.t, fmt.Sprintf("%s#%d", nd.id, nd.started), filepath.Dir(nd.cfg), "serve", "-config", nd.cfg)
}

func (c *testCluster) waitReady(nd *clusterNode) {
	c.t.Helper()
	waitFor(c.t, nd.id+" ready", 30*time.Second, func() bool {
		code, _ := get("http://"+nd.intake+"/readyz", "")
		return code == 200
	})
}

type status struct {
	NodeID       string `json:"node_id"`
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	AppliedIndex uint64 `json:"applied_index"`
	Counts       map[string]int
}

func (c *testCluster) status(nd *clusterNode) (status, bool) {
	code, b := get("http://"+nd.admin+"/v1/status", c.token)
	var st status
	if code != 200 || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

func (c *testCluster) leader() *clusterNode {
	c.t.Helper()
	var l *clusterNode
	waitFor(c.t, "a leader", 30*time.Second, func() bool {
		for _, nd := range c.nodes {
			if !nd.proc.running() {
				continue
			}
			if st, ok := c.status(nd); ok && st.State == "leader" {
				l = nd
				return true
			}
		}
		return false
	})
	return l
}

// other returns the first node that is none of not.
func (c *testCluster) other(not ...*clusterNode) *clusterNode {
	c.t.Helper()
	for _, nd := range c.nodes {
		if !slices.Contains(not, nd) {
			return nd
		}
	}
	c.t.Fatal("no other node")
	return nil
}

func (c *testCluster) eventState(nd *clusterNode, key string) string {
	code, b := get("http://"+nd.admin+"/v1/events/"+key, c.token)
	if code != 200 {
		return ""
	}
	var ev struct{ State string }
	json.Unmarshal(b, &ev)
	return ev.State
}

// send posts one signed delivery to a node and returns the status (0 when the
// connection failed: an unknown outcome).
func (c *testCluster) send(ctx context.Context, nd *clusterNode, id string) int {
	body := []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"pad":"%s"}`, id, strings.Repeat("x", 900)))
	s, _ := providers.Lookup("standard")
	hs, _ := s.Sign(body, []byte(c.secret), time.Now(), id, nil)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.intake+"/in/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
