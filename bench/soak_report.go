package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SoakVerdict is the soak's outcome: Pass, or the reasons it failed.
type SoakVerdict struct {
	Pass     bool          `json:"pass"`
	Reasons  []string      `json:"reasons,omitempty"`
	Growth   []GrowthCheck `json:"growth"`
	Claim    Drift         `json:"claim_p99_drift"`
	Delivery Drift         `json:"delivery_p99_drift"`
}

// GrowthCheck is the growth rule applied to one node's metric over one
// segment: a stretch of samples of one process lifetime (Life) in one role
// (a leader runs the forwarder: more goroutines, fds and memory than a
// follower); Life -1 is the whole run, for the data dir.
type GrowthCheck struct {
	Node   string `json:"node"`
	Metric string `json:"metric"` // rss, fds, goroutines, data
	Life   int    `json:"life"`
	Role   string `json:"role,omitempty"` // leader or follower during the segment
	Growth Growth `json:"growth"`
}

// judgeSoak applies the growth and drift rules (soak_verdict.go), and fails
// the soak as well on what no soak may show: an exactly-once violation, a
// claim not delivered by the end of the drain, a leader change that did not
// complete (no new leader, the node not ready again, a node that had to be
// killed).
func judgeSoak(sr *Soak) SoakVerdict {
	var v SoakVerdict
	perLife := map[string]func(NodeSample) (float64, bool){
		"rss":        func(n NodeSample) (float64, bool) { return float64(n.RSSBytes), true },
		"fds":        func(n NodeSample) (float64, bool) { return float64(n.FDs), true },
		"goroutines": func(n NodeSample) (float64, bool) { return float64(n.Goroutines), n.Goroutines >= 0 },
	}
	for ni := 0; ni < sr.Nodes; ni++ {
		id := nodeName(sr, ni)
		var data []sample
		var seg map[string][]sample
		segLife, segRole := -1, ""
		flush := func() {
			for _, name := range []string{"rss", "fds", "goroutines"} {
				if s := seg[name]; len(s) > 0 {
					v.Growth = append(v.Growth, GrowthCheck{Node: id, Metric: name, Life: segLife, Role: segRole, Growth: growth(s, growthFloors[name])})
				}
			}
			seg = map[string][]sample{}
		}
		for _, s := range sr.Samples {
			if ni >= len(s.Nodes) {
				continue
			}
			n := s.Nodes[ni]
			data = append(data, sample{T: s.T, V: float64(n.DataBytes)})
			if !n.Up {
				continue
			}
			role := "follower"
			if s.Leader == n.ID {
				role = "leader"
			} else if s.Leader == "" {
				role = segRole // no leader known in this sample: keep the segment
			}
			if n.Life != segLife || role != segRole {
				flush()
				segLife, segRole = n.Life, role
			}
			for name, get := range perLife {
				if x, ok := get(n); ok {
					seg[name] = append(seg[name], sample{T: s.T, V: x})
				}
			}
		}
		flush()
		v.Growth = append(v.Growth, GrowthCheck{Node: id, Metric: "data", Life: -1, Growth: growth(data, growthFloors["data"])})
	}
	for _, c := range v.Growth {
		if c.Growth.Grows {
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s %s%s grows: %s", c.Node, c.Metric, segLabel(c), c.Growth.Reason))
		}
	}
	var claim, deliv []sample
	for _, iv := range sr.Intervals {
		if iv.ClaimP99 > 0 {
			claim = append(claim, sample{T: iv.To, V: float64(iv.ClaimP99)})
		}
		if iv.DeliveryP99 > 0 {
			deliv = append(deliv, sample{T: iv.To, V: float64(iv.DeliveryP99)})
		}
	}
	v.Claim, v.Delivery = drift(claim), drift(deliv)
	if v.Claim.Drifted {
		v.Reasons = append(v.Reasons, "claim p99 drifts: "+v.Claim.Reason)
	}
	if v.Delivery.Drifted {
		v.Reasons = append(v.Reasons, "delivery p99 drifts: "+v.Delivery.Reason)
	}
	if r := sr.Result; r != nil {
		if r.Violations > 0 {
			v.Reasons = append(v.Reasons, fmt.Sprintf("%d exactly-once violations", r.Violations))
		}
		if r.Delivery != nil && r.Delivery.Pending > 0 {
			v.Reasons = append(v.Reasons, fmt.Sprintf("%d claims not delivered by the end of the drain (%s)", r.Delivery.Pending, fmtSeconds(r.Delivery.DrainS)))
		}
	}
	for _, tr := range sr.Transfers {
		if tr.Err != "" {
			v.Reasons = append(v.Reasons, fmt.Sprintf("leader change at %.0fs: %s", tr.AtS, tr.Err))
		}
	}
	v.Pass = len(v.Reasons) == 0
	return v
}

func segLabel(c GrowthCheck) string {
	if c.Life < 0 {
		return ""
	}
	return fmt.Sprintf(" (process %d, %s %.0f..%.0f s)", c.Life+1, c.Role, c.Growth.From, c.Growth.To)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeSoakFiles writes soak.json, soak.csv, the plots and summary.md into sr.Dir.
func writeSoakFiles(sr *Soak) error {
	if err := os.MkdirAll(sr.Dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sr, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(sr.Dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeSoakCSV(sr, filepath.Join(sr.Dir, "soak.csv")); err != nil {
		return err
	}
	if err := writeSoakPlots(sr, filepath.Join(sr.Dir, "resources.svg"), filepath.Join(sr.Dir, "latency.svg")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(sr.Dir, "summary.md"), []byte(soakMarkdown(sr)), 0o644)
}

// writeSoakCSV writes one row per sample: the interval that ended with it,
// the leader's backlog, and each node's footprint (empty while it restarts).
func writeSoakCSV(sr *Soak, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t_s", "claims", "other", "claim_p50_ms", "claim_p99_ms", "delivered", "delivery_p50_ms", "delivery_p99_ms",
		"backlog_bench", "backlog_node", "events", "leader", "leader_change"}
	for ni := 0; ni < sr.Nodes; ni++ {
		id := nodeName(sr, ni)
		head = append(head, id+"_process", id+"_rss_mib", id+"_fds", id+"_goroutines", id+"_data_mib")
	}
	_ = w.Write(head)
	ms := func(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 3, 64) }
	opt := func(p *int64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatInt(*p, 10)
	}
	for i, s := range sr.Samples {
		var iv Interval
		if i < len(sr.Intervals) {
			iv = sr.Intervals[i]
		}
		row := []string{strconv.FormatFloat(s.T, 'f', 1, 64), strconv.FormatInt(iv.Claims, 10), strconv.FormatInt(iv.Other, 10),
			ms(iv.ClaimP50), ms(iv.ClaimP99), strconv.FormatInt(iv.Delivered, 10), ms(iv.DeliveryP50), ms(iv.DeliveryP99),
			strconv.FormatInt(iv.Backlog, 10), opt(s.Backlog), opt(s.Events), s.Leader, strconv.FormatBool(iv.Transfer)}
		for _, n := range s.Nodes {
			if !n.Up {
				row = append(row, strconv.Itoa(n.Life+1), "", "", "", fmt.Sprintf("%.2f", mib(n.DataBytes)))
				continue
			}
			row = append(row, strconv.Itoa(n.Life+1), fmt.Sprintf("%.1f", mib(n.RSSBytes)), strconv.Itoa(n.FDs),
				strconv.Itoa(n.Goroutines), fmt.Sprintf("%.2f", mib(n.DataBytes)))
		}
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// soakMarkdown is summary.md, also printed at the end of the run.
func soakMarkdown(sr *Soak) string {
	var b strings.Builder
	v := sr.Verdict
	verdict := "PASS"
	if !v.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# Soak %s, commit %s: %s\n\n", sr.Date.Format("2006-01-02 15:04 UTC"), sr.Commit, verdict)
	for _, r := range v.Reasons {
		fmt.Fprintf(&b, "- %s\n", r)
	}
	if len(v.Reasons) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%d nodes (failpoints build), open model at %g/s for %s, %d B bodies, at most %d requests in flight; "+
		"source retention %s, retention buckets %s wide ended every %s (ONCEHOOK_TEST_BUCKET_WIDTH, ONCEHOOK_TEST_EXPIRE_INTERVAL); "+
		"raft snapshots at the node's thresholds; a leader change (SIGTERM to the leader, restart) every %s; a sample every %s. "+
		"The machine was shared with other work: latencies are indicative.\n\n",
		sr.Nodes, sr.Rate, fmtSeconds(sr.DurationS), sr.BodyBytes, sr.Clients, sr.Retention, sr.BucketWidth, sr.ExpireInterval,
		orNoneS(sr.TransferS), fmtSeconds(sr.SampleS))

	if r := sr.Result; r != nil {
		b.WriteString("## Load\n\n")
		fmt.Fprintf(&b, "| claims (202) | claims/s | unexpected answers | missed | claim p99 (whole run) |")
		d := r.Delivery
		if d != nil {
			b.WriteString(" delivered | pending after drain | repeated deliveries | delivery p99 after the 202 (whole run) |")
		}
		b.WriteString("\n|---|---|---|---|---|")
		if d != nil {
			b.WriteString("---|---|---|---|")
		}
		fmt.Fprintf(&b, "\n| %d | %.1f | %d | %d | %s |", r.Claims, r.ClaimsPerSec, r.Unexpected, r.Missed, fmtMicros(float64(r.Latency202.P99)))
		if d != nil {
			fmt.Fprintf(&b, " %d | %d | %d | %s |", d.Delivered, d.Pending, d.Repeated, fmtMicros(float64(d.AfterAck.P99)))
		}
		b.WriteString("\n\n")
		if len(r.Errors) > 0 {
			b.WriteString("Unexpected answers by class (requests that reached a node while it restarted fail by design):")
			for _, k := range sortedKeys(r.Errors) {
				fmt.Fprintf(&b, " %s: %d;", k, r.Errors[k])
			}
			b.WriteString("\n\n")
		}
	}

	b.WriteString("## Footprint (growth rule: docs/reliability.md, \"Soak\")\n\n")
	b.WriteString("| node | metric | process, role | from..to | samples | first | last | 2nd-quarter median | last-quarter median | 2nd-half trend over the span | grows |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range v.Growth {
		g := c.Growth
		f := metricFormat(c.Metric)
		grows := "no"
		switch {
		case !g.Judged:
			grows = "not judged (too few samples)"
		case g.Grows:
			grows = "**yes**"
		}
		proc := "all"
		if c.Life >= 0 {
			proc = fmt.Sprintf("%d, %s", c.Life+1, c.Role)
		}
		q2, q4, trend := "-", "-", "-"
		if g.Judged {
			q2, q4, trend = f(g.Q2), f(g.Q4), signed(f, g.Projected)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f..%.0f s | %d | %s | %s | %s | %s | %s | %s |\n", c.Node, c.Metric, proc, g.From, g.To, g.Samples,
			f(g.First), f(g.Last), q2, q4, trend, grows)
	}
	b.WriteString("\n## Latency per interval (drift rule: median of the interval p99s, last quarter against the second)\n\n")
	b.WriteString("| | 2nd-quarter median p99 | last-quarter median p99 | drifts |\n|---|---|---|---|\n")
	for _, x := range []struct {
		name string
		d    Drift
	}{{"claim (send -> 202)", v.Claim}, {"delivery (202 -> handler)", v.Delivery}} {
		dr := "no"
		switch {
		case !x.d.Judged:
			dr = "not judged"
		case x.d.Drifted:
			dr = "**yes**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.name, fmtMicros(x.d.Q2), fmtMicros(x.d.Q4), dr)
	}

	b.WriteString("\n## Leader changes\n\n")
	if len(sr.Transfers) == 0 {
		b.WriteString("None.\n")
	} else {
		b.WriteString("| at | from | to | stopped after | new leader after | restarted node ready after | problem |\n|---|---|---|---|---|---|---|\n")
		for _, tr := range sr.Transfers {
			fmt.Fprintf(&b, "| %.0f s | %s | %s | %.1f s | %.1f s | %.1f s | %s |\n", tr.AtS, tr.From, dash(tr.To), tr.StopS, tr.ElectedS, tr.ReadyS, dash(tr.Err))
		}
	}
	b.WriteString("\n## Churn\n\n")
	var snaps []string
	for i, n := range sr.Snapshots {
		snaps = append(snaps, fmt.Sprintf("%s %d", nodeName(sr, i), n))
	}
	fmt.Fprintf(&b, "Raft snapshots seen in the data dirs (at least; a node keeps one, sampled every %s): %s.\n", fmtSeconds(sr.SampleS), strings.Join(snaps, ", "))
	var lo, hi int64 = -1, 0
	for _, s := range sr.Samples[len(sr.Samples)/2:] {
		if s.Events != nil {
			if lo < 0 || *s.Events < lo {
				lo = *s.Events
			}
			hi = max(hi, *s.Events)
		}
	}
	if lo >= 0 {
		fmt.Fprintf(&b, "Events retained by the leader over the second half: %d to %d (keys expire %s after their claim).\n", lo, hi, sr.Retention)
	}
	if sr.Dir != "" {
		b.WriteString("\nFiles: soak.csv (a row per sample), soak.json, resources.svg, latency.svg.\n")
	}
	return b.String()
}

func orNoneS(s float64) string {
	if s <= 0 {
		return "(none)"
	}
	return fmtSeconds(s)
}

// metricFormat renders a metric's values: MiB for bytes, whole numbers else.
func metricFormat(metric string) func(float64) string {
	if metric == "rss" || metric == "data" {
		return func(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
	}
	return func(v float64) string { return fmt.Sprintf("%.0f", v) }
}

func signed(f func(float64) string, v float64) string {
	if v >= 0 {
		return "+" + f(v)
	}
	return f(v)
}
