package main

import (
	"time"

	"oncehook/forward"
)

// Retention (docs/architecture.md, Event states): the sweeper's bounds. The
// dead-letter metrics are package metrics'; oncehook purge is client.go's
// cmdPurge.

// sweepLimits derives the sweeper's bounds from the running config: the
// schedule horizon is the longest backoff_max or lease of any source (or a
// handler's Retry-After hold, forward.MaxHold); the payload age the longest
// payload_retention.
func (n *node) sweepLimits() forward.Limits {
	l := forward.Limits{Horizon: max(forward.MaxHold, forward.DefaultLease)}
	cfg := n.cfg.Load()
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		l.Horizon = max(l.Horizon, time.Duration(s.BackoffMax), time.Duration(s.Lease))
		l.PayloadAge = max(l.PayloadAge, time.Duration(s.PayloadRetention))
	}
	return l
}
