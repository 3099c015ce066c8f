// Package metrics owns the node's Prometheus registry and its collectors:
// the intake's request, claim and signature counters and its latency
// histogram, the forwarder's delivery, rate-limit and retention counters,
// the keys_url and schema counters, the config reload gauge, the Raft and
// event-state gauges read at scrape time (NewRaftCollector), the bridge of
// hashicorp/raft's own go-metrics (BridgeRaft), oncehook_build_info, and the
// per-source dead-letter age (NewDeadCollector). The metric names, labels
// and help texts are docs/operations.md's; the dashboard and the alert rules
// (docs/alerts.yml) read them.
//
// # What it owns
//
// One Metrics per node: New creates its registry with the process and Go
// collectors and every counter above; the wiring registers the collectors
// that read the cluster node once it is open, and hands the counting methods
// to the intake (Metrics satisfies intake.Metrics), the key sets (Keys) and
// the forwarder (Delivery, RateLimited, DeadExpired). A nil *Metrics counts
// nothing.
//
// # What it promises
//
// Labels stay low-cardinality: a source name, a status code, an outcome, a
// configured type, a state name; never a key, a URL or a body field. The
// scrape-time collectors cache nothing: a scrape costs a few atomic loads and
// short bbolt read transactions.
//
// # What it must not import
//
// Of ours, engine and cluster only, for their types, and it reads the node
// through its own small interfaces (RaftSource, DeadSource). Never intake,
// admin, forward, keyset, package main, nor fasthttp. TestDependencyRule
// keeps it so.
package metrics
