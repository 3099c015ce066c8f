package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// More line colours: p50s are drawn lighter than their p99s.
var (
	colClaimLight = color.RGBA{R: 0x9e, G: 0xc5, B: 0xe8, A: 0xff}
	colDelivLight = color.RGBA{R: 0x98, G: 0xdf, B: 0x8a, A: 0xff}
	colMetric     = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	colSteps      = []color.Color{colClaim, colDup, colDeliv, colOther, colMetric,
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
		color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
		color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}}
)

// extraPanels are the panels a run adds to the two every run has: latencies
// and backlog over time when the timeline has per-second latencies (open
// model), the node's footprint and claim p99 as keys pile up for -fill.
func extraPanels(res *Result) ([]*plot.Plot, error) {
	var ps []*plot.Plot
	if hasSecondLatency(res.Timeline) {
		lat, err := latencyOverTime(res)
		if err != nil {
			return nil, err
		}
		bl, err := backlogOverTime(res)
		if err != nil {
			return nil, err
		}
		ps = append(ps, lat, bl)
	}
	if res.Fill != nil && len(res.Fill.Points) > 0 {
		fp, err := fillPanels(res.Fill)
		if err != nil {
			return nil, err
		}
		ps = append(ps, fp...)
	}
	return ps, nil
}

func hasSecondLatency(tl []Second) bool {
	for _, s := range tl {
		if s.ClaimP99 > 0 || s.DeliveryP99 > 0 {
			return true
		}
	}
	return false
}

// series is one named line.
type series struct {
	name string
	c    color.Color
	xys  plotter.XYs
	dash bool
}

// addSeries adds the lines with points to p; empty series are skipped.
func addSeries(p *plot.Plot, ss []series) error {
	for _, s := range ss {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			return err
		}
		l.Color = s.c
		l.Width = vg.Points(1.5)
		if s.dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return nil
}

// latencyOverTime plots claim and delivery (after the 202) p50 and p99, one
// point per second, on a log axis in ms.
func latencyOverTime(res *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "latency over time (claims by answer second; deliveries by arrival second, after the 202)"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "latency (ms, log)"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	var top int64 = 1
	pick := func(get func(Second) int64) plotter.XYs {
		var xys plotter.XYs
		for _, s := range res.Timeline {
			if v := get(s); v > 0 {
				top = max(top, v)
				xys = append(xys, plotter.XY{X: float64(s.T) + 0.5, Y: float64(v) / 1000})
			}
		}
		return xys
	}
	err := addSeries(p, []series{
		{name: "claim p50", c: colClaimLight, xys: pick(func(s Second) int64 { return s.ClaimP50 })},
		{name: "claim p99", c: colClaim, xys: pick(func(s Second) int64 { return s.ClaimP99 })},
		{name: "delivery p50", c: colDelivLight, xys: pick(func(s Second) int64 { return s.DeliveryP50 })},
		{name: "delivery p99", c: colDeliv, xys: pick(func(s Second) int64 { return s.DeliveryP99 })},
	})
	if err != nil {
		return nil, err
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Max = 8 * float64(top) / 1000 // headroom on the log axis: the legend sits above the lines
	return p, nil
}

// backlogOverTime plots the claimed-but-not-delivered count and the node's
// oncehook_backlog when it was scraped.
func backlogOverTime(res *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "backlog at the end of each second"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "events"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	var computed, metric plotter.XYs
	var top int64 = 1
	for _, s := range res.Timeline {
		computed = append(computed, plotter.XY{X: float64(s.T + 1), Y: float64(s.Backlog)})
		top = max(top, s.Backlog)
		if s.MetricBacklog != nil {
			metric = append(metric, plotter.XY{X: float64(s.T) + 0.5, Y: float64(*s.MetricBacklog)})
			top = max(top, *s.MetricBacklog)
		}
	}
	err := addSeries(p, []series{
		{name: "claimed - delivered (bench)", c: colOther, xys: computed},
		{name: "oncehook_backlog (node)", c: colMetric, xys: metric, dash: true},
	})
	if err != nil {
		return nil, err
	}
	p.Y.Min, p.Y.Max = 0, 1.3*float64(top)
	p.Y.Tick.Marker = plainTicks{}
	return p, nil
}

// fillPanels plots the node's RSS and data dir, and the claim p99 of each
// interval, against the requests answered so far.
func fillPanels(f *Fill) ([]*plot.Plot, error) {
	mem := plot.New()
	mem.Title.Text = fmt.Sprintf("retained state (payload_retention %s)", orDash(f.PayloadRetention))
	mem.X.Label.Text = "events sent"
	mem.Y.Label.Text = "MiB"
	mem.Add(plotter.NewGrid())
	mem.Legend.Top, mem.Legend.Left = true, true
	lat := plot.New()
	lat.Title.Text = "claim p99 between samples"
	lat.X.Label.Text = "events sent"
	lat.Y.Label.Text = "ms"
	lat.Add(plotter.NewGrid())
	lat.Legend.Top, lat.Legend.Left = true, true
	var rss, data, p99 plotter.XYs
	for _, pt := range f.Points {
		x := float64(pt.Sent)
		rss = append(rss, plotter.XY{X: x, Y: mib(pt.RSSBytes)})
		data = append(data, plotter.XY{X: x, Y: mib(pt.DataBytes)})
		if pt.ClaimP99 > 0 {
			p99 = append(p99, plotter.XY{X: x, Y: float64(pt.ClaimP99) / 1000})
		}
	}
	if err := addSeries(mem, []series{{name: "node RSS", c: colClaim, xys: rss}, {name: "data dir", c: colDup, xys: data}}); err != nil {
		return nil, err
	}
	if err := addSeries(lat, []series{{name: "claim p99", c: colClaim, xys: p99}}); err != nil {
		return nil, err
	}
	mem.Y.Min, lat.Y.Min, mem.X.Min, lat.X.Min = 0, 0, 0, 0
	mem.X.Tick.Marker, lat.X.Tick.Marker = plainTicks{}, plainTicks{}
	return []*plot.Plot{mem, lat}, nil
}

func orDash(s string) string {
	if s == "" {
		return "not set"
	}
	return s
}

// writeSustainPlot draws the search: each step's backlog over time, and
// claim and delivery p99 against the step's rate.
func writeSustainPlot(sr *Sustain, path string) error {
	bl := plot.New()
	bl.Title.Text = fmt.Sprintf("oncehook sustained-rate search, %d node(s), %d B, commit %s: backlog per step", sr.Nodes, sr.BodyBytes, sr.Commit)
	bl.X.Label.Text = "time since the step's start (s)"
	bl.Y.Label.Text = "claimed - delivered"
	bl.Add(plotter.NewGrid())
	bl.Legend.Top, bl.Legend.Left = true, true
	var ss []series
	for i, st := range sr.Steps {
		if st.Result == nil {
			continue
		}
		var xys plotter.XYs
		for _, s := range st.Result.Timeline {
			xys = append(xys, plotter.XY{X: float64(s.T + 1), Y: float64(s.Backlog)})
		}
		verdict := "ok"
		if !st.Pass {
			verdict = "fail"
		}
		ss = append(ss, series{name: fmt.Sprintf("%g/s %s", st.Rate, verdict), c: colSteps[i%len(colSteps)], xys: xys, dash: !st.Pass})
	}
	if err := addSeries(bl, ss); err != nil {
		return err
	}
	bl.Y.Min = 0
	bl.Y.Tick.Marker = plainTicks{}

	lat := plot.New()
	lat.Title.Text = "p99 per step (delivery: after the 202)"
	lat.X.Label.Text = "requested rate (/s)"
	lat.Y.Label.Text = "ms (log)"
	lat.Add(plotter.NewGrid())
	lat.Legend.Top, lat.Legend.Left = true, true
	var claim, deliv plotter.XYs
	for _, st := range sortedSteps(sr.Steps) {
		claim = append(claim, plotter.XY{X: st.Rate, Y: max(float64(st.ClaimP99), 1) / 1000})
		deliv = append(deliv, plotter.XY{X: st.Rate, Y: max(float64(st.DeliveryP99), 1) / 1000})
	}
	if err := addSeries(lat, []series{{name: "claim p99", c: colClaim, xys: claim}, {name: "delivery p99", c: colDeliv, xys: deliv}}); err != nil {
		return err
	}
	for _, xys := range []plotter.XYs{claim, deliv} {
		if len(xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.Shape = draw.CircleGlyph{}
		lat.Add(sc)
	}
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.X.Tick.Marker = plainTicks{}
	return drawPanels([]*plot.Plot{bl, lat}, path)
}

// sortedSteps orders steps by rate (refining steps come last in the run).
func sortedSteps(steps []Step) []Step {
	out := append([]Step(nil), steps...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Rate < out[j-1].Rate; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
