package engine

// A claim that carries its lease (Command.LeaseNow): when the leader's
// forwarder has a free worker, the claim itself leases the new event, so one
// log entry claims it and hands it to a worker instead of a claim entry and a
// lease entry (docs/architecture.md, "A claim that carries its lease").
//
// The claim leases the event only where a lease command would have: the
// event is new and pending (not a duplicate, not stale), its source is not
// paused (its events are held), and, for an ordered source, it is the head of
// its object's queue (order.go). Otherwise it stays pending and a later lease
// takes it. The fencing token is the entry's index, as for a lease, and
// Attempts counts the lease.

// leaseClaimed leases the pending event ev that claim c is creating, when c
// asks for it and the rules above let it go, and reports whether it did. ev
// has its order queue entry (when ordered) but no due entry yet; the caller
// indexes it as pending when it was not leased. Records and the states index
// are the caller's.
func (a *applier) leaseClaimed(c *Command, ev *Event) (bool, error) {
	if c.LeaseNow <= 0 || ev.State != StatePending || a.paused(ev.Source) {
		return false, nil
	}
	if ev.OrderObject != "" && !a.isHead(ev) {
		return false, nil
	}
	lf := ev.LeaseFor
	if lf == 0 {
		lf = c.LeaseNow
	}
	ev.State = StateProcessing
	ev.Token = a.token(c)
	ev.Attempts = 1
	ev.NextAttemptAt = 0
	ev.LeaseUntil = c.Now + lf
	return true, a.leases.Put(a.tk(ev.LeaseUntil, ev.Key), empty)
}

// claimLeaseResult is the result of a claim that leased its event: Created,
// processing, and the event in Events with its payload and headers, as a
// lease returns it. The payload and headers are the command's (for an entry
// decoded with DecodeEntryShared, the log entry's bytes, which nothing
// writes to).
func claimLeaseResult(c *Command, ev *Event) Result {
	out := *ev
	out.Payload, out.Headers = c.Payload, c.Headers
	return Result{Created: true, State: StateProcessing, Events: []Event{out}, N: 1}
}
