package main

import (
	"math/rand/v2"
	"testing"
)

// synth samples f every 10 s over n samples, from 10 s on (the soak's grid).
func synth(n int, f func(i int, t float64) float64) []sample {
	s := make([]sample, n)
	for i := range s {
		t := float64(10 * (i + 1))
		s[i] = sample{T: t, V: f(i, t)}
	}
	return s
}

// TestGrowthRule checks the unbounded-growth rule (soak_verdict.go) on
// synthetic hour- and ten-minute-long series.
func TestGrowthRule(t *testing.T) {
	noise := rand.New(rand.NewPCG(1, 2))
	const mib = 1 << 20
	for _, tc := range []struct {
		name          string
		s             []sample
		floor         float64
		judged, grows bool
		trend, step   bool
	}{
		{"flat", synth(60, func(int, float64) float64 { return 80 * mib }), growthFloors["rss"], true, false, false, false},
		{"noisy flat", synth(60, func(int, float64) float64 { return (80 + 16*(noise.Float64()-0.5)) * mib }), growthFloors["rss"], true, false, false, false},
		{"very noisy flat (+-50%)", synth(360, func(int, float64) float64 { return 200 * (0.5 + noise.Float64()) }), growthFloors["fds"], true, false, false, false},
		{"growing: doubles over the run", synth(60, func(_ int, t float64) float64 { return 40*mib + t*(200*mib)/600 }), growthFloors["rss"], true, true, true, false},
		{"growing goroutines, one per 10 s", synth(60, func(i int, _ float64) float64 { return 40 + float64(i)*3 }), growthFloors["goroutines"], true, true, true, false},
		{"slow growth: +30% over the run", synth(60, func(_ int, t float64) float64 { return 100*mib + t*(30*mib)/600 }), growthFloors["rss"], true, false, false, false},
		{"step: doubles at 70%", synth(60, func(i int, _ float64) float64 {
			if i >= 42 {
				return 300 * mib
			}
			return 100 * mib
		}), growthFloors["data"], true, true, true, true},
		{"step at 40%: flat over the second half, still doubled", synth(60, func(i int, _ float64) float64 {
			if i >= 24 {
				return 250
			}
			return 100
		}), growthFloors["goroutines"], true, true, false, true},
		{"warm-up growth, then flat", synth(60, func(_ int, t float64) float64 { return min(t, 200) * mib / 2 }), growthFloors["rss"], true, false, false, false},
		{"sawtooth: raft log between snapshots", synth(60, func(i int, _ float64) float64 { return float64(20+8*(i%4)) * mib }), growthFloors["data"], true, false, false, false},
		{"doubling below the floor", synth(60, func(i int, _ float64) float64 { return 5 + float64(i)/6 }), growthFloors["fds"], true, false, false, false},
		{"too few samples", synth(11, func(i int, _ float64) float64 { return float64(i) * mib * 100 }), growthFloors["rss"], false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := growth(tc.s, tc.floor)
			if g.Judged != tc.judged || g.Grows != tc.grows || g.Trend != tc.trend || g.Step != tc.step {
				t.Fatalf("growth = %+v; want judged %v, grows %v (trend %v, step %v)", g, tc.judged, tc.grows, tc.trend, tc.step)
			}
		})
	}
}

// TestDriftRule checks the latency drift rule: the median of the interval
// p99s of the last quarter against the second quarter's.
func TestDriftRule(t *testing.T) {
	noise := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name    string
		s       []sample
		judged  bool
		drifted bool
	}{
		{"flat", synth(60, func(int, float64) float64 { return 8000 }), true, false},
		{"noisy flat", synth(60, func(int, float64) float64 { return 8000 * (0.6 + 0.8*noise.Float64()) }), true, false},
		{"drifts: p99 grows with time", synth(60, func(_ int, t float64) float64 { return 2000 + 80*t }), true, true},
		{"stalls in a few intervals (leader changes)", synth(60, func(i int, _ float64) float64 {
			if i%15 == 14 || i == 50 || i == 51 {
				return 2_000_000
			}
			return 8000
		}), true, false},
		{"doubling below the floor", synth(60, func(i int, _ float64) float64 {
			if i >= 45 {
				return 3000
			}
			return 1000
		}), true, false},
		{"step over twice and the floor", synth(60, func(i int, _ float64) float64 {
			if i >= 45 {
				return 30000
			}
			return 10000
		}), true, true},
		{"empty", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := drift(tc.s)
			if d.Judged != tc.judged || d.Drifted != tc.drifted {
				t.Fatalf("drift = %+v; want judged %v, drifted %v", d, tc.judged, tc.drifted)
			}
		})
	}
}

func TestQuarterMedianSlope(t *testing.T) {
	s := synth(8, func(i int, _ float64) float64 { return float64(i) })
	// T 10..80, span 70: quarters [10,27.5) [27.5,45) [45,62.5) [62.5,80].
	for k, want := range [][]float64{{0, 1}, {2, 3}, {4, 5}, {6, 7}} {
		if got := quarter(s, k+1); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("quarter %d = %v; want %v", k+1, got, want)
		}
	}
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Fatalf("median = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median = %v", m)
	}
	if sl := slope(s); sl < 0.0999 || sl > 0.1001 {
		t.Fatalf("slope = %v; want 0.1 per second", sl)
	}
}
