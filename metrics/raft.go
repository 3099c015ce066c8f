package metrics

import (
	"runtime"
	"runtime/debug"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"oncehook/cluster"
	"oncehook/engine"
)

// raftCollector reads the cluster node at scrape time: role, indexes, leader
// changes, events per state and the age of the oldest dead letter, plus
// oncehook_build_info. Nothing is cached between scrapes and nothing runs
// between them; a scrape costs a few atomic loads and two short bbolt read
// transactions (the counters bucket, and one index entry of the dead state).
//
// Labels stay low-cardinality: a state name, and the build's version strings.
type raftCollector struct {
	node  RaftSource
	build [3]string // version, revision, goversion

	isLeader, hasLeader, commit, applied, lastContact, unreachable, clockHeld, leaderChanges *prometheus.Desc
	storeFailing, storeErrors, peersNotStoring                                               *prometheus.Desc
	events, oldestDead, buildInfo                                                            *prometheus.Desc
}

// RaftSource is what the Raft collector needs from the cluster node.
type RaftSource interface {
	// Status reports role, leader, indexes and the leader-change count.
	Status() cluster.Status
	// LastContactAge is 0 on the leader, -1 when this node never heard a leader.
	LastContactAge() time.Duration
	// Counts reports how many events are in each state (and per source).
	Counts() (map[engine.State]int, map[string]int, error)
	// List with State set walks that state's index oldest UpdatedAt first.
	List(engine.ListFilter) ([]engine.Event, error)
}

var _ RaftSource = (*cluster.Node)(nil)

// NewRaftCollector returns the collector of the Raft and event-state gauges
// read from n at scrape time, and of oncehook_build_info with version (the
// binary's, set at build time).
func NewRaftCollector(n RaftSource, version string) prometheus.Collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &raftCollector{
		node:            n,
		build:           buildLabels(version),
		isLeader:        desc("oncehook_raft_is_leader", "1 if this node is the Raft leader."),
		hasLeader:       desc("oncehook_raft_has_leader", "1 if this node knows a Raft leader."),
		commit:          desc("oncehook_raft_commit_index", "The Raft commit index this node knows."),
		applied:         desc("oncehook_raft_applied_index", "The last Raft index applied to this node's state machine."),
		lastContact:     desc("oncehook_raft_last_contact_seconds", "Seconds since this follower heard from the leader; 0 on the leader, -1 if never."),
		unreachable:     desc("oncehook_raft_peers_unreachable", "On the leader, the members its heartbeats failed to reach in the last minute; 0 on other nodes."),
		storeFailing:    desc("oncehook_raft_store_failing", "1 while this node cannot store raft log entries or snapshots (its last attempt failed: a full or read-only disk); 0 otherwise."),
		peersNotStoring: desc("oncehook_raft_peers_not_storing", "On the leader, the followers that refused the last append it sent them because they could not store it (a full or read-only disk), and that it is sending it to again; 0 on other nodes."),
		storeErrors:     desc("oncehook_raft_store_errors_total", "Failed raft log appends, snapshot writes and snapshot installs on this node since it started: a full or read-only disk, or a snapshot from the leader that would not install."),
		clockHeld:       desc("oncehook_raft_clock_held", "1 on a leader whose clock disagrees with a majority of the voters by more than a minute: it ends no retention bucket and drops no payload until it agrees; 0 otherwise."),
		leaderChanges:   desc("oncehook_raft_leader_changes_total", "Leader changes this process has seen: another leader, or the same one elected again in a new term."),
		events:          desc("oncehook_events", "Events in the replicated state, by state.", "state"),
		oldestDead:      desc("oncehook_oldest_dead_seconds", "Age of the oldest dead letter (since it went dead); 0 when there is none."),
		buildInfo:       desc("oncehook_build_info", "Always 1; the labels say which build runs.", "version", "revision", "goversion"),
	}
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.isLeader, c.hasLeader, c.commit, c.applied, c.lastContact,
		c.unreachable, c.storeFailing, c.storeErrors, c.peersNotStoring, c.clockHeld, c.leaderChanges, c.events, c.oldestDead, c.buildInfo} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.node.Status()
	gauge(c.isLeader, b2f(st.State == "leader"))
	gauge(c.hasLeader, b2f(st.LeaderID != ""))
	gauge(c.commit, float64(st.CommitIndex))
	gauge(c.applied, float64(st.AppliedIndex))
	if age := c.node.LastContactAge(); age < 0 {
		gauge(c.lastContact, -1)
	} else {
		gauge(c.lastContact, age.Seconds())
	}
	gauge(c.unreachable, float64(st.Unreachable))
	gauge(c.storeFailing, b2f(st.StoreFailing != ""))
	gauge(c.peersNotStoring, float64(len(st.PeersNotStoring)))
	ch <- prometheus.MustNewConstMetric(c.storeErrors, prometheus.CounterValue, float64(st.StoreErrors))
	gauge(c.clockHeld, b2f(st.ClockHeld != ""))
	ch <- prometheus.MustNewConstMetric(c.leaderChanges, prometheus.CounterValue, float64(st.LeaderChanges))
	gauge(c.buildInfo, 1, c.build[:]...)

	// A storage error leaves these series out of this scrape rather than
	// report a wrong zero; the scrape itself still succeeds.
	if byState, _, err := c.node.Counts(); err == nil {
		// Every state, zeros included, so that a dashboard never sees a
		// series appear out of nowhere.
		for _, s := range engine.States {
			gauge(c.events, float64(byState[s]), s.String())
		}
	}
	if dead, err := c.node.List(engine.ListFilter{State: engine.StateDead, Limit: 1}); err == nil {
		age := 0.0
		if len(dead) == 1 {
			age = max(0, time.Since(time.Unix(0, dead[0].UpdatedAt)).Seconds())
		}
		gauge(c.oldestDead, age)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildLabels returns version, the VCS revision go build embedded, and the Go
// version, for oncehook_build_info.
func buildLabels(version string) [3]string {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return [3]string{version, rev, runtime.Version()}
}

// BridgeRaft routes what hashicorp/raft and raft-boltdb emit through
// go-metrics into the registry, as oncehook_raft_* (timers are summaries in
// milliseconds, as go-metrics measures them).
//
// raft v1.7.3 and raft-boltdb/v2 v2.3.1 emit through
// github.com/hashicorp/go-metrics/compat, which without build tags forwards to
// armon/go-metrics; this file uses the same compat packages, so the bridge
// follows whichever implementation a build tag selects. go-metrics keeps one
// process-wide sink: the node started last owns it (one per process outside
// tests).
//
// Hostname and runtime metrics are off (the Go collector already reports the
// runtime). The legacy per-peer series, whose metric names carry a peer id
// (raft emits a labelled twin of each), are filtered out. Series never expire:
// their label values (peer ids, RPC types) are bounded by the cluster's size.
func (m *Metrics) BridgeRaft() error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Name:       "oncehook_go_metrics_bridge",
		Registerer: m.reg,
		Expiration: 0,
	})
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig("oncehook")
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableRuntimeMetrics = false
	cfg.BlockedPrefixes = []string{
		"oncehook.raft.replication.appendEntries.rpc.",
		"oncehook.raft.replication.appendEntries.logs.",
		"oncehook.raft.replication.heartbeat.",
		"oncehook.raft.replication.installSnapshot.",
	}
	_, err = gometrics.NewGlobal(cfg, sink)
	return err
}
