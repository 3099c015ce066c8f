package chaos

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// result is every figure one scenario run reports.
type result struct {
	Scenario string
	Seed     uint64
	Skipped  string

	Ops, Acked, AckedNew, AckedDup, Unknown, Refused, Errors int
	Rejected                                                 int // 401: the receiving node refused the signature
	UnknownPresent, UnknownAbsent                            int

	Lost          int // acked, absent from the final state
	NotFinished   int // acked, present but neither done nor dead after the drain
	Linearizable  string
	DoubleRuns    int // overlapping runs of one key while the first's lease was live
	ClockReclaims int // overlaps whose first lease the leader's clock ended early (S11), the first run fenced
	SameTokenRuns int // one lease delivered twice
	RunsAfterDone int // runs under a token newer than the one that completed the event
	PhantomRuns   int // runs of a key absent from the final state
	Runs          int
	FencedHandler int     // late runs the fencing-aware handler refused (a newer token seen)
	LateRuns      int     // runs that answered after oncehook gave up on them
	FencedOncehk  float64 // oncehook's own count of fenced completions (current processes)
	Dead          int

	Converged     bool
	ConvergeNote  string
	HashEqual     bool
	HashNote      string
	LeaderChanges int

	UnavailS   float64 // longest stretch without a new claim acknowledged, from the fault on
	RecoveryS  float64 // heal -> every node ready and caught up
	BeforeRate float64 // new claims/s
	DuringRate float64
	AfterRate  float64
	P99Before  time.Duration
	P99During  time.Duration
	P99After   time.Duration

	CanaryHits int
	Notes      []string
	Violations []string
	VizPath    string
}

func (r *result) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *result) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *result) Ratio() float64 {
	if r.BeforeRate == 0 {
		return 0
	}
	return r.AfterRate / r.BeforeRate
}

// timeline marks the phases of a run in the load generator's clock (ns).
type timeline struct {
	loadStart, faultAt, healAt, loadEnd int64
	// leaderAhead, when set (S11), bounds how far the leader's test clock
	// may have moved forward between two wall-clock instants (Unix ns, the
	// handler's clock): leases are granted and reclaimed by the leader's
	// clock, so a forward jump of it ends a lease early in real time.
	leaderAhead func(from, to int64) int64
}

// checkHistory fills r from the load history, the final state and the handler
// runs. base is the load generator's base time (for the handler's wall clock).
func checkHistory(r *result, ops []op, final map[string]finalEvent, runs []hrun, tl timeline, resultsDir string) {
	r.Ops = len(ops)
	acked := map[string]bool{}
	byKey := map[string][]op{}
	for _, o := range ops {
		switch o.Outcome {
		case outNew:
			r.AckedNew++
			acked[o.ID] = true
		case outDup:
			r.AckedDup++
			acked[o.ID] = true
		case outUnknown:
			r.Unknown++
			if _, ok := final["orders:"+o.ID]; ok {
				r.UnknownPresent++
			} else {
				r.UnknownAbsent++
			}
		case outRefused:
			r.Refused++
			continue // never reached a process: not part of the history
		case outReject:
			r.Rejected++
			continue // refused before the claim: nothing stored (S11 checks when they may happen)
		case outError:
			r.Errors++
			if r.Errors <= 3 {
				r.note("unexpected answer to %s on node%d: %d %q", o.ID, o.Node+1, o.Status, o.Answer)
			}
			continue
		}
		byKey[o.ID] = append(byKey[o.ID], o)
	}
	r.Acked = len(acked)
	if r.Errors > 0 {
		r.violate("%d requests got an unexpected status (not 200/202/5xx)", r.Errors)
	}

	// 1. lost: acknowledged but absent, or not finished after the drain.
	for id := range acked {
		ev, ok := final["orders:"+id]
		switch {
		case !ok:
			r.Lost++
		case ev.State != "done" && ev.State != "dead":
			r.NotFinished++
		}
	}
	if r.Lost > 0 {
		r.violate("%d acknowledged events lost", r.Lost)
	}
	if r.NotFinished > 0 {
		r.violate("%d acknowledged events neither done nor dead after the drain", r.NotFinished)
	}
	for _, ev := range final {
		if ev.State == "dead" {
			r.Dead++
		}
	}

	// 2. porcupine: a per-key claim register. Unknown ops whose key is absent
	// did not happen and are dropped; the others may have happened at any time
	// after their call (return = +inf), as etcd's robustness tests patch
	// theirs. A final read per key pins the final state.
	var hist []porcupine.Operation
	readAt := tl.loadEnd + int64(time.Hour)
	nextClient := 0
	for _, o := range ops {
		nextClient = max(nextClient, o.Client+1)
	}
	for id, kops := range byKey {
		_, present := final["orders:"+id]
		for _, o := range kops {
			ret := o.Return
			if o.Outcome == outUnknown {
				if !present {
					continue
				}
				ret = math.MaxInt64 - 1
			}
			hist = append(hist, porcupine.Operation{ClientId: o.Client, Input: claimIn{Key: id},
				Call: o.Call, Output: o.Outcome, Return: ret})
		}
		out := "absent"
		if present {
			out = "present"
		}
		hist = append(hist, porcupine.Operation{ClientId: nextClient, Input: claimIn{Key: id, Read: true},
			Call: readAt, Output: out, Return: readAt + 1})
	}
	res, info := porcupine.CheckOperationsVerbose(claimModel, hist, 60*time.Second)
	r.Linearizable = string(res)
	if res != porcupine.Ok {
		r.violate("claim history is not linearizable (%s)", res)
		if resultsDir != "" {
			os.MkdirAll(resultsDir, 0o755)
			p := filepath.Join(resultsDir, fmt.Sprintf("%s-seed%d-porcupine.html", r.Scenario, r.Seed))
			if err := porcupine.VisualizePath(claimModel, info, p); err == nil {
				r.VizPath = p
			}
		}
	}

	// 3. runs: double runs under a live lease, runs after done, fencing.
	r.Runs = len(runs)
	runsBy := map[string][]hrun{}
	for _, rn := range runs {
		runsBy[rn.Key] = append(runsBy[rn.Key], rn)
	}
	margin := int64(lease - time.Second)
	for key, rs := range runsBy {
		ev, ok := final[key]
		if !ok {
			r.PhantomRuns += len(rs)
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		for i := range rs {
			a := rs[i]
			if a.Outcome == "fenced" {
				r.FencedHandler++
			}
			if a.Late {
				r.LateRuns++
			}
			if ev.State == "done" && a.Token > ev.Token {
				r.RunsAfterDone++
			}
			for j := i + 1; j < len(rs); j++ {
				b := rs[j]
				if b.Start >= a.End {
					continue
				}
				switch {
				case b.Token == a.Token:
					r.SameTokenRuns++
				case b.Token > a.Token && !a.Late && b.Start-a.Start < margin:
					// b was leased while oncehook still waited for a's answer,
					// and a's lease (granted before a started) had not run out,
					// unless the leader's clock jumped ahead by what was left
					// of it: then the lease ended by the clock that grants it,
					// and only the fencing token tells the runs apart, so the
					// earlier run must not have applied its effect.
					if tl.leaderAhead != nil && a.Outcome != "ok" && b.Start-a.Start >= margin-tl.leaderAhead(a.Start, b.Start) {
						r.ClockReclaims++
						continue
					}
					r.DoubleRuns++
				}
			}
		}
		if ev.State == "done" {
			found := false
			for _, a := range rs {
				if a.Token == ev.Token && a.Outcome == "ok" {
					found = true
				}
			}
			if !found {
				r.violate("%s is done under token %d but no run under that token succeeded", key, ev.Token)
			}
		}
	}
	for id := range acked {
		ev := final["orders:"+id]
		if ev.State == "done" && len(runsBy["orders:"+id]) == 0 {
			r.violate("orders:%s is done but the handler never ran it", id)
		}
	}
	if r.DoubleRuns > 0 {
		r.violate("%d double runs while a lease was live", r.DoubleRuns)
	}
	if r.SameTokenRuns > 0 {
		r.violate("%d overlapping runs under one fencing token", r.SameTokenRuns)
	}
	if r.RunsAfterDone > 0 {
		r.violate("%d runs after the event was done", r.RunsAfterDone)
	}
	if r.PhantomRuns > 0 {
		r.violate("%d handler runs of keys absent from the final state", r.PhantomRuns)
	}

	// 4. availability and throughput.
	var news []int64
	type lat struct {
		at int64
		d  time.Duration
	}
	var lats []lat
	for _, o := range ops {
		if o.Outcome == outNew {
			news = append(news, o.Return)
		}
		if o.Outcome == outNew || o.Outcome == outDup {
			lats = append(lats, lat{o.Return, time.Duration(o.Return - o.Call)})
		}
	}
	slices.Sort(news)
	if tl.faultAt > 0 {
		last := tl.faultAt
		var gap int64
		for _, t := range news {
			if t < tl.faultAt {
				continue
			}
			if t > tl.loadEnd {
				break
			}
			gap = max(gap, t-last)
			last = t
		}
		gap = max(gap, tl.loadEnd-last)
		r.UnavailS = float64(gap) / 1e9
	}
	rate := func(from, to int64) float64 {
		if to <= from {
			return 0
		}
		n := 0
		for _, t := range news {
			if t >= from && t < to {
				n++
			}
		}
		return float64(n) / (float64(to-from) / 1e9)
	}
	p99 := func(from, to int64) time.Duration {
		var ds []time.Duration
		for _, l := range lats {
			if l.at >= from && l.at < to {
				ds = append(ds, l.d)
			}
		}
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[(len(ds)*99)/100]
	}
	warm := tl.loadStart + int64(time.Second) // skip connection set-up
	fault, heal := tl.faultAt, tl.healAt
	if fault == 0 { // baseline: thirds
		span := tl.loadEnd - warm
		fault, heal = warm+span/3, warm+2*span/3
	}
	r.BeforeRate, r.P99Before = rate(warm, fault), p99(warm, fault)
	r.DuringRate, r.P99During = rate(fault, heal), p99(fault, heal)
	r.AfterRate, r.P99After = rate(heal, tl.loadEnd), p99(heal, tl.loadEnd)
}

// claimIn is one porcupine input: a claim of Key, or the final read of it.
type claimIn struct {
	Key  string
	Read bool
}

var claimModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(claimIn).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		claimed := state.(bool)
		in := input.(claimIn)
		out := output.(string)
		if in.Read {
			return (out == "present") == claimed, claimed
		}
		switch out {
		case outNew:
			return !claimed, true
		case outDup:
			return claimed, true
		default: // unknown, and the key exists: it may have created it or not
			return true, true
		}
	},
	Equal: func(a, b any) bool { return a.(bool) == b.(bool) },
	DescribeOperation: func(input, output any) string {
		in := input.(claimIn)
		if in.Read {
			return fmt.Sprintf("read %s -> %s", in.Key, output)
		}
		return fmt.Sprintf("claim %s -> %s", in.Key, output)
	},
	DescribeState: func(state any) string {
		if state.(bool) {
			return "claimed"
		}
		return "absent"
	},
}

// grepTree counts files under dir (and the extra files) that contain any of
// needles, and names them.
func grepTree(dirs []string, needles [][]byte) (int, []string) {
	hits := 0
	var where []string
	for _, d := range dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || !fi.Mode().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, n := range needles {
				if len(n) > 0 && strings.Contains(string(b), string(n)) {
					hits++
					where = append(where, p)
					break
				}
			}
			return nil
		})
	}
	return hits, where
}
