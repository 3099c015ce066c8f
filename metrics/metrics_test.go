package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"oncehook/engine"
)

// scrape returns what /metrics serves of reg, and its status code.
func scrape(t *testing.T, reg *prometheus.Registry) (string, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String(), rec.Code
}

// missing returns the lines of want that text lacks.
func missing(text string, want ...string) (miss []string) {
	lines := strings.Split(text, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			miss = append(miss, w)
		}
	}
	return miss
}

// TestCountersCount: each counting method moves its own series, with its
// labels; a status code out of range is "other".
func TestCountersCount(t *testing.T) {
	m := New()
	m.Request("s", 202)
	m.Request("s", 999)
	m.Claim("s", true)
	m.Claim("s", false)
	m.SchemaFailure("s")
	m.Keys().FetchFailure("s")
	m.Keys().Active("s", 3)
	m.DeadExpired(engine.Event{Source: "s"})
	m.ConfiguredSources([]string{"quiet"})
	m.PayloadsDropped(250)
	m.PayloadsDropped(7)
	m.LeasesReclaimed(2)
	m.ConfigReloaded(false)
	text, code := scrape(t, m.Registry())
	if code != http.StatusOK {
		t.Fatalf("scrape: %d\n%s", code, text)
	}
	if miss := missing(text,
		`oncehook_requests_total{code="202",source="s"} 1`,
		`oncehook_requests_total{code="other",source="s"} 1`,
		`oncehook_claims_total{result="new",source="s"} 1`,
		`oncehook_claims_total{result="duplicate",source="s"} 1`,
		`oncehook_schema_failures_total{source="s"} 1`,
		`oncehook_keys_fetch_failures_total{source="s"} 1`,
		`oncehook_keys_active{source="s"} 3`,
		`oncehook_dead_expired_total{source="s"} 1`,
		`oncehook_dead_expired_total{source="quiet"} 0`,
		`oncehook_rate_limited_total{source="quiet"} 0`,
		`oncehook_rate_limit_wait_seconds_total{source="quiet"} 0`,
		`oncehook_replay_suspected_total{source="quiet"} 0`,
		`oncehook_sync_conflicts_total{source="quiet"} 0`,
		`oncehook_duplicate_body_mismatch_total{source="quiet"} 0`,
		`oncehook_schema_failures_total{source="quiet"} 0`,
		`oncehook_keys_fetch_failures_total{source="quiet"} 0`,
		`oncehook_claims_total{result="new",source="quiet"} 0`,
		`oncehook_claims_total{result="duplicate",source="quiet"} 0`,
		`oncehook_payloads_dropped_total 257`,
		`oncehook_leases_reclaimed_total 2`,
		`oncehook_config_last_reload_successful 0`,
	); len(miss) > 0 {
		t.Errorf("scrape lacks %q:\n%s", miss, text)
	}
}

// TestNilMetricsCountNothing: the wiring may hand out a nil *Metrics.
func TestNilMetricsCountNothing(t *testing.T) {
	var m *Metrics
	m.Request("s", 200)
	m.Claim("s", true)
	m.SignatureFailure("s", "bad")
	m.ClaimDuration(time.Millisecond)
	m.Delivery("s", "done", time.Millisecond)
	m.ReplaySuspected("s")
	m.PayloadsDropped(1)
	m.LeasesReclaimed(1)
	m.SyncConflict("s")
	m.DuplicateBodyChanged("s")
	m.Filtered("s", "other")
	m.RateLimited("s", time.Second)
	m.SchemaFailure("s")
	m.DeadExpired(engine.Event{Source: "s"})
	m.ConfigReloaded(true)
	m.Keys().FetchFailure("s")
	m.Keys().Active("s", 1)
}

type deadAt struct {
	at  map[string]int64
	err error
}

// OldestDeadBySource answers as the engine may: asked for some sources, it
// stops once it found them and may find no other; asked for none, it walks
// every dead letter.
func (d deadAt) OldestDeadBySource(want []string) (map[string]int64, error) {
	if len(want) == 0 {
		return d.at, d.err
	}
	out := map[string]int64{}
	for s, t := range d.at {
		if slices.Contains(want, s) {
			out[s] = t
		}
	}
	return out, d.err
}

// TestDeadCollector: one series per configured source, its oldest dead
// letter's age or 0; a storage error fails the series, not the scrape's
// other collectors.
func TestDeadCollector(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		src  deadAt
		want map[string]float64 // source to age; nil: the scrape fails
	}{
		{"none dead", deadAt{}, map[string]float64{"a": 0, "b": 0}},
		{"one dead", deadAt{at: map[string]int64{"b": now.Add(-90 * time.Second).UnixNano()}}, map[string]float64{"a": 0, "b": 90}},
		{"clock behind", deadAt{at: map[string]int64{"a": now.Add(time.Minute).UnixNano()}}, map[string]float64{"a": 0, "b": 0}},
		// A source a reload removed keeps its dead letters until
		// dead_retention: their age must be seen before they go.
		{"a source removed", deadAt{at: map[string]int64{"gone": now.Add(-time.Hour).UnixNano()}}, map[string]float64{"a": 0, "b": 0, "gone": 3600}},
		{"storage error", deadAt{err: errors.New("disk")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewDeadCollector(tc.src, func() []string { return []string{"a", "b"} })
			c.(*deadCollector).now = func() time.Time { return now }
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			text, code := scrape(t, reg)
			if tc.want == nil {
				if code != http.StatusInternalServerError {
					t.Fatalf("scrape %d without the storage error:\n%s", code, text)
				}
				return
			}
			var want []string
			for s, v := range tc.want {
				want = append(want, fmt.Sprintf("oncehook_dead_oldest_age_seconds{source=%q} %v", s, v))
			}
			if miss := missing(text, want...); code != http.StatusOK || len(miss) > 0 {
				t.Errorf("scrape %d lacks %q:\n%s", code, miss, text)
			}
		})
	}
}

// countedDead is deadAt counting its walks.
type countedDead struct {
	deadAt
	walks *int
}

func (d countedDead) OldestDeadBySource(want []string) (map[string]int64, error) {
	*d.walks++
	return d.deadAt.OldestDeadBySource(want)
}

// TestDeadCollectorWalksAtMostEvery: however often /metrics is asked (it
// needs no token), the dead letters are walked at most once every
// deadWalkEvery; the ages still move with each scrape's clock, and a failed
// walk is not kept.
func TestDeadCollectorWalksAtMostEvery(t *testing.T) {
	now := time.Unix(1000, 0)
	walks := 0
	src := countedDead{deadAt{at: map[string]int64{"a": now.Add(-10 * time.Second).UnixNano()}}, &walks}
	c := NewDeadCollector(src, func() []string { return []string{"a"} })
	c.(*deadCollector).now = func() time.Time { return now }
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	age := func(want string) {
		t.Helper()
		text, code := scrape(t, reg)
		if miss := missing(text, `oncehook_dead_oldest_age_seconds{source="a"} `+want); code != http.StatusOK || len(miss) > 0 {
			t.Fatalf("scrape %d lacks %q:\n%s", code, miss, text)
		}
	}
	for range 5 {
		age("10")
	}
	now = now.Add(deadWalkEvery - time.Second)
	age("14")
	if walks != 1 {
		t.Fatalf("%d walks for six scrapes within %s, want 1", walks, deadWalkEvery)
	}
	now = now.Add(time.Second)
	age("15")
	if walks != 2 {
		t.Fatalf("%d walks once %s passed, want 2", walks, deadWalkEvery)
	}

	failing := countedDead{deadAt{err: errors.New("disk")}, &walks}
	c2 := NewDeadCollector(failing, func() []string { return []string{"a"} })
	c2.(*deadCollector).now = func() time.Time { return now }
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(c2)
	walks = 0
	for range 2 {
		if _, code := scrape(t, reg2); code != http.StatusInternalServerError {
			t.Fatalf("scrape %d with the storage error, want 500", code)
		}
	}
	if walks != 2 {
		t.Fatalf("%d walks for two failed scrapes, want 2 (a failure is not kept)", walks)
	}
}

// TestInFlightCollector: every configured source has a series (0 when it
// holds no worker), and a source that is no longer configured has one while
// its events hold workers.
func TestInFlightCollector(t *testing.T) {
	for _, tc := range []struct {
		name string
		held map[string]int
		want []string
	}{
		{"a follower", nil, []string{`oncehook_delivery_in_flight{source="a"} 0`, `oncehook_delivery_in_flight{source="b"} 0`}},
		{"the leader", map[string]int{"b": 7}, []string{`oncehook_delivery_in_flight{source="a"} 0`, `oncehook_delivery_in_flight{source="b"} 7`}},
		{"a source removed", map[string]int{"gone": 2}, []string{`oncehook_delivery_in_flight{source="a"} 0`, `oncehook_delivery_in_flight{source="gone"} 2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewInFlightCollector(func() map[string]int { return tc.held }, func() []string { return []string{"a", "b"} }))
			text, code := scrape(t, reg)
			if miss := missing(text, tc.want...); code != http.StatusOK || len(miss) > 0 {
				t.Errorf("scrape %d lacks %q:\n%s", code, miss, text)
			}
		})
	}
}
