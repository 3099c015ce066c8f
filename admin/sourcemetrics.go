package admin

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/engine"
)

// sourceCollector reports, at scrape time, each configured source's pause
// state and backlog: oncehook_source_paused, oncehook_source_paused_seconds,
// oncehook_backlog and oncehook_oldest_pending_age_seconds. A scrape costs a
// read of the sources bucket and of the pending counters, with a seek or
// two per source (engine.Backlog): its cost is the number of sources, not
// of pending events.
//
// The source label only takes configured source names (and the names of
// sources paused in the replicated state), so its cardinality is the
// config's.
type sourceCollector struct {
	node    pauseSource
	sources func() []string // the configured source names
	now     func() time.Time

	paused, pausedFor, backlog, oldest *prometheus.Desc
}

// pauseSource is what the collector needs from the cluster node.
type pauseSource interface {
	Sources() (map[string]engine.SourceState, error)
	Backlog() (map[string]engine.Backlog, error)
}

// NewSourceCollector returns the collector of the sources' pause state and
// backlog, read from n at scrape time; sources returns the configured
// source names.
func NewSourceCollector(n pauseSource, sources func() []string) prometheus.Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"source"}, nil)
	}
	return &sourceCollector{
		node: n, sources: sources, now: time.Now,
		paused:    desc("oncehook_source_paused", "1 if the source is paused (its events are held, not delivered)."),
		pausedFor: desc("oncehook_source_paused_seconds", "Seconds since the source was paused; 0 when it is not."),
		backlog:   desc("oncehook_backlog", "Pending events of the source (waiting for delivery, held ones included)."),
		oldest:    desc("oncehook_oldest_pending_age_seconds", "Seconds since the source's oldest pending event became due; 0 when none is."),
	}
}

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.paused, c.pausedFor, c.backlog, c.oldest} {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	var ss sourceStatus
	var err error
	if ss.paused, err = c.node.Sources(); err != nil {
		ch <- prometheus.NewInvalidMetric(c.paused, err)
		return
	}
	if ss.backlog, err = c.node.Backlog(); err != nil {
		ch <- prometheus.NewInvalidMetric(c.backlog, err)
		return
	}
	names := c.sources()
	for name := range ss.paused {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	// A source no longer configured here (removed, renamed, or configured
	// on another node only) whose events wait is a backlog like any other:
	// its series must exist for an alert on it to fire.
	for name, b := range ss.backlog {
		if b.Pending > 0 && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, source string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, source)
	}
	for _, name := range names {
		_, paused := ss.paused[name]
		gauge(c.paused, b2f(paused), name)
		gauge(c.pausedFor, ss.pausedFor(name, now), name)
		gauge(c.backlog, float64(ss.backlog[name].Pending), name)
		gauge(c.oldest, ss.oldestAge(name, now), name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
