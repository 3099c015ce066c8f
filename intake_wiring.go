package main

// The intake package's wiring: its store is the cluster node, the claim
// errors it answers as a loss of quorum are the cluster's, and its counters
// are this process's Prometheus collectors.

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/cluster"
	"oncehook/intake"
)

var _ intake.Store = (*cluster.Node)(nil)

// claimNotCommitted: the cluster errors after which a claim is not known to
// be committed (no leader, not the leader, shutting down, outcome unknown).
func claimNotCommitted(err error) bool {
	return errors.Is(err, cluster.ErrNoLeader) || errors.Is(err, cluster.ErrIndeterminate) ||
		errors.Is(err, cluster.ErrShutdown) || errors.Is(err, cluster.ErrNotLeader)
}

// intakeMetrics is the intake's view of the metrics (intake.Metrics).
type intakeMetrics struct{ m *metrics }

var _ intake.Metrics = intakeMetrics{}

func (i intakeMetrics) Request(source string, code int)        { i.m.request(source, code) }
func (i intakeMetrics) Claim(source string, created bool)      { i.m.claim(source, created) }
func (i intakeMetrics) SignatureFailure(source, reason string) { i.m.signatureFailure(source, reason) }
func (i intakeMetrics) ClaimDuration(d time.Duration)          { i.m.claimDuration(d) }
func (i intakeMetrics) ReplaySuspected(source string)          { i.m.replaySuspected(source) }
func (i intakeMetrics) SyncConflict(source string)             { i.m.syncConflict(source) }
func (i intakeMetrics) DuplicateBodyChanged(source string)     { i.m.duplicateBodyChanged(source) }
func (i intakeMetrics) Filtered(source, typ string)            { i.m.filtered(source, typ) }
func (i intakeMetrics) SchemaFailure(source string)            { i.m.schemaFailure(source) }

// initSchemaMetrics creates and registers the schema rejection counter; called
// by newMetrics.
func (m *metrics) initSchemaMetrics() {
	m.schemaFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "oncehook_schema_failures_total", Help: "Verified deliveries refused by the source's schema_file (400), by source.",
	}, []string{"source"})
	m.reg.MustRegister(m.schemaFailures)
}

// schemaFailure counts a body refused by its source's schema.
func (m *metrics) schemaFailure(source string) {
	if m == nil {
		return
	}
	m.schemaFailures.WithLabelValues(source).Inc()
}
