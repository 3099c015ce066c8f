package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/admin"
	"oncehook/cluster"
	"oncehook/engine"
	"oncehook/forward"
)

// Retention (docs/architecture.md, Event states): the sweeper's bounds, the
// dead-letter metrics, and purge (POST /v1/purge, oncehook purge).

// retentionMetrics counts the dead letters Expire deleted after their
// dead_retention.
type retentionMetrics struct {
	deadExpired *prometheus.CounterVec
}

// initRetentionMetrics creates and registers the retention collectors;
// called by newMetrics.
func (m *metrics) initRetentionMetrics() {
	m.retention = &retentionMetrics{
		deadExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_dead_expired_total",
			Help: "Dead letters deleted because their source's dead_retention passed (each logged at warn with its key), by source.",
		}, []string{"source"}),
	}
	m.reg.MustRegister(m.retention.deadExpired)
}

// deadExpiredSources exports oncehook_dead_expired_total at 0 for sources,
// so that a rate or an alert sees the series before the first expiry.
func (m *metrics) deadExpiredSources(sources []string) {
	for _, s := range sources {
		m.retention.deadExpired.WithLabelValues(s)
	}
}

// deadExpired counts one dead letter deleted by expiry.
func (m *metrics) deadExpired(ev engine.Event) {
	if m == nil {
		return
	}
	m.retention.deadExpired.WithLabelValues(ev.Source).Inc()
}

// deadCollector reports oncehook_dead_oldest_age_seconds{source} at scrape
// time for every configured source (0 when it has no dead letter): a walk of
// the dead letters oldest first that stops once every configured source was
// seen (engine.OldestDeadBySource), so at most the number of dead letters.
// oncehook_oldest_dead_seconds (raftmetrics.go) is the same age over all
// sources, one seek.
type deadCollector struct {
	node    deadSource
	sources func() []string // the configured source names
	now     func() time.Time
	oldest  *prometheus.Desc
}

// deadSource is what the collector needs from the cluster node.
type deadSource interface {
	OldestDeadBySource(sources []string) (map[string]int64, error)
}

var _ deadSource = (*cluster.Node)(nil)

func newDeadCollector(n deadSource, sources func() []string) *deadCollector {
	return &deadCollector{node: n, sources: sources, now: time.Now, oldest: prometheus.NewDesc("oncehook_dead_oldest_age_seconds",
		"Seconds since the source's oldest dead letter went dead (it is deleted when dead_retention passes); 0 when it has none.",
		[]string{"source"}, nil)}
}

func (c *deadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.oldest }

func (c *deadCollector) Collect(ch chan<- prometheus.Metric) {
	names := c.sources()
	at, err := c.node.OldestDeadBySource(names)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	now := c.now()
	for _, name := range names {
		age := 0.0
		if t, ok := at[name]; ok {
			age = max(0, now.Sub(time.Unix(0, t)).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, name)
	}
}

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

// cmdPurge is oncehook purge: POST /v1/purge.
func cmdPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("purge", stderr)
	mk := clientFlags(fs)
	state := fs.String("state", "", "delete every event in this state: dead|done|stale (required)")
	source := fs.String("source", "", "only this source's events")
	before := fs.String("before", "", "only events updated before this RFC 3339 time (required)")
	reason := fs.String("reason", "", "why (logged with who; required)")
	dry := fs.Bool("dry-run", false, "show what would be deleted")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *state == "" || *before == "" || *reason == "" {
		return usageError{"purge needs -state, -before and -reason"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	var out json.RawMessage
	req := admin.PurgeRequest{State: *state, Source: *source, Before: *before, Reason: *reason, DryRun: *dry}
	if err := c.do(ctx, http.MethodPost, "/v1/purge", req, &out); err != nil {
		return err
	}
	return printAnswer(stdout, out)
}
