package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"oncehook/engine"
)

// Metrics holds the node's registry and the intake's, the key sets' and the
// forwarder's Prometheus collectors. Labels stay low-cardinality: a source
// name, a status code, an outcome; never a key, a URL or a body field.
type Metrics struct {
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

	// Filtered counts deliveries a source's type filter answered without a
	// claim; the type label is a configured type or "other".
	filteredTotal *prometheus.CounterVec

	// rateLimitedTotal and rateLimitWait count deliveries that waited for
	// their source's max_rate or a handler's Retry-After, and how long.
	rateLimitedTotal *prometheus.CounterVec
	rateLimitWait    *prometheus.CounterVec

	// schemaFailures counts bodies refused by their source's schema_file.
	schemaFailures *prometheus.CounterVec
	// keysFetchFailures and keysActive are the keys_url collectors.
	keysFetchFailures *prometheus.CounterVec
	keysActive        *prometheus.GaugeVec
	// deadExpired counts the dead letters Expire deleted after their
	// dead_retention.
	deadExpired *prometheus.CounterVec
	// payloadsDropped counts the payloads the leader's sweeper dropped after
	// their payload_retention.
	payloadsDropped prometheus.Counter
	// leasesReclaimed counts the leases the leader's sweeper found ended
	// unanswered: each of those events goes to its handler again.
	leasesReclaimed prometheus.Counter
	// deliveryWorkers is the leader's delivery pool size (forward's
	// OnWorkers); 0 on a follower.
	deliveryWorkers prometheus.Gauge
}

var codeStrings = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return
}()

// New creates the node's registry and registers on it the process and Go
// collectors and every counter, histogram and gauge of Metrics.
func New() *Metrics {
	m := &Metrics{
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
			Name: "oncehook_deliveries_total", Help: "Handler deliveries by source and outcome (done, retry, dead, fenced, error: the outcome could not be recorded, e.g. leadership lost; the lease expires and the event goes out again).",
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
			Help: "Duplicates whose body differs from the stored event's (a sender reusing ids, or tampering): answered as duplicates, or 409 on a sync source (also in oncehook_sync_conflicts_total).",
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
		schemaFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_schema_failures_total", Help: "Verified deliveries refused by the source's schema_file (400), by source.",
		}, []string{"source"}),
		keysFetchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_keys_fetch_failures_total", Help: "Failed keys_url fetches (network, status, size, bad document), by source.",
		}, []string{"source"}),
		keysActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncehook_keys_active", Help: "keys_url keys in force (past nbf, before exp), by source.",
		}, []string{"source"}),
		deadExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_dead_expired_total",
			Help: "Dead letters deleted because their source's dead_retention passed (each logged at warn with its key), by source.",
		}, []string{"source"}),
		payloadsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncehook_payloads_dropped_total",
			Help: "Payloads of done events this node's sweeper dropped after their payload_retention (the leader sweeps; the drop is replicated).",
		}),
		leasesReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "oncehook_leases_reclaimed_total",
			Help: "Events this node's sweeper returned to pending because their lease ended unanswered (a leader that died or stalled mid-delivery, a handler slower than its lease): each is delivered again.",
		}),
		deliveryWorkers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "oncehook_delivery_workers",
			Help: "Requests to handlers this node's forwarder may have in flight at once: the leader's delivery pool, which grows past its base while a slow handler keeps answering more; 0 on a follower.",
		}),
	}
	m.reloadOK.Set(1)
	m.reg.MustRegister(m.requests, m.claims, m.sigFailures, m.deliveries, m.bodyChanged, m.replays, m.syncConflicts, m.filteredTotal, m.claimLatency, m.deliveryTime, m.reloadOK,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.rateLimitedTotal, m.rateLimitWait)
	m.reg.MustRegister(m.schemaFailures)
	m.reg.MustRegister(m.keysFetchFailures, m.keysActive)
	m.reg.MustRegister(m.deadExpired, m.payloadsDropped, m.leasesReclaimed)
	m.reg.MustRegister(m.deliveryWorkers)
	return m
}

// Registry is the node's registry: what /metrics serves, and where the
// wiring registers the collectors that read the cluster node.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Collectors are the counters, histograms and gauges New registered (not the
// process and Go collectors): every oncehook series but the scrape-time
// collectors'.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.claims, m.sigFailures, m.deliveries, m.claimLatency, m.deliveryTime,
		m.reloadOK, m.bodyChanged, m.replays, m.syncConflicts, m.schemaFailures, m.keysFetchFailures, m.keysActive,
		m.filteredTotal, m.rateLimitedTotal, m.rateLimitWait, m.deadExpired, m.payloadsDropped, m.leasesReclaimed, m.deliveryWorkers}
}

// DeliveryWorkers sets oncehook_delivery_workers to the delivery pool's size.
func (m *Metrics) DeliveryWorkers(n int) {
	if m == nil {
		return
	}
	m.deliveryWorkers.Set(float64(n))
}

// ConfigReloaded sets oncehook_config_last_reload_successful.
func (m *Metrics) ConfigReloaded(ok bool) {
	if m == nil {
		return
	}
	m.reloadOK.Set(b2f(ok))
}

// Request counts one answered intake request by source and status code.
func (m *Metrics) Request(source string, code int) {
	if m == nil {
		return
	}
	c := "other"
	if code >= 0 && code < len(codeStrings) {
		c = codeStrings[code]
	}
	m.requests.WithLabelValues(source, c).Inc()
}

// Claim counts a verified delivery, new or duplicate.
func (m *Metrics) Claim(source string, created bool) {
	if m == nil {
		return
	}
	r := "duplicate"
	if created {
		r = "new"
	}
	m.claims.WithLabelValues(source, r).Inc()
}

// SignatureFailure counts a rejected signature by reason.
func (m *Metrics) SignatureFailure(source, reason string) {
	if m == nil {
		return
	}
	m.sigFailures.WithLabelValues(source, reason).Inc()
}

// ClaimDuration observes one intake request's latency.
func (m *Metrics) ClaimDuration(d time.Duration) {
	if m == nil {
		return
	}
	m.claimLatency.Observe(d.Seconds())
}

// Delivery counts one handler call by outcome and observes its latency.
func (m *Metrics) Delivery(source, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(source, outcome).Inc()
	m.deliveryTime.Observe(d.Seconds())
}

// ReplaySuspected counts a body the replay guard found under another key.
func (m *Metrics) ReplaySuspected(source string) {
	if m == nil {
		return
	}
	m.replays.WithLabelValues(source).Inc()
}

// SyncConflict counts a sync-mode duplicate whose body differs (409).
func (m *Metrics) SyncConflict(source string) {
	if m == nil {
		return
	}
	m.syncConflicts.WithLabelValues(source).Inc()
}

// DuplicateBodyChanged counts a duplicate whose body differs from the
// stored event's.
func (m *Metrics) DuplicateBodyChanged(source string) {
	if m == nil {
		return
	}
	m.bodyChanged.WithLabelValues(source).Inc()
}

// Filtered counts a delivery dropped by its source's type filter; typ is a
// configured type or "other", so the label set stays bounded by the config.
func (m *Metrics) Filtered(source, typ string) {
	if m == nil {
		return
	}
	m.filteredTotal.WithLabelValues(source, typ).Inc()
}

// RateLimited counts a delivery that waited d for its source's rate limit or
// hold.
func (m *Metrics) RateLimited(source string, d time.Duration) {
	if m == nil {
		return
	}
	m.rateLimitedTotal.WithLabelValues(source).Inc()
	m.rateLimitWait.WithLabelValues(source).Add(d.Seconds())
}

// SchemaFailure counts a body refused by its source's schema.
func (m *Metrics) SchemaFailure(source string) {
	if m == nil {
		return
	}
	m.schemaFailures.WithLabelValues(source).Inc()
}

// ConfiguredSources exports the per-source counters at 0 for sources, so
// that a rate or an alert sees each series before its first event: every
// counter labelled by source alone, and the claims' new and duplicate.
// Series with an open second label (a status code, a reason, an event
// type, a delivery's outcome) appear with their first count.
func (m *Metrics) ConfiguredSources(sources []string) {
	if m == nil {
		return
	}
	for _, s := range sources {
		for _, v := range []*prometheus.CounterVec{m.bodyChanged, m.replays, m.syncConflicts,
			m.rateLimitedTotal, m.rateLimitWait, m.schemaFailures, m.deadExpired, m.keysFetchFailures} {
			v.WithLabelValues(s)
		}
		m.claims.WithLabelValues(s, "new")
		m.claims.WithLabelValues(s, "duplicate")
	}
}

// DeadExpired counts one dead letter deleted by expiry.
func (m *Metrics) DeadExpired(ev engine.Event) {
	if m == nil {
		return
	}
	m.deadExpired.WithLabelValues(ev.Source).Inc()
}

// PayloadsDropped counts n payloads dropped by the sweeper.
func (m *Metrics) PayloadsDropped(n int) {
	if m == nil {
		return
	}
	m.payloadsDropped.Add(float64(n))
}

// LeasesReclaimed counts n leases reclaimed by the sweeper.
func (m *Metrics) LeasesReclaimed(n int) {
	if m == nil {
		return
	}
	m.leasesReclaimed.Add(float64(n))
}

// Keys is the key sets' view of the metrics (keyset.Metrics).
func (m *Metrics) Keys() Keys { return Keys{m} }

// Keys counts the keys_url fetches and the keys in force.
type Keys struct{ m *Metrics }

// FetchFailure counts a failed fetch of source's keys_url.
func (k Keys) FetchFailure(source string) {
	if k.m == nil {
		return
	}
	k.m.keysFetchFailures.WithLabelValues(source).Inc()
}

// Active reports how many of source's published keys are in force.
func (k Keys) Active(source string, n int) {
	if k.m == nil {
		return
	}
	k.m.keysActive.WithLabelValues(source).Set(float64(n))
}

// Listener exports a listener's open connections and the connections it
// refused (over a cap; on the cluster port also those that failed to
// authenticate), read at scrape time.
func (m *Metrics) Listener(name string, open func() int, refused func() uint64) {
	labels := prometheus.Labels{"listener": name}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "oncehook_connections_open", Help: "Connections open on a listener (intake, admin, cluster).", ConstLabels: labels,
		}, func() float64 { return float64(open()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "oncehook_connections_refused_total", Help: "Connections a listener closed at once: over its caps, or (cluster) not authenticated.", ConstLabels: labels,
		}, func() float64 { return float64(refused()) }),
	)
}

// IdleClosed reports the connections an HTTP listener closed while they
// waited between requests, to take a new one when full (connlimit).
func (m *Metrics) IdleClosed(name string, closed func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "oncehook_connections_idle_closed_total", Help: "Connections idle between requests that a full listener (intake, admin) closed to take a new one.",
		ConstLabels: prometheus.Labels{"listener": name},
	}, func() float64 { return float64(closed()) }))
}
