package forward

import (
	"context"
	"testing"
	"time"

	"oncehook/engine"
)

// slowCommits holds every Complete at gate, as a Raft commit under load
// takes its time.
type slowCommits struct {
	*leader
	gate chan struct{}
}

func (s *slowCommits) Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, keep time.Duration) error {
	select {
	case <-s.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.leader.Complete(ctx, key, token, resp, step, keep)
}

// TestWorkerFreeWhileOutcomeCommits: a worker whose handler answered delivers
// the next event while the outcome commits, up to recordFactor outcomes per
// worker; then it waits for its own. Every outcome is recorded in the end,
// and Drain waits for them.
func TestWorkerFreeWhileOutcomeCommits(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	const workers = 1
	total := recordFactor*workers + 2
	for i := range total {
		l.claim("src:"+string(rune('a'+i)), "src", "x")
	}
	store := &slowCommits{leader: l, gate: make(chan struct{})}
	f := New(Options{Store: store, Targets: only(Target{URL: srv.URL, Timeout: time.Minute}), Workers: workers,
		PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond})
	stop := runF(t, f)

	// recordFactor outcomes wait in the background, the next one on its
	// worker: one handler call more than that, and no further.
	want := recordFactor*workers + 1
	waitFor(t, "the handler called while outcomes commit", func() bool { return h.n() >= want })
	ticks(t, l, 3)
	if got := h.n(); got != want {
		t.Errorf("handler called %d times with every commit held, want %d", got, want)
	}
	drained := make(chan error, 1)
	go func() { drained <- f.Drain(context.Background()) }()
	waitFor(t, "the drain started", func() bool {
		f.slots.mu.Lock()
		defer f.slots.mu.Unlock()
		return f.slots.draining
	})
	close(store.gate)
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// Drained means recorded: the answered ones are done.
	done := 0
	for i := range total {
		if l.get("src:"+string(rune('a'+i))).State == engine.StateDone {
			done++
		}
	}
	if done != want {
		t.Errorf("%d events done after Drain, want the %d the handler answered", done, want)
	}
	stop()
	// The last one goes on the next run.
	stop = runF(t, f)
	waitFor(t, "every event done", func() bool {
		for i := range total {
			if l.get("src:"+string(rune('a'+i))).State != engine.StateDone {
				return false
			}
		}
		return true
	})
	stop()
	if h.n() != total {
		t.Errorf("handler called %d times for %d events", h.n(), total)
	}
}
