package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"oncehook/config"
	"oncehook/engine"
	"oncehook/providers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http's client keeps idle connections' goroutines until they time out.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// fasthttp's process-wide Date updater, and its worker-pool cleaner,
		// which notices a stopped server only after its next 10s sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// The benchmarks' fasthttp client: the process-wide dialer's address
		// cache cleaner, and a HostClient's idle-connection cleaner, which
		// notices closed connections only after its next 10s sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	)
}

// handler is a local HTTP handler that records every delivery and answers
// with whatever the test decides.
type handler struct {
	t      testing.TB
	srv    *http.Server
	url    string
	mu     sync.Mutex
	got    []delivery
	answer func(d delivery) (int, string)
	ctype  string // the answers' Content-Type; "": net/http sniffs one
}

type delivery struct {
	Key, Source, Attempt, Token, ContentType string
	Body                                     []byte
	Header                                   http.Header
}

func newHandler(t testing.TB) *handler {
	h := &handler{t: t, answer: func(delivery) (int, string) { return 200, "ok" }}
	ln := listenLoopback(t)
	h.url = "http://" + ln.Addr().String()
	h.srv = &http.Server{Handler: h}
	go h.srv.Serve(ln)
	t.Cleanup(func() { h.srv.Close() })
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	d := delivery{Key: r.Header.Get("Idempotency-Key"), Source: r.Header.Get("Oncehook-Source"),
		Attempt: r.Header.Get("Oncehook-Attempt"), Token: r.Header.Get("Oncehook-Fencing-Token"),
		ContentType: r.Header.Get("Content-Type"), Body: body, Header: r.Header.Clone()}
	h.mu.Lock()
	h.got = append(h.got, d)
	answer, ctype := h.answer, h.ctype
	h.mu.Unlock()
	status, text := answer(d)
	if ctype != "" {
		w.Header().Set("Content-Type", ctype)
	}
	w.WriteHeader(status)
	io.WriteString(w, text)
}

func (h *handler) setAnswer(f func(delivery) (int, string)) {
	h.mu.Lock()
	h.answer = f
	h.mu.Unlock()
}

func (h *handler) deliveries(key string) []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []delivery
	for _, d := range h.got {
		if key == "" || d.Key == key {
			out = append(out, d)
		}
	}
	return out
}

// testNode is one in-process node started from a real config file.
type testNode struct {
	t       testing.TB
	dir     string
	cfgPath string
	n       *node
	intake  string
	admin   string
	token   string
	secret  string
	client  *http.Client
	log     *bytes.Buffer
	logMu   *sync.Mutex
	opts    []nodeOption // passed to startNode
}

const testSourceTOML = `
[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/orders"
forward_headers = ["X-Trace"]
lease = "2s"
forward_timeout = "1s"
backoff_min = "20ms"
backoff_max = "100ms"
max_attempts = 3
max_body = "64KiB"
order = { object = "json:data.object.id", time = "json:created" }

[[source]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_stripe_test_secret"]
forward = "%[1]s/stripe"

[[source]]
name = "sync"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/sync"
mode = "sync"
forward_timeout = "2s"
lease = "5s"
backoff_min = "20ms"
backoff_max = "50ms"
`

// startTestNode writes a config into a fresh directory (or reuses dir) and
// starts a node on loopback ports chosen by the kernel.
func startTestNode(t testing.TB, dir, handlerURL string) *testNode {
	t.Helper()
	return startNodeWithSources(t, dir, handlerURL, "")
}

// nodeConfig is every test node's config: [node] and [admin] on loopback
// ports the kernel chooses, adminExtra appended to [admin], the shared test
// sources, then sources ("%[1]s" standing for the handler URL).
func nodeConfig(dir, handlerURL, adminExtra, sources string) string {
	return fmt.Sprintf(`[node]
id = "node1"
data_dir = %q
listen = "127.0.0.1:0"
log_level = "debug"

[admin]
listen = "127.0.0.1:0"
tokens = [{ name = "ops", token_file = "admin.token" }]
%s
`, filepath.Join(dir, "data"), adminExtra) + fmt.Sprintf(testSourceTOML+sources, handlerURL)
}

func (tn *testNode) start() {
	t := tn.t
	t.Helper()
	cfg, err := config.Load(tn.cfgPath)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	level := new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(syncWriter{tn.logMu, tn.log}, &slog.HandlerOptions{Level: level}))
	n, err := startNode(cfg, log, level, syncWriter{tn.logMu, tn.log}, tn.opts...)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	tn.n = n
	tn.intake = "http://" + n.httpLn.Addr().String()
	tn.admin = n.adminScheme() + "://" + n.adminLn.Addr().String()
	tn.client = &http.Client{Timeout: 20 * time.Second}
	t.Cleanup(tn.stop)
	waitUntil(t, "node ready", func() bool { ok, _ := n.cluster.Ready(); return ok && n.cluster.IsLeader() })
}

func (tn *testNode) stop() {
	if tn.n == nil {
		return
	}
	if err := tn.n.shutdown(); err != nil {
		tn.t.Errorf("shutdown: %v", err)
	}
	tn.n = nil
	tn.client.CloseIdleConnections()
}

func (tn *testNode) logs() string {
	tn.logMu.Lock()
	defer tn.logMu.Unlock()
	return tn.log.String()
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

type answer struct {
	Status int
	Body   map[string]any
	Raw    string
	Header http.Header
}

// post sends body to /in/source with the given headers.
func (tn *testNode) post(source string, body []byte, headers []providers.Header) answer {
	tn.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tn.intake+"/in/"+source, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		req.Header.Set(h.Name, h.Value)
	}
	return tn.do(req)
}

func (tn *testNode) do(req *http.Request) answer {
	tn.t.Helper()
	resp, err := tn.client.Do(req)
	if err != nil {
		tn.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, Raw: string(raw), Header: resp.Header}
	json.Unmarshal(raw, &a.Body)
	return a
}

// signed returns standard-webhooks headers for body under id.
func (tn *testNode) signed(body []byte, id string) []providers.Header {
	tn.t.Helper()
	return signStandard(tn.t, tn.secret, body, id, time.Now())
}

func signStandard(t testing.TB, secret string, body []byte, id string, at time.Time) []providers.Header {
	t.Helper()
	s, _ := providers.Lookup("standard")
	h, err := s.Sign(body, []byte(secret), at, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (tn *testNode) adminGet(path string, out any) int {
	tn.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tn.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	a := tn.do(req)
	if out != nil {
		json.Unmarshal([]byte(a.Raw), out)
	}
	return a.Status
}

func (tn *testNode) event(key string) (engine.Event, error) {
	return tn.n.cluster.Get(key, false)
}

func (tn *testNode) waitState(key string, want engine.State) engine.Event {
	tn.t.Helper()
	var ev engine.Event
	waitUntil(tn.t, fmt.Sprintf("%s in state %s", key, want.String()), func() bool {
		var err error
		ev, err = tn.event(key)
		return err == nil && ev.State == want
	})
	return ev
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustWrite(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
