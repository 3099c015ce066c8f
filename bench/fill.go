package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// -fill N sends N new small events through one spawned node (closed model,
// -c clients, 256 B bodies unless -size) and reports what the retained state
// costs: the node's RSS and data dir per retained key, and whether claims get
// slower as the keys pile up (claim p99 of the last window against the
// first). With -payload-retention the source drops delivered events'
// payloads after that delay, so what stays is the key. Progress is printed
// every fillEvery; the run is bounded by N, or by -d when given.

// fillEvery is how often -fill samples the node and prints progress.
const fillEvery = 5 * time.Second

// fillWindow is the size of the first and last windows whose claim latency
// -fill compares: 100,000 operations, or a tenth of a smaller fill.
func fillWindow(n int64) int64 { return min(100_000, max(1, n/10)) }

// Fill is the retained-state part of a -fill result.
type Fill struct {
	Events           int64   `json:"events"` // -fill
	Claims           int64   `json:"claims"`
	PayloadRetention string  `json:"payload_retention,omitempty"`
	Window           int64   `json:"window"`          // operations in each compared window
	First            Latency `json:"first_window_us"` // claim latency of the first window
	Last             Latency `json:"last_window_us"`  // and of the last
	// P99Growth is the last window's claim p99 over the first's: about 1
	// when retained keys cost nothing per claim.
	P99Growth float64 `json:"p99_growth,omitempty"`
	RSSBytes  int64   `json:"rss_bytes"` // the node after the drain
	// RSSFileBytes is the part of RSSBytes that maps files (NodeStat).
	RSSFileBytes int64 `json:"rss_file_bytes"`
	DataBytes    int64 `json:"data_bytes"` // its data dir (bbolt files, raft log, snapshots)
	// The parts of DataBytes: the engine file, the raft log, the snapshots.
	EngineBytes   int64   `json:"engine_bytes"`
	LogBytes      int64   `json:"log_bytes"`
	SnapshotBytes int64   `json:"snapshot_bytes"`
	DataPerKey    float64 `json:"data_bytes_per_key"`
	RSSPerKey     float64 `json:"rss_bytes_per_key"`
	TenMillionS   float64 `json:"ten_million_s"` // how long 10,000,000 events take at this run's claims/s
	Stopped       string  `json:"stopped,omitempty"`

	Points []FillPoint `json:"points"`
}

// FillPoint is one sample of the node during a fill.
type FillPoint struct {
	T         float64 `json:"t_s"`
	Sent      int64   `json:"sent"` // requests answered so far
	RSSBytes  int64   `json:"rss_bytes"`
	DataBytes int64   `json:"data_bytes"`
	Rate      float64 `json:"rate"`         // answers per second since the previous point
	ClaimP99  int64   `json:"claim_p99_us"` // of the 202s since the previous point
}

// fillProgress samples the node every fillEvery while the fill runs.
type fillProgress struct {
	o *options
	e *env
	g *generator
	w io.Writer // nil: quiet

	stopc, done chan struct{}
	mu          sync.Mutex // guards points
	points      []FillPoint
}

func startFillProgress(o *options, e *env, g *generator, stderr io.Writer) *fillProgress {
	p := &fillProgress{o: o, e: e, g: g, stopc: make(chan struct{}), done: make(chan struct{})}
	if !o.quiet {
		p.w = stderr
		fmt.Fprintf(stderr, "fill: %d events of %d B, %d clients; progress every %s\n", o.fill, o.size, o.clients, fillEvery)
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(fillEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-t.C:
			}
			pt := p.sample()
			if p.w != nil {
				fmt.Fprintln(p.w, fillLine(pt, o.fill))
			}
		}
	}()
	return p
}

// sample reads the node's footprint and the claim latency since the last sample.
func (p *fillProgress) sample() FillPoint {
	pt := FillPoint{T: time.Since(p.g.start).Seconds(), Sent: p.g.done.Load(), ClaimP99: p.g.lat.interval().P99}
	if st := p.e.nodeStats(); len(st) > 0 {
		pt.RSSBytes, pt.DataBytes = st[0].RSSBytes, st[0].DataBytes
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := FillPoint{}
	if n := len(p.points); n > 0 {
		prev = p.points[n-1]
	}
	if dt := pt.T - prev.T; dt > 0 {
		pt.Rate = float64(pt.Sent-prev.Sent) / dt
	}
	p.points = append(p.points, pt)
	return pt
}

// fillLine is one progress line.
func fillLine(pt FillPoint, total int64) string {
	eta := "-"
	if pt.Sent >= total {
		eta = "0s (draining)"
	} else if pt.Rate > 0 {
		eta = (time.Duration(float64(total-pt.Sent)/pt.Rate) * time.Second).Round(time.Second).String()
	}
	perKey := 0.0
	if pt.Sent > 0 {
		perKey = float64(pt.DataBytes) / float64(pt.Sent)
	}
	return fmt.Sprintf("fill: %5.1f%% %d/%d  %.0f/s  claim p99 %s  node RSS %.1f MiB  data %.1f MiB (%.0f B/key)  ETA %s",
		100*float64(pt.Sent)/float64(total), pt.Sent, total, pt.Rate, fmtMicros(float64(pt.ClaimP99)),
		mib(pt.RSSBytes), mib(pt.DataBytes), perKey, eta)
}

// finish stops sampling and builds the fill report from the run's result
// (whose node stats were read after the drain).
func (p *fillProgress) finish(lr *loadResult, res *Result) *Fill {
	close(p.stopc)
	<-p.done
	p.sample()
	f := &Fill{
		Events: p.o.fill, Claims: res.Claims, PayloadRetention: p.o.payloadRetention,
		Window: fillWindow(p.o.fill), First: lr.first, Last: lr.last, Points: p.points,
	}
	if f.First.P99 > 0 && f.Last.Count > 0 {
		f.P99Growth = round2(float64(f.Last.P99) / float64(f.First.P99))
	}
	if len(res.NodeStats) > 0 {
		f.RSSBytes, f.DataBytes = res.NodeStats[0].RSSBytes, res.NodeStats[0].DataBytes
		f.RSSFileBytes = res.NodeStats[0].RSSFileBytes
		f.EngineBytes, f.LogBytes, f.SnapshotBytes = res.NodeStats[0].EngineBytes, res.NodeStats[0].LogBytes, res.NodeStats[0].SnapshotBytes
	}
	if f.Claims > 0 {
		f.DataPerKey = float64(f.DataBytes) / float64(f.Claims)
		f.RSSPerKey = float64(f.RSSBytes) / float64(f.Claims)
	}
	if res.ClaimsPerSec > 0 {
		f.TenMillionS = 10e6 / res.ClaimsPerSec
	}
	if lr.ops < p.o.fill {
		f.Stopped = fmt.Sprintf("stopped after %d of %d operations (-d or interrupted); the last window is short", lr.ops, p.o.fill)
	}
	return f
}

// formatFill renders the fill's part of the text report.
func formatFill(f *Fill) string {
	var b strings.Builder
	line := func(label, fields, values string) {
		fmt.Fprintf(&b, "%-13s %-40s %s\n", label, fields, values)
	}
	pr := f.PayloadRetention
	if pr == "" {
		pr = "not set"
	}
	line("Fill", "[claims/events, payload_retention]", fmt.Sprintf("%d/%d, %s", f.Claims, f.Events, pr))
	line("Retained", "[RSS, data dir, per key]",
		fmt.Sprintf("%.1f MiB, %.1f MiB, %.0f B RSS + %.0f B disk per key", mib(f.RSSBytes), mib(f.DataBytes), f.RSSPerKey, f.DataPerKey))
	if f.EngineBytes > 0 && f.Claims > 0 {
		perKey := func(b int64) float64 { return float64(b) / float64(f.Claims) }
		line("Data dir", "[engine file, raft log, snapshots]",
			fmt.Sprintf("%.1f MiB (%.0f B/key), %.1f MiB (%.0f B/key), %.1f MiB (%.0f B/key)",
				mib(f.EngineBytes), perKey(f.EngineBytes), mib(f.LogBytes), perKey(f.LogBytes), mib(f.SnapshotBytes), perKey(f.SnapshotBytes)))
	}
	if f.RSSFileBytes > 0 {
		line("RSS", "[own memory, mapped files]",
			fmt.Sprintf("%.1f MiB, %.1f MiB (bbolt's memory maps: page cache the kernel reclaims)", mib(f.RSSBytes-f.RSSFileBytes), mib(f.RSSFileBytes)))
	}
	line(fmt.Sprintf("First %dk", f.Window/1000), "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(f.First))
	line(fmt.Sprintf("Last %dk", f.Window/1000), "[min, mean, 50, 90, 99, 99.9, max]", fmtLatency(f.Last))
	if f.P99Growth > 0 {
		line("Claim p99", "[last window / first window]", fmt.Sprintf("%.2f×", f.P99Growth))
	}
	if f.TenMillionS > 0 {
		line("10M events", "[at this run's claims/s]", (time.Duration(f.TenMillionS) * time.Second).Round(time.Second).String())
	}
	if f.Stopped != "" {
		line("Stopped", "", f.Stopped)
	}
	return b.String()
}
