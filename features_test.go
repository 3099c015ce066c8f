package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/admin"
	"oncehook/engine"
	"oncehook/providers"
)

// startNodeWithSources starts a node like startTestNode, with extra TOML
// (more [[source]] tables, "%[1]s" standing for the handler URL) appended to
// the shared test sources.
func startNodeWithSources(t testing.TB, dir, handlerURL, extra string) *testNode {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	tn := &testNode{t: t, dir: dir, cfgPath: filepath.Join(dir, "oncehook.toml"), log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	secretPath := filepath.Join(dir, "orders.secret")
	if b, err := os.ReadFile(secretPath); err == nil {
		tn.secret = strings.TrimSpace(string(b))
	} else {
		tn.secret, _ = providers.GenerateSecret("standard")
		mustWrite(t, secretPath, tn.secret+"\n")
	}
	tn.token = "admin-token-for-tests-0123456789abcdef"
	mustWrite(t, filepath.Join(dir, "admin.token"), tn.token+"\n")
	mustWrite(t, tn.cfgPath, testConfig(dir, handlerURL, extra))
	tn.start()
	return tn
}

// testConfig is the config startNodeWithSources writes.
func testConfig(dir, handlerURL, extra string) string {
	return nodeConfig(dir, handlerURL, "", extra)
}

// signWith signs body for a standard source with secret (whsec_ or whsk_).
func signWith(t testing.TB, secret string, body []byte, id string) []providers.Header {
	t.Helper()
	return signStandard(t, secret, body, id, time.Now())
}

func TestKeygenAsymmetric(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := cmdKeygen([]string{"-provider", "standard", "-asymmetric"}, &out, &errOut); err != nil {
		t.Fatalf("keygen -asymmetric: %v (%s)", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "private: whsk_") || !strings.HasPrefix(lines[1], "public: whpk_") {
		t.Fatalf("keygen -asymmetric printed %q, want two labelled lines", out.String())
	}
	priv, pub := strings.TrimPrefix(lines[0], "private: "), strings.TrimPrefix(lines[1], "public: ")
	if got, err := providers.PublicKeyOf([]byte(priv)); err != nil || got != pub {
		t.Fatalf("the printed public key is not the private key's: %v", err)
	}
	out.Reset()
	if err := cmdKeygen([]string{"-provider", "stripe", "-asymmetric"}, &out, &errOut); err == nil {
		t.Fatal("keygen -asymmetric for stripe succeeded")
	}
	out.Reset()
	if err := cmdKeygen([]string{"-provider", "STANDARD"}, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "whsec_") {
		t.Fatalf("keygen -provider STANDARD (any case, as the config reads it): %v %q", err, out.String())
	}
	out.Reset()
	if err := cmdKeygen(nil, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "whsec_") {
		t.Fatalf("plain keygen: %v %q", err, out.String())
	}
}

// A source with only whpk_ public keys accepts v1a signatures only; a source
// with both kinds accepts either, and a header mixing them.
func TestIntakeV1a(t *testing.T) {
	h := newHandler(t)
	privA, pubA, _ := providers.GenerateKeyPair("standard")
	privB, _, _ := providers.GenerateKeyPair("standard")
	whsec, _ := providers.GenerateSecret("standard")
	extra := fmt.Sprintf(`
[[source]]
name = "v1a-only"
provider = "standard"
secrets = [%q]
forward = "%%[1]s/v1a"

[[source]]
name = "mixed"
provider = "standard"
secrets = [%q, %q]
forward = "%%[1]s/mixed"
`, pubA, whsec, pubA)
	tn := startNodeWithSources(t, "", h.url, extra)

	body := []byte(`{"id":"evt_v1a"}`)
	cases := []struct {
		name    string
		source  string
		headers []providers.Header
		status  int
	}{
		{"v1a with the configured key", "v1a-only", signWith(t, privA, body, "msg_a1"), 202},
		{"v1a with another key", "v1a-only", signWith(t, privB, body, "msg_a2"), 401},
		{"v1 to a v1a-only source", "v1a-only", signWith(t, whsec, body, "msg_a3"), 401},
		{"v1a to a mixed source", "mixed", signWith(t, privA, body, "msg_m1"), 202},
		{"v1 to a mixed source", "mixed", signWith(t, whsec, body, "msg_m2"), 202},
	}
	for _, c := range cases {
		a := tn.post(c.source, body, c.headers)
		if a.Status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, a.Status, a.Raw, c.status)
		}
	}
	// One header with a v1 entry from an unknown secret and a good v1a entry.
	v1a := signWith(t, privA, body, "msg_m3")
	v1bad := signWith(t, "whsec_"+strings.Repeat("QUFB", 8), body, "msg_m3")
	var mixedHeaders []providers.Header
	for i, hd := range v1a {
		if hd.Name == "webhook-signature" {
			hd.Value = v1bad[i].Value + " " + hd.Value
		}
		mixedHeaders = append(mixedHeaders, hd)
	}
	if a := tn.post("mixed", body, mixedHeaders); a.Status != 202 {
		t.Fatalf("mixed header: %d %s", a.Status, a.Raw)
	}
	tn.waitState("v1a-only:msg_a1", engine.StateDone)
	if _, err := tn.event("v1a-only:msg_a2"); err == nil {
		t.Fatal("a delivery signed with an unknown key was stored")
	}
	if _, err := tn.event("v1a-only:msg_a3"); err == nil {
		t.Fatal("a v1 delivery to a v1a-only source was stored")
	}
	if n := len(h.deliveries("v1a-only:msg_a1")); n != 1 {
		t.Fatalf("handler got %d deliveries of the v1a event", n)
	}
}

// stepHandler answers each delivery with a status and an optional
// Oncehook-Step chosen by the test, recording the Oncehook-Last-Step it got.
type stepHandler struct {
	mu        sync.Mutex
	lastSteps []string // per request; "-" when absent
	answer    func(n int) (status int, step string)
}

func (s *stepHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	last := "-"
	if v := r.Header.Values("Oncehook-Last-Step"); len(v) > 0 {
		last = strings.Join(v, ",")
	}
	s.lastSteps = append(s.lastSteps, last)
	n := len(s.lastSteps)
	answer := s.answer
	s.mu.Unlock()
	status, step := answer(n)
	if step != "" {
		w.Header().Set("Oncehook-Step", step)
	}
	w.WriteHeader(status)
}

func (s *stepHandler) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lastSteps...)
}

// A handler fails after its step "charged"; the retry carries
// Oncehook-Last-Step: charged; the step is in the admin API and the events
// CLI, and survives a restart.
func TestStepsEndToEnd(t *testing.T) {
	sh := &stepHandler{answer: func(n int) (int, string) {
		if n == 1 {
			return 500, "charged"
		}
		return 200, ""
	}}
	ln := listenLoopback(t)
	srv := &http.Server{Handler: sh}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	tn := startTestNode(t, "", "http://"+ln.Addr().String())
	body := orderBody("evt_step", "obj_step", 1)
	if a := tn.post("orders", body, tn.signed(body, "msg_step")); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	ev := tn.waitState("orders:msg_step", engine.StateDone)
	if got := sh.seen(); len(got) != 2 || got[0] != "-" || got[1] != "charged" {
		t.Fatalf("Oncehook-Last-Step per attempt = %q, want [- charged]", got)
	}
	if ev.Step != "charged" || ev.Attempts != 2 {
		t.Fatalf("event: step %q attempts %d", ev.Step, ev.Attempts)
	}
	var view admin.Event
	if st := tn.adminGet("/v1/events/orders:msg_step", &view); st != http.StatusOK || view.Step != "charged" {
		t.Fatalf("admin event: %d step %q", st, view.Step)
	}
	var out, errOut bytes.Buffer
	args := []string{"-addr", strings.TrimPrefix(tn.admin, "http://"), "-token-file", filepath.Join(tn.dir, "admin.token"), "orders:msg_step"}
	if err := cmdEventShow(ctxTimeout(t, 10*time.Second), args, &out, &errOut); err != nil {
		t.Fatalf("events show: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `"step": "charged"`) {
		t.Fatalf("events show lacks the step:\n%s", out.String())
	}
	out.Reset()
	if err := cmdEvents(ctxTimeout(t, 10*time.Second), args[:4], &out, &errOut); err != nil {
		t.Fatalf("events: %v", err)
	}
	if !strings.Contains(out.String(), "STEP") || !strings.Contains(out.String(), "charged") {
		t.Fatalf("events table lacks the step:\n%s", out.String())
	}

	// An operator replay sends the step again; it survives a restart.
	dir := tn.dir
	tn.stop()
	again := startTestNode(t, dir, "http://"+ln.Addr().String())
	if ev, err := again.event("orders:msg_step"); err != nil || ev.Step != "charged" {
		t.Fatalf("after restart: %+v %v", ev, err)
	}
	req, _ := http.NewRequest(http.MethodPost, again.admin+"/v1/replay", strings.NewReader(`{"keys":["orders:msg_step"],"reason":"resume"}`))
	req.Header.Set("Authorization", "Bearer "+again.token)
	if a := again.do(req); a.Status != http.StatusOK {
		t.Fatalf("replay: %d %s", a.Status, a.Raw)
	}
	waitUntil(t, "replayed delivery", func() bool { return len(sh.seen()) == 3 })
	if got := sh.seen()[2]; got != "charged" {
		t.Fatalf("replayed attempt carried Oncehook-Last-Step %q, want charged", got)
	}
	again.waitState("orders:msg_step", engine.StateDone)
}
