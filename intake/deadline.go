package intake

import (
	"context"
	"sync/atomic"
	"time"
)

// claimDeadlines hands out the contexts that bound how long a claim waits for
// its commit. The bound is a safety net (a commit normally takes
// milliseconds), so it need not be exact: every claim that starts within one
// step shares one context, which ends between timeout and timeout+step after
// each of them started. A context of its own per claim cost a timer and three
// allocations on every request.
type claimDeadlines struct {
	timeout time.Duration
	step    time.Duration
	cur     atomic.Pointer[sharedDeadline]
}

// sharedDeadline is one step's context.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // never called early: the deadline ends it
	until  time.Time          // handed out to claims that start before this
}

// maxDeadlineStep caps the step, so that a long timeout is not stretched by
// much in absolute terms either.
const maxDeadlineStep = 100 * time.Millisecond

func newClaimDeadlines(timeout time.Duration) *claimDeadlines {
	return &claimDeadlines{timeout: timeout, step: max(min(timeout/16, maxDeadlineStep), time.Millisecond)}
}

// get returns a context that ends no earlier than timeout after now and no
// later than timeout+step after it. now is the wall clock: context deadlines
// are.
func (d *claimDeadlines) get(now time.Time) context.Context {
	if c := d.cur.Load(); c != nil && now.Before(c.until) {
		return c.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(d.timeout+d.step))
	next := &sharedDeadline{ctx: ctx, cancel: cancel, until: now.Add(d.step)}
	// A claim that raced here and lost uses its own context; the winner's
	// serves the rest of the step.
	if old := d.cur.Load(); old == nil || !now.Before(old.until) {
		d.cur.CompareAndSwap(old, next)
	}
	return ctx
}
