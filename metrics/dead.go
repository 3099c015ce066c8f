package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/cluster"
)

// deadCollector reports oncehook_dead_oldest_age_seconds{source} at scrape
// time for every configured source (0 when it has no dead letter) and every
// other source that has dead letters: a walk of the dead letters
// (engine.OldestDeadBySource), so the number of dead letters.
// oncehook_oldest_dead_seconds (raft.go) is the same age over all sources,
// one seek.
type deadCollector struct {
	node    DeadSource
	sources func() []string // the configured source names
	now     func() time.Time
	oldest  *prometheus.Desc
}

// DeadSource is what the dead-letter age collector needs from the cluster
// node.
type DeadSource interface {
	OldestDeadBySource(sources []string) (map[string]int64, error)
}

var _ DeadSource = (*cluster.Node)(nil)

// NewDeadCollector returns the collector of the age of each configured
// source's oldest dead letter, read from n at scrape time; sources gives the
// configured source names.
func NewDeadCollector(n DeadSource, sources func() []string) prometheus.Collector {
	return &deadCollector{node: n, sources: sources, now: time.Now, oldest: prometheus.NewDesc("oncehook_dead_oldest_age_seconds",
		"Seconds since the source's oldest dead letter went dead (it is deleted when dead_retention passes); 0 when it has none.",
		[]string{"source"}, nil)}
}

func (c *deadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.oldest }

func (c *deadCollector) Collect(ch chan<- prometheus.Metric) {
	// Every source's dead letters, configured or not: a source a reload
	// removed or renamed keeps its dead letters until dead_retention, and
	// the alert on their age must see them before they are deleted.
	at, err := c.node.OldestDeadBySource(nil)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.oldest, err)
		return
	}
	names := c.sources()
	var others []string
	for name := range at {
		if !slices.Contains(names, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	names = append(slices.Clip(names), others...)
	now := c.now()
	for _, name := range names {
		age := 0.0
		if t, ok := at[name]; ok {
			age = max(0, now.Sub(time.Unix(0, t)).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, name)
	}
}
