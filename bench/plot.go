package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Line colours: request latency / claims, duplicates, other, deliveries.
var (
	colClaim = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colDup   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colOther = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colDeliv = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// writePlot draws panels into a PNG at path: latency by percentile (x is
// 1/(1-q) on a log axis, labelled in percentiles, as HdrHistogram plots do),
// answers per second over the run, and, when the run has them, latencies and
// backlog over time (open model) or the node's footprint as keys pile up
// (-fill).
func writePlot(res *Result, path string) error {
	top, err := percentilePlot(res)
	if err != nil {
		return err
	}
	bottom, err := timelinePlot(res)
	if err != nil {
		return err
	}
	more, err := extraPanels(res)
	if err != nil {
		return err
	}
	return drawPanels(append([]*plot.Plot{top, bottom}, more...), path)
}

// drawPanels stacks ps vertically, 4.5 inches each, into a PNG at path.
func drawPanels(ps []*plot.Plot, path string) error {
	img := vgimg.New(9*vg.Inch, vg.Length(len(ps))*4.5*vg.Inch)
	layoutPanels(ps, draw.New(img))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// layoutPanels draws ps stacked vertically on dc, their axes aligned.
func layoutPanels(ps []*plot.Plot, dc draw.Canvas) {
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	rows := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		rows[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range ps {
		p.Draw(canvases[i][0])
	}
}

func percentilePlot(res *Result) (*plot.Plot, error) {
	p := plot.New()
	load := loadShort(res)
	if res.HandlerDelayMs > 0 {
		load += fmt.Sprintf(", handler %g ms", res.HandlerDelayMs)
	}
	if res.NeighbourEvents > 0 {
		load += fmt.Sprintf(", neighbour %d × %g ms", res.NeighbourEvents, res.NeighbourDelayMs)
	}
	p.Title.Text = fmt.Sprintf("oncehook %s, %d node(s), %s, %d B, %s, commit %s",
		res.Provider, res.Nodes, load, res.BodyBytes, res.Date.Format("2006-01-02 15:04"), res.Commit)
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (ms, log)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = percentileTicks{}
	p.Add(plotter.NewGrid())
	// Bottom right: curves rise to the right, so that corner stays empty.
	p.Legend.XOffs, p.Legend.YOffs = -4*vg.Millimeter, 4*vg.Millimeter
	if err := addCurve(p, "all requests (send -> 200/202)", res.Percentiles, res.Latency.Count, colClaim); err != nil {
		return nil, err
	}
	if len(res.Percentiles200) > 0 {
		if err := addCurve(p, "duplicates only (send -> 200)", res.Percentiles200, res.Latency200.Count, colDup); err != nil {
			return nil, err
		}
	}
	if d := res.Delivery; d != nil {
		if err := addCurve(p, "delivery (send -> handler)", d.Percentiles, d.Latency.Count, colDeliv); err != nil {
			return nil, err
		}
	}
	// Log y: request latencies (ms) and delivery latencies (up to seconds
	// when the forwarder lags) both stay readable.
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	return p, nil
}

func loadShort(res *Result) string {
	if res.Model == "open" {
		return fmt.Sprintf("open %g/s", res.RequestedRate)
	}
	return fmt.Sprintf("closed c=%d", res.Clients)
}

// addCurve plots pts at x = 1/(1-q); the 100th percentile (max) sits at x = n.
func addCurve(p *plot.Plot, name string, pts []Point, n int64, c color.Color) error {
	if len(pts) == 0 {
		return nil
	}
	xys := make(plotter.XYs, 0, len(pts))
	for _, pt := range pts {
		x := float64(n)
		if pt.Percentile < 100 {
			x = 1 / (1 - pt.Percentile/100)
		}
		if len(xys) > 0 && x <= xys[len(xys)-1].X {
			continue
		}
		xys = append(xys, plotter.XY{X: x, Y: max(float64(pt.Micros), 1) / 1000})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// percentileTicks labels a 1/(1-q) axis in percentiles: 1 -> 0%, 2 -> 50%,
// 10 -> 90%, 100 -> 99%, ...
type percentileTicks struct{}

func (percentileTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 2 && hi >= 2 {
		ts = append(ts, plot.Tick{Value: 2, Label: "50%"})
	}
	for x := 1.0; x <= hi*1.0001; x *= 10 {
		if x < lo/1.0001 {
			continue
		}
		ts = append(ts, plot.Tick{Value: x, Label: percentileLabel(x)})
	}
	return ts
}

func percentileLabel(x float64) string {
	if x <= 1 {
		return "0%"
	}
	q := 100 * (1 - 1/x)
	digits := max(0, int(math.Round(math.Log10(x)))-2)
	return strconv.FormatFloat(q, 'f', digits, 64) + "%"
}

func timelinePlot(res *Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "answers per second (1 s buckets, by completion time)"
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "per second"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = 4*vg.Millimeter, -4*vg.Millimeter
	series := []struct {
		name string
		c    color.Color
		get  func(Second) int64
	}{
		{"claims (202)", colClaim, func(s Second) int64 { return s.Accepted }},
		{"duplicates (200)", colDup, func(s Second) int64 { return s.Duplicate }},
		{"other / failed", colOther, func(s Second) int64 { return s.Other }},
		{"delivered to handler", colDeliv, func(s Second) int64 { return s.Delivered }},
	}
	var top int64
	for _, s := range series {
		xys := make(plotter.XYs, 0, len(res.Timeline))
		var total int64
		for _, sec := range res.Timeline {
			v := s.get(sec)
			total += v
			top = max(top, v)
			// A point mid-bucket; the last bucket is partial.
			xys = append(xys, plotter.XY{X: float64(sec.T) + 0.5, Y: float64(v)})
		}
		if total == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.Color = s.c
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	p.Y.Min = 0
	p.Y.Max = 1.3 * float64(max(top, 1)) // headroom: the legend sits above the lines
	p.Y.Tick.Marker = plainTicks{}
	return p, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
