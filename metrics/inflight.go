package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// inFlightCollector reports oncehook_delivery_in_flight{source} at scrape
// time: the events of each source that hold one of this node's delivery
// workers (leased and not yet answered, those waiting for a rate limit
// included). It shows which source a slow handler's backlog belongs to and
// how the pool is shared (docs/operations.md, "Sharing the workers"). Every
// configured source has a series (0 when it holds none, and on a
// follower); a source removed by a reload has one while its events still
// hold workers.
type inFlightCollector struct {
	inFlight func() map[string]int // nil map: not delivering (a follower)
	sources  func() []string       // the configured source names
	desc     *prometheus.Desc
}

// NewInFlightCollector returns the collector of the events each source has
// at the handlers, read from inFlight at scrape time; sources gives the
// configured source names.
func NewInFlightCollector(inFlight func() map[string]int, sources func() []string) prometheus.Collector {
	return &inFlightCollector{inFlight: inFlight, sources: sources, desc: prometheus.NewDesc("oncehook_delivery_in_flight",
		"Events of the source holding one of this node's delivery workers (leased, not yet answered; waiting for max_rate included); 0 on a follower.",
		[]string{"source"}, nil)}
}

func (c *inFlightCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *inFlightCollector) Collect(ch chan<- prometheus.Metric) {
	held := c.inFlight()
	names := c.sources()
	for name := range held {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(held[name]), name)
	}
}
