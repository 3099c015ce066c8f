package engine

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// openApplier applies entries to e in its pending transaction (deferred),
// each at the next index, failing the test on an engine error.
func openApplier(t *testing.T, e *Engine) func(cmds ...Command) []Result {
	idx := uint64(0)
	return func(cmds ...Command) []Result {
		t.Helper()
		idx++
		rs, err := e.ApplyBatchDeferred([]Entry{{Index: idx, Cmds: cmds}})
		if err != nil {
			t.Fatal(err)
		}
		return rs[0]
	}
}

// TestLeaseDueOrderedFollowerInOpenTransaction: an ordered event claimed
// behind its object's head (Held: its claim wakes no lease) whose head ends
// in the same open transaction is leasable, and LeaseDue says so: its due
// entry is noted although no lease could take it when it was put.
func TestLeaseDueOrderedFollowerInOpenTransaction(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	apply := openApplier(t, e)
	apply(orderedClaim("src:h", t0, "obj", 1))
	l := apply(leaseCmd(t0, 10))
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if r := apply(orderedClaim("src:f", t0+sec, "obj", 2)); !r[0].Held {
		t.Fatalf("the follower is not held: %+v", r[0])
	}
	apply(completeCmd("src:h", l[0].Events[0].Token, t0+2*sec))
	if due, err := e.LeaseDue(t0+2*sec, nil); err != nil || !due {
		t.Fatalf("LeaseDue = %v, %v with the follower leasable in the open transaction", due, err)
	}
	if got := apply(leaseCmd(t0+2*sec, 10)); len(got[0].Events) != 1 {
		t.Fatalf("the lease took %d events, want the follower", len(got[0].Events))
	}
}

// TestLeaseDueReclaimHorizonInOpenTransaction: a reclaim's horizon, in the
// open transaction, brings a retry committed an hour ahead to within a
// second; LeaseDue says it is due once that second has passed.
func TestLeaseDueReclaimHorizonInOpenTransaction(t *testing.T) {
	e := mustOpen(t, Options{NoSync: true})
	apply := openApplier(t, e)
	apply(claimCmd("src:a", t0))
	l := apply(leaseCmd(t0, 10))
	f := failCmd("src:a", l[0].Events[0].Token, t0, 0)
	f.RetryIn = hour
	apply(f)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	apply(Command{Op: OpReclaim, Now: t0 + sec, Horizon: sec})
	if due, err := e.LeaseDue(t0+3*sec, nil); err != nil || !due {
		t.Fatalf("LeaseDue = %v, %v; the reclaim moved the retry to t0+2s in the open transaction", due, err)
	}
	if got := apply(leaseCmd(t0+3*sec, 10)); len(got[0].Events) != 1 {
		t.Fatalf("the lease took %d events", len(got[0].Events))
	}
}

// TestLeaseDueNeverFalseWhileLeasable: random sequences of claims (ordered
// or not, leasing themselves or not), leases with and without a source
// skipped, completions, fails and refunds, reclaims with a horizon,
// replays, pauses, resumes, expiries and commits at random points; after
// each step, whenever LeaseDue says false, a lease at that moment takes
// nothing. LeaseDue may say true for nothing (a lease then finds nothing);
// a false while an event is leasable leaves it waiting for a poll tick.
func TestLeaseDueNeverFalseWhileLeasable(t *testing.T) {
	seeds := 400
	if testing.Short() {
		seeds = 50
	}
	for seed := range int64(seeds) {
		leaseDueModel(t, seed)
		if t.Failed() {
			return
		}
	}
}

func leaseDueModel(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	e := mustOpen(t, Options{NoSync: true})
	defer e.Close()
	apply := openApplier(t, e)
	now := t0
	type leased struct {
		key   string
		token uint64
	}
	var processing []leased
	var finished []string
	var steps []string // what ran, for the failure's report
	sources := []string{"a", "b", "c"}
	run := func(cmds ...Command) []Result {
		t.Helper()
		rs := apply(cmds...)
		for i, c := range cmds {
			steps = append(steps, fmt.Sprintf("%v key=%s src=%s obj=%s now=+%ds: %v", c.Op, c.Key, c.Source, c.OrderObject, (c.Now-t0)/sec, rs[i].Err))
		}
		return rs
	}
	take := func(r Result) {
		for _, ev := range r.Events {
			processing = append(processing, leased{ev.Key, ev.Token})
		}
	}
	pick := func() leased {
		i := rng.Intn(len(processing))
		p := processing[i]
		processing = slices.Delete(processing, i, i+1)
		return p
	}
	skip := func() []Quota {
		if rng.Intn(3) != 0 {
			return nil
		}
		return []Quota{{Source: sources[rng.Intn(len(sources))], Hard: true}}
	}
	flush := func() {
		if err := e.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for step := range 120 {
		switch rng.Intn(14) {
		case 0, 1, 2:
			src := sources[rng.Intn(len(sources))]
			n++
			c := claimFrom(src, fmt.Sprintf("%s:k%d", src, n), now)
			if rng.Intn(2) == 0 {
				c.OrderObject, c.OrderTime = fmt.Sprintf("%s:o%d", src, rng.Intn(2)), int64(n)
			}
			if rng.Intn(4) == 0 {
				c.LeaseNow, c.LeaseFor = 30*sec, 30*sec
			}
			take(run(c)[0])
		case 3, 4:
			l := leaseCmd(now, 1+rng.Intn(3))
			l.Quotas = skip()
			take(run(l)[0])
		case 5, 6:
			if len(processing) > 0 {
				p := pick()
				run(completeCmd(p.key, p.token, now))
				finished = append(finished, p.key)
			}
		case 7:
			if len(processing) > 0 {
				p := pick()
				f := failCmd(p.key, p.token, now, 2)
				f.RetryIn = int64(rng.Intn(3)) * sec
				f.Refund = rng.Intn(3) == 0
				run(f)
				finished = append(finished, p.key)
			}
		case 8:
			rc := Command{Op: OpReclaim, Now: now}
			if rng.Intn(2) == 0 {
				rc.Horizon = sec
			}
			run(rc)
		case 9:
			if len(finished) > 0 {
				run(Command{Op: OpReplay, Now: now, Keys: []string{finished[rng.Intn(len(finished))]}, Who: "ops", LeaseFor: 30 * sec})
			}
		case 10:
			run(pauseCmd(sources[rng.Intn(len(sources))], now))
		case 11:
			run(resumeCmd(sources[rng.Intn(len(sources))], now))
		case 12:
			flush()
		case 13:
			now += int64(rng.Intn(40)) * sec
			if rng.Intn(10) == 0 {
				run(Command{Op: OpExpire, Now: now})
			}
		}
		if rng.Intn(3) == 0 {
			flush()
		}
		q, at := skip(), now+int64(rng.Intn(3))*sec
		due, err := e.LeaseDue(at, q)
		if err != nil {
			t.Fatal(err)
		}
		if !due {
			l := leaseCmd(at, 1000)
			l.Quotas = q
			r := run(l)
			if len(r[0].Events) > 0 {
				for _, s := range steps {
					t.Log(s)
				}
				t.Fatalf("seed %d, step %d: LeaseDue(+%ds, %v) = false (transaction open: %v), yet a lease took %d events (%s)",
					seed, step, (at-t0)/sec, q, e.open.Load(), len(r[0].Events), r[0].Events[0].Key)
			}
			take(r[0])
		}
		now = max(now, at)
	}
}
