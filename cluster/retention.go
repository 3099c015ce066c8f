package cluster

import (
	"context"
	"fmt"
	"time"

	"oncehook/engine"
)

// PurgeBatch is the most events one purge command deletes; Purge proposes
// commands of this size until none is left.
const PurgeBatch = 1000

// Purge deletes every event in state (dead, done or stale) updated before
// before, of source when not "", with everything it owns, in commands of
// PurgeBatch events. It may run on any node, like Replay; who and reason go
// into the leader's audit log line, one per command. It returns the keys
// deleted, also when a later command failed.
func (n *Node) Purge(ctx context.Context, state engine.State, source string, before time.Time, who, reason string) ([]string, error) {
	var keys []string
	for {
		c := engine.Command{Op: engine.OpPurge, State: state, Source: source, Before: before.UnixNano(),
			Max: PurgeBatch, Who: who, Reason: reason}
		r, err := n.applyOne(ctx, c, false)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return keys, fmt.Errorf("purge: %w", err)
		}
		keys = append(keys, r.Keys...)
		if r.N < PurgeBatch {
			return keys, nil
		}
	}
}

// PurgePreview counts, from this node's applied state, the events a Purge
// would delete and lists the first max: the dry run, without a Raft write.
func (n *Node) PurgePreview(state engine.State, source string, before time.Time, max int) ([]string, int, error) {
	return n.eng.PurgePreview(state, source, before.UnixNano(), max)
}

// PurgeRetained counts the events of a purge with these arguments whose
// retention has not ended at now (see engine.PurgeRetained).
func (n *Node) PurgeRetained(state engine.State, source string, before, now time.Time) (int, error) {
	return n.eng.PurgeRetained(state, source, before.UnixNano(), now.UnixNano())
}

// OldestDeadBySource reads, per source with dead letters, when its oldest
// went dead (see engine.OldestDeadBySource for the cost and sources).
func (n *Node) OldestDeadBySource(sources []string) (map[string]int64, error) {
	return n.eng.OldestDeadBySource(sources)
}

// auditPurge logs an applied purge command on the leader: one line per
// command, with who asked and why.
func (n *Node) auditPurge(c *engine.Command, r *engine.Result) {
	if !n.IsLeader() {
		return
	}
	n.log.Warn("purge", "audit", true, "who", c.Who, "reason", c.Reason, "state", c.State.String(),
		"source", c.Source, "before", time.Unix(0, c.Before).UTC(), "count", r.N)
}
