package forward

import (
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// TestReloadedLeaseReachesEarlierEventsSynctest: a reload changed a source's
// lease (and forward_timeout) after some of its events were claimed, each
// storing the lease of its claim. Their leases are the running config's:
// the handler never holds an event twice at once, and each is done after
// one request, like an event claimed after the reload.
//
// Leased for the stored length instead: with forward_timeout raised past
// the old lease, the lease ended while the request ran, and the event went
// out again beside it; with the lease lowered, every new lease ended past
// the lowered reclaim horizon and was reclaimed at the next sweep, again and
// again. In both the 2xx answers were fenced and the event never finished.
func TestReloadedLeaseReachesEarlierEventsSynctest(t *testing.T) {
	for _, tc := range []struct {
		name            string
		before, after   time.Duration // the source's lease at the old event's claim, and now
		timeout, handle time.Duration // forward_timeout now, and how long the handler takes
		horizon         time.Duration // the reclaim horizon (0: none)
		run             time.Duration
	}{
		{"forward_timeout raised with the lease", 30 * time.Second, 120 * time.Second, 60 * time.Second, 40 * time.Second, 0, 5 * time.Minute},
		{"lease lowered", time.Hour, 30 * time.Second, 10 * time.Second, 3 * time.Second, 10 * time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLeader(t)
				var mu sync.Mutex
				busy := map[string]*peak{"src:old": {}, "src:new": {}}
				requests := map[string]int{}
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					key := r.Header.Get(HeaderEventKey)
					mu.Lock()
					requests[key]++
					mu.Unlock()
					done := busy[key].enter()
					time.Sleep(tc.handle)
					done()
				})
				l.claimLease("src:old", "src", "x", tc.before)
				l.claimLease("src:new", "src", "y", tc.after)
				leases := []engine.LeaseLength{{Source: "src", For: int64(tc.after)}}
				opts := Options{
					Store:         l,
					Targets:       only(Target{URL: "http://handler/src", Timeout: tc.timeout, Lease: tc.after}),
					Leases:        func() []engine.LeaseLength { return leases },
					Client:        &http.Client{Transport: asyncTransport{h}},
					Workers:       4,
					PollInterval:  time.Second,
					SweepInterval: time.Second,
					DefaultLease:  tc.after,
				}
				if tc.horizon > 0 {
					opts.Limits = func() Limits { return Limits{Horizon: tc.horizon} }
				}
				stop := runInBubble(t, opts)
				time.Sleep(tc.run)
				stop()
				time.Sleep(time.Minute) // requests the transport left running end
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				for _, key := range []string{"src:new", "src:old"} {
					if ev := l.get(key); busy[key].most.Load() > 1 || requests[key] != 1 || ev.State != engine.StateDone {
						t.Errorf("%s: %d requests, %d at once, event %v after %d attempts: want one request and done",
							key, requests[key], busy[key].most.Load(), ev.State, ev.Attempts)
					}
				}
			})
		})
	}
}

// TestParkedEventOfARemovedSourceIsHeldSynctest: events parked for their
// max_rate slot when a reload removes their source are held like the
// source's other events (pending, their attempts as they were), not failed
// with "no target": failed, an event on its last attempt went dead without
// its handler ever being called for it.
func TestParkedEventOfARemovedSourceIsHeldSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		keys := []string{"src:1", "src:2", "src:3"}
		for _, k := range keys {
			l.claim(k, "src", "x")
		}
		// Seven failed attempts each (a handler that was down), due now.
		for range 7 {
			res, err := l.apply(engine.Command{Op: engine.OpLease, Max: 10, LeaseFor: int64(30 * time.Second)})
			if err != nil || len(res.Events) != len(keys) {
				t.Fatalf("lease: %v, %d events", err, len(res.Events))
			}
			for _, ev := range res.Events {
				if _, err := l.apply(engine.Command{Op: engine.OpFail, Key: ev.Key, Token: ev.Token, MaxAttempts: 8, Reason: "status 503"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var mu sync.Mutex
		removed := false
		targets := func(source string) (Target, bool) {
			mu.Lock()
			defer mu.Unlock()
			if source != "src" || removed {
				return Target{}, false
			}
			return Target{URL: "http://handler/src", MaxRate: 1, Burst: 1}, true
		}
		h := &rateSink{}
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      targets,
			Client:       &http.Client{Transport: handlerTransport{h}},
			Workers:      4,
			PollInterval: 10 * time.Second, // the tick that would see the removal comes late
		})
		time.Sleep(500 * time.Millisecond) // src:1 delivered; the others parked for 1 s and 2 s
		mu.Lock()
		removed = true // the reload
		mu.Unlock()
		time.Sleep(time.Minute)
		stop()
		synctest.Wait()
		if n := len(h.of("src")); n != 1 {
			t.Fatalf("handler got %d requests, want 1", n)
		}
		for _, k := range keys[1:] {
			if ev := l.get(k); ev.State != engine.StatePending || ev.Attempts != 7 {
				t.Errorf("%s: %v after %d attempts (%q); want it held, pending with its 7 attempts", k, ev.State, ev.Attempts, ev.LastError)
			}
		}
	})
}

// TestReplayIsMarked: an event delivered again because an operator replayed
// it says so (Oncehook-Replayed-At, the replay's time), so that a handler
// that records each key's effect once can run it again; its first delivery,
// and a redelivery after a lost lease, carry no such header.
func TestReplayIsMarked(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	l.claim("src:r", "src", "x")
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL})})
	waitFor(t, "done", stateIs(l, "src:r", engine.StateDone))
	if _, err := l.apply(engine.Command{Op: engine.OpReplay, Keys: []string{"src:r"}, Who: "ops", Reason: "redo"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replay's delivery", func() bool { return h.n() == 2 })
	if got := h.hit(0).header.Values(HeaderReplayedAt); len(got) != 0 {
		t.Errorf("first delivery carries %s %q", HeaderReplayedAt, got)
	}
	audit := l.get("src:r").Audit
	if len(audit) != 1 {
		t.Fatalf("audit %+v, want the replay", audit)
	}
	if got, want := h.hit(1).header.Get(HeaderReplayedAt), time.Unix(0, audit[0].At).UTC().Format(time.RFC3339Nano); got != want {
		t.Errorf("replayed delivery: %s %q, want %q", HeaderReplayedAt, got, want)
	}
}
