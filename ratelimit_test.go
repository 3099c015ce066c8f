package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"oncehook/providers"
)

// A source with max_rate = 50 delivers 100 events to a real handler no faster
// than 50 a second: with a burst of 1 the first and last deliveries are 1.98 s
// apart, measured at the handler (1.6 s allows for timer slack; no upper bound,
// which a busy machine could break). The waits are counted in /metrics.
func TestMaxRateThroughNode(t *testing.T) {
	h := newHandler(t)
	var mu sync.Mutex
	var at []time.Time
	h.setAnswer(func(d delivery) (int, string) {
		if d.Source == "limited" {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
		}
		return 200, "ok"
	})
	secret, _ := providers.GenerateSecret("standard")
	// A burst of 1: a bucket that filled while the node was idle would let a
	// whole burst of 50 through at once and make the span about 1 s.
	extra := fmt.Sprintf(`
[[source]]
name = "limited"
provider = "standard"
secrets = [%q]
forward = "%%[1]s/limited"
max_rate = 50
max_rate_burst = 1
`, secret)
	tn := startNodeWithSources(t, "", h.url, extra)

	const n = 100
	for i := range n {
		body := fmt.Appendf(nil, `{"id":"evt_%d"}`, i)
		if a := tn.post("limited", body, signWith(t, secret, body, fmt.Sprintf("msg_%03d", i))); a.Status != 202 {
			t.Fatalf("post %d: %d %s", i, a.Status, a.Raw)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(at)
	}
	waitUntil(t, "100 deliveries", func() bool { return count() >= n })
	mu.Lock()
	span := at[len(at)-1].Sub(at[0])
	mu.Unlock()
	if span < 1600*time.Millisecond {
		t.Errorf("100 deliveries at max_rate 50 took %v, want about 2s", span)
	}
	if v := mustMetric(t, tn.scrape(), `oncehook_rate_limited_total{source="limited"}`); v < n/2 {
		t.Errorf("oncehook_rate_limited_total = %v, want most of the %d deliveries", v, n)
	}
}
