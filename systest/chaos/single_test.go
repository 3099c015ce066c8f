package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"oncehook/internal/testcluster"
	"oncehook/providers"
)

// single is one oncehook node on loopback with an in-process recording
// handler: the target of the hostile-input and security tests (no namespaces
// needed).
type single struct {
	t       *testing.T
	dir     string // config dir
	data    string
	cfg     string
	logPath string
	intake  string // host:port
	admin   string
	proc    *proc
	rec     *recorder
	secret  string
	stripe  string
}

const stripeSecret = "whsec_CANARYstripe0123456789abcdef"

// recorder is the handler: it records every delivery's key and token.
type recorder struct {
	mu   sync.Mutex
	runs []hrun
	srv  *http.Server
	addr string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	t.Cleanup(func() { r.srv.Close() })
	return r
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	r.runs = append(r.runs, hrun{Key: req.Header.Get("Idempotency-Key"), Start: time.Now().UnixNano()})
	r.mu.Unlock()
	w.WriteHeader(200)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rn := range r.runs {
		if key == "" || rn.Key == key {
			n++
		}
	}
	return n
}

// githubSecret signs the github source's deliveries (GitHub signs the body
// only: the replay guard's case).
const githubSecret = "CANARYgithub0123456789abcdef0123"

// newSingle writes a config (sources orders: standard, stripe: stripe, svix:
// svix with the orders secret, github: github) and
// starts the node unless start is false.
func newSingle(t *testing.T, start bool) *single {
	t.Helper()
	dir := t.TempDir()
	s := &single{t: t, dir: dir, data: filepath.Join(dir, "data"), cfg: filepath.Join(dir, "node.toml"),
		logPath: filepath.Join(dir, "node.log"), intake: testcluster.FreeAddr(t), admin: testcluster.FreeAddr(t), secret: canarySecret, stripe: stripeSecret}
	s.rec = newRecorder(t)
	writeSecret(t, filepath.Join(dir, "admin.token"), adminToken)
	writeSecret(t, filepath.Join(dir, "orders.secret"), s.secret)
	writeSecret(t, filepath.Join(dir, "stripe.secret"), s.stripe)
	writeSecret(t, filepath.Join(dir, "github.secret"), githubSecret)
	src := func(name, provider, secret, extra string) testcluster.SourceConfig {
		return testcluster.SourceConfig{Name: name, Provider: provider, SecretFile: secret,
			Forward: "http://" + s.rec.addr + "/" + name, Extra: extra}
	}
	orders := src("orders", "standard", "orders.secret", "")
	orders.Lease, orders.ForwardTimeout, orders.BackoffMin, orders.BackoffMax = "3s", "2s", "50ms", "500ms"
	cfg := testcluster.NodeConfig{ID: "solo", DataDir: s.data, Listen: s.intake, LogLevel: "debug",
		AdminListen: s.admin, AdminTokenName: "chaos", AdminTokenFile: "admin.token",
		Sources: []testcluster.SourceConfig{orders,
			src("stripe", "stripe", "stripe.secret", `max_body = "64KiB"`),
			src("svix", "svix", "orders.secret", ""),
			src("github", "github", "github.secret", ""),
		}}
	if err := cfg.Write(s.cfg); err != nil {
		t.Fatal(err)
	}
	if start {
		s.start()
	}
	return s
}

func (s *single) start() {
	s.t.Helper()
	s.proc = startProc(s.t, "solo", s.logPath, oncehookBin, "serve", "-config", s.cfg)
	ctx := context.Background()
	if err := testcluster.AwaitReady(ctx, "the node", s.proc, testcluster.ReadyTimeout, func() bool {
		return testcluster.Ready(ctx, plainClient, "http://"+s.intake+"/readyz")
	}); err != nil {
		s.t.Fatalf("%v", err)
	}
}

// serveExit starts a node on cfg that must refuse to start and waits up to
// 15 s for it to exit; exited is false when it is still running then (the
// test's cleanup kills it).
func serveExit(t *testing.T, cfg string) (p *proc, exited bool) {
	t.Helper()
	p = testcluster.StartProc(t, "refused", "", oncehookBin, "serve", "-config", cfg)
	err := testcluster.Await(context.Background(), "the node to exit", 15*time.Second, func() (bool, error) { return !p.Running(), nil })
	return p, err == nil
}

var plainClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}

func (s *single) get(url string, auth bool) (int, []byte) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if auth {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	resp, err := plainClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// total is the number of events stored, from /v1/status.
func (s *single) total() int {
	code, b := s.get("http://"+s.admin+"/v1/status", true)
	if code != 200 {
		s.t.Fatalf("status: %d %s", code, b)
	}
	var st nodeStatus
	json.Unmarshal(b, &st)
	n := 0
	for _, v := range st.Counts {
		n += v
	}
	return n
}

func (s *single) exists(key string) bool {
	code, _ := s.get("http://"+s.admin+"/v1/events/"+key, true)
	return code == 200
}

func (s *single) alive() bool {
	code, _ := s.get("http://"+s.intake+"/livez", false)
	return code == 200 && s.proc.Running()
}

// sign returns the Standard Webhooks headers for body under secret.
func sign(t *testing.T, secret string, body []byte, id string, at time.Time) []providers.Header {
	t.Helper()
	sch, _ := providers.Lookup("standard")
	hs, err := sch.Sign(body, []byte(secret), at, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func signStripe(t *testing.T, body []byte, at time.Time) []providers.Header {
	t.Helper()
	sch, _ := providers.Lookup("stripe")
	hs, err := sch.Sign(body, []byte(stripeSecret), at, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

type answer struct {
	status int
	body   string
	header http.Header
}

func (s *single) post(method, path string, body []byte, hs []providers.Header, extra map[string]string) answer {
	req, _ := http.NewRequest(method, "http://"+s.intake+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := plainClient.Do(req)
	if err != nil {
		return answer{status: 0, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// raw writes payload on a new TCP connection and reads what comes back until
// the server closes the connection or wait passes.
func raw(addr string, payload []byte, wait time.Duration) (string, bool) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err.Error(), false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	c.Write(payload)
	var out bytes.Buffer
	_, err = io.Copy(&out, c)
	closed := err == nil // EOF: the server closed the connection
	return out.String(), closed
}

func stopSingle(s *single) {
	if s.proc != nil {
		s.proc.Stop(20 * time.Second)
	}
}
