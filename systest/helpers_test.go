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
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/internal/testcluster"
	"oncehook/internal/testproc"
	"oncehook/providers"
)

var binary string

// TestMain runs inside a testproc run directory: the binary, every test's
// TempDir and data dir live under it, a SIGINT or SIGTERM still cleans up,
// and what a killed run leaves is swept by the next one (package testproc).
// Processes, configs, readiness and the leader come from package
// testcluster.
func TestMain(m *testing.M) {
	run, err := testproc.Begin("systest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(run.Dir(), "oncehook")
	if err := testcluster.Build(binary, "oncehook"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		run.End()
		os.Exit(1)
	}
	code := m.Run()
	run.End()
	os.Exit(code)
}

// start starts the binary with args in dir; it dies with the test.
func start(t *testing.T, name, dir string, args ...string) *testcluster.Proc {
	t.Helper()
	return testcluster.StartProc(t, name, dir, append([]string{binary}, args...)...)
}

// run runs the binary with args in dir and returns its output and exit code.
func run(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	return testcluster.Run(t, dir, append([]string{binary}, args...)...)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
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
	r.url = serveHandler(t, r)
	return r
}

// serveHandler serves h on a loopback port until the test ends and returns
// its base URL: the nodes' forward target.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
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
type clusterNode = testcluster.Node

// testCluster is testcluster's loopback cluster plus what these tests do
// with it: send signed events, read an event's state.
type testCluster struct {
	*testcluster.Cluster
}

// startCluster starts n nodes forwarding the "orders" source to handler.
func startCluster(t *testing.T, n int, handler string) *testCluster {
	t.Helper()
	return startClusterWith(t, n, handler, "")
}

// startClusterWith is startCluster with extra TOML lines in the orders source.
func startClusterWith(t *testing.T, n int, handler, sourceExtra string) *testCluster {
	t.Helper()
	return &testCluster{testcluster.Start(t, testcluster.Options{Bin: binary, Nodes: n, Handler: handler, SourceExtra: sourceExtra})}
}

func (c *testCluster) eventState(nd *clusterNode, key string) string {
	code, b := get("http://"+nd.Admin+"/v1/events/"+key, c.Token)
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
	return c.sendBody(ctx, nd, id, []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"pad":"%s"}`, id, strings.Repeat("x", 900))))
}

// sendBody posts body to the orders source of nd, signed the Standard
// Webhooks way under id, and returns the status (0: the connection failed).
func (c *testCluster) sendBody(ctx context.Context, nd *clusterNode, id string, body []byte) int {
	return c.sendTo(ctx, nd, "orders", id, body)
}

// sendTo is sendBody to any source signed with the orders secret.
func (c *testCluster) sendTo(ctx context.Context, nd *clusterNode, source, id string, body []byte) int {
	s, _ := providers.Lookup("standard")
	hs, _ := s.Sign(body, []byte(c.Secret), time.Now(), id, nil)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+nd.Intake+"/in/"+source, bytes.NewReader(body))
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
