package cluster

import (
	"log/slog"
	"testing"
	"time"
)

// A leader's clock steps a month ahead right after a check that agreed:
// within the cached 30 s, the next expire must still be held.
func TestZZDiffClockStepWithinCache(t *testing.T) {
	var logs lockedBuffer
	clocks := &skewedClocks{off: map[string]time.Duration{}}
	c := newTestCluster(t, 3, func(cfg *Config) {
		clocks.tune(&logs)(cfg)
		cfg.clockEvery = 0 // default 30 s
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	l := c.waitLeader(-1)
	leader := c.nodes[l]
	ctx := ctxT(t, 30*time.Second)
	if _, err := leader.Claim(ctx, claimCmd("src:done")); err != nil {
		t.Fatal(err)
	}
	evs, err := leader.Lease(ctx, 1, time.Hour)
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	if err := leader.Complete(ctx, evs[0].Key, evs[0].Token, nil, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	// A sweep with clocks in agreement: the verdict is cached.
	if n, _, err := leader.Expire(ctx); err != nil || n != 0 {
		t.Fatalf("first expire %d %v", n, err)
	}
	clocks.set(c.ids[l], 31*24*time.Hour) // NTP steps / VM resumes
	n, _, err := leader.Expire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dropped, _ := leader.DropPayloads(ctx, 0, 0)
	t.Logf("after the step: expired %d, payloads dropped %d, status clock_held=%q", n, dropped, leader.Status().ClockHeld)
	if n != 0 {
		t.Fatalf("a leader whose clock stepped a month ahead 0 s after an agreeing check expired %d events", n)
	}
}
