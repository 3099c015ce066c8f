package forward

// Delivery concurrency follows the handler (docs/architecture.md, "Delivery").
// A worker is held for as long as its handler takes to answer, so a fixed pool
// of n workers delivers at most n ÷ latency events per second: 256 workers and
// a handler that takes 200 ms cap delivery at 1,280/s, and a backlog then grows
// for as long as more arrive (measured: docs/performance.md). A larger fixed
// pool would keep up with a slow handler that scales, and push ever more
// requests at one that does not, where they only wait in its queue.
//
// So the pool grows, in steps, while it is the limit, and each step is kept
// only if it pays: after two ticks in a row in which every worker was busy and
// events were still waiting to be leased, the pool grows by a quarter (up to
// the maximum). The tick after the step is part old size, part new; the two
// ticks after that are compared with the two before the step. More than a
// tenth more deliveries and the step stays (the handler had room); otherwise
// it is undone and no step is tried for sizeHoldTicks (the handler was the
// limit, not the pool). Two ticks on each side smooth the count, which moves
// by a whole round of the pool from tick to tick when the handler takes a
// good part of a tick. After sizeCalmTicks ticks in a row without a waiting
// backlog the pool shrinks by a fifth, down to its base. Only 2xx answers
// count: a handler that fails faster with more requests does not earn more
// of them.
//
// The step function is pure (counts in, size out) so that it can be tested
// without time; the dispatcher calls it once per PollInterval tick.

const (
	sizeHoldTicks = 10 // ticks without a step after one that did not pay
	sizeCalmTicks = 5  // ticks without a waiting backlog before the pool shrinks
	sizeGainPct   = 10 // a step stays when deliveries grew by more than this %
	sizeSatTicks  = 2  // saturated ticks in a row before a step
	sizeJudgeIn   = 3  // ticks after a step when it is judged (the first is skipped)
)

// poolSizer decides the number of workers from tick to tick.
type poolSizer struct {
	base, max int
	most      int // MaxWorkers: max while bodies are small
	n         int

	prev, last int // deliveries in the tick before the last one, and in the last
	sat        int // saturated ticks in a row
	calm       int // ticks in a row without a waiting backlog
	judging    int // ticks left before the last step is judged; 0: none pending
	prevN      int // size before the step being judged
	before     int // deliveries in the two ticks that asked for that step
	hold       int // ticks left before another step may be tried
}

func newPoolSizer(base, most int) *poolSizer {
	most = max(base, most)
	return &poolSizer{base: base, max: most, most: most, n: base}
}

// limit sets the most the pool may grow to now, as the bodies in flight
// allow (Options.PoolBytes): never above MaxWorkers nor below the base. A
// pool above it comes down to it at once, and a step being judged is
// forgotten.
func (p *poolSizer) limit(most int) {
	p.max = max(p.base, min(p.most, most))
	if p.n > p.max {
		p.n, p.judging = p.max, 0
	}
}

// step takes one tick's facts, whether every worker was busy while events
// waited (saturated) and how many deliveries the handlers answered 2xx
// (delivered), and returns the pool's size for the next tick.
func (p *poolSizer) step(saturated bool, delivered int) int {
	p.prev, p.last = p.last, delivered
	if p.hold > 0 {
		p.hold--
	}
	if p.judging > 0 {
		p.judging--
		// Not more than a tenth more (nothing more, when nothing came
		// before: a handler that only times out earns no workers).
		if p.judging == 0 && (p.prev+p.last)*100 <= p.before*(100+sizeGainPct) {
			p.n, p.hold = p.prevN, sizeHoldTicks
		}
		p.sat, p.calm = 0, 0
		return p.n
	}
	if !saturated {
		p.sat = 0
		p.calm++
		if p.calm >= sizeCalmTicks && p.n > p.base {
			p.n, p.calm = max(p.base, p.n-p.n/5), 0
		}
		return p.n
	}
	p.calm = 0
	p.sat++
	if p.sat >= sizeSatTicks && p.hold == 0 && p.n < p.max {
		p.prevN, p.before, p.judging, p.sat = p.n, p.prev+p.last, sizeJudgeIn, 0
		p.n = min(p.max, p.n+max(1, p.n/4))
	}
	return p.n
}
