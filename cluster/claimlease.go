package cluster

import (
	"sync/atomic"
	"time"

	"oncehook/engine"
)

// LeaseSlots is the leader's delivery capacity as the proposer sees it: a
// claim proposed while a worker is free carries its lease (engine
// Command.LeaseNow), so one log entry claims the event and hands it to that
// worker, with no lease entry in between (docs/architecture.md, "A claim that
// carries its lease"). The forwarder implements it; the node running it as
// leader sets it with SetLeaseSlots.
//
// Every reservation ends in exactly one DeliverLeased or ReleaseSlot with the
// ticket it got. A reservation whose event a stopped forwarder can no longer
// deliver is not lost: the event stays processing until its lease ends and a
// leader's sweeper reclaims it.
type LeaseSlots interface {
	// ReserveSlot reserves a worker for a claim of source (one that is free,
	// or one the forwarder lets commits in flight hold beyond them) and
	// returns the source's lease length (the leader's running config's),
	// which the claim then stores and is leased for, and a ticket. ok is
	// false when the claim gets none: none is free, delivery is not running
	// (more is false then: no other claim gets one either), or the source
	// has its share of the workers or is throttled (more is true).
	ReserveSlot(source string) (leaseFor time.Duration, ticket uint64, ok, more bool)
	// DeliverLeased gives the reserved worker the event the claim leased.
	DeliverLeased(ticket uint64, ev engine.Event)
	// ReleaseSlot gives back a reserved worker whose claim leased nothing
	// (a duplicate, a paused source, an ordered event behind another, a
	// failed entry).
	ReleaseSlot(ticket uint64)
}

// SetLeaseSlots makes s the capacity this node's proposer offers claims (nil:
// none; every claim then waits for a lease). Set it while leading, and unset
// it when the forwarder stops.
func (n *Node) SetLeaseSlots(s LeaseSlots) {
	if s == nil {
		n.prop.leaseSlots.Store(nil)
		return
	}
	n.prop.leaseSlots.Store(&slotsRef{s})
}

type slotsRef struct{ LeaseSlots }

// leaseReservation is one claim of an entry that carries a lease.
type leaseReservation struct {
	pos    int // the claim's position in the entry
	ticket uint64
}

// reserveLeases stamps LeaseNow on the claims of an entry this leader is about
// to propose, one per free worker, and returns the slots and the
// reservations (nil when none). Only the leader's proposer decides it: a
// LeaseNow that arrived with a command (from any caller) is cleared, so no
// claim leases an event no worker was reserved for.
func (p *proposer) reserveLeases(cmds []engine.Command) (LeaseSlots, []leaseReservation) {
	held := p.leaseSlots.Load()
	ref := held // nil once no worker is left
	var rs []leaseReservation
	for i := range cmds {
		c := &cmds[i]
		if c.Op != engine.OpClaim {
			continue
		}
		c.LeaseNow = 0
		if ref == nil {
			continue
		}
		lf, ticket, ok, more := ref.ReserveSlot(c.Source)
		if !ok {
			if !more {
				ref = nil // every worker is taken
			}
			continue
		}
		if lf <= 0 {
			ref.ReleaseSlot(ticket)
			ref = nil
			continue
		}
		// The leader's length, not the one the claim came with: the intake
		// that took it (a follower's) may run an older config, and the
		// leader's forward_timeout must end inside the lease.
		c.LeaseNow, c.LeaseFor = int64(lf), int64(lf)
		rs = append(rs, leaseReservation{pos: i, ticket: ticket})
	}
	if len(rs) == 0 {
		return nil, nil
	}
	p.claimLeases.Add(uint64(len(rs)))
	return held.LeaseSlots, rs
}

// handOver ends an entry's reservations: the events its claims leased go to
// their workers, the rest of the workers are released. res is nil when the
// entry failed.
func (p *proposer) handOver(s LeaseSlots, rs []leaseReservation, res []engine.Result) {
	for _, r := range rs {
		if r.pos < len(res) && res[r.pos].Err == nil && len(res[r.pos].Events) == 1 {
			p.claimLeased.Add(1)
			s.DeliverLeased(r.ticket, res[r.pos].Events[0])
			continue
		}
		s.ReleaseSlot(r.ticket)
	}
}

// claimLeaseCounters: claims offered a worker, and claims that leased their
// event.
type claimLeaseCounters struct {
	claimLeases atomic.Uint64
	claimLeased atomic.Uint64
}
