package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/providers"
)

// --- metrics ----------------------------------------------------------------

// scrape returns the admin listener's /metrics text.
func (tn *testNode) scrape() string {
	tn.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	a := tn.do(req)
	if a.Status != http.StatusOK {
		tn.t.Fatalf("GET /metrics: %d %s", a.Status, a.Raw)
	}
	return a.Raw
}

// metricValue finds one sample in Prometheus text format by its exact series
// name (labels in the exposition's order, sorted by name).
func metricValue(text, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func mustMetric(t *testing.T, text, series string) float64 {
	t.Helper()
	v, ok := metricValue(text, series)
	if !ok {
		t.Fatalf("no sample %s in /metrics", series)
	}
	return v
}

func TestRaftGaugesMoveWithEvents(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(d delivery) (int, string) {
		if strings.HasSuffix(d.Key, "_fail") {
			return 500, "no"
		}
		return 200, "ok"
	})
	tn := startTestNode(t, "", h.url)
	// The election is counted by the node's leadership observer, which may run
	// a moment after raft reports the leader.
	waitUntil(t, "the node's election counted", func() bool { return tn.n.cluster.Status().LeaderChanges >= 1 })
	before := tn.scrape()
	for series, want := range map[string]float64{
		"oncehook_raft_is_leader":            1,
		"oncehook_raft_has_leader":           1,
		"oncehook_raft_last_contact_seconds": 0,
		"oncehook_raft_store_failing":        0,
		"oncehook_raft_store_errors_total":   0,
		"oncehook_raft_peers_not_storing":    0,
		`oncehook_events{state="done"}`:      0,
		`oncehook_events{state="dead"}`:      0,
		`oncehook_events{state="pending"}`:   0,
		"oncehook_oldest_dead_seconds":       0,
	} {
		if got := mustMetric(t, before, series); got != want {
			t.Fatalf("before: %s = %v, want %v", series, got, want)
		}
	}
	if v := mustMetric(t, before, "oncehook_raft_leader_changes_total"); v < 1 {
		t.Fatalf("oncehook_raft_leader_changes_total = %v: the node's own election counts", v)
	}
	if !regexp.MustCompile(`(?m)^oncehook_build_info\{goversion="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).MatchString(before) {
		t.Fatal("no oncehook_build_info{goversion,revision,version} 1")
	}
	commit0 := mustMetric(t, before, "oncehook_raft_commit_index")

	ok := orderBody("evt_m_ok", "obj_m_ok", 1)
	bad := orderBody("evt_m_fail", "obj_m_fail", 1)
	tn.post("orders", ok, tn.signed(ok, "msg_m_ok"))
	tn.post("orders", ok, tn.signed(ok, "msg_m_ok")) // a duplicate
	tn.post("orders", bad, tn.signed(bad, "msg_m_fail"))
	tn.waitState("orders:msg_m_ok", engine.StateDone)
	tn.waitState("orders:msg_m_fail", engine.StateDead)

	after := tn.scrape()
	if c := mustMetric(t, after, "oncehook_raft_commit_index"); c <= commit0 {
		t.Fatalf("commit index %v after three claims and their deliveries, was %v", c, commit0)
	}
	// The sweeper proposes now and then, so one scrape may fall between a
	// commit and its apply: the applied index must catch up, not be equal at
	// every instant.
	waitUntil(t, "the applied index to reach the commit index", func() bool {
		s := tn.scrape()
		return mustMetric(t, s, "oncehook_raft_applied_index") == mustMetric(t, s, "oncehook_raft_commit_index")
	})
	for series, want := range map[string]float64{
		`oncehook_events{state="done"}`:                               1,
		`oncehook_events{state="dead"}`:                               1,
		`oncehook_claims_total{result="new",source="orders"}`:         2,
		`oncehook_claims_total{result="duplicate",source="orders"}`:   1,
		`oncehook_deliveries_total{outcome="dead",source="orders"}`:   1,
		`oncehook_deliveries_total{outcome="done",source="orders"}`:   1,
		`oncehook_requests_total{code="202",source="orders"}`:         2,
		"oncehook_raft_is_leader":                                     1,
		"oncehook_config_last_reload_successful":                      1,
		`oncehook_signature_failures_total{reason="x",source="none"}`: -1, // absent
	} {
		got, found := metricValue(after, series)
		if want == -1 {
			if found {
				t.Fatalf("after: unexpected %s", series)
			}
			continue
		}
		if !found || got != want {
			t.Fatalf("after: %s = %v (found %v), want %v", series, got, found, want)
		}
	}
	if v := mustMetric(t, after, "oncehook_oldest_dead_seconds"); v <= 0 || v > 60 {
		t.Fatalf("oncehook_oldest_dead_seconds = %v, want a small positive age", v)
	}
	// Raft's own go-metrics, bridged into the same registry.
	for _, name := range []string{"oncehook_raft_apply", "oncehook_raft_commitTime", "oncehook_raft_fsm_applyBatch"} {
		if !regexp.MustCompile(`(?m)^` + name + `[ {]`).MatchString(after) {
			t.Fatalf("bridged raft metric %s missing", name)
		}
	}
	// No per-peer metric names, no keys in labels.
	if strings.Contains(after, "appendEntries_rpc_") || strings.Contains(after, "msg_m_") {
		t.Fatal("/metrics carries a per-peer metric name or an event key")
	}
}

// --- alert rules ------------------------------------------------------------

// metricName finds metric names, not recording rules (level:metric:operations).
var metricName = regexp.MustCompile(`(?:^|[^:\w])(oncehook_[a-z_]+)`)

// TestAlertRulesFile checks docs/alerts.yml without promtool: its shape, and
// that every metric it reads is one a node exports.
func TestAlertRulesFile(t *testing.T) {
	raw, err := os.ReadFile("docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if strings.Contains(text, "\t") {
		t.Fatal("alerts.yml has a tab: YAML indents with spaces")
	}
	if !strings.HasPrefix(strings.TrimSpace(stripComments(text)), "groups:") {
		t.Fatal("alerts.yml does not start with groups:")
	}
	alerts := regexp.MustCompile(`(?m)^      - alert: (\S+)$`).FindAllStringSubmatch(text, -1)
	var names []string
	for _, m := range alerts {
		names = append(names, m[1])
	}
	for _, want := range []string{"OncehookNoLeader", "OncehookDeadLettersGrowing", "OncehookDuplicateRatioShifted", "OncehookDeliveryLatencyHigh"} {
		if !slices.Contains(names, want) {
			t.Fatalf("alerts.yml has no alert %s (has %v)", want, names)
		}
	}
	// Every alert has an expr, labels.severity and a summary.
	for i, block := range strings.Split(text, "      - alert: ")[1:] {
		for _, field := range []string{"\n        expr:", "\n          severity:", "\n          summary:"} {
			if !strings.Contains(block, field) {
				t.Fatalf("alert %s has no %s", names[i], strings.TrimSpace(field))
			}
		}
	}

	// The metric names the rules read are ones a node exports.
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_alerts", "obj_alerts", 1)
	tn.post("orders", body, tn.signed(body, "msg_alerts"))
	tn.post("orders", body, tn.signed(body, "msg_alerts"))
	tn.waitState("orders:msg_alerts", engine.StateDone)
	exported := tn.scrape()
	var used []string
	for _, m := range metricName.FindAllStringSubmatch(stripComments(text), -1) {
		used = append(used, m[1])
	}
	if len(used) < 5 {
		t.Fatalf("alerts.yml reads only %v", used)
	}
	slices.Sort(used)
	for _, name := range slices.Compact(used) {
		if !regexp.MustCompile(`(?m)^` + name + `[ {]`).MatchString(exported) {
			t.Errorf("alerts.yml reads %s, which /metrics does not export", name)
		}
	}
}

// TestAlertRulesPromtool runs promtool check rules on docs/alerts.yml and the
// rule unit tests in docs/alerts_test.yml, where promtool is installed (.ci/run
// takes it from Debian's prometheus package).
func TestAlertRulesPromtool(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		promtool, _ = exec.LookPath("promtool")
	}
	if promtool == "" {
		t.Skip("promtool not found (Debian package prometheus, or set PROMTOOL); structural checks only")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "docs"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func stripComments(yaml string) string {
	var b strings.Builder
	for line := range strings.Lines(yaml) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// --- serve in-process: SIGHUP and sd_notify -----------------------------------

// served is `oncehook serve -config F` running in this process under a fake
// systemd: NOTIFY_SOCKET names a unixgram socket the test reads.
type served struct {
	t       *testing.T
	dir     string
	cfgPath string
	secret  string
	notify  chan string
	cancel  context.CancelFunc
	done    chan error
	logMu   sync.Mutex
	log     bytes.Buffer
	intake  string
	admin   string
	client  *http.Client
}

func (s *served) Write(p []byte) (int, error) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.Write(p)
}

func (s *served) logs() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.log.String()
}

const serveConfig = `[node]
id = "node1"
data_dir = %q
listen = "127.0.0.1:0"
log_level = %q

[admin]
listen = "127.0.0.1:0"
tokens = [{ name = "ops", token_file = "admin.token" }]

[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%s/orders"
backoff_min = "20ms"
backoff_max = "100ms"
`

const extraSource = `
[[source]]
name = "extra"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%s/extra"
`

// config is serveConfig for this run, plus extra TOML.
func (s *served) config(level, handlerURL, extra string) string {
	return fmt.Sprintf(serveConfig, filepath.Join(s.dir, "data"), level, handlerURL) + extra
}

// startServed writes a config (log level info, the orders source) and runs
// serve until READY=1.
func startServed(t *testing.T, handlerURL string) *served {
	dir := t.TempDir()
	s := &served{t: t, dir: dir, cfgPath: filepath.Join(dir, "oncehook.toml"), notify: make(chan string, 16),
		done: make(chan error, 1), client: &http.Client{Timeout: 10 * time.Second}}
	s.secret, _ = providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), s.secret+"\n")
	mustWrite(t, filepath.Join(dir, "admin.token"), "ops-token-0123456789abcdef0123456789\n")
	mustWrite(t, s.cfgPath, s.config("info", handlerURL, ""))

	// The fake systemd's notify socket. A short relative name keeps the path
	// under the 108 bytes a socket address holds.
	sock := filepath.Join(dir, "n.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", sock)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(s.notify)
				return
			}
			s.notify <- string(buf[:n])
		}
	}()
	// While this test runs, a SIGHUP must never reach the default action
	// (ending the test binary), even in the instant before serve catches it.
	guard := make(chan os.Signal, 4)
	signal.Notify(guard, syscall.SIGHUP)

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- run(ctx, []string{"serve", "-config", s.cfgPath}, s, s) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
		signal.Stop(guard)
		conn.Close()
		s.client.CloseIdleConnections()
	})

	s.expectNotify("READY=1")
	addrs := regexp.MustCompile(`msg="oncehook serving".* listen=(\S+) admin=(\S+)`)
	waitUntil(t, "the serving log line", func() bool { return addrs.MatchString(s.logs()) })
	m := addrs.FindStringSubmatch(s.logs())
	s.intake, s.admin = "http://"+m[1], "http://"+m[2]
	// READY=1 says the listeners and raft run; electing a leader comes after.
	waitUntil(t, "/readyz", func() bool {
		resp, err := s.client.Get(s.intake + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// expectNotify reads the next sd_notify messages and compares them in order.
func (s *served) expectNotify(want ...string) {
	s.t.Helper()
	for _, w := range want {
		select {
		case got, ok := <-s.notify:
			if !ok {
				s.t.Fatalf("notify socket closed, want %q", w)
			}
			if got != w {
				s.t.Fatalf("sd_notify message %q, want %q", got, w)
			}
		case <-time.After(20 * time.Second):
			s.t.Fatalf("no sd_notify message, want %q", w)
		}
	}
}

func (s *served) noMoreNotify() {
	s.t.Helper()
	select {
	case got, ok := <-s.notify:
		if ok {
			s.t.Fatalf("unexpected sd_notify message %q", got)
		}
	default:
	}
}

func (s *served) hup() {
	s.t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		s.t.Fatal(err)
	}
}

func (s *served) post(source, id string) int {
	s.t.Helper()
	body := orderBody("evt_"+id, "obj_"+id, 1)
	req, _ := http.NewRequest(http.MethodPost, s.intake+"/in/"+source, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range signStandard(s.t, s.secret, body, id, time.Now()) {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metrics returns the node's /metrics text.
func (s *served) metrics() string {
	s.t.Helper()
	resp, err := s.client.Get(s.admin + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String()
}

func (s *served) metric(series string) float64 {
	s.t.Helper()
	v, ok := metricValue(s.metrics(), series)
	if !ok {
		s.t.Fatalf("no %s in /metrics", series)
	}
	return v
}

func TestSIGHUPReloadsOrKeepsTheConfig(t *testing.T) {
	h := newHandler(t)
	s := startServed(t, h.url)
	if code := s.post("extra", "msg_hup_0"); code != http.StatusNotFound {
		t.Fatalf("POST /in/extra before the reload: %d, want 404", code)
	}
	if code := s.post("orders", "msg_hup_1"); code != http.StatusAccepted {
		t.Fatalf("POST /in/orders: %d", code)
	}
	// The forwarder logs "delivered" (at debug) after the handler answered
	// and the completion committed, then counts it: wait for the count, so
	// that line was already dropped at info before the level changes.
	waitUntil(t, "the first delivery recorded", func() bool {
		v, ok := metricValue(s.metrics(), `oncehook_deliveries_total{outcome="done",source="orders"}`)
		return ok && v == 1
	})

	if hasLine(s.logs(), "level=DEBUG") {
		t.Fatal("debug lines at level info")
	}
	// A valid, changed file: a new source, the log level down to debug.
	mustWrite(t, s.cfgPath, s.config("debug", h.url, fmt.Sprintf(extraSource, h.url)))
	s.hup()
	s.expectNotify("RELOADING=1", "READY=1")
	waitUntil(t, "the reload log line", func() bool { return strings.Contains(s.logs(), `msg="configuration reloaded"`) })
	line := grepLine(s.logs(), `msg="configuration reloaded"`)
	if !strings.Contains(line, "node.log_level") || !strings.Contains(line, "source[extra] (added)") {
		t.Fatalf("reload log line does not say what changed: %s", line)
	}
	if code := s.post("extra", "msg_hup_2"); code != http.StatusAccepted {
		t.Fatalf("POST /in/extra after the reload: %d, want 202", code)
	}
	// Debug lines now appear ("delivered" is logged at debug), for the new
	// event only: the first was delivered while the level was info.
	waitUntil(t, "a debug line", func() bool { return hasLine(s.logs(), "msg=delivered", "key=extra:msg_hup_2") })
	if hasLine(s.logs(), "key=orders:msg_hup_1", "level=DEBUG") {
		t.Fatal("a debug line was written while the level was info")
	}
	if v := s.metric("oncehook_config_last_reload_successful"); v != 1 {
		t.Fatalf("oncehook_config_last_reload_successful = %v after a good reload", v)
	}

	// An invalid file: rejected, the running config kept.
	mustWrite(t, s.cfgPath, s.config("warn", h.url, "\n[[source]]\nname = \"broken\"\nprovider = \"standard\"\nlease = \"forever\"\n"))
	s.hup()
	s.expectNotify("RELOADING=1", "READY=1")
	waitUntil(t, "the rejection log line", func() bool {
		return strings.Contains(s.logs(), `msg="reload rejected; keeping the running configuration"`)
	})
	if v := s.metric("oncehook_config_last_reload_successful"); v != 0 {
		t.Fatalf("oncehook_config_last_reload_successful = %v after a rejected reload, want 0", v)
	}
	if code := s.post("extra", "msg_hup_3"); code != http.StatusAccepted {
		t.Fatalf("POST /in/extra after the rejected reload: %d, want 202 (old config kept)", code)
	}
	waitUntil(t, "debug still on", func() bool { return hasLine(s.logs(), "msg=delivered", "key=extra:msg_hup_3") })
	if secret := strings.TrimPrefix(s.secret, "whsec_"); strings.Contains(s.logs(), secret) {
		t.Fatal("the log carries a secret")
	}
}

// hasLine reports whether one line of text holds every needle.
func hasLine(text string, needles ...string) bool {
	for line := range strings.Lines(text) {
		all := true
		for _, n := range needles {
			all = all && strings.Contains(line, n)
		}
		if all {
			return true
		}
	}
	return false
}

func grepLine(text, needle string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, needle) {
			return line
		}
	}
	return ""
}

func TestSystemdNotifyOrder(t *testing.T) {
	h := newHandler(t)
	s := startServed(t, h.url) // READY=1 first
	if code := s.post("orders", "msg_notify"); code != http.StatusAccepted {
		t.Fatalf("POST after READY=1: %d", code)
	}
	s.hup()
	s.expectNotify("RELOADING=1", "READY=1")
	s.hup()
	s.expectNotify("RELOADING=1", "READY=1")
	s.noMoreNotify()
	s.cancel()
	s.expectNotify("STOPPING=1")
	select {
	case err := <-s.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("serve returned %v", err)
		}
		s.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	s.noMoreNotify()
}
