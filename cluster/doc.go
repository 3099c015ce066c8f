// Package cluster replicates the engine's commands with hashicorp/raft.
//
// It owns the Raft node (log and stable store in raft-boltdb, file snapshots
// and when to take them, a TCP or in-memory transport), the FSM that applies committed entries to the
// engine in one bbolt transaction per batch, the group-commit proposer that
// packs concurrent commands into one log entry, and the internal channel a
// follower uses to hand its commands to the leader.
//
// Invariants:
//   - A command's outcome is decided only inside the FSM (put-if-absent on the
//     committed log), never by a read before proposing.
//   - Every time a command carries is stamped by the leader's proposer
//     (Command.Now); the FSM never reads a clock.
//   - A failed FSM write stops the process: raft would otherwise advance the
//     applied index past an entry this node never stored.
//   - Leader-only work (delivery, sweeping) starts after a Barrier, so the FSM
//     has applied every entry of earlier terms, and stops on losing leadership.
//
// cluster imports engine; it must not import providers, forward, fasthttp or
// package main. See DESIGN.md in this folder for how a claim travels.
package cluster
