package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/cluster"
)

// deadCollector reports oncehook_dead_oldest_age_seconds{source} at scrape
// time for every configured source (0 when it has no dead letter) and every
// other source that has dead letters: a walk of the dead letters
// (engine.OldestDeadBySource), so the number of dead letters.
// oncehook_oldest_dead_seconds (raft.go) is the same age over all sources,
// one seek. /metrics needs no token, so the walk is made at most once every
// deadWalkEvery however often the route is asked (with millions of dead
// letters a walk takes a tenth of a second and holds a read transaction);
// the ages are computed at each scrape from the times the last walk found.
type deadCollector struct {
	node    DeadSource
	sources func() []string // the configured source names
	now     func() time.Time
	oldest  *prometheus.Desc

	mu     sync.Mutex // held across a walk: scrapes meanwhile wait for it
	walked time.Time  // when at was read; zero: never
	at     map[string]int64
}

// deadWalkEvery is the longest a walk's result of the dead letters is used.
const deadWalkEvery = 5 * time.Second

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
	now := c.now()
	at, err := c.oldestDead(now)
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
	for _, name := range names {
		age := 0.0
		if t, ok := at[name]; ok {
			age = max(0, now.Sub(time.Unix(0, t)).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, name)
	}
}

// oldestDead returns the last walk's result when it is younger than
// deadWalkEvery by now, else walks again. A failed walk is not kept.
func (c *deadCollector) oldestDead(now time.Time) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if age := now.Sub(c.walked); !c.walked.IsZero() && age >= 0 && age < deadWalkEvery {
		return c.at, nil
	}
	at, err := c.node.OldestDeadBySource(nil)
	if err != nil {
		return nil, err
	}
	c.at, c.walked = at, now
	return at, nil
}
