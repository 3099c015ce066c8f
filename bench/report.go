package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/mattn/go-isatty"
)

// Histogram range: 1 µs .. 60 s at 3 significant digits (values below
// 2,048 µs are exact; above, within 0.1%).
const (
	histMin     = 1
	histMax     = 60 * 1000 * 1000
	histSigFigs = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histSigFigs) }

// micros converts d to whole microseconds, at least 1 (the histogram's floor).
func micros(d time.Duration) int64 { return max(1, d.Microseconds()) }

func recordMicros(h *hdrhistogram.Histogram, d time.Duration) { recordValue(h, micros(d)) }

// recordValue records v µs, clamped into the histogram's range.
func recordValue(h *hdrhistogram.Histogram, v int64) {
	_ = h.RecordValue(min(max(v, histMin), histMax)) // in range: cannot fail
}

// Result is one run's outcome: the JSON file and what the report prints.
// Latencies are in microseconds, rates per second.
type Result struct {
	Date      time.Time `json:"date"`
	Commit    string    `json:"commit"`
	GoVersion string    `json:"go_version"`
	CPUs      int       `json:"cpus"`

	Target        string  `json:"target"` // "spawn" or the intake URLs
	Nodes         int     `json:"nodes"`
	LeaderOnly    bool    `json:"leader_only,omitempty"` // -leader-only: every request went to the leader
	Source        string  `json:"source"`
	Provider      string  `json:"provider"`
	Model         string  `json:"model"` // closed | open
	Clients       int     `json:"clients"`
	RequestedRate float64 `json:"requested_rate,omitempty"`
	DurationS     float64 `json:"duration_s,omitempty"` // -d
	Operations    int64   `json:"operations,omitempty"` // -n
	BodyBytes     int     `json:"body_bytes"`
	DupRatio      float64 `json:"dup_ratio"`
	Storm         int     `json:"storm"`
	// HandlerDelayMs is -handler-delay: the sink answered each delivery this
	// late, as a slow handler (0: at once).
	HandlerDelayMs float64 `json:"handler_delay_ms,omitempty"`
	// Neighbour*: -neighbour: events of a second source sent (and accepted)
	// just before the load, its handler's delay, and how many of them it had
	// received when the run ended.
	NeighbourEvents    int64   `json:"neighbour_events,omitempty"`
	NeighbourDelayMs   float64 `json:"neighbour_delay_ms,omitempty"`
	NeighbourDelivered int64   `json:"neighbour_delivered,omitempty"`

	Requests     int64            `json:"requests"`
	NewKeys      int64            `json:"new_keys"` // distinct new keys sent (a storm is one)
	Missed       int64            `json:"missed"`   // open model: due but never sent
	ElapsedS     float64          `json:"elapsed_s"`
	Rate         float64          `json:"rate"`       // requests completed per second
	Throughput   float64          `json:"throughput"` // 200 and 202 answers per second
	StatusCodes  map[string]int64 `json:"status_codes"`
	Errors       map[string]int64 `json:"errors,omitempty"` // failures and unexpected answers by class
	Latency      Latency          `json:"latency_us"`
	Latency202   Latency          `json:"latency_202_us"` // requests answered 202 (new claims)
	Latency200   Latency          `json:"latency_200_us"` // requests answered 200 (duplicates)
	Claims       int64            `json:"claims"`         // 202 answers
	ClaimsPerSec float64          `json:"claims_per_sec"`
	Duplicates   Duplicates       `json:"duplicates"`
	Storms       *Storms          `json:"storms,omitempty"`
	Unexpected   int64            `json:"unexpected"` // answers other than 200/202, and failed requests
	Violations   int64            `json:"violations"` // answers that break exactly-once claims
	Delivery     *Delivery        `json:"delivery,omitempty"`
	Fill         *Fill            `json:"fill,omitempty"`
	CPU          CPU              `json:"cpu_cores"`
	NodeStats    []NodeStat       `json:"node_stats,omitempty"`

	Timeline    []Second `json:"timeline"`
	Percentiles []Point  `json:"percentiles"`
	// Percentiles200 is the curve of duplicates' answers, when there were both kinds.
	Percentiles200 []Point  `json:"percentiles_200,omitempty"`
	Files          []string `json:"files,omitempty"`
}

// Latency summarizes a distribution in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	Min   int64   `json:"min"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	P999  int64   `json:"p99_9"`
	Max   int64   `json:"max"`
}

// Duplicates counts the resends of acked keys (-dup) and how they were answered.
type Duplicates struct {
	Sent        int64 `json:"sent"`
	Answered200 int64 `json:"answered_200"`    // the expected answer
	AnsweredNew int64 `json:"answered_as_new"` // 202 to a resend: a double claim
	Total200    int64 `json:"total_200"`       // every 200, storms included
}

// Storms counts -storm operations.
type Storms struct {
	Count      int64 `json:"count"`
	Copies     int   `json:"copies"`
	Requests   int64 `json:"requests"`
	Violations int64 `json:"violations"` // storms without exactly one 202
}

// Delivery is what the sink saw: each claimed event should arrive once.
type Delivery struct {
	Claimed   int64 `json:"claimed"`   // distinct keys answered 2xx (202 as new, or 200 as held)
	Delivered int64 `json:"delivered"` // distinct claimed keys received
	Pending   int64 `json:"pending"`   // claimed but not received by the end of the drain
	// Unclaimed is the distinct keys received that this run did not claim:
	// a request the node committed though its answer failed (a restart),
	// or another bench process's run. They do not make up for a pending one.
	Unclaimed    int64   `json:"unclaimed,omitempty"`
	Repeated     int64   `json:"repeated"` // deliveries of a key already received
	PerSec       float64 `json:"per_sec"`
	DrainS       float64 `json:"drain_s"`
	Latency      Latency `json:"latency_us"` // send time -> handler received
	Percentiles  []Point `json:"percentiles"`
	NoSendTimeIn int64   `json:"no_send_time,omitempty"`
	// AfterAck is the delivery latency a provider's event sees: from the
	// generator receiving its 202 to the handler receiving it, paired by key.
	AfterAck            Latency `json:"after_ack_us"`
	AfterAckPercentiles []Point `json:"after_ack_percentiles,omitempty"`
	// AfterAckSteady is AfterAck of the deliveries that arrived after the
	// first third of -d: the steady state, without the warm-up.
	AfterAckSteady Latency `json:"after_ack_steady_us"`
	BeforeAck      int64   `json:"before_ack,omitempty"` // delivered before the 202 came back (counted as 1 µs)
	Stale          int64   `json:"stale,omitempty"`      // deliveries of an earlier step's keys
}

// CPU is the CPU used during the load phase, in cores (CPU seconds per second).
type CPU struct {
	Nodes []float64 `json:"nodes,omitempty"`
	Bench float64   `json:"bench"` // this process: generator and sink
	// PerClaimUS is the CPU time of the spawned nodes and this process from
	// the start of the load to the end of the drain, in µs per claim: what one
	// event costs the machine from its signing to its delivery. Set only when
	// nodes were spawned and every claim was delivered, so that it compares
	// across runs whose delivery lagged the load differently.
	PerClaimUS float64 `json:"us_per_claim,omitempty"`
	// PerClaimNodesUS is the nodes' share of PerClaimUS.
	PerClaimNodesUS float64 `json:"nodes_us_per_claim,omitempty"`
	// Machine is the whole machine during the load (/proc/stat), kernel
	// threads and other processes included: the per-process figures above
	// leave out the kernel's own work for them (loopback TCP, block I/O,
	// the journal), which is what decides whether two cores are full.
	Machine *MachineCPU `json:"machine,omitempty"`
}

// MachineCPU is the machine's CPU time during the load, in cores.
type MachineCPU struct {
	Cores  int     `json:"cores"`  // online CPUs
	Busy   float64 `json:"busy"`   // user, system, interrupts and steal
	IOWait float64 `json:"iowait"` // idle with disk I/O outstanding
}

// NodeStat is a spawned node's footprint at the end of the run.
type NodeStat struct {
	ID       string `json:"id"`
	RSSBytes int64  `json:"rss_bytes"`
	// RSSFileBytes is the part of RSSBytes that maps files (RssFile): the
	// engine's and the raft log's memory-mapped bbolt pages, page cache the
	// kernel takes back under memory pressure. The rest is the process's own.
	RSSFileBytes int64 `json:"rss_file_bytes"`
	DataBytes    int64 `json:"data_bytes"`
	// The parts of DataBytes (docs/operations.md, "Durability"): the engine
	// file, the raft log and the raft snapshots.
	EngineBytes   int64 `json:"engine_bytes"`
	LogBytes      int64 `json:"log_bytes"`
	SnapshotBytes int64 `json:"snapshot_bytes"`
	Exited        bool  `json:"exited,omitempty"`
}

// Second is one second of the run, by completion time.
type Second struct {
	T         int   `json:"t"`
	Accepted  int64 `json:"accepted"`  // 202
	Duplicate int64 `json:"duplicate"` // 200
	Other     int64 `json:"other"`     // anything else, failures included
	Delivered int64 `json:"delivered"` // received by the sink in this second

	// Open model and the sink: what a user feels, second by second.
	ClaimP50       int64  `json:"claim_p50_us,omitempty"`    // 202 answers completed in this second
	ClaimP99       int64  `json:"claim_p99_us,omitempty"`    //
	DeliveryP50    int64  `json:"delivery_p50_us,omitempty"` // 202 -> handler, first deliveries received in this second
	DeliveryP99    int64  `json:"delivery_p99_us,omitempty"` //
	FirstDelivered int64  `json:"first_delivered,omitempty"` // keys received for the first time
	Backlog        int64  `json:"backlog,omitempty"`         // claims so far minus keys delivered so far, at the second's end
	MetricBacklog  *int64 `json:"metric_backlog,omitempty"`  // the node's oncehook_backlog scraped in this second
}

// Point is one point of a percentile curve.
type Point struct {
	Percentile float64 `json:"percentile"`
	Micros     int64   `json:"us"`
}

// summarize reads the summary statistics off h.
func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		Min:   h.Min(),
		Mean:  h.Mean(),
		P50:   h.ValueAtQuantile(50),
		P90:   h.ValueAtQuantile(90),
		P99:   h.ValueAtQuantile(99),
		P999:  h.ValueAtQuantile(99.9),
		Max:   h.Max(),
	}
}

// summarizeOrZero is summarize for a histogram that may be absent.
func summarizeOrZero(h *hdrhistogram.Histogram) Latency {
	if h == nil {
		return Latency{}
	}
	return summarize(h)
}

// percentileCurve samples h at ten points per decade of 1/(1-q), from the
// median's left (q = 0) to the last recorded value, as HdrHistogram plots do.
func percentileCurve(h *hdrhistogram.Histogram) []Point {
	n := h.TotalCount()
	if n == 0 {
		return nil
	}
	var pts []Point
	for i := 0; ; i++ {
		q := 1 - math.Pow(10, -float64(i)/10)
		if q >= 1-1/float64(n) || i > 70 {
			break
		}
		pts = append(pts, Point{Percentile: 100 * q, Micros: h.ValueAtQuantile(100 * q)})
	}
	return append(pts, Point{Percentile: 100, Micros: h.Max()})
}

// perSecond divides n by elapsed, 0 for an empty interval.
func perSecond(n int64, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(n) / elapsed.Seconds()
}

// cpuUsage turns two samples into cores used between them.
func cpuUsage(a, b cpuSample) CPU {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return CPU{}
	}
	c := CPU{Bench: round2((b.self - a.self).Seconds() / wall)}
	for i := range b.nodes {
		if i < len(a.nodes) {
			c.Nodes = append(c.Nodes, round2((b.nodes[i]-a.nodes[i]).Seconds()/wall))
		}
	}
	if a.machine.ok && b.machine.ok {
		c.Machine = &MachineCPU{Cores: b.machine.cores,
			Busy:   round2((b.machine.busy - a.machine.busy).Seconds() / wall),
			IOWait: round2((b.machine.iowait - a.machine.iowait).Seconds() / wall)}
	}
	return c
}

// perClaim fills c.PerClaimUS and c.PerClaimNodesUS from the samples at the
// start of the load and at the end of the drain.
func (c *CPU) perClaim(start, end cpuSample, claims int64) {
	if claims <= 0 || len(end.nodes) == 0 || len(start.nodes) != len(end.nodes) {
		return
	}
	var nodes time.Duration
	for i := range end.nodes {
		nodes += end.nodes[i] - start.nodes[i]
	}
	total := nodes + end.self - start.self
	c.PerClaimUS = math.Round(float64(total.Microseconds())/float64(claims)*10) / 10
	c.PerClaimNodesUS = math.Round(float64(nodes.Microseconds())/float64(claims)*10) / 10
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// buildResult does the report's arithmetic on what the load and the drain saw.
func buildResult(o *options, e *env, lr *loadResult, dr *drainResult, cpu CPU) *Result {
	r := lr.rec
	res := &Result{
		Date:           lr.start.UTC().Truncate(time.Second),
		Commit:         readCommit(moduleRoot()),
		GoVersion:      runtime.Version(),
		CPUs:           runtime.NumCPU(),
		Target:         "spawn",
		Nodes:          o.nodes(),
		LeaderOnly:     o.leaderOnly,
		Source:         o.source,
		Provider:       o.provider,
		Model:          "closed",
		Clients:        o.clients,
		DurationS:      o.duration.Seconds(),
		Operations:     o.total,
		BodyBytes:      o.size,
		DupRatio:       o.dup,
		Storm:          o.storm,
		HandlerDelayMs: float64(o.handlerDelay) / float64(time.Millisecond),
		Requests:       r.requests,
		NewKeys:        r.newSent + r.storms,
		Missed:         lr.missed,
		ElapsedS:       lr.elapsed.Seconds(),
		Rate:           perSecond(r.requests, lr.elapsed),
		Throughput:     perSecond(r.accepted+r.duplicates, lr.elapsed),
		StatusCodes:    map[string]int64{},
		Errors:         r.errs,
		Latency:        summarize(lr.lat),
		Latency202:     summarizeOrZero(lr.lat202),
		Latency200:     summarizeOrZero(lr.lat200),
		Claims:         r.accepted,
		ClaimsPerSec:   perSecond(r.accepted, lr.elapsed),
		Duplicates:     Duplicates{Sent: r.dupSent, Answered200: r.dupOK, AnsweredNew: r.dupAsNew, Total200: r.duplicates},
		Unexpected:     r.requests - r.accepted - r.duplicates,
		Violations:     r.dupAsNew + r.newAsDup + r.stormBad,
		CPU:            cpu,
		Timeline:       slices.Clone(r.perSec),
		Percentiles:    percentileCurve(lr.lat),
		RequestedRate:  o.rate,
	}
	if o.rate > 0 {
		res.Model = "open"
	}
	if res.Latency200.Count > 0 && res.Latency202.Count > 0 {
		res.Percentiles200 = percentileCurve(lr.lat200)
	}
	if o.spawn == 0 {
		res.Target = strings.Join(o.targets, ",")
	}
	for c, n := range r.codes {
		res.StatusCodes[strconv.Itoa(c)] = n
	}
	if r.failed > 0 {
		res.StatusCodes["error"] = r.failed
	}
	if o.storm > 1 {
		res.Storms = &Storms{Count: r.storms, Copies: o.storm, Requests: r.stormSent, Violations: r.stormBad}
	}
	at := func(i int) *Second {
		for len(res.Timeline) <= i {
			res.Timeline = append(res.Timeline, Second{T: len(res.Timeline)})
		}
		return &res.Timeline[i]
	}
	for i, l := range lr.claimPerSec {
		at(i).ClaimP50, at(i).ClaimP99 = l.P50, l.P99
	}
	if dr != nil {
		res.Delivery = deliveryOf(lr.elapsed, dr)
		for i, n := range dr.snap.perSec {
			at(i).Delivered = n
		}
		for i, n := range dr.snap.perSecNew {
			at(i).FirstDelivered = n
		}
		if lr.match != nil {
			all, steady, perSec, before := lr.match.snapshot()
			res.Delivery.AfterAck = summarize(all)
			res.Delivery.AfterAckSteady = steady
			res.Delivery.AfterAckPercentiles = percentileCurve(all)
			res.Delivery.BeforeAck = before
			for i, l := range perSec {
				at(i).DeliveryP50, at(i).DeliveryP99 = l.P50, l.P99
			}
		}
		for sec, v := range dr.metric {
			at(sec).MetricBacklog = &v
		}
		// Filled even when nothing arrived: a backlog that only grows is
		// what a source forwarding elsewhere looks like.
		fillBacklog(res.Timeline)
	}
	if e != nil {
		res.NodeStats = e.nodeStats()
	}
	return res
}

// deliveryOf counts the keys claimed and received from the run's ledger
// (keyLedger): a key received that the run did not claim is Unclaimed, not
// a delivery of a claimed one.
func deliveryOf(elapsed time.Duration, dr *drainResult) *Delivery {
	s := dr.snap
	return &Delivery{
		Claimed:      s.claimed,
		Delivered:    s.delivered,
		Pending:      s.pending(),
		Unclaimed:    max(0, s.unique-s.delivered),
		Repeated:     s.repeats,
		PerSec:       perSecond(s.delivered, elapsed+dr.waited),
		DrainS:       dr.waited.Seconds(),
		Latency:      summarize(s.lat),
		Percentiles:  percentileCurve(s.lat),
		NoSendTimeIn: s.noSentNs,
		Stale:        s.stale,
	}
}

// fillBacklog sets each second's Backlog: the claims (202 answers) completed
// up to its end minus the keys first delivered up to its end.
func fillBacklog(tl []Second) {
	var claimed, delivered int64
	for i := range tl {
		claimed += tl[i].Accepted
		delivered += tl[i].FirstDelivered
		tl[i].Backlog = claimed - delivered
	}
}

// writeReport prints res as text (like vegeta's report) or as JSON.
func writeReport(o *options, res *Result, w io.Writer) error {
	if o.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	_, err := io.WriteString(w, formatText(res))
	return err
}

// formatText renders the text report.
func formatText(res *Result) string {
	var b strings.Builder
	line := func(label, fields, values string) {
		fmt.Fprintf(&b, "%-13s %-40s %s\n", label, fields, values)
	}
	target := fmt.Sprintf("%d node(s) spawned", res.Nodes)
	if res.LeaderOnly {
		target += ", every request to the leader"
	}
	if res.Target != "spawn" {
		target = res.Target
	}
	fmt.Fprintf(&b, "%-13s %s, source %s, provider %s, commit %s, %d CPUs\n", "Target", target, res.Source, res.Provider, res.Commit, res.CPUs)
	fmt.Fprintf(&b, "%-13s %s, body %d B, dup %g, storm %d\n", "Load", loadLabel(res), res.BodyBytes, res.DupRatio, res.Storm)
	if res.HandlerDelayMs > 0 {
		fmt.Fprintf(&b, "%-13s the sink answers each delivery %g ms after it arrived (-handler-delay)\n", "Handler", res.HandlerDelayMs)
	}
	if res.NeighbourEvents > 0 {
		fmt.Fprintf(&b, "%-13s %d events of source %s, whose handler answers after %g ms, sent before the load; %d delivered by the end\n",
			"Neighbour", res.NeighbourEvents, neighbourSource, res.NeighbourDelayMs, res.NeighbourDelivered)
	}
	if res.Model == "open" {
		line("Requests", "[total, requested, rate, throughput]",
			fmt.Sprintf("%d, %.2f/s, %.2f/s, %.2f/s", res.Requests, res.RequestedRate, res.Rate, res.Throughput))
	} else {
		line("Requests", "[total, rate, throughput]", fmt.Sprintf("%d, %.2f/s, %.2f/s", res.Requests, res.Rate, res.Throughput))
	}
	line("Duration", "[load]", fmtSeconds(res.ElapsedS))
	line("Latencies", "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(res.Latency))
	if res.Latency200.Count > 0 && res.Latency202.Count > 0 {
		line("  of 202", "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(res.Latency202))
		line("  of 200", "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(res.Latency200))
	}
	line("Status Codes", "[code:count]", fmtCodes(res.StatusCodes))
	line("Claims", "[202 answers, per second]", fmt.Sprintf("%d, %.2f/s", res.Claims, res.ClaimsPerSec))
	d := res.Duplicates
	line("Duplicates", "[resent, answered 200, answered 202]", fmt.Sprintf("%d, %d, %d", d.Sent, d.Answered200, d.AnsweredNew))
	if s := res.Storms; s != nil {
		line("Storms", "[storms, copies, requests, violations]", fmt.Sprintf("%d, %d, %d, %d", s.Count, s.Copies, s.Requests, s.Violations))
	}
	line("Unexpected", "[not 200/202, exactly-once violations]", fmt.Sprintf("%d, %d", res.Unexpected, res.Violations))
	if res.Missed > 0 {
		line("Missed", "[due, never sent]", fmt.Sprintf("%d (the generator could not keep the rate: raise -c)", res.Missed))
	}
	if dl := res.Delivery; dl != nil {
		line("Delivery", "[delivered/claimed, repeated, rate]",
			fmt.Sprintf("%d/%d, %d, %.2f/s (drain %s%s)", dl.Delivered, dl.Claimed, dl.Repeated, dl.PerSec, fmtSeconds(dl.DrainS), pendingNote(dl)))
		line("Delivery lat", "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(dl.Latency))
		if dl.AfterAck.Count > 0 {
			after := fmtLatency(dl.AfterAck)
			if dl.BeforeAck > 0 {
				// A delivery can reach the handler before its 202 reaches the
				// generator; those count as 1µs here: say how many.
				after += fmt.Sprintf(" (%d of %d arrived before the 2xx, counted as 1µs)", dl.BeforeAck, dl.AfterAck.Count)
			}
			line("  after 2xx", "[min, mean, 50, 90, 99, 99.9, max]", after)
			if dl.AfterAckSteady.Count > 0 && dl.AfterAckSteady.Count < dl.AfterAck.Count {
				line("  steady", "[after the first third of -d]", fmtLatency(dl.AfterAckSteady))
			}
		}
	}
	line("CPU cores", "[nodes..., bench]", fmtCPU(res.CPU))
	for _, n := range res.NodeStats {
		exited := ""
		if n.Exited {
			exited = " (EXITED during the run)"
		}
		line("Node "+n.ID, "[RSS, data dir]", fmt.Sprintf("%.1f MiB, %.1f MiB%s", mib(n.RSSBytes), mib(n.DataBytes), exited))
	}
	if len(res.Errors) > 0 {
		b.WriteString("Error Set:\n")
		for _, k := range sortedKeys(res.Errors) {
			fmt.Fprintf(&b, "  %d × %s\n", res.Errors[k], k)
		}
	}
	if res.Model == "open" {
		b.WriteString(formatTimeline(res.Timeline))
	}
	if res.Fill != nil {
		b.WriteString(formatFill(res.Fill))
	}
	for _, f := range res.Files {
		line("File", "", f)
	}
	return b.String()
}

// formatTimeline renders the run second by second: claims and their latency,
// deliveries and their latency after the 2xx, and the backlog (computed, and
// the node's metric when scraped). Empty when no second has a claim latency.
func formatTimeline(tl []Second) string {
	has := false
	for _, s := range tl {
		has = has || s.ClaimP99 > 0
	}
	if !has {
		return ""
	}
	var b strings.Builder
	b.WriteString("Per second (claims by answer time; deliveries by arrival; latency after the 202):\n")
	fmt.Fprintf(&b, "  %4s %9s %9s %9s %11s %9s %9s %9s %9s\n",
		"t", "claims", "claim50", "claim99", "delivered", "deliv50", "deliv99", "backlog", "metric")
	lat := func(us int64) string {
		if us == 0 {
			return "-"
		}
		return fmtMicros(float64(us))
	}
	for _, s := range tl {
		metric := "-"
		if s.MetricBacklog != nil {
			metric = strconv.FormatInt(*s.MetricBacklog, 10)
		}
		fmt.Fprintf(&b, "  %4d %9d %9s %9s %11d %9s %9s %9d %9s\n",
			s.T, s.Accepted, lat(s.ClaimP50), lat(s.ClaimP99), s.FirstDelivered,
			lat(s.DeliveryP50), lat(s.DeliveryP99), s.Backlog, metric)
	}
	return b.String()
}

func pendingNote(d *Delivery) string {
	var s string
	switch {
	case d.Pending > 0 && d.Delivered == 0 && d.Unclaimed == 0:
		// Not one arrived: rather the source forwards elsewhere than a
		// drain too short.
		s = fmt.Sprintf("; none of the %d claims reached the sink: check that the source's forward URL is the sink's address (-sink), then raise -drain for a slow handler", d.Pending)
	case d.Pending > 0:
		s = fmt.Sprintf("; %d claimed but not delivered when it ended: raise -drain", d.Pending)
	}
	if d.Unclaimed > 0 {
		s += fmt.Sprintf("; %d keys received that this run did not claim", d.Unclaimed)
	}
	return s
}

func loadLabel(res *Result) string {
	var bound []string
	if res.DurationS > 0 {
		bound = append(bound, "-d "+fmtSeconds(res.DurationS))
	}
	if res.Operations > 0 {
		bound = append(bound, fmt.Sprintf("-n %d", res.Operations))
	}
	if res.Model == "open" {
		return fmt.Sprintf("open model at %g/s, at most %d in flight, %s", res.RequestedRate, res.Clients, strings.Join(bound, " "))
	}
	return fmt.Sprintf("closed model, %d clients, %s", res.Clients, strings.Join(bound, " "))
}

func fmtLatency(l Latency) string {
	if l.Count == 0 {
		return "-"
	}
	us := func(v int64) string { return fmtMicros(float64(v)) }
	return strings.Join([]string{us(l.Min), fmtMicros(l.Mean), us(l.P50), us(l.P90), us(l.P99), us(l.P999), us(l.Max)}, ", ")
}

// fmtMicros prints a µs value as a Go duration with at most 4 significant
// digits: 87µs, 1.234ms, 12.35ms, 1.5s.
func fmtMicros(us float64) string {
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d >= 10*time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= 100*time.Millisecond:
		d = d.Round(100 * time.Microsecond)
	case d >= 10*time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

func fmtSeconds(s float64) string { return fmtMicros(s * 1e6) }

func fmtCodes(codes map[string]int64) string {
	var parts []string
	for _, k := range sortedKeys(codes) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, codes[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func fmtCPU(c CPU) string {
	var parts []string
	for _, v := range c.Nodes {
		parts = append(parts, fmt.Sprintf("%.2f", v))
	}
	parts = append(parts, fmt.Sprintf("%.2f", c.Bench))
	out := strings.Join(parts, ", ")
	if c.PerClaimUS > 0 {
		out += fmt.Sprintf("; load+drain: %.0f µs CPU per claim (nodes %.0f)", c.PerClaimUS, c.PerClaimNodesUS)
	}
	if m := c.Machine; m != nil {
		out += fmt.Sprintf("; machine: %.2f of %d busy, %.2f iowait", m.Busy, m.Cores, m.IOWait)
	}
	return out
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// resultPaths names the run's files: <date>-<commit>-<nodes>n-<model>.{json,png}.
func resultPaths(o *options, res *Result) (jsonPath, pngPath string) {
	name := fmt.Sprintf("%s-%s-%dn-%s", res.Date.Format("20060102-150405"), res.Commit, res.Nodes, o.model())
	if o.dup > 0 {
		name += fmt.Sprintf("-dup%g", o.dup)
	}
	if o.storm > 1 {
		name += fmt.Sprintf("-storm%d", o.storm)
	}
	if o.fill > 0 {
		name += fmt.Sprintf("-fill%d", o.fill)
	}
	if o.neighbour > 0 {
		name += fmt.Sprintf("-neighbour%d", o.neighbour)
	}
	base := filepath.Join(o.out, name)
	return base + ".json", base + ".png"
}

// writeFiles writes the JSON result and the PNG plot named in res.Files.
func writeFiles(res *Result) error {
	if len(res.Files) != 2 {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(res.Files[0]), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(res.Files[0], append(b, '\n'), 0o644); err != nil {
		return err
	}
	return writePlot(res, res.Files[1])
}

// replot redraws the PNG beside a saved JSON result.
func replot(jsonPath string) error {
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	png := strings.TrimSuffix(jsonPath, ".json") + ".png"
	var sr Sustain // a -sustain search has steps; a run has none
	if err := json.Unmarshal(b, &sr); err == nil && len(sr.Steps) > 0 {
		return writeSustainPlot(&sr, png)
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	return writePlot(&res, png)
}

// readCommit returns the short commit of HEAD by reading .git under root (no
// git process), or "nogit".
func readCommit(root string) string {
	gitDir, commonDir := gitDirs(root)
	head, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return "nogit"
	}
	h := strings.TrimSpace(string(head))
	if ref, ok := strings.CutPrefix(h, "ref: "); ok {
		h = ""
		if b, err := os.ReadFile(filepath.Join(commonDir, filepath.FromSlash(ref))); err == nil {
			h = strings.TrimSpace(string(b))
		} else if packed, err := os.ReadFile(filepath.Join(commonDir, "packed-refs")); err == nil {
			for l := range strings.SplitSeq(string(packed), "\n") {
				if hash, name, ok := strings.Cut(strings.TrimSpace(l), " "); ok && name == ref {
					h = hash
				}
			}
		}
	}
	if len(h) < 7 {
		return "nogit"
	}
	return h[:7]
}

// gitDirs returns the git dir of the checkout at root, where HEAD is, and
// the common dir, where branches are: both root/.git in a plain checkout; in
// a linked worktree, .git is a file naming the worktree's git dir, whose
// commondir file names the repository's.
func gitDirs(root string) (gitDir, commonDir string) {
	gitDir = filepath.Join(root, ".git")
	b, err := os.ReadFile(gitDir)
	if err != nil {
		return gitDir, gitDir // a directory, or nothing
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return gitDir, gitDir
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	commonDir = dir
	if c, err := os.ReadFile(filepath.Join(dir, "commondir")); err == nil {
		commonDir = strings.TrimSpace(string(c))
		if !filepath.IsAbs(commonDir) {
			commonDir = filepath.Join(dir, commonDir)
		}
	}
	return dir, commonDir
}

// progress draws a one-line bar on a terminal; a no-op otherwise.
type progress struct {
	stopc chan struct{}
	done  chan struct{}
}

func startProgress(o *options, stderr io.Writer, g *generator) *progress {
	p := &progress{}
	f, ok := stderr.(*os.File)
	if o.quiet || !ok || !isatty.IsTerminal(f.Fd()) {
		return p
	}
	p.stopc, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				fmt.Fprint(f, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprint(f, "\r"+progressLine(o, g)+"\033[K")
			}
		}
	}()
	return p
}

func (p *progress) stop() {
	if p.stopc != nil {
		close(p.stopc)
		<-p.done
	}
}

// progressLine is "  42% [========>           ]  4.2s  104,023 req  24,767/s".
func progressLine(o *options, g *generator) string {
	el := time.Since(g.start)
	var frac float64
	switch {
	case o.total > 0 && o.duration > 0:
		frac = max(float64(g.started.Load())/float64(o.total), el.Seconds()/o.duration.Seconds())
	case o.total > 0:
		frac = float64(g.started.Load()) / float64(o.total)
	default:
		frac = el.Seconds() / o.duration.Seconds()
	}
	frac = min(max(frac, 0), 1)
	const width = 30
	fill := int(frac * width)
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill < width {
		bar = strings.Repeat("=", fill) + ">" + strings.Repeat(" ", width-fill-1)
	}
	n := g.done.Load()
	return fmt.Sprintf("%4.0f%% [%s] %6.1fs %10d req %9.0f/s", 100*frac, bar, el.Seconds(), n, perSecond(n, el))
}
