package main

import (
	"fmt"
	"math"
	"slices"
)

// The soak's verdict (docs/reliability.md, "Soak"). A soak fails when a
// process's footprint grows without bound or when latency drifts; both are
// read off series of samples (t seconds since the load's start, value),
// never off a single sample, so that one slow scrape or one leader change
// does not decide the run.
//
// Growth, for each of RSS, open fds, goroutines and the data dir: the series
// is cut into quarters by time. The first half is warm-up (caches fill,
// retention reaches its steady state, the first snapshots are taken) and is
// judged by nothing. A series grows without bound when either
//
//   - trend: the least-squares slope over the second half, projected over
//     the series' whole span, exceeds the second half's median (the value
//     would more than double over one more run of this length), and the
//     last quarter's median is above the second quarter's by more than the
//     metric's floor (the level really moved: a sawtooth such as the raft
//     log between snapshots tilts the fitted line without moving the
//     medians); or
//   - step: the last quarter's median exceeds the second quarter's by more
//     than the larger of the second quarter's median and the floor (it more
//     than doubled).
//
// The floor (growthFloors) keeps small absolute changes from counting:
// twenty goroutines more on a node that runs forty are a connection pool,
// not a leak. Medians make both rules indifferent to a few outliers; the
// least-squares slope over many samples averages noise out (for independent
// noise of standard deviation s around a level, the projected growth is
// about 1.3 s over 30 samples, far below the level).
//
// A node restarted by the soak (its leader change) starts a new process,
// and a node that becomes leader starts the forwarder (more goroutines, fds
// and memory than a follower): RSS, fds and goroutines are judged per
// segment, a stretch of one process lifetime in one role, each segment of at
// least minGrowthSamples samples on its own (soak_report.go, judgeSoak); the
// data dir outlives the process and is judged over the whole run.
//
// Drift, for claim p99 and delivery p99: the value of a quarter is the
// median of the p99s of its intervals (10 s each), so that the few intervals
// a leader change stalls do not make the quarter's figure. The latency
// drifted when the last quarter's exceeds twice the second quarter's and the
// difference is above driftFloorUS.

// minGrowthSamples is the fewest samples a series needs to be judged: with
// fewer, a quarter holds one or two samples and its median is a sample.
const minGrowthSamples = 12

// driftFloorUS is the smallest p99 increase (µs) that can count as drift:
// on a machine shared with other work a p99 of 2 ms reading 4.5 ms is noise.
const driftFloorUS = 5000

// growthFloors are the per-metric floors of the growth rules.
var growthFloors = map[string]float64{
	"rss":        16 << 20, // bytes
	"fds":        16,
	"goroutines": 32,
	"data":       16 << 20, // bytes
}

// sample is one value of a series at T seconds since the load's start.
type sample struct {
	T float64
	V float64
}

// Growth is the growth rule applied to one series.
type Growth struct {
	Samples   int     `json:"samples"`
	From      float64 `json:"from_s"`
	To        float64 `json:"to_s"`
	First     float64 `json:"first"`
	Last      float64 `json:"last"`
	Q2        float64 `json:"q2_median"`
	Q4        float64 `json:"q4_median"`
	Slope     float64 `json:"slope_per_s"` // second half, least squares
	Projected float64 `json:"projected"`   // Slope over the whole span
	Base      float64 `json:"base"`        // second half's median, at least the floor
	Floor     float64 `json:"floor"`       //
	Judged    bool    `json:"judged"`      // enough samples
	Trend     bool    `json:"trend"`       // the trend rule fired
	Step      bool    `json:"step"`        // the step rule fired
	Grows     bool    `json:"grows"`       // Trend || Step
	Reason    string  `json:"reason,omitempty"`
}

// growth judges one series (in time order) with the given floor.
func growth(s []sample, floor float64) Growth {
	g := Growth{Samples: len(s), Floor: floor}
	if len(s) == 0 {
		return g
	}
	g.From, g.To = s[0].T, s[len(s)-1].T
	g.First, g.Last = s[0].V, s[len(s)-1].V
	span := g.To - g.From
	q2, q4 := quarter(s, 2), quarter(s, 4)
	if len(s) < minGrowthSamples || span <= 0 || len(q2) == 0 || len(q4) == 0 {
		g.Reason = fmt.Sprintf("not judged: %d samples (need %d)", len(s), minGrowthSamples)
		return g
	}
	g.Judged = true
	half := s[slices.IndexFunc(s, func(p sample) bool { return p.T >= g.From+span/2 }):]
	g.Q2, g.Q4 = median(q2), median(q4)
	g.Slope = slope(half)
	g.Projected = g.Slope * span
	g.Base = max(median(values(half)), floor)
	rise := g.Q4 - g.Q2
	g.Trend = g.Projected > g.Base && rise > floor
	g.Step = rise > max(g.Q2, floor)
	g.Grows = g.Trend || g.Step
	switch {
	case g.Step:
		g.Reason = fmt.Sprintf("last quarter's median %.4g > 2 x second quarter's %.4g", g.Q4, g.Q2)
	case g.Trend:
		g.Reason = fmt.Sprintf("second-half slope projects +%.4g over the run (> %.4g), last quarter %.4g vs second %.4g", g.Projected, g.Base, g.Q4, g.Q2)
	}
	return g
}

// Drift is the drift rule applied to one latency series (µs).
type Drift struct {
	Q2      float64 `json:"q2_median_us"`
	Q4      float64 `json:"q4_median_us"`
	Judged  bool    `json:"judged"`
	Drifted bool    `json:"drifted"`
	Reason  string  `json:"reason,omitempty"`
}

// drift judges a series of interval p99s (µs, intervals without samples
// left out).
func drift(s []sample) Drift {
	var d Drift
	q2, q4 := quarter(s, 2), quarter(s, 4)
	if len(q2) == 0 || len(q4) == 0 {
		d.Reason = "not judged: a quarter without samples"
		return d
	}
	d.Judged = true
	d.Q2, d.Q4 = median(q2), median(q4)
	d.Drifted = d.Q4 > 2*d.Q2 && d.Q4-d.Q2 > driftFloorUS
	if d.Drifted {
		d.Reason = fmt.Sprintf("last quarter's median p99 %s > 2 x second quarter's %s", fmtMicros(d.Q4), fmtMicros(d.Q2))
	}
	return d
}

// quarter returns the values of s in its k-th quarter by time (1..4): T in
// [From + (k-1)·span/4, From + k·span/4), the last quarter closed.
func quarter(s []sample, k int) []float64 {
	if len(s) == 0 {
		return nil
	}
	from, span := s[0].T, s[len(s)-1].T-s[0].T
	lo, hi := from+float64(k-1)*span/4, from+float64(k)*span/4
	var out []float64
	for _, p := range s {
		if p.T >= lo && (p.T < hi || (k == 4 && p.T <= hi)) {
			out = append(out, p.V)
		}
	}
	return out
}

func values(s []sample) []float64 {
	out := make([]float64, len(s))
	for i, p := range s {
		out[i] = p.V
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	c := slices.Clone(v)
	slices.Sort(c)
	if n := len(c); n%2 == 0 {
		return (c[n/2-1] + c[n/2]) / 2
	}
	return c[len(c)/2]
}

// slope is the least-squares slope of V over T; 0 for fewer than 2 points
// or no spread in T.
func slope(s []sample) float64 {
	if len(s) < 2 {
		return 0
	}
	var mt, mv float64
	for _, p := range s {
		mt += p.T
		mv += p.V
	}
	n := float64(len(s))
	mt, mv = mt/n, mv/n
	var num, den float64
	for _, p := range s {
		num += (p.T - mt) * (p.V - mv)
		den += (p.T - mt) * (p.T - mt)
	}
	if den == 0 {
		return 0
	}
	return num / den
}
