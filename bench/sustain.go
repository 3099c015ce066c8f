package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"oncehook/internal/testcluster"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// The sustained rate is what the product delivers, not what it claims: an
// intake that answers 202 faster than the forwarder delivers builds a backlog
// for as long as the load lasts. -sustain runs open-model steps of -step-d at
// increasing rates and calls a step sustained when
//
//   - every scheduled request was sent (no "missed"), none answered other
//     than 202, no exactly-once violation;
//   - every claim was delivered by the end of the step's drain;
//   - the backlog was flat (flatness, below);
//   - delivery p99 after the 202, over the deliveries that arrived after the
//     step's first third (its warm-up), stayed under -max-delivery-p99
//     (100 ms).
//
// The search stops at the first step that fails, then halves the interval
// between the last passing and the first failing rate -refine times. It runs
// at most maxSustainSteps + 5 steps, each bounded like a plain run.

// Bounds of the search.
const (
	maxSustainSteps = 20
	maxRefine       = 5
	minStep         = 6 * time.Second // a last third of at least 2 s

	// flatMinEvents is the smallest backlog rise tolerated (events), for low rates.
	flatMinEvents = 50
	// flatMonotonePoints is how many seconds the last third needs before a
	// backlog rising in every one of them counts as growth on its own: for a
	// flat backlog whose per-second values are independent noise, six values
	// come out in rising order once in 720 steps.
	flatMonotonePoints = 6
)

// normalizeModes checks -sustain, -fill and -payload-retention against the
// other flags and fills their defaults.
func (o *options) normalizeModes() error {
	if o.payloadRetention != "" {
		if o.spawn == 0 {
			return errors.New("-payload-retention writes the spawned nodes' config: needs -spawn")
		}
		if d, err := time.ParseDuration(o.payloadRetention); err != nil || d <= 0 {
			return fmt.Errorf("-payload-retention %q: want a positive duration such as 1s", o.payloadRetention)
		}
	}
	if o.sustain {
		switch {
		case o.fill > 0 || o.rate > 0 || o.total > 0:
			return errors.New("-sustain sets the rate and the duration of each step: drop -rate, -n and -fill")
		case o.spawn == 0 && o.sinkAddr == "":
			return errors.New("-sustain measures deliveries: needs -spawn, or -sink with -target")
		case o.cpuprofile != "":
			return errors.New("-sustain and -cpuprofile exclude each other")
		case o.rateMin <= 0 || o.rateMax < o.rateMin:
			return errors.New("-sustain needs 0 < -rate-min <= -rate-max")
		case o.rateStep < 0:
			return errors.New("-rate-step must not be negative")
		case o.refine < 0 || o.refine > maxRefine:
			return fmt.Errorf("-refine %d: want 0..%d", o.refine, maxRefine)
		case o.stepD < minStep:
			return fmt.Errorf("-step-d %s: at least %s (the flatness rule reads the last third)", o.stepD, minStep)
		case o.maxDelivP99 <= 0:
			return errors.New("-max-delivery-p99 must be positive")
		}
		if o.rateStep == 0 {
			o.rateStep = o.rateMin
		}
		if n := len(sustainRates(o.rateMin, o.rateMax, o.rateStep)); n > maxSustainSteps {
			return fmt.Errorf("-sustain: %d steps from -rate-min to -rate-max; at most %d (raise -rate-step)", n, maxSustainSteps)
		}
		o.duration = o.stepD
	}
	if o.fill > 0 {
		switch {
		case o.spawn != 1:
			return errors.New("-fill measures one node's retained state: needs -spawn 1")
		case o.rate > 0 || o.total > 0:
			return errors.New("-fill sends its events in the closed model: drop -rate and -n")
		case o.dup > 0 || o.storm > 1:
			return errors.New("-fill sends new events only: drop -dup and -storm")
		}
		o.total = o.fill
	}
	return nil
}

// sustainRates lists the search's rates: min, min+step, ... up to max, and
// max itself when the steps skip it.
func sustainRates(lo, hi, step float64) []float64 {
	var rs []float64
	for i := 0; ; i++ {
		r := lo + float64(i)*step
		if r > hi*(1+1e-9) || i > 10*maxSustainSteps {
			break
		}
		rs = append(rs, r)
	}
	if len(rs) > 0 && rs[len(rs)-1] < hi*(1-1e-9) {
		rs = append(rs, hi)
	}
	return rs
}

// Flatness is the backlog rule applied to a step: over the last third of
// the load's seconds (at least 3), the backlog at the end may exceed the
// backlog at the start by at most Tolerance events, the larger of 50 and a
// tenth of a second of load (rate/10), and it may not rise in every one of
// those seconds when there are at least flatMonotonePoints of them. The first
// two thirds are warm-up: connections, caches, the first snapshot.
type Flatness struct {
	From      int   `json:"from_s"` // first second of the last third
	To        int   `json:"to_s"`   // its last second
	Start     int64 `json:"start"`  // backlog at From
	End       int64 `json:"end"`    // backlog at To
	Max       int64 `json:"max"`    // highest backlog in the last third
	Rise      int64 `json:"rise"`   // End - Start
	Tolerance int64 `json:"tolerance"`
	Monotone  bool  `json:"monotone"` // rose in every second of the last third
	Flat      bool  `json:"flat"`
}

// flatness judges backlog, the per-second backlog of the load's whole
// seconds, for a step at rate. Fewer than 3 seconds are never flat.
func flatness(backlog []int64, rate float64) Flatness {
	n := len(backlog)
	f := Flatness{Tolerance: max(flatMinEvents, int64(math.Ceil(rate/10)))}
	if n < 3 {
		return f
	}
	m := max(3, n/3)
	f.From, f.To = n-m, n-1
	last := backlog[f.From:]
	f.Start, f.End = last[0], last[len(last)-1]
	f.Rise = f.End - f.Start
	f.Max = last[0]
	rising := true
	for i, v := range last {
		f.Max = max(f.Max, v)
		if i > 0 && v <= last[i-1] {
			rising = false
		}
	}
	f.Monotone = rising && len(last) >= flatMonotonePoints
	f.Flat = f.Rise <= f.Tolerance && !f.Monotone
	return f
}

// Step is one step of the search and its verdict.
type Step struct {
	Rate            float64  `json:"rate"`
	Pass            bool     `json:"pass"`
	Reasons         []string `json:"reasons,omitempty"` // why it failed
	Flatness        Flatness `json:"flatness"`
	ClaimsPerSec    float64  `json:"claims_per_sec"`
	DeliveredPerSec float64  `json:"delivered_per_sec"` // over the load's whole seconds
	ClaimP99        int64    `json:"claim_p99_us"`
	DeliveryP99     int64    `json:"delivery_p99_us"` // after the 202, steady state (Delivery.AfterAckSteady)
	Result          *Result  `json:"result"`
}

// judge applies the sustained-rate rules to one step's result.
func judge(res *Result, rate float64, stepD, maxP99 time.Duration) Step {
	st := Step{Rate: rate, Result: res, ClaimsPerSec: res.ClaimsPerSec, ClaimP99: res.Latency202.P99}
	fail := func(format string, args ...any) { st.Reasons = append(st.Reasons, fmt.Sprintf(format, args...)) }
	secs := min(int(stepD/time.Second), len(res.Timeline))
	backlog := make([]int64, secs)
	var delivered int64
	for i := range secs {
		backlog[i] = res.Timeline[i].Backlog
		delivered += res.Timeline[i].FirstDelivered
	}
	if secs > 0 {
		st.DeliveredPerSec = float64(delivered) / float64(secs)
	}
	st.Flatness = flatness(backlog, rate)
	if res.Missed > 0 {
		fail("%d requests due but never sent (every one of -c in flight: the node fell behind, or raise -c)", res.Missed)
	}
	if res.Unexpected > 0 || res.Violations > 0 {
		fail("%d unexpected answers, %d exactly-once violations", res.Unexpected, res.Violations)
	}
	d := res.Delivery
	if d == nil {
		fail("no delivery measured")
	} else {
		st.DeliveryP99 = d.AfterAckSteady.P99
		if d.Pending > 0 {
			fail("%d claims not delivered by the end of the drain", d.Pending)
		}
		if d.AfterAckSteady.Count == 0 {
			fail("no delivery after the first third of the step")
		} else if time.Duration(st.DeliveryP99)*time.Microsecond > maxP99 {
			fail("delivery p99 after the 202 %s > %s", fmtMicros(float64(st.DeliveryP99)), maxP99)
		}
	}
	if f := st.Flatness; !f.Flat {
		switch {
		case f.To == 0:
			fail("too few seconds to judge the backlog")
		case f.Monotone:
			fail("backlog rose in every second of %d..%d s (%d -> %d)", f.From, f.To, f.Start, f.End)
		default:
			fail("backlog grew by %d (> %d) over %d..%d s", f.Rise, f.Tolerance, f.From, f.To)
		}
	}
	st.Pass = len(st.Reasons) == 0
	return st
}

// Sustain is the search's outcome: the JSON file and the report.
type Sustain struct {
	Date        time.Time `json:"date"`
	Commit      string    `json:"commit"`
	GoVersion   string    `json:"go_version"`
	CPUs        int       `json:"cpus"`
	Nodes       int       `json:"nodes"`
	Provider    string    `json:"provider"`
	BodyBytes   int       `json:"body_bytes"`
	Clients     int       `json:"clients"`
	StepS       float64   `json:"step_s"`
	MaxP99US    int64     `json:"max_delivery_p99_us"`
	Steps       []Step    `json:"steps"`
	Sustained   float64   `json:"sustained_rate"` // highest passing rate; 0: none passed
	FirstFailed float64   `json:"first_failed_rate,omitempty"`
	// AtLeast is set when every rate passed: the sustained rate is at least
	// -rate-max.
	AtLeast bool     `json:"at_least,omitempty"`
	Note    string   `json:"note,omitempty"`
	Files   []string `json:"files,omitempty"`
}

// runSustain runs the search on e, reports and writes its files.
func runSustain(ctx context.Context, o *options, e *env, stdout, stderr io.Writer) error {
	rates := sustainRates(o.rateMin, o.rateMax, o.rateStep)
	sr := &Sustain{
		Date: time.Now().UTC().Truncate(time.Second), Commit: readCommit(moduleRoot()),
		GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Nodes: o.nodes(), Provider: o.provider,
		BodyBytes: o.size, Clients: o.clients, StepS: o.stepD.Seconds(), MaxP99US: o.maxDelivP99.Microseconds(),
	}
	bound := time.Duration(len(rates)+o.refine) * (o.stepD + o.timeout + 2*o.drain)
	fmt.Fprintf(stderr, "sustain: %d steps of %s at %s/s, then up to %d refining; at most %s\n",
		len(rates), o.stepD, fmtRates(rates), o.refine, bound.Round(time.Second))
	step := func(rate float64) (Step, error) {
		so := *o
		so.rate, so.total, so.duration = math.Round(rate), 0, o.stepD
		so.quiet = true
		res, _, err := measure(ctx, &so, e, stderr)
		if err != nil {
			return Step{}, err
		}
		st := judge(res, so.rate, o.stepD, o.maxDelivP99)
		sr.Steps = append(sr.Steps, st)
		fmt.Fprintln(stderr, "sustain: "+stepLine(st))
		return st, ctx.Err()
	}
	// An interrupt (ctx done) ends the search; what was measured is still
	// reported, the interrupted step's verdict aside.
	interrupted := false
	stopped := func(err error) (bool, error) {
		if err == nil {
			return false, nil
		}
		if ctx.Err() != nil && len(sr.Steps) > 0 {
			interrupted = true
			return true, nil
		}
		return true, err
	}
	lastPass, firstFail := 0.0, 0.0
	for _, r := range rates {
		st, err := step(r)
		if stop, err := stopped(err); stop {
			if err != nil {
				return err
			}
			break
		}
		if !st.Pass {
			firstFail = st.Rate
			break
		}
		lastPass = st.Rate
	}
	if firstFail > 0 && lastPass > 0 && !interrupted {
		for range o.refine {
			if !settle(ctx, e, o) {
				sr.Note = "the node's backlog did not reach 0 within -drain after a failed step: refining skipped"
				break
			}
			mid := math.Round((lastPass + firstFail) / 2)
			if mid <= lastPass || mid >= firstFail {
				break
			}
			st, err := step(mid)
			if stop, err := stopped(err); stop {
				if err != nil {
					return err
				}
				break
			}
			if st.Pass {
				lastPass = st.Rate
			} else {
				firstFail = st.Rate
			}
		}
	}
	sr.Sustained, sr.FirstFailed, sr.AtLeast = lastPass, firstFail, firstFail == 0 && !interrupted
	if interrupted {
		sr.Note = "interrupted: the last step was cut short (its verdict does not count) and the search is incomplete"
	}
	if !o.noFiles {
		base := filepath.Join(o.out, fmt.Sprintf("%s-%s-%dn-sustain", sr.Date.Format("20060102-150405"), sr.Commit, sr.Nodes))
		sr.Files = []string{base + ".json", base + ".png"}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sr); err != nil {
			return err
		}
	} else if _, err := io.WriteString(stdout, formatSustain(sr)); err != nil {
		return err
	}
	return writeSustainFiles(sr)
}

// settle waits until the node's backlog metric reads 0, at most -drain: a
// failed step leaves events pending, which would load the next step.
func settle(ctx context.Context, e *env, o *options) bool {
	if e.adminURL == "" {
		return true
	}
	if o.drain <= 0 {
		return false
	}
	admin := e.leaderAdmin()
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	err := testcluster.Await(ctx, "an empty backlog", o.drain, func() (bool, error) {
		v, ok := scrapeBacklog(ctx, c, admin+"/metrics", o.source)
		return ok && v == 0, nil
	})
	return err == nil
}

func fmtRates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%g", r)
	}
	return strings.Join(parts, ", ")
}

// stepLine is one step on one line.
func stepLine(st Step) string {
	verdict := "sustained"
	if !st.Pass {
		verdict = "NOT sustained: " + strings.Join(st.Reasons, "; ")
	}
	f := st.Flatness
	return fmt.Sprintf("%7g/s  claims %8.1f/s  delivered %8.1f/s  claim p99 %8s  delivery p99 %8s  backlog %d..%d s: %d -> %d (max %d, tol %d)  %s",
		st.Rate, st.ClaimsPerSec, st.DeliveredPerSec, fmtMicros(float64(st.ClaimP99)), fmtMicros(float64(st.DeliveryP99)),
		f.From, f.To, f.Start, f.End, f.Max, f.Tolerance, verdict)
}

// formatSustain renders the search's report.
func formatSustain(sr *Sustain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sustained rate search: %d node(s), provider %s, body %d B, steps of %s, at most %d in flight, commit %s, %d CPUs\n",
		sr.Nodes, sr.Provider, sr.BodyBytes, fmtSeconds(sr.StepS), sr.Clients, sr.Commit, sr.CPUs)
	fmt.Fprintf(&b, "A step is sustained when the backlog is flat over its last third and delivery p99 after the 202 is under %s.\n",
		fmtMicros(float64(sr.MaxP99US)))
	for _, st := range sr.Steps {
		b.WriteString("  " + stepLine(st) + "\n")
	}
	switch {
	case sr.Sustained == 0 && sr.FirstFailed > 0:
		fmt.Fprintf(&b, "Sustained rate: none of the steps (below %g/s)\n", sr.FirstFailed)
	case sr.Sustained == 0:
		b.WriteString("Sustained rate: not determined\n")
	case sr.AtLeast:
		fmt.Fprintf(&b, "Sustained rate: at least %g/s (every step passed; raise -rate-max)\n", sr.Sustained)
	case sr.FirstFailed == 0:
		fmt.Fprintf(&b, "Sustained rate: at least %g/s\n", sr.Sustained)
	default:
		fmt.Fprintf(&b, "Sustained rate: %g/s (%g/s failed)\n", sr.Sustained, sr.FirstFailed)
	}
	if sr.Note != "" {
		b.WriteString("Note: " + sr.Note + "\n")
	}
	for _, f := range sr.Files {
		fmt.Fprintf(&b, "File %s\n", f)
	}
	return b.String()
}

// writeSustainFiles writes the search's JSON and PNG named in sr.Files.
func writeSustainFiles(sr *Sustain) error {
	if len(sr.Files) != 2 {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(sr.Files[0]), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sr, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(sr.Files[0], append(b, '\n'), 0o644); err != nil {
		return err
	}
	return writeSustainPlot(sr, sr.Files[1])
}
