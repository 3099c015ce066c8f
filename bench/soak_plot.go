package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// nodeColours: one per node, in the order of the spawned nodes.
var nodeColours = []color.Color{colClaim, colDup, colDeliv, colOther, colMetric,
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff}}

// writeSoakPlots draws resources.svg (each node's RSS, open fds, goroutines
// and data dir over time) and latency.svg (claim and delivery p50/p99 per
// interval, and the backlog) into sr.Dir.
func writeSoakPlots(sr *Soak, resources, latency string) error {
	title := fmt.Sprintf("oncehook soak, %d nodes, %g/s, retention %s, commit %s", sr.Nodes, sr.Rate, sr.Retention, sr.Commit)
	type metric struct {
		title, unit string
		get         func(NodeSample) (float64, bool)
	}
	metrics := []metric{
		{title + ": RSS per node (a restart starts a new line)", "MiB", func(n NodeSample) (float64, bool) { return mib(n.RSSBytes), n.Up }},
		{"open file descriptors per node", "fds", func(n NodeSample) (float64, bool) { return float64(n.FDs), n.Up }},
		{"goroutines per node (go_goroutines)", "goroutines", func(n NodeSample) (float64, bool) { return float64(n.Goroutines), n.Up && n.Goroutines >= 0 }},
		{"data dir per node (engine file, raft log, snapshots)", "MiB", func(n NodeSample) (float64, bool) { return mib(n.DataBytes), true }},
	}
	var ps []*plot.Plot
	for _, m := range metrics {
		p := soakPanel(m.title, m.unit)
		for ni := 0; ni < sr.Nodes; ni++ {
			var segs []plotter.XYs
			var cur plotter.XYs
			life := -1
			for _, s := range sr.Samples {
				if ni >= len(s.Nodes) {
					continue
				}
				n := s.Nodes[ni]
				v, ok := m.get(n)
				if !ok || n.Life != life {
					if len(cur) > 0 {
						segs = append(segs, cur)
					}
					cur, life = nil, n.Life
				}
				if ok {
					cur = append(cur, plotter.XY{X: s.T, Y: v})
				}
			}
			if len(cur) > 0 {
				segs = append(segs, cur)
			}
			if err := addSegments(p, nodeName(sr, ni), nodeColours[ni%len(nodeColours)], segs); err != nil {
				return err
			}
		}
		p.Y.Min = 0
		ps = append(ps, p)
	}
	if err := drawSVG(ps, resources); err != nil {
		return err
	}

	lat := soakPanel(title+": p50 and p99 per interval", "ms (log)")
	var top int64 = 1
	pick := func(get func(Interval) int64) plotter.XYs {
		var xys plotter.XYs
		for _, iv := range sr.Intervals {
			if v := get(iv); v > 0 {
				top = max(top, v)
				xys = append(xys, plotter.XY{X: iv.To, Y: float64(v) / 1000})
			}
		}
		return xys
	}
	err := addSeries(lat, []series{
		{name: "claim p50", c: colClaimLight, xys: pick(func(i Interval) int64 { return i.ClaimP50 })},
		{name: "claim p99", c: colClaim, xys: pick(func(i Interval) int64 { return i.ClaimP99 })},
		{name: "delivery p50 (202 -> handler)", c: colDelivLight, xys: pick(func(i Interval) int64 { return i.DeliveryP50 })},
		{name: "delivery p99 (202 -> handler)", c: colDeliv, xys: pick(func(i Interval) int64 { return i.DeliveryP99 })},
	})
	if err != nil {
		return err
	}
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Y.Max = 30 * float64(top) / 1000 // headroom on the log axis: the legend sits above the lines

	bl := soakPanel("backlog at each interval's end; leader changes marked", "events")
	var bench, node, changes plotter.XYs
	for _, iv := range sr.Intervals {
		bench = append(bench, plotter.XY{X: iv.To, Y: float64(iv.Backlog)})
	}
	for _, s := range sr.Samples {
		if s.Backlog != nil {
			node = append(node, plotter.XY{X: s.T, Y: float64(*s.Backlog)})
		}
	}
	for _, tr := range sr.Transfers {
		changes = append(changes, plotter.XY{X: tr.AtS, Y: 0})
	}
	if err := addSeries(bl, []series{
		{name: "claimed - delivered (bench)", c: colOther, xys: bench},
		{name: "oncehook_backlog (leader)", c: colMetric, xys: node, dash: true},
	}); err != nil {
		return err
	}
	if len(changes) > 0 {
		sc, err := plotter.NewScatter(changes)
		if err != nil {
			return err
		}
		sc.Shape = draw.TriangleGlyph{}
		sc.Color = colOther
		sc.Radius = vg.Points(4)
		bl.Add(sc)
		bl.Legend.Add("leader change", sc)
	}
	bl.Y.Min = 0
	return drawSVG([]*plot.Plot{lat, bl}, latency)
}

func nodeName(sr *Soak, i int) string {
	if len(sr.Samples) > 0 && i < len(sr.Samples[0].Nodes) {
		return sr.Samples[0].Nodes[i].ID
	}
	return fmt.Sprintf("node%d", i+1)
}

func soakPanel(title, unit string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = unit
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.X.Tick.Marker = plainTicks{}
	return p
}

// addSegments draws one node's lines (one per process lifetime) under one
// legend entry.
func addSegments(p *plot.Plot, name string, c color.Color, segs []plotter.XYs) error {
	for i, xys := range segs {
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		p.Add(l)
		if i == 0 {
			p.Legend.Add(name, l)
		}
	}
	return nil
}

// drawSVG stacks ps vertically, 3.5 inches each, into an SVG at path.
func drawSVG(ps []*plot.Plot, path string) error {
	c := vgsvg.New(9*vg.Inch, vg.Length(len(ps))*3.5*vg.Inch)
	layoutPanels(ps, draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
