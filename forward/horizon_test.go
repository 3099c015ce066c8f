package forward

import (
	"testing"
	"time"
)

// TestHorizonOutlivesAReloadThatLowersIt: the reclaim's schedule horizon
// follows the config up at once, and down only once the higher one has
// passed since it was last in force: leases granted for 30 minutes are not
// cut by a reload to a 10-minute horizon while their workers still run.
func TestHorizonOutlivesAReloadThatLowersIt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var h horizon
	for i, step := range []struct {
		at   time.Duration // after t0
		cur  time.Duration
		want time.Duration
	}{
		{0, 30 * time.Minute, 30 * time.Minute},
		{time.Minute, 30 * time.Minute, 30 * time.Minute},
		{2 * time.Minute, 10 * time.Minute, 30 * time.Minute}, // the reload
		{30 * time.Minute, 10 * time.Minute, 30 * time.Minute},
		{31*time.Minute - time.Second, 10 * time.Minute, 30 * time.Minute},
		{31 * time.Minute, 10 * time.Minute, 10 * time.Minute}, // 30 min after it was last in force
		{32 * time.Minute, 20 * time.Minute, 20 * time.Minute}, // up at once
		{33 * time.Minute, 0, 0},                               // no bound
		{34 * time.Minute, 5 * time.Minute, 5 * time.Minute},
	} {
		if got := h.next(step.cur, t0.Add(step.at)); got != step.want {
			t.Fatalf("step %d (at %v, configured %v): horizon %v, want %v", i, step.at, step.cur, got, step.want)
		}
	}
}
