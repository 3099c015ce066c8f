package main

// The intake package's wiring: its store is the cluster node, the claim
// errors it answers as a loss of quorum are the cluster's, and its counters
// are this process's Prometheus collectors.

import (
	"errors"

	"oncehook/cluster"
	"oncehook/intake"
	"oncehook/metrics"
)

var _ intake.Store = (*cluster.Node)(nil)

// claimNotCommitted: the cluster errors after which a claim is not known to
// be committed (no leader, not the leader, shutting down, outcome unknown).
func claimNotCommitted(err error) bool {
	return errors.Is(err, cluster.ErrNoLeader) || errors.Is(err, cluster.ErrIndeterminate) ||
		errors.Is(err, cluster.ErrShutdown) || errors.Is(err, cluster.ErrNotLeader)
}

// *metrics.Metrics counts the intake's requests, claims and refusals.
var _ intake.Metrics = (*metrics.Metrics)(nil)
