package main

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics holds the intake's and the forwarder's Prometheus collectors. Labels
// stay low-cardinality: a source name, a status code, an outcome; never a key,
// a URL or a body field.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	claims       *prometheus.CounterVec
	sigFailures  *prometheus.CounterVec
	deliveries   *prometheus.CounterVec
	claimLatency prometheus.Histogram
	deliveryTime prometheus.Histogram
	reloadOK     prometheus.Gauge
	bodyChanged  *prometheus.CounterVec
	// replays and syncConflicts count the answers of docs/security.md's
	// replay guard and sync-mode body check.
	replays       *prometheus.CounterVec
	syncConflicts *prometheus.CounterVec

	// filtered counts deliveries a source's type filter answered without a
	// claim; the type label is a configured type or "other".
	filteredTotal *prometheus.CounterVec

	// rateLimitedTotal and rateLimitWait count deliveries that waited for
	// their source's max_rate or a handler's Retry-After, and how long.
	rateLimitedTotal *prometheus.CounterVec
	rateLimitWait    *prometheus.CounterVec

	schemaFailures *prometheus.CounterVec // intake_wiring.go
	keys           *keysMetrics           // keyset_wiring.go
	retention      *retentionMetrics      // retention.go
}

var codeStrings = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return
}()

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_requests_total", Help: "Intake requests by source and status code.",
		}, []string{"source", "code"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_claims_total", Help: "Verified deliveries by source and result (new or duplicate).",
		}, []string{"source", "result"}),
		sigFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_signature_failures_total", Help: "Rejected signatures by source and reason.",
		}, []string{"source", "reason"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_deliveries_total", Help: "Handler deliveries by source and outcome (done, retry, dead, fenced).",
		}, []string{"source", "outcome"}),
		claimLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "oncehook_claim_duration_seconds", Help: "Intake request latency, verify to answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		deliveryTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "oncehook_delivery_duration_seconds", Help: "Handler call latency.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		bodyChanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_duplicate_body_mismatch_total",
			Help: "Duplicates whose body differs from the stored event's (answered as duplicates; a sender reusing ids, or tampering).",
		}, []string{"source"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_replay_suspected_total",
			Help: "Verified bodies already held by another key's event (replay guard): answered as that event's duplicate, nothing stored.",
		}, []string{"source"}),
		syncConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_sync_conflicts_total",
			Help: "Sync-mode duplicates whose body differs from the stored event's: answered 409, never the cached answer.",
		}, []string{"source"}),
		filteredTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_filtered_total",
			Help: "Verified deliveries dropped by the source's accept_types or drop_types (200 filtered, nothing stored), by source and type (a configured type, or other).",
		}, []string{"source", "type"}),
		rateLimitedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_rate_limited_total",
			Help: "Deliveries that waited for their source's max_rate or a handler's Retry-After before they started, by source.",
		}, []string{"source"}),
		rateLimitWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_rate_limit_wait_seconds_total",
			Help: "Time deliveries waited for their source's max_rate or a handler's Retry-After, by source.",
		}, []string{"source"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "oncehook_config_last_reload_successful", Help: "1 if the last configuration reload succeeded.",
		}),
	}
	m.reloadOK.Set(1)
	m.reg.MustRegister(m.requests, m.claims, m.sigFailures, m.deliveries, m.bodyChanged, m.replays, m.syncConflicts, m.filteredTotal, m.claimLatency, m.deliveryTime, m.reloadOK,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.rateLimitedTotal, m.rateLimitWait)
	m.initSchemaMetrics()
	m.initKeysMetrics()
	m.initRetentionMetrics()
	return m
}

func (m *metrics) request(source string, code int) {
	if m == nil {
		return
	}
	c := "other"
	if code >= 0 && code < len(codeStrings) {
		c = codeStrings[code]
	}
	m.requests.WithLabelValues(source, c).Inc()
}

func (m *metrics) claim(source string, created bool) {
	if m == nil {
		return
	}
	r := "duplicate"
	if created {
		r = "new"
	}
	m.claims.WithLabelValues(source, r).Inc()
}

func (m *metrics) signatureFailure(source, reason string) {
	if m == nil {
		return
	}
	m.sigFailures.WithLabelValues(source, reason).Inc()
}

func (m *metrics) claimDuration(d time.Duration) {
	if m == nil {
		return
	}
	m.claimLatency.Observe(d.Seconds())
}

func (m *metrics) delivery(source, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(source, outcome).Inc()
	m.deliveryTime.Observe(d.Seconds())
}

func (m *metrics) replaySuspected(source string) {
	if m == nil {
		return
	}
	m.replays.WithLabelValues(source).Inc()
}

func (m *metrics) syncConflict(source string) {
	if m == nil {
		return
	}
	m.syncConflicts.WithLabelValues(source).Inc()
}

func (m *metrics) duplicateBodyChanged(source string) {
	if m == nil {
		return
	}
	m.bodyChanged.WithLabelValues(source).Inc()
}

// filtered counts a delivery dropped by its source's type filter; typ is a
// configured type or "other", so the label set stays bounded by the config.
func (m *metrics) filtered(source, typ string) {
	if m == nil {
		return
	}
	m.filteredTotal.WithLabelValues(source, typ).Inc()
}

// rateLimited counts a delivery that waited d for its source's rate limit or
// hold.
func (m *metrics) rateLimited(source string, d time.Duration) {
	if m == nil {
		return
	}
	m.rateLimitedTotal.WithLabelValues(source).Inc()
	m.rateLimitWait.WithLabelValues(source).Add(d.Seconds())
}
