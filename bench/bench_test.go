package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"oncehook/internal/testcluster"
	"oncehook/providers"
)

// binPath is the oncehook binary TestMain builds for the spawn tests.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "oncehook-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "oncehook")
	build := exec.Command("go", "build", "-o", binPath, "oncehook")
	build.Dir = moduleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build oncehook: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := settled(3 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// settled waits up to limit for every goroutine the tests started to end.
// fasthttp's client and server cleaners end by themselves within 1s of the
// last connection (MaxIdleConnDuration, MaxIdleWorkerDuration); the server's
// Date updater is process-wide and never ends, and neither does the fork
// thread of package testproc that starts the spawned nodes: both are ignored.
func settled(limit time.Duration) error {
	var leaked error
	testcluster.Await(context.Background(), "the tests' goroutines to end", limit, func() (bool, error) {
		leaked = goleak.Find(goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
			goleak.IgnoreTopFunction("oncehook/internal/testproc.onForkThread.func1.1"))
		return leaked == nil, nil
	})
	return leaked
}

// TestSummarize checks the report's statistics against a histogram whose
// answers are known: 1..100 µs once each (exact below 2,048 µs).
func TestSummarize(t *testing.T) {
	h := newHist()
	for v := int64(1); v <= 100; v++ {
		recordValue(h, v)
	}
	got := summarize(h)
	want := Latency{Count: 100, Min: 1, Mean: 50.5, P50: 50, P90: 90, P99: 99, P999: 100, Max: 100}
	if got != want {
		t.Fatalf("summarize = %+v, want %+v", got, want)
	}

	// Above 2,048 µs values share buckets: at 3 significant digits, 5,000 µs
	// sits in [5000, 5003], reported as its highest equivalent value.
	recordValue(h, 5000)
	if got := summarize(h); got.Max != 5003 || got.P50 != 51 || got.Count != 101 {
		t.Fatalf("with 5000: %+v, want max 5003, p50 51, count 101", got)
	}
	if got := summarize(newHist()); got != (Latency{}) {
		t.Fatalf("empty: %+v", got)
	}
	// Out of range values are clamped, not dropped.
	h2 := newHist()
	recordValue(h2, 0)
	recordValue(h2, 2*histMax)
	if got := summarize(h2); got.Count != 2 || got.Min != 1 || got.Max < histMax {
		t.Fatalf("clamped: %+v", got)
	}
}

func TestPercentileCurve(t *testing.T) {
	h := newHist()
	for v := int64(1); v <= 1000; v++ {
		recordValue(h, v)
	}
	pts := percentileCurve(h)
	// Ten points per decade of 1/(1-q) while q < 1-1/n = 99.9%: i = 0..29,
	// then the max.
	if len(pts) != 31 {
		t.Fatalf("%d points, want 31: %v", len(pts), pts)
	}
	if pts[0] != (Point{0, 1}) {
		t.Fatalf("first %v, want {0 1}", pts[0])
	}
	if pts[10].Micros != 900 || pts[20].Micros != 990 {
		t.Fatalf("p90 %d, p99 %d, want 900, 990", pts[10].Micros, pts[20].Micros)
	}
	if last := pts[len(pts)-1]; last != (Point{100, 1000}) {
		t.Fatalf("last %v, want {100 1000}", last)
	}
}

// TestBacklogWhenNothingArrives: a run none of whose claims reached the
// sink (its source forwards elsewhere) shows the backlog growing by the
// claims, not zeros, and says to check the forward URL.
func TestBacklogWhenNothingArrives(t *testing.T) {
	lr := &loadResult{
		start: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), elapsed: 2 * time.Second, lat: newHist(), ops: 100,
		rec: recorder{requests: 100, newSent: 100, accepted: 100, codes: map[int]int64{202: 100},
			perSec: []Second{{T: 0, Accepted: 60}, {T: 1, Accepted: 40}}},
	}
	dr := &drainResult{waited: time.Second, snap: sinkSnapshot{lat: newHist(), claimed: 100}}
	o := &options{spawn: 1, source: "bench", provider: "standard", clients: 4, duration: 2 * time.Second, size: 256, storm: 1}
	res := buildResult(o, nil, lr, dr, CPU{})
	if len(res.Timeline) != 2 || res.Timeline[0].Backlog != 60 || res.Timeline[1].Backlog != 100 {
		t.Fatalf("timeline %+v, want backlogs 60 and 100", res.Timeline)
	}
	if note := pendingNote(res.Delivery); !strings.Contains(note, "none of the 100 claims reached the sink") {
		t.Fatalf("pending note %q", note)
	}
}

// TestBuildResult checks rates, means and counts on a synthetic run:
// 1,000 requests in 2 s, 700 claims, 250 duplicates, 40 503s, 10 timeouts.
func TestBuildResult(t *testing.T) {
	lat := newHist()
	for v := int64(1); v <= 100; v++ {
		recordValue(lat, v)
	}
	lr := &loadResult{
		start:   time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		elapsed: 2 * time.Second,
		lat:     lat,
		ops:     1000,
		rec: recorder{
			requests: 1000, failed: 10, newSent: 750, dupSent: 250,
			accepted: 700, duplicates: 250, dupOK: 250,
			codes:  map[int]int64{202: 700, 200: 250, 503: 40},
			errs:   map[string]int64{"timeout": 10, "503 no quorum": 40},
			perSec: []Second{{T: 0, Accepted: 400, Duplicate: 100}, {T: 1, Accepted: 300, Duplicate: 150, Other: 50}},
		},
	}
	dlat := newHist()
	recordValue(dlat, 2000)
	dr := &drainResult{waited: 500 * time.Millisecond, snap: sinkSnapshot{
		lat: dlat, unique: 690, claimed: 700, delivered: 690, deliveries: 691, repeats: 1, perSec: []int64{300, 300, 90}, perSecNew: []int64{300, 299, 91},
	}}
	o := &options{spawn: 1, source: "bench", provider: "standard", clients: 64, duration: 2 * time.Second, size: 1024, dup: 0.25, storm: 1}
	res := buildResult(o, nil, lr, dr, CPU{Nodes: []float64{1.5}, Bench: 0.4})

	checks := []struct {
		name      string
		got, want any
	}{
		{"rate", res.Rate, 500.0},
		{"throughput", res.Throughput, 475.0},
		{"claims/s", res.ClaimsPerSec, 350.0},
		{"claims", res.Claims, int64(700)},
		{"new keys", res.NewKeys, int64(750)},
		{"unexpected", res.Unexpected, int64(50)},
		{"violations", res.Violations, int64(0)},
		{"mean", res.Latency.Mean, 50.5},
		{"p99", res.Latency.P99, int64(99)},
		{"codes", fmtCodes(res.StatusCodes), "200:250 202:700 503:40 error:10"},
		{"dups", res.Duplicates, Duplicates{Sent: 250, Answered200: 250, Total200: 250}},
		{"delivered", res.Delivery.Delivered, int64(690)},
		{"pending", res.Delivery.Pending, int64(10)},
		{"repeated", res.Delivery.Repeated, int64(1)},
		{"delivery/s", res.Delivery.PerSec, 276.0}, // 690 / 2.5 s
		{"delivery p50", res.Delivery.Latency.P50, int64(2000)},
		{"timeline", len(res.Timeline), 3},
		{"timeline[2]", res.Timeline[2], Second{T: 2, Delivered: 90, FirstDelivered: 91, Backlog: 10}},
		{"backlog after 1 s", res.Timeline[0].Backlog, int64(100)},
		{"model", res.Model, "closed"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	text := formatText(res)
	for _, want := range []string{
		"Requests      [total, rate, throughput]                1000, 500.00/s, 475.00/s",
		"Latencies     [min, mean, 50, 90, 99, 99.9, max]       1µs, 51µs, 50µs, 90µs, 99µs, 100µs, 100µs",
		"Claims        [202 answers, per second]                700, 350.00/s",
		"Unexpected    [not 200/202, exactly-once violations]   50, 0",
		"10 × timeout",
		"40 × 503 no quorum",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}

	// Open model: the requested rate is reported beside the achieved one.
	o.rate = 600
	res = buildResult(o, nil, lr, nil, CPU{})
	if res.Model != "open" || res.RequestedRate != 600 || res.Delivery != nil {
		t.Fatalf("open: model %s, requested %g, delivery %v", res.Model, res.RequestedRate, res.Delivery)
	}
	if text := formatText(res); !strings.Contains(text, "1000, 600.00/s, 500.00/s, 475.00/s") {
		t.Errorf("open report:\n%s", text)
	}
}

func TestSchedule(t *testing.T) {
	g := &generator{o: &options{rate: 1000, duration: 2 * time.Second}, start: time.Unix(100, 0)}
	if got := g.scheduled(); got != 2000 {
		t.Errorf("scheduled = %d, want 2000", got)
	}
	if got := g.due(5).Sub(g.start); got != 5*time.Millisecond {
		t.Errorf("due(5) = start+%s, want 5ms", got)
	}
	if got := g.scheduleSpan(); got != 2*time.Second {
		t.Errorf("span = %s, want 2s", got)
	}
	g.o.total = 300
	if got := g.scheduled(); got != 300 {
		t.Errorf("scheduled with -n 300 = %d", got)
	}
}

func TestBodyTemplate(t *testing.T) {
	for _, size := range []int{0, 100, 1024, 4096} {
		bt := newBodyTemplate("abcdef0123", size)
		b := bt.fill(nil, 42, 1_764_000_000_123_456_789)
		if size > 100 && len(b) != size {
			t.Errorf("size %d: body is %d bytes", size, len(b))
		}
		var v struct {
			ID     string `json:"id"`
			SentNs int64  `json:"sent_ns"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("size %d: %v: %s", size, err, b)
		}
		if v.ID != bt.id(42) || v.ID != "evt_abcdef0123_000000000042" || v.SentNs != 1_764_000_000_123_456_789 {
			t.Errorf("size %d: %+v", size, v)
		}
		if ns, ok := parseSentNs(b); !ok || ns != v.SentNs {
			t.Errorf("parseSentNs = %d, %v", ns, ok)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"1KiB": 1024, "512": 512, "4KB": 4000, "1MiB": 1 << 20, "64B": 64, " 2 KiB": 2048} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "1GiB2"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): no error", bad)
		}
	}
}

func TestTargetURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8080":  "http://127.0.0.1:8080",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://example.com":    "https://example.com:443",
		"http://[::1]:9":         "http://[::1]:9",
	} {
		if got, err := targetURL(in); err != nil || got != want {
			t.Errorf("targetURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"127.0.0.1:8080", "ftp://x", "http://x/in/bench", "http://"} {
		if _, err := targetURL(bad); err == nil {
			t.Errorf("targetURL(%q): no error", bad)
		}
	}
}

func TestOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "need -spawn"},
		{[]string{"-spawn", "1", "-target", "http://x:1"}, "exclude"},
		{[]string{"-target", "http://x:1"}, "-secret-file"},
		{[]string{"-spawn", "1", "-dup", "2"}, "-dup"},
		{[]string{"-spawn", "1", "-provider", "nope"}, "-provider"},
		{[]string{"-spawn", "1", "-n", "10", "-cpuprofile", "x"}, "-cpuprofile needs -d"},
		{[]string{"-spawn", "1", "-storm", "0"}, "-storm"},
		{[]string{"-target", "http://x:1", "-secret-file", "s", "-leader-only"}, "-leader-only needs -spawn"},
		{[]string{"-spawn", "3", "-soak", "-leader-only"}, "exclude"},
		{[]string{"-target", "http://x:1", "-secret-file", "s", "-neighbour", "10"}, "-neighbour needs -spawn"},
		{[]string{"-spawn", "1", "-neighbour", "10", "-fill", "100"}, "-neighbour needs -spawn"},
		{[]string{"-spawn", "1", "-neighbour", "-1"}, "-neighbour -1"},
		{[]string{"-spawn", "1", "-neighbour", "10", "-neighbour-delay", "10s"}, "-neighbour-delay"},
	} {
		var stderr bytes.Buffer
		_, err := parseOptions(tc.args, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
	o, err := parseOptions([]string{"-spawn", "1"}, &bytes.Buffer{})
	if err != nil || o.duration != 10*time.Second || o.size != 1024 || o.clients != 64 || o.model() != "closed-c64" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}

// runJSON runs bench with args plus -json and returns the decoded result.
func runJSON(t *testing.T, args ...string) (*Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args = append(args, "-json", "-q", "-no-files", "-bin", binPath)
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		// The report says what went wrong (codes, errors, what was not
		// delivered): keep it with the error.
		return nil, fmt.Errorf("%w\nstderr:\n%s\nreport:\n%s", err, stderr.String(), stdout.String())
	}
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout.String())
	}
	return &res, nil
}

// TestSpawnOneSmoke runs a real node for ~3 s with a fifth of the requests
// resending acked keys: claims flow, nothing unexpected, every resend is a
// 200 and none of them is counted as a claim.
func TestSpawnOneSmoke(t *testing.T) {
	res, err := runJSON(t, "-spawn", "1", "-c", "16", "-d", "3s", "-dup", "0.2", "-drain", "5s")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("claims %d (%.0f/s), duplicates %+v, p50 %dµs p99 %dµs, codes %v",
		res.Claims, res.ClaimsPerSec, res.Duplicates, res.Latency.P50, res.Latency.P99, res.StatusCodes)
	if res.ClaimsPerSec <= 0 || res.Claims == 0 {
		t.Fatalf("no claims: %+v", res)
	}
	if res.Unexpected != 0 || res.Violations != 0 {
		t.Fatalf("unexpected %d, violations %d, codes %v, errors %v", res.Unexpected, res.Violations, res.StatusCodes, res.Errors)
	}
	d := res.Duplicates
	if d.Sent == 0 || d.Answered200 != d.Sent || d.AnsweredNew != 0 {
		t.Fatalf("duplicates %+v: want every resend answered 200", d)
	}
	// A claim is a 202 to a new key: as many as new keys, none from resends.
	if res.Claims != res.NewKeys || res.Claims+d.Total200 != res.Requests || res.StatusCodes["202"] != res.Claims {
		t.Fatalf("claims %d, new keys %d, 200s %d, requests %d", res.Claims, res.NewKeys, d.Total200, res.Requests)
	}
	if dl := res.Delivery; dl == nil || dl.Repeated != 0 || dl.Delivered > res.Claims || dl.Delivered == 0 {
		t.Fatalf("delivery %+v", res.Delivery)
	}
}

// TestSpawnOneNeighbour: with -neighbour the node gets a second source,
// whose events (sent before the load) reach their own handler and are
// counted there, not in the measured source's deliveries.
func TestSpawnOneNeighbour(t *testing.T) {
	res, err := runJSON(t, "-spawn", "1", "-c", "8", "-d", "1s", "-neighbour", "50", "-neighbour-delay", "10ms", "-drain", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if res.NeighbourEvents != 50 || res.NeighbourDelayMs != 10 {
		t.Fatalf("neighbour events %d, delay %g ms: want 50 and 10", res.NeighbourEvents, res.NeighbourDelayMs)
	}
	if res.NeighbourDelivered == 0 || res.NeighbourDelivered > 50 {
		t.Fatalf("neighbour delivered %d of 50", res.NeighbourDelivered)
	}
	if dl := res.Delivery; dl == nil || dl.Delivered != res.Claims || dl.Repeated != 0 {
		t.Fatalf("delivery %+v for %d claims: the neighbour's events counted with the measured source's", res.Delivery, res.Claims)
	}
}

// TestSpawnOneOpenStorm runs the open model with storms of 4 copies. The
// drain waits for the deliveries (it ends as the last arrives): without it
// the last storm's delivery, still on its way, fails the run as pending.
func TestSpawnOneOpenStorm(t *testing.T) {
	res, err := runJSON(t, "-spawn", "1", "-rate", "100", "-n", "100", "-c", "32", "-storm", "4", "-drain", "10s")
	if err != nil {
		t.Fatal(err)
	}
	s := res.Storms
	if s == nil || s.Count != 100 || s.Requests != 400 || s.Violations != 0 || res.Missed != 0 {
		t.Fatalf("storms %+v, missed %d", s, res.Missed)
	}
	if res.Claims != 100 || res.StatusCodes["200"] != 300 {
		t.Fatalf("codes %v: want one 202 per storm", res.StatusCodes)
	}
	if d := res.Delivery; d == nil || d.Delivered != 100 || d.Pending != 0 || d.Repeated != 0 {
		t.Fatalf("delivery %+v: want each storm's event delivered once", res.Delivery)
	}
}

// TestSpawnThreeSmoke runs against a three-node cluster. It skips, saying
// why, when the cluster does not come up (the cluster is young).
func TestSpawnThreeSmoke(t *testing.T) {
	res, err := runJSON(t, "-spawn", "3", "-c", "16", "-d", "2s", "-dup", "0.2", "-drain", "5s")
	if err != nil {
		if strings.Contains(err.Error(), "exited early") || strings.Contains(err.Error(), "not ready") {
			t.Skipf("three-node cluster did not come up; skipping until it does:\n%v", err)
		}
		t.Fatal(err)
	}
	if res.Claims == 0 || res.Unexpected != 0 || res.Violations != 0 || res.Duplicates.AnsweredNew != 0 {
		t.Fatalf("claims %d, unexpected %d, violations %d, codes %v, errors %v",
			res.Claims, res.Unexpected, res.Violations, res.StatusCodes, res.Errors)
	}
}

// TestSpawnLeaderOnly: with -leader-only the generator's one target is the
// intake of the node the cluster reports as leader.
func TestSpawnLeaderOnly(t *testing.T) {
	o, err := parseOptions([]string{"-spawn", "3", "-bin", binPath, "-leader-only", "-d", "1s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	e, err := setup(t.Context(), o, &stderr)
	if err != nil {
		if strings.Contains(err.Error(), "exited early") || strings.Contains(err.Error(), "not ready") {
			t.Skipf("three-node cluster did not come up; skipping until it does:\n%v", err)
		}
		t.Fatal(err)
	}
	defer func() {
		if err := e.close(&stderr); err != nil {
			t.Error(err)
		}
	}()
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	st, err := testcluster.FetchStatus(t.Context(), c, e.adminURL, e.adminToken)
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, p := range e.nodes {
		if p.id == st.LeaderID {
			want = "http://" + p.listen
		}
	}
	if len(e.targets) != 1 || e.targets[0] != want {
		t.Fatalf("targets %v, want only the leader %s's intake %q", e.targets, st.LeaderID, want)
	}
}

// BenchmarkSign is the generator's per-request signing cost (body fill and
// the provider's HMAC over 1 KiB), which bench pays on the fly, inside the
// measured request; compare it with the latencies it reports.
func BenchmarkSign(b *testing.B) {
	for _, p := range signerNames() {
		b.Run(p, func(b *testing.B) {
			scheme, _ := providers.Lookup(p)
			secret, _ := providers.GenerateSecret(p)
			bt := newBodyTemplate("abcdef0123", 1024)
			var body []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				body = bt.fill(body, int64(i), time.Now().UnixNano())
				if _, err := scheme.Sign(body, []byte(secret), time.Now(), bt.id(int64(i)), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	g := &generator{start: time.Now().Add(-5 * time.Second)}
	g.done.Store(1000)
	line := progressLine(&options{duration: 10 * time.Second}, g)
	if !strings.HasPrefix(line, "  50% [===============>") || !strings.Contains(line, "1000 req") {
		t.Errorf("progress line %q", line)
	}
	g.started.Store(30)
	if line := progressLine(&options{total: 30}, g); !strings.HasPrefix(line, " 100% [==============================]") {
		t.Errorf("progress line at the end %q", line)
	}
}

func TestStatusBytes(t *testing.T) {
	status := []byte("Name:\toncehook\nVmRSS:\t  1843200 kB\nRssAnon:\t   102400 kB\nRssFile:\t  1740800 kB\n")
	for _, tc := range []struct {
		field string
		want  int64
	}{
		{"VmRSS:", 1843200 << 10},
		{"RssFile:", 1740800 << 10},
		{"RssShmem:", 0}, // missing
	} {
		if got := statusBytes(status, tc.field); got != tc.want {
			t.Errorf("statusBytes(%q) = %d, want %d", tc.field, got, tc.want)
		}
	}
}
