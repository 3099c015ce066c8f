package forward

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// A job whose lease ended while it waited for a worker (here the
// dispatcher stalls for two leases right after leasing, as a stopped
// process or a stalled machine would) is handed back instead of sent: its
// lease was reclaimed meanwhile, and the handler gets the event once, under
// the newer lease. Sent, the stale job would reach the handler besides the
// newer one, and on an ordered source after a newer event of its object.
func TestLeaseEndedBeforeTheStartSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		var mu sync.Mutex
		var tokens []string
		h := &rateSink{answer: func(_ arrival, _ int, w http.ResponseWriter) {}}
		record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			tokens = append(tokens, r.Header.Get(HeaderFencingToken))
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
		tgt := Target{URL: "http://handler/src", Timeout: 10 * time.Second}
		var calls atomic.Int32
		stalled := func(source string) (Target, bool) {
			if calls.Add(1) == 1 { // the dispatcher placing the first lease
				time.Sleep(time.Minute)
			}
			return only(tgt)(source)
		}
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:         l,
			Targets:       stalled,
			Client:        &http.Client{Transport: handlerTransport{record}},
			Workers:       2,
			PollInterval:  time.Second,
			SweepInterval: time.Second,
			DefaultLease:  30 * time.Second,
		})
		defer stop()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		ev := l.get("src:1")
		mu.Lock()
		defer mu.Unlock()
		if ev.State != engine.StateDone || len(tokens) != 1 {
			t.Fatalf("event %v; the handler got tokens %v, want it done after one request", ev.State, tokens)
		}
	})
}

// A timed-out attempt is retried no sooner than its lease's end: the
// handler may still be working on it, and forward_timeout < lease leaves it
// the lease to finish, so one handler never runs the event twice at once
// (here the handler takes 3 s of a 1 s timeout; the backoff is 100 ms).
func TestTimedOutAttemptRetriesAfterTheLeaseSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		h := &rateSink{answer: func(_ arrival, n int, w http.ResponseWriter) {
			if n == 1 {
				time.Sleep(3 * time.Second)
			}
		}}
		l.claim("src:1", "src", "x")
		stop := runInBubble(t, Options{
			Store:        l,
			Targets:      only(Target{URL: "http://handler/src", Timeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			PollInterval: time.Second,
			DefaultLease: 10 * time.Second,
		})
		defer stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		got := h.of("src")
		if len(got) != 2 || l.get("src:1").State != engine.StateDone {
			t.Fatalf("%d requests, event %v; want the timeout, then a 2xx", len(got), l.get("src:1").State)
		}
		if gap := got[1].at.Sub(got[0].at); gap < 10*time.Second {
			t.Fatalf("retried %v after the timed-out attempt started, inside its 10 s lease", gap)
		}
	})
}
