package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"oncehook/providers"
)

// A source with max_rate = 20 delivers a 200-event backlog to a real handler
// no faster than 20 a second: with the default burst (20) the first and last
// deliveries are at least 9 s apart, measured at the handler (8.5 s allows
// for timer slack; no upper bound, which a busy machine could break). The
// waits are counted in /metrics.
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
	extra := fmt.Sprintf(`
[[source]]
name = "limited"
provider = "standard"
secrets = [%q]
forward = "%%[1]s/limited"
max_rate = 20
`, secret)
	tn := startNodeWithSources(t, "", h.url, extra)

	const n = 200
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
	for deadline := time.Now().Add(time.Minute); count() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries after a minute", count(), n)
		}
	}
	mu.Lock()
	span := at[len(at)-1].Sub(at[0])
	mu.Unlock()
	if span < 8500*time.Millisecond {
		t.Errorf("%d deliveries at max_rate 20 took %v, want about 9-10 s", n, span)
	}
	t.Logf("%d deliveries at max_rate 20 took %v", n, span)
	if v := mustMetric(t, tn.scrape(), `oncehook_rate_limited_total{source="limited"}`); v < n/2 {
		t.Errorf("oncehook_rate_limited_total = %v, want most of the %d deliveries", v, n)
	}
}
