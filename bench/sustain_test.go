package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestFlatness checks the backlog rule on synthetic series: the last third
// (at least 3 seconds) may rise by at most max(50, rate/10) events, and may
// not rise in every second when it has at least 6.
func TestFlatness(t *testing.T) {
	for _, tc := range []struct {
		name     string
		backlog  []int64
		rate     float64
		flat     bool
		monotone bool
		rise     int64
		tol      int64
	}{
		{"constant", []int64{100, 100, 100, 100, 100, 100, 100, 100, 100}, 3000, true, false, 0, 300},
		{"noise around a level", []int64{300, 120, 340, 180, 260, 310, 150, 290, 200, 330}, 3000, true, false, 40, 300},
		{"warm-up spike then flat", []int64{5000, 9000, 2000, 200, 210, 190, 205, 200}, 3000, true, false, 10, 300},
		{"draining", []int64{900, 800, 700, 600, 500, 400}, 1000, true, false, -200, 100},
		{"linear growth over the tolerance", []int64{0, 100, 200, 300, 400, 500, 600, 700, 800}, 1000, false, false, 200, 100},
		{"rise just at the tolerance", []int64{0, 0, 0, 0, 0, 0, 0, 50, 100}, 1000, true, false, 100, 100},
		{"rise one over the tolerance", []int64{0, 0, 0, 0, 0, 0, 0, 50, 101}, 1000, false, false, 101, 100},
		{"small but rising every second of 6", []int64{
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 12, 14, 16, 18, 20}, 3000, false, true, 10, 300},
		{"rising every second of 5 is not enough alone", []int64{
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 11, 12, 13, 14, 15}, 3000, true, false, 4, 300},
		{"low rate: the floor of 50", []int64{0, 0, 0, 10, 30, 49}, 100, true, false, 39, 50},
		{"too short to judge", []int64{0, 0}, 100, false, false, 0, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := flatness(tc.backlog, tc.rate)
			if f.Flat != tc.flat || f.Monotone != tc.monotone || f.Rise != tc.rise || f.Tolerance != tc.tol {
				t.Fatalf("flatness = %+v; want flat %v, monotone %v, rise %d, tolerance %d", f, tc.flat, tc.monotone, tc.rise, tc.tol)
			}
			if n := len(tc.backlog); n >= 3 && (f.To != n-1 || f.To-f.From+1 != max(3, n/3)) {
				t.Fatalf("last third %d..%d of %d seconds", f.From, f.To, n)
			}
		})
	}
}

func TestSustainRates(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, step float64
		want         []float64
	}{
		{1000, 4000, 1000, []float64{1000, 2000, 3000, 4000}},
		{1000, 3500, 1000, []float64{1000, 2000, 3000, 3500}},
		{500, 500, 500, []float64{500}},
		{0.1, 0.3, 0.1, []float64{0.1, 0.2, 0.30000000000000004}},
	} {
		if got := sustainRates(tc.lo, tc.hi, tc.step); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("sustainRates(%g, %g, %g) = %v, want %v", tc.lo, tc.hi, tc.step, got, tc.want)
		}
	}
}

func TestOptionsModes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-spawn", "1", "-sustain"}, "-rate-min"},
		{[]string{"-spawn", "1", "-sustain", "-rate-min", "2000", "-rate-max", "1000"}, "-rate-min <= -rate-max"},
		{[]string{"-spawn", "1", "-sustain", "-rate-min", "1000", "-rate-max", "2000", "-rate", "5"}, "drop -rate"},
		{[]string{"-spawn", "1", "-sustain", "-rate-min", "1000", "-rate-max", "2000", "-step-d", "2s"}, "-step-d"},
		{[]string{"-spawn", "1", "-sustain", "-rate-min", "100", "-rate-max", "10000"}, "at most 20"},
		{[]string{"-spawn", "1", "-sustain", "-rate-min", "100", "-rate-max", "200", "-refine", "9"}, "-refine"},
		{[]string{"-target", "http://x:1", "-secret-file", "s", "-sustain", "-rate-min", "100", "-rate-max", "200"}, "needs -spawn, or -sink"},
		{[]string{"-spawn", "3", "-fill", "1000"}, "-spawn 1"},
		{[]string{"-spawn", "1", "-fill", "1000", "-rate", "100"}, "drop -rate"},
		{[]string{"-spawn", "1", "-fill", "1000", "-dup", "0.5"}, "new events only"},
		{[]string{"-target", "http://x:1", "-secret-file", "s", "-payload-retention", "1s"}, "needs -spawn"},
		{[]string{"-spawn", "1", "-payload-retention", "soon"}, "-payload-retention"},
	} {
		if _, err := parseOptions(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}

	o, err := parseOptions([]string{"-spawn", "1", "-fill", "5000"}, &bytes.Buffer{})
	if err != nil || o.size != 256 || o.total != 5000 || o.duration != 0 || o.rate != 0 {
		t.Fatalf("-fill defaults: size %d, total %d, duration %s, rate %g, %v", o.size, o.total, o.duration, o.rate, err)
	}
	o, err = parseOptions([]string{"-spawn", "1", "-fill", "5000", "-size", "1KiB", "-d", "1m"}, &bytes.Buffer{})
	if err != nil || o.size != 1024 || o.duration != time.Minute {
		t.Fatalf("-fill with -size and -d: size %d, duration %s, %v", o.size, o.duration, err)
	}
	o, err = parseOptions([]string{"-spawn", "1", "-sustain", "-rate-min", "1000", "-rate-max", "3000"}, &bytes.Buffer{})
	if err != nil || o.rateStep != 1000 || o.duration != 30*time.Second || o.refine != 2 || o.maxDelivP99 != 100*time.Millisecond {
		t.Fatalf("-sustain defaults: %+v, %v", o, err)
	}
}

// sustainedResult is a step's result whose backlog holds at level after a
// warm-up, with the given steady delivery p99 (µs).
func sustainedResult(secs int, level, slope int64, p99 int64) *Result {
	res := &Result{Claims: int64(secs) * 1000, ClaimsPerSec: 1000, Latency202: Latency{P99: 5000}}
	for i := range secs {
		res.Timeline = append(res.Timeline, Second{T: i, Accepted: 1000, FirstDelivered: 1000, Backlog: level + int64(i)*slope})
	}
	res.Delivery = &Delivery{Claimed: res.Claims, Delivered: res.Claims,
		AfterAck: Latency{Count: 10, P99: 2 * p99}, AfterAckSteady: Latency{Count: 5, P99: p99}}
	return res
}

func TestJudge(t *testing.T) {
	const stepD, maxP99 = 9 * time.Second, 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		res    *Result
		reason string // "" : sustained
	}{
		{"flat and fast", sustainedResult(12, 80, 0, 40_000), ""},
		{"steady p99 over the limit", sustainedResult(9, 80, 0, 150_000), "delivery p99 after the 202 150ms > 100ms"},
		{"growing backlog", sustainedResult(9, 0, 200, 40_000), "backlog grew by 400 (> 100) over 6..8 s"},
		{"missed", func() *Result { r := sustainedResult(9, 80, 0, 40_000); r.Missed = 7; return r }(), "7 requests due but never sent"},
		{"pending", func() *Result { r := sustainedResult(9, 80, 0, 40_000); r.Delivery.Pending = 3; return r }(), "3 claims not delivered"},
		{"unexpected", func() *Result { r := sustainedResult(9, 80, 0, 40_000); r.Unexpected = 2; return r }(), "2 unexpected answers"},
		{"no delivery", func() *Result { r := sustainedResult(9, 80, 0, 40_000); r.Delivery = nil; return r }(), "no delivery measured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := judge(tc.res, 1000, stepD, maxP99)
			if tc.reason == "" {
				if !st.Pass || len(st.Reasons) > 0 {
					t.Fatalf("not sustained: %v", st.Reasons)
				}
				// Only the step's seconds count: the drain's seconds are left out.
				if st.Flatness.To != 8 || st.DeliveredPerSec != 1000 {
					t.Fatalf("flatness %+v, delivered/s %g", st.Flatness, st.DeliveredPerSec)
				}
				return
			}
			if st.Pass || !strings.Contains(strings.Join(st.Reasons, "; "), tc.reason) {
				t.Fatalf("pass %v, reasons %q; want %q", st.Pass, st.Reasons, tc.reason)
			}
		})
	}
}

func TestFormatSustain(t *testing.T) {
	pass := judge(sustainedResult(9, 80, 0, 40_000), 1000, 9*time.Second, 100*time.Millisecond)
	failed := judge(sustainedResult(9, 0, 200, 40_000), 2000, 9*time.Second, 100*time.Millisecond)
	sr := &Sustain{Nodes: 1, Provider: "standard", BodyBytes: 1024, StepS: 9, Clients: 256, MaxP99US: 100_000,
		Steps: []Step{pass, failed}, Sustained: 1000, FirstFailed: 2000, Commit: "abcdef0", CPUs: 2}
	text := formatSustain(sr)
	for _, want := range []string{
		"Sustained rate search: 1 node(s), provider standard, body 1024 B, steps of 9s, at most 256 in flight",
		"1000/s  claims   1000.0/s  delivered   1000.0/s  claim p99      5ms  delivery p99     40ms  backlog 6..8 s: 80 -> 80 (max 80, tol 100)  sustained",
		"2000/s", "NOT sustained: backlog grew by 400 (> 200) over 6..8 s",
		"Sustained rate: 1000/s (2000/s failed)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	sr.Steps, sr.Sustained, sr.FirstFailed, sr.AtLeast = []Step{pass}, 1000, 0, true
	if text := formatSustain(sr); !strings.Contains(text, "at least 1000/s") {
		t.Errorf("all passed:\n%s", text)
	}
	sr.Steps, sr.Sustained, sr.FirstFailed, sr.AtLeast = []Step{failed}, 0, 2000, false
	if text := formatSustain(sr); !strings.Contains(text, "none of the steps (below 2000/s)") {
		t.Errorf("none passed:\n%s", text)
	}
	sr.Steps, sr.Sustained, sr.FirstFailed, sr.Note = []Step{pass}, 1000, 0, "interrupted"
	if text := formatSustain(sr); !strings.Contains(text, "Sustained rate: at least 1000/s\n") || !strings.Contains(text, "Note: interrupted") {
		t.Errorf("interrupted:\n%s", text)
	}
	sr.Sustained = 0
	if text := formatSustain(sr); !strings.Contains(text, "Sustained rate: not determined") {
		t.Errorf("interrupted in the first step:\n%s", text)
	}
	dir := t.TempDir()
	sr.Steps = []Step{pass, failed}
	sr.Files = []string{filepath.Join(dir, "s.json"), filepath.Join(dir, "s.png")}
	if err := writeSustainFiles(sr); err != nil {
		t.Fatal(err)
	}
	for _, f := range sr.Files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	// -replot knows a search's JSON from a run's.
	if err := os.Remove(sr.Files[1]); err != nil {
		t.Fatal(err)
	}
	if err := replot(sr.Files[0]); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(sr.Files[1]); err != nil || st.Size() == 0 {
		t.Fatalf("replot: %v", err)
	}
}

// TestAckMatcher pairs 202s and deliveries in both orders: each pair is
// recorded once, in the second of its arrival, a delivery that beat its 202
// as the floor.
func TestAckMatcher(t *testing.T) {
	const s = int64(time.Second)
	origin := int64(1_000) * s
	m := newAckMatcher(origin, origin+2*s)
	m.acked(1, origin+100_000_000)             // 202 at 0.1 s
	m.received(1, origin+130_000_000)          // delivered 30 ms later, in second 0
	m.received(2, origin+2*s+500_000_000)      // delivered at 2.5 s
	m.acked(2, origin+2*s+400_000_000)         // its 202 100 ms earlier, seen after
	m.received(3, origin+3*s)                  // delivered before its 202
	m.acked(3, origin+3*s+1_000_000)           //
	m.acked(4, origin+3*s)                     // never delivered
	m.received(-1, origin)                     // out of range: ignored
	m.acked(int64(maxMatchChunks)<<16, origin) //
	all, steady, perSec, before := m.snapshot()
	if all.TotalCount() != 3 || before != 1 {
		t.Fatalf("pairs %d, before ack %d; want 3, 1", all.TotalCount(), before)
	}
	// Above 2,048 µs the histograms keep 3 (all) and 2 (per second)
	// significant digits.
	if all.Max() < 100_000 || all.Max() > 100_100 || all.Min() != 1 {
		t.Fatalf("min %d, max %d µs; want 1, 100000", all.Min(), all.Max())
	}
	if steady.Count != 2 || len(perSec) != 4 || perSec[0].P50 < 30_000 || perSec[0].P50 > 30_300 ||
		perSec[1].Count != 0 || perSec[2].Count != 1 || perSec[3].P99 != 1 {
		t.Fatalf("steady %+v, per second %+v", steady, perSec)
	}
}

func TestFillBacklog(t *testing.T) {
	tl := []Second{{Accepted: 100, FirstDelivered: 40}, {Accepted: 100, FirstDelivered: 90}, {FirstDelivered: 60}, {}}
	fillBacklog(tl)
	var got []int64
	for _, s := range tl {
		got = append(got, s.Backlog)
	}
	if want := []int64{60, 70, 10, 10}; !reflect.DeepEqual(got, want) {
		t.Fatalf("backlog %v, want %v", got, want)
	}
}

func TestParseBacklogMetric(t *testing.T) {
	const exposition = `# HELP oncehook_backlog Pending events of the source.
# TYPE oncehook_backlog gauge
oncehook_backlog{source="bench2"} 7
oncehook_backlog{source="bench"} 1234
oncehook_backlog_other{source="bench"} 9
oncehook_oldest_pending_age_seconds{source="bench"} 3.5
`
	for _, tc := range []struct {
		text, source string
		want         int64
		ok           bool
	}{
		{exposition, "bench", 1234, true},
		{exposition, "bench2", 7, true},
		{exposition, "nope", 0, false},
		{`oncehook_backlog{source="bench"} 5e+06 1764000000000`, "bench", 5_000_000, true},
		{`oncehook_backlog{source="bench"} NaNx`, "bench", 0, false},
		{"", "bench", 0, false},
	} {
		got, ok := parseBacklogMetric(strings.NewReader(tc.text), tc.source)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q in %q: %d, %v; want %d, %v", tc.source, tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFormatTimeline(t *testing.T) {
	metric := int64(42)
	tl := []Second{
		{T: 0, Accepted: 3000, ClaimP50: 2100, ClaimP99: 9800, FirstDelivered: 2950, DeliveryP50: 1500, DeliveryP99: 31000, Backlog: 50, MetricBacklog: &metric},
		{T: 1, Accepted: 12, ClaimP50: 2000, ClaimP99: 4000},
	}
	text := formatTimeline(tl)
	for _, want := range []string{
		"     t    claims   claim50   claim99   delivered   deliv50   deliv99   backlog    metric",
		"     0      3000     2.1ms     9.8ms        2950     1.5ms      31ms        50        42",
		"     1        12       2ms       4ms           0         -         -         0         -",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("timeline lacks %q:\n%s", want, text)
		}
	}
	if got := formatTimeline([]Second{{T: 0, Accepted: 5}}); got != "" {
		t.Errorf("timeline without latencies: %q", got)
	}
}

func TestFill(t *testing.T) {
	for n, want := range map[int64]int64{10_000_000: 100_000, 1_000_000: 100_000, 100_000: 10_000, 5: 1} {
		if got := fillWindow(n); got != want {
			t.Errorf("fillWindow(%d) = %d, want %d", n, got, want)
		}
	}
	line := fillLine(FillPoint{T: 10, Sent: 40_000, RSSBytes: 100 << 20, DataBytes: 40_000 * 1000, Rate: 4000, ClaimP99: 12_345}, 100_000)
	if want := "fill:  40.0% 40000/100000  4000/s  claim p99 12.35ms  node RSS 100.0 MiB  data 38.1 MiB (1000 B/key)  ETA 15s"; line != want {
		t.Errorf("fill line\n%q, want\n%q", line, want)
	}
	if line := fillLine(FillPoint{Sent: 10}, 10); !strings.HasSuffix(line, "ETA 0s (draining)") {
		t.Errorf("fill line at the end %q", line)
	}
	f := &Fill{Events: 100_000, Claims: 100_000, Window: 10_000, RSSBytes: 150 << 20, DataBytes: 130 << 20,
		EngineBytes: 100 << 20, LogBytes: 25 << 20, SnapshotBytes: 5 << 20,
		DataPerKey: 1363, RSSPerKey: 1573, First: Latency{Count: 10_000, P99: 40_000}, Last: Latency{Count: 10_000, P99: 44_000},
		P99Growth: 1.1, TenMillionS: 2500}
	text := formatFill(f)
	for _, want := range []string{
		"Fill          [claims/events, payload_retention]       100000/100000, not set",
		"Retained      [RSS, data dir, per key]                 150.0 MiB, 130.0 MiB, 1573 B RSS + 1363 B disk per key",
		"Data dir      [engine file, raft log, snapshots]       100.0 MiB (1049 B/key), 25.0 MiB (262 B/key), 5.0 MiB (52 B/key)",
		"Claim p99     [last window / first window]             1.10×",
		"10M events    [at this run's claims/s]                 41m40s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("fill report lacks %q:\n%s", want, text)
		}
	}

	// The plot of a fill with an open-model-like timeline has every panel.
	res := &Result{Nodes: 1, Provider: "standard", Model: "closed", Fill: f,
		Latency: Latency{Count: 3}, Percentiles: []Point{{0, 100}, {50, 200}, {100, 400}},
		Timeline: []Second{{T: 0, Accepted: 10, ClaimP50: 100, ClaimP99: 200, Backlog: 3}}}
	f.Points = []FillPoint{{T: 5, Sent: 20_000, RSSBytes: 80 << 20, DataBytes: 30 << 20, ClaimP99: 30_000}, {T: 10, Sent: 50_000, RSSBytes: 120 << 20, DataBytes: 70 << 20}}
	path := filepath.Join(t.TempDir(), "fill.png")
	if err := writePlot(res, path); err != nil {
		t.Fatal(err)
	}
	if ps, err := extraPanels(res); err != nil || len(ps) != 4 {
		t.Fatalf("%d extra panels, %v; want 4", len(ps), err)
	}
}

// TestConfigPayloadRetention: the spawned config carries payload_retention
// only when -payload-retention is given.
func TestConfigPayloadRetention(t *testing.T) {
	s, err := startSink("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	e := &env{dir: "/tmp/x", sink: s}
	e.nodes = []*proc{{id: "node1", listen: "127.0.0.1:1", admin: "127.0.0.1:2", dataDir: "/tmp/x/node1"}}
	o := &options{source: "bench", provider: "standard", size: 256}
	if cfg := e.config(e.nodes[0], o); strings.Contains(cfg, "payload_retention") {
		t.Fatalf("payload_retention without the flag:\n%s", cfg)
	}
	o.payloadRetention = "1s"
	if cfg := e.config(e.nodes[0], o); !strings.Contains(cfg, "payload_retention = \"1s\"\n") {
		t.Fatalf("no payload_retention:\n%s", cfg)
	}
}

// TestSinkSteps: each begin starts the sink's counts afresh, and a late
// delivery of an earlier run's key is stale, not a new key of this run.
func TestSinkSteps(t *testing.T) {
	s, err := startSink("127.0.0.1:0", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	post := func(key string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.url()+"/bench", strings.NewReader(`{"sent_ns":1}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	start := time.Now()
	m := newAckMatcher(start.UnixNano(), start.UnixNano())
	s.begin(start, "aaaaaaaaaa", m)
	m.acked(1, time.Now().UnixNano())
	post("bench:evt_aaaaaaaaaa_000000000001")
	post("bench:evt_aaaaaaaaaa_000000000001")
	post("bench:evt_aaaaaaaaaa_000000000002")
	if snap := s.snapshot(); snap.unique != 2 || snap.repeats != 1 || sum(snap.perSecNew) != 2 || snap.stale != 0 {
		t.Fatalf("first run: %+v", snap)
	}
	if all, _, _, _ := m.snapshot(); all.TotalCount() != 1 {
		t.Fatalf("matched %d, want 1", all.TotalCount())
	}
	s.begin(time.Now(), "bbbbbbbbbb", nil)
	post("bench:evt_aaaaaaaaaa_000000000003")
	post("bench:evt_bbbbbbbbbb_000000000001")
	if snap := s.snapshot(); snap.unique != 1 || snap.repeats != 0 || snap.stale != 1 || snap.deliveries != 1 {
		t.Fatalf("second run: %+v", snap)
	}
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

// TestSpawnOneOpenTimeline runs the open model on a real node: every
// delivered key is paired with its 202 exactly once, and the seconds carry
// claim latencies and a backlog that ends at zero once all is delivered.
func TestSpawnOneOpenTimeline(t *testing.T) {
	res, err := runJSON(t, "-spawn", "1", "-rate", "200", "-d", "3s", "-c", "64", "-drain", "20s")
	if err != nil {
		t.Fatal(err)
	}
	d := res.Delivery
	if d == nil || res.Claims == 0 || d.Pending != 0 {
		t.Fatalf("claims %d, delivery %+v", res.Claims, d)
	}
	if d.AfterAck.Count != d.Delivered || d.AfterAckSteady.Count == 0 || d.AfterAckSteady.Count > d.AfterAck.Count {
		t.Fatalf("paired %d (steady %d) of %d delivered", d.AfterAck.Count, d.AfterAckSteady.Count, d.Delivered)
	}
	var claims, first int64
	for _, s := range res.Timeline {
		claims += s.Accepted
		first += s.FirstDelivered
		if s.Accepted > 0 && s.ClaimP99 == 0 {
			t.Fatalf("second %d: %d claims without a latency", s.T, s.Accepted)
		}
	}
	last := res.Timeline[len(res.Timeline)-1]
	if claims != res.Claims || first != d.Delivered || last.Backlog != 0 {
		t.Fatalf("timeline: %d claims, %d first deliveries, last backlog %d; want %d, %d, 0", claims, first, last.Backlog, res.Claims, d.Delivered)
	}
}

// TestSpawnOneSustain runs a one-step search end to end. Whether the step
// passes depends on the machine; what is checked is the shape of the result.
func TestSpawnOneSustain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"-spawn", "1", "-sustain", "-rate-min", "100", "-rate-max", "100", "-step-d", "6s", "-drain", "20s",
		"-json", "-q", "-no-files", "-bin", binPath}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	var sr Sustain
	if err := json.Unmarshal(stdout.Bytes(), &sr); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout.String())
	}
	if len(sr.Steps) != 1 || sr.Steps[0].Rate != 100 || sr.Steps[0].Result == nil || sr.Steps[0].Flatness.To != 5 {
		t.Fatalf("steps %+v", sr.Steps)
	}
	st := sr.Steps[0]
	if st.Pass != (sr.Sustained == 100) || st.Pass != sr.AtLeast || st.Pass == (len(st.Reasons) > 0) {
		t.Fatalf("pass %v, reasons %q, sustained %g, at least %v", st.Pass, st.Reasons, sr.Sustained, sr.AtLeast)
	}
	t.Logf("step: %s", stepLine(st))
}

// TestSpawnOneFill fills a real node with a few thousand events.
func TestSpawnOneFill(t *testing.T) {
	res, err := runJSON(t, "-spawn", "1", "-fill", "3000", "-c", "16", "-drain", "20s")
	if err != nil {
		t.Fatal(err)
	}
	f := res.Fill
	if f == nil || f.Events != 3000 || f.Claims != 3000 || res.BodyBytes != 256 || f.Window != 300 {
		t.Fatalf("fill %+v, body %d", f, res.BodyBytes)
	}
	if f.First.Count != 300 || f.Last.Count != 300 || f.P99Growth <= 0 {
		t.Fatalf("windows: first %+v, last %+v, growth %g", f.First, f.Last, f.P99Growth)
	}
	if f.RSSBytes <= 0 || f.DataBytes <= 0 || f.DataPerKey <= 0 || len(f.Points) == 0 || f.TenMillionS <= 0 {
		t.Fatalf("footprint %+v", f)
	}
}

// TestSinkHandlerDelay: with -handler-delay the sink records a delivery when
// it arrives and answers it no sooner than the delay, as a slow handler.
func TestSinkHandlerDelay(t *testing.T) {
	const delay = 50 * time.Millisecond
	s, err := startSink("127.0.0.1:0", delay)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	s.begin(time.Now(), "cccccccccc", nil)
	c := &http.Client{Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, s.url()+"/bench", strings.NewReader(`{"sent_ns":1}`))
	req.Header.Set("Idempotency-Key", "bench:evt_cccccccccc_000000000001")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); resp.StatusCode != http.StatusOK || took < delay {
		t.Fatalf("status %d after %v; want 200 after at least %v", resp.StatusCode, took, delay)
	}
	if snap := s.snapshot(); snap.unique != 1 || snap.deliveries != 1 {
		t.Fatalf("after one delivery: %+v", snap)
	}
}
