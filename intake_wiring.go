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

// claimNotCommitted names, for the sender's 503, the cluster errors after
// which a claim is not known to be committed; "" for any other error. An
// unknown outcome is not called a loss of quorum: the command may well
// commit, and the retry then finds the event (docs/reference.md).
func claimNotCommitted(err error) string {
	switch {
	case errors.Is(err, cluster.ErrIndeterminate):
		return "commit outcome unknown (leader changed or commit timed out): not acknowledged, retry"
	case errors.Is(err, cluster.ErrPeerBusy):
		return "the leader takes no more cluster connections from this node's address (send to another node): not committed, retry"
	case errors.Is(err, cluster.ErrPeerUnproven):
		return "the leader refused this node's cluster handshake (send to another node): not committed, retry"
	case errors.Is(err, cluster.ErrRemoved):
		return "this node was removed from the cluster (send to another node): not committed, retry"
	case errors.Is(err, cluster.ErrNoLeader):
		return "no leader (election in progress or no quorum): not committed, retry"
	case errors.Is(err, cluster.ErrNotLeader):
		return "leadership moved while claiming: not committed, retry"
	case errors.Is(err, cluster.ErrShutdown):
		return "node shutting down: not committed, retry"
	}
	return ""
}

// *metrics.Metrics counts the intake's requests, claims and refusals.
var _ intake.Metrics = (*metrics.Metrics)(nil)
