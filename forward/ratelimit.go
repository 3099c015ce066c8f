package forward

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"oncehook/engine"
)

// MaxHold caps how long a handler's Retry-After (on 429 or 503) holds its
// whole source.
const MaxHold = 5 * time.Minute

// ReasonRateLimited is the failure reason of an event handed back because its
// source's rate limit or Retry-After hold would not let it start inside its
// lease (doc.go, "Rate limits").
const ReasonRateLimited = "rate limited"

// bucket is one source's token bucket, kept as a theoretical arrival time
// (GCRA): a delivery may start at tat - tau, and each start moves tat one
// interval on. It holds burst tokens at most; it starts with one (see
// limiter.bucket). hold is the end of a Retry-After hold: nothing starts
// before it.
type bucket struct {
	rate     float64
	burst    int
	interval time.Duration // 1/rate; 0: no rate limit
	tau      time.Duration // (burst-1) * interval
	tat      time.Time
	hold     time.Time
	budget   time.Duration // how far ahead slots may be booked before leasing pauses
	// gen counts the reloads that changed the rate or burst: a parked
	// event booked under an older gen is booked again (rebookChangedRates).
	gen uint64
}

// next is the earliest time a delivery could start, at now.
func (b *bucket) next(now time.Time) time.Time {
	s := now
	if b.hold.After(s) {
		s = b.hold
	}
	if b.interval > 0 {
		if t := b.tat.Add(-b.tau); t.After(s) {
			s = t
		}
	}
	return s
}

// take books the slot at start, which next returned.
func (b *bucket) take(start time.Time) {
	if b.interval > 0 {
		if start.After(b.tat) {
			b.tat = start
		}
		b.tat = b.tat.Add(b.interval)
	}
}

// limiter holds the buckets of one Run. The dispatcher books slots; workers
// set holds.
type limiter struct {
	mu    sync.Mutex
	lease time.Duration // Options.DefaultLease
	b     map[string]*bucket
	// parked, when set, counts the events of src parked under its
	// bucket's generation gen (not yet marked for rebooking): a rate
	// change gives their slots back before it weighs the bucket, as they
	// are booked again under the new rate. The dispatcher sets it and is
	// the only caller of bucketLocked.
	parked func(src string, gen uint64) int
}

func newLimiter(lease time.Duration) *limiter {
	return &limiter{lease: lease, b: make(map[string]*bucket)}
}

// bucketLocked returns src's bucket with tgt's rate, creating or updating it.
// A new bucket (or one whose rate was turned on by a reload) holds a single
// token: this leader does not know what an earlier leader delivered just
// before it took over, so it does not start with a whole burst.
func (l *limiter) bucketLocked(src string, tgt Target, now time.Time) *bucket {
	b := l.b[src]
	fresh := b == nil
	if fresh {
		b = &bucket{}
		l.b[src] = b
	}
	rate, burst := tgt.MaxRate, tgt.Burst
	if rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		rate, burst = 0, 0
	} else if burst < 1 {
		burst = max(1, int(math.Ceil(rate)))
	}
	if rate != b.rate || burst != b.burst {
		// A new bucket holds a single token, as does one whose rate a
		// reload turned on (the traffic before, unlimited, says nothing of
		// its burst). A reload that changed a rate keeps the share of the
		// bucket in use, capped at all of it, without the slots of its
		// parked events (they are booked again under the new rate,
		// rebookChangedRates): an idle source keeps its whole burst, one
		// that just spent it waits as long in proportion.
		used := -1.0 // a single token
		if !fresh {
			if full := spanOf(float64(b.burst) * float64(b.interval)); full > 0 {
				if l.parked != nil {
					// Their slots, due or not, go back: they are booked
					// again (rebookChangedRates).
					b.tat = b.tat.Add(-spanOf(float64(l.parked(src, b.gen)) * float64(b.interval)))
				}
				used = 0
				if b.tat.After(now) {
					used = min(float64(b.tat.Sub(now))/float64(full), 1)
				}
			}
			b.gen++
		}
		b.rate, b.burst = rate, burst
		b.interval, b.tau = 0, 0
		if rate > 0 {
			// In floating point, each capped: a rate of one event in
			// centuries must not wrap around to no limit at all.
			b.interval = max(spanOf(float64(time.Second)/rate), time.Nanosecond)
			b.tau = spanOf(float64(burst-1) * float64(b.interval))
			if used < 0 {
				b.tat = now.Add(b.tau)
			} else {
				b.tat = now.Add(spanOf(used * float64(burst) * float64(b.interval)))
			}
		}
	}
	// Its events are leased for the source's own lease when it has one
	// (Options.Leases): with forward_timeout at or past the default lease,
	// the default would leave no budget, and none of its events would wait
	// for a slot inside their lease.
	lease := l.lease
	if tgt.Lease > 0 {
		lease = tgt.Lease
	}
	b.budget = (lease - tgt.Timeout) / 2
	return b
}

// maxSpan caps the token bucket's durations: a hundred years is no limit
// anyone waits out, and its sums with a time stay far from overflowing.
const maxSpan = 100 * 365 * 24 * time.Hour

// spanOf is ns as a duration, at most maxSpan.
func spanOf(ns float64) time.Duration {
	if !(ns < float64(maxSpan)) { // NaN too
		return maxSpan
	}
	return time.Duration(ns)
}

// book decides when an event of src leased now may start: at start, when that
// is now or no later than deadline (the slot is then booked), or ok is false
// and start says when it could have. An event that can start now always
// does, whatever its deadline: only waiting is refused. gen is the bucket's
// generation the slot was booked under.
func (l *limiter) book(src string, tgt Target, now, deadline time.Time) (start time.Time, gen uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(src, tgt, now)
	start = b.next(now)
	if start.After(now) && start.After(deadline) {
		return start, b.gen, false
	}
	b.take(start)
	return start, b.gen, true
}

// limited reports whether src has a rate or is held past now.
func (l *limiter) limited(src string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[src]
	return b != nil && (b.rate > 0 || b.hold.After(now))
}

// held reports whether src is held past t.
func (l *limiter) held(src string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[src]
	return b != nil && b.hold.After(t)
}

// setHold holds src until until, and says whether the source was not held
// before (so that the hold is logged once, not once per event).
func (l *limiter) setHold(src string, now, until time.Time) (started bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b[src]
	if b == nil {
		b = &bucket{}
		l.b[src] = b
	}
	started = !b.hold.After(now)
	if until.After(b.hold) {
		b.hold = until
	}
	return started
}

// fullLocked reports whether b has slots booked further ahead than its
// budget, and until when.
func (b *bucket) fullLocked(now time.Time) (bool, time.Time) {
	if b.interval == 0 {
		return false, time.Time{}
	}
	next := b.tat.Add(-b.tau)
	if next.Sub(now) <= max(b.budget, 0) {
		return false, time.Time{}
	}
	return true, next.Add(-max(b.budget, 0))
}

// full returns the sources whose slots are booked further ahead than their
// budget, sorted: a lease takes none of their events (a hard quota of 0),
// and their claims do not carry their leases. until is the earliest time
// one of them has room again; zero when there are none. Holds do not count:
// a long hold must not stop the source's leases for longer than it lasts
// (an event that cannot start inside its lease is handed back).
func (l *limiter) full(now time.Time) (sources []string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for src, b := range l.b {
		if ok, u := b.fullLocked(now); ok {
			sources = append(sources, src)
			if until.IsZero() || u.Before(until) {
				until = u
			}
		}
	}
	slices.Sort(sources)
	return sources, until
}

// ensure makes the buckets of the named sources that have none yet, or one
// without a rate (a reload turned it on), and a rate limit now, so that room
// caps their first lease too: such a bucket holds one token, and its room is
// what it can book within its budget.
func (l *limiter) ensure(sources []string, targets func(string) (Target, bool), now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, src := range sources {
		if b := l.b[src]; b != nil && b.interval > 0 {
			continue // limited already (a reload's change of rate: gens)
		}
		if tgt, ok := targets(src); ok && tgt.MaxRate > 0 {
			l.bucketLocked(src, tgt.withDefaults(), now)
		}
	}
}

// room caps quotas (sorted by source, each once) so that a lease takes no
// more of a rate-limited source's events than can start within its budget:
// how many slots its bucket can still book no further ahead than that. A
// lease that took more would book slots past their events' leases, and
// hand those events back to pending behind newer ones, which took the
// slots meanwhile: under a steady load above the rate they waited until it
// stopped. A source without a bucket (no event booked since this leader
// started, and not among Options.LimitedSources: ensure) is not capped;
// its first lease books what it took.
//
// waiting names the sources the last lease left due events of: while one
// other than a source, and not skipped by quotas, waits, the source's share
// binds as well (see below).
func (l *limiter) room(quotas []engine.Quota, now time.Time, free int, waiting []string) []engine.Quota {
	skipped := func(src string) bool {
		i, found := slices.BinarySearchFunc(quotas, src, func(q engine.Quota, s string) int { return strings.Compare(q.Source, s) })
		return found && quotas[i].Hard && quotas[i].Max == 0
	}
	othersWait := func(src string) bool {
		return slices.ContainsFunc(waiting, func(w string) bool { return w != src && !skipped(w) })
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for src, b := range l.b {
		if b.interval == 0 {
			continue
		}
		tat := b.tat
		if tat.Before(now) {
			tat = now // an idle bucket: take moves tat to the start first
		}
		first := tat.Add(-b.tau) // the next slot, before the clamp to now
		n := 0
		if ahead := now.Add(max(b.budget, 0)).Sub(first); ahead >= 0 {
			n = int(ahead/b.interval) + 1
		}
		i, found := slices.BinarySearchFunc(quotas, src, func(q engine.Quota, s string) int { return strings.Compare(q.Source, s) })
		switch {
		case found && quotas[i].Hard && quotas[i].Max <= n:
			// Skipped already (full, or no target), or capped lower.
		case found && othersWait(src):
			// Its share binds too (what it holds of the pool counts its
			// parked events), and other sources have events due: no more
			// than the lower of the two. A quota cannot be both soft (the
			// share, then more once nobody else waits) and hard (the
			// room), so the source waits for its share to free while
			// others wait.
			quotas[i] = engine.Quota{Source: src, Max: min(n, quotas[i].Max), Hard: true}
		case found:
			quotas[i] = engine.Quota{Source: src, Max: n, Hard: true}
		case n < free:
			// An idle source's room is most often more than a lease asks
			// for: only a cap that binds takes a place among the quotas.
			quotas = slices.Insert(quotas, i, engine.Quota{Source: src, Max: n, Hard: true})
		}
	}
	if len(quotas) > engine.MaxQuotas {
		quotas = quotas[:engine.MaxQuotas] // as slots.quotas does
	}
	return quotas
}

// throttled reports whether source's slots are booked further ahead than
// its budget (full).
func (l *limiter) throttled(source string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	full := false
	if b := l.b[source]; b != nil {
		full, _ = b.fullLocked(now)
	}
	return full
}

// parked is a leased event waiting in the dispatcher, not on a worker, for its
// booked start, under its bucket's generation gen. rebook: its source's rate
// changed since; it is booked again under the new one instead of starting.
type parked struct {
	job
	start  time.Time
	gen    uint64
	rebook bool
}

// gens returns the generation of each source's bucket, after applying its
// target's rate (nil: removed; left out), so that a change no booking has
// met yet counts too.
func (l *limiter) gens(sources map[string]*Target, now time.Time) map[string]uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := make(map[string]uint64, len(sources))
	for src, tgt := range sources {
		if tgt != nil && l.b[src] != nil {
			g[src] = l.bucketLocked(src, *tgt, now).gen
		}
	}
	return g
}

// rebookChangedRates makes the parked events of every source whose rate a
// reload changed (or that a reload removed) due now, to be booked again
// (parked.rebook): slots booked under an old rate would otherwise keep a
// lowered limit from applying to a backlog already leased, or a raised one
// from releasing it. A source's events keep their order.
func (f *Forwarder) rebookChangedRates(park *parkQueue, now time.Time) {
	if len(*park) == 0 {
		return
	}
	sources := map[string]*Target{}
	removed := false
	for i := range *park {
		src := (*park)[i].ev.Source
		if _, seen := sources[src]; seen {
			continue
		}
		sources[src] = nil
		if tgt, ok := f.opts.Targets(src); ok {
			tgt = tgt.withDefaults()
			sources[src] = &tgt
		} else {
			removed = true
		}
	}
	gens := f.lim.gens(sources, now)
	stale := func(p parked) bool {
		g, ok := gens[p.ev.Source]
		return sources[p.ev.Source] == nil || ok && g != p.gen && !p.rebook
	}
	if !removed && !slices.ContainsFunc(*park, stale) {
		return
	}
	old := *park
	*park = make(parkQueue, 0, len(old))
	for _, p := range old {
		if stale(p) {
			// Due now, earlier starts first: the order they were booked in.
			p.rebook, p.start = true, now.Add(p.start.Sub(now)/(1<<20))
		}
		park.push(p)
	}
}

// parkQueue is a min-heap of parked events by start.
type parkQueue []parked

func (q *parkQueue) push(p parked) {
	*q = append(*q, p)
	s := *q
	for i := len(s) - 1; i > 0; {
		j := (i - 1) / 2
		if !s[i].start.Before(s[j].start) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}

func (q *parkQueue) pop() parked {
	s := *q
	p := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = parked{}
	s = s[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1].start.Before(s[c].start) {
			c++
		}
		if !s[c].start.Before(s[i].start) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	*q = s
	return p
}
