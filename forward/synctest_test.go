package forward

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// These tests run inside a synctest bubble: time is fake and jumps whenever
// every goroutine is blocked, so backoffs, leases and sweeper ticks of seconds
// take no real time. Requests never touch the network (an httptest server
// inside a bubble would block on real I/O): handlerTransport calls the handler
// in process.

// handlerTransport serves requests with an http.Handler in process.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}

// bubbleRun runs a Forwarder with opts inside the current bubble for d of fake
// time, then stops it and waits for Run to return.
func bubbleRun(t *testing.T, opts Options, d time.Duration, during func()) {
	t.Helper()
	f := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	if during != nil {
		during()
	}
	time.Sleep(d)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// timedSink records when each request arrived (fake time) and answers with
// answer(n).
type timedSink struct {
	mu     sync.Mutex
	at     []time.Time
	answer func(n int, w http.ResponseWriter, r *http.Request)
}

func (s *timedSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	n := len(s.at)
	s.mu.Unlock()
	s.answer(n, w, r)
}

func (s *timedSink) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// Each retry comes no sooner than the backoff carried in its Fail, and no
// later than one poll interval after it; the backoff doubles and is capped.
func TestBackoffScheduleSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const failures = 6
		l := newLeader(t)
		h := &timedSink{answer: func(n int, w http.ResponseWriter, r *http.Request) {
			if n <= failures {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}}
		lo, hi, poll := time.Second, 8*time.Second, 100*time.Millisecond
		l.claim("src:b", "src", "x")
		bubbleRun(t, Options{
			Store:        l,
			Targets:      only(Target{URL: "http://handler/b", BackoffMin: lo, BackoffMax: hi, MaxAttempts: 20}),
			Client:       &http.Client{Transport: handlerTransport{h}},
			Rand:         rand.New(rand.NewPCG(5, 6)),
			PollInterval: poll,
		}, 2*time.Minute, nil)

		if ev := l.get("src:b"); ev.State != engine.StateDone || ev.Attempts != failures+1 {
			t.Fatalf("event %v after %d attempts, want done after %d", ev.State, ev.Attempts, failures+1)
		}
		at, fails := h.times(), l.failLog()
		if len(at) != failures+1 || len(fails) != failures {
			t.Fatalf("%d requests and %d fails", len(at), len(fails))
		}
		for i, c := range fails {
			retry := time.Duration(c.RetryIn)
			b := min(lo<<i, hi)
			if retry < b/2 || retry > b {
				t.Errorf("retry %d: backoff %v outside [%v, %v]", i+1, retry, b/2, b)
			}
			if gap := at[i+1].Sub(at[i]); gap < retry || gap > retry+poll {
				t.Errorf("retry %d came %v after the failure; backoff %v, poll %v", i+1, gap, retry, poll)
			}
		}
	})
}

// A handler that hangs past its lease (here a per-event lease shorter than
// the timeout): the attempt is cut at the lease's end, so the handler sees
// its connection close before the event can be reclaimed and sent again,
// and the event is delivered again under a newer token and completes. (The
// sweeps fall between whole seconds, so that the reclaim never meets the
// cut at one instant of the bubble's clock.)
func TestLeaseExpirySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		var cut time.Time
		h := &timedSink{answer: func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				<-r.Context().Done()
				cut = time.Now()
			}
		}}
		rec := &recorder{}
		l.claimLease("src:l", "src", "x", 5*time.Second)
		t0 := time.Now()
		bubbleRun(t, Options{
			Store:         l,
			Targets:       only(Target{URL: "http://handler/l", Timeout: 30 * time.Second, BackoffMin: time.Second, BackoffMax: time.Second}),
			Client:        &http.Client{Transport: handlerTransport{h}},
			SweepInterval: 700 * time.Millisecond,
			PollInterval:  700 * time.Millisecond,
			Observe:       rec.observe,
			OnFinish:      rec.finish,
		}, time.Minute, nil)

		at := h.times()
		if len(at) != 2 {
			t.Fatalf("%d requests, want 2", len(at))
		}
		if d := cut.Sub(t0); d != 5*time.Second {
			t.Errorf("first attempt cut %v after the claim, want at the 5s lease's end", d)
		}
		if d := at[1].Sub(t0); d < 5*time.Second || d > 7*time.Second {
			t.Errorf("redelivered %v after the claim, want after the 5s lease's end, within a backoff and a poll", d)
		}
		if ev := l.get("src:l"); ev.State != engine.StateDone || ev.Attempts != 2 {
			t.Errorf("event %v attempts %d, want done after 2", ev.State, ev.Attempts)
		}
		fins := rec.finishes()
		if len(fins) != 2 || fins[0].Outcome != OutcomeRetry || fins[0].Reason != reasonTimeout || fins[1].Outcome != OutcomeDone ||
			fins[1].Token <= fins[0].Token || fins[0].Attempt != 1 || fins[1].Attempt != 2 {
			t.Errorf("finishes = %+v, want retry (attempt 1, timeout) then done (attempt 2, newer token)", fins)
		}
	})
}

// Reclaim runs every SweepInterval and Expire every ExpireInterval; a poll
// interval of an hour means one lease, at start.
func TestSweeperTicksSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		bubbleRun(t, Options{
			Store:          l,
			Targets:        only(Target{}),
			Client:         &http.Client{Transport: handlerTransport{http.NotFoundHandler()}},
			PollInterval:   time.Hour,
			SweepInterval:  time.Second,
			ExpireInterval: 10 * time.Second,
		}, 30*time.Second+500*time.Millisecond, nil)
		if r, e, ls := l.reclaims.Load(), l.expires.Load(), l.leases.Load(); r != 30 || e != 3 || ls != 1 {
			t.Errorf("reclaims %d expires %d leases %d, want 30 3 1", r, e, ls)
		}
	})
}

// Payloads due are dropped every PayloadInterval (1 s by default), not only
// at the expire tick (a minute): a node holds the payloads of the last
// payload_retention and a second more, not of the last minute.
func TestPayloadsDroppedEverySecondSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		l.claim("src:a", "src", "body of a")
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
		var counted atomic.Int64
		bubbleRun(t, Options{
			Store:           l,
			Targets:         only(Target{PayloadRetention: time.Second}),
			Client:          &http.Client{Transport: handlerTransport{ok}},
			ExpireInterval:  time.Minute,
			PayloadsDropped: func(n int) { counted.Add(int64(n)) },
		}, 3*time.Second+500*time.Millisecond, nil)
		if n := counted.Load(); n != 1 {
			t.Errorf("PayloadsDropped counted %d, want 1", n)
		}
		ev, err := l.eng.Get("src:a", true)
		if err != nil {
			t.Fatal(err)
		}
		if ev.State != engine.StateDone || ev.Payload != nil {
			t.Fatalf("3.5 s in: state %v, payload %q; want done, its payload dropped", ev.State, ev.Payload)
		}
		if e := l.expires.Load(); e != 0 {
			t.Fatalf("%d expires in 3.5 s, want none before the minute", e)
		}
	})
}
