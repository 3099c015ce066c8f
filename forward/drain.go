package forward

import "context"

// Drain prepares a leader to step down without a second delivery: it stops
// leasing (neither the dispatcher nor a claim leases another event, and a
// parked event is not started) and waits until every delivery in flight has
// ended and its outcome was recorded, or ctx ends. It returns nil when
// nothing is in flight any more, ctx's error when ctx ended first, and nil at
// once when Run is not running.
//
// Why: a leader that hands leadership over while a handler is answering
// cannot record that answer (Complete is refused off the leader), so the
// event stays processing until its lease ends and is delivered again. A
// node that drains first hands over with no answer pending; events still
// due wait for the next leader, which leases them at once. Events parked
// for a rate limit are handed back to pending, their attempt refunded and
// their slot's time as their next try, so that the next leader (or this
// node after a restart) leases them then, instead of after their lease
// ends with an attempt spent; after a crash the lease still has to end.
//
// Drain does not end Run: the caller stops the Forwarder (by cancelling
// Run's context, or when leadership ends) after Drain returned.
func (f *Forwarder) Drain(ctx context.Context) error {
	s := f.slots
	s.mu.Lock()
	if s.n == 0 { // not running
		s.mu.Unlock()
		return nil
	}
	if !s.draining {
		s.draining = true
		s.idle = make(chan struct{})
		s.checkIdle()
	}
	idle := s.idle
	s.mu.Unlock()
	s.signal() // the dispatcher may be waiting to lease: it looks again
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkIdle closes idle when a drain waits, no worker is busy and no claim
// holds a reservation. Call with s.mu held.
func (s *slots) checkIdle() {
	if s.draining && s.busy <= 0 && s.reserved <= 0 && s.recording <= 0 && s.parked <= 0 {
		s.wakeIdle()
	}
}

// wakeIdle closes idle once. Call with s.mu held.
func (s *slots) wakeIdle() {
	if s.idle == nil {
		return
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// Undrain ends a Drain: leasing goes on as before. A leader whose hand-over
// failed (it still leads) calls it; a Run that ended since needs nothing.
func (f *Forwarder) Undrain() {
	s := f.slots
	s.mu.Lock()
	if !s.draining {
		s.mu.Unlock()
		return
	}
	s.draining = false
	s.wakeIdle()
	s.idle = nil
	s.mu.Unlock()
	s.signal() // the dispatcher leases again
}

// isDraining reports whether a drain was asked for in this run.
func (s *slots) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}
