package forward

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"oncehook/engine"
)

// TestReloadRaisingTheTimeoutPastALease: an event leased for 30 s waits for
// its rate slot while a reload raises its source's forward_timeout to 60 s
// (and the lease to 120 s). Started with the new timeout under the old
// lease, the attempt outlived its lease, the event was leased again, and the
// handler ran it twice at once. It is handed back and leased again for the
// new length; no attempt runs past its lease.
func TestReloadRaisingTheTimeoutPastALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		var mu sync.Mutex
		reloaded := false
		targets := func(source string) (Target, bool) {
			mu.Lock()
			defer mu.Unlock()
			if source != "src" {
				return Target{}, false
			}
			tgt := Target{URL: "http://handler/src", MaxRate: 0.2, Burst: 1, Timeout: 10 * time.Second, Lease: 30 * time.Second}
			if reloaded {
				tgt.Timeout, tgt.Lease = 60*time.Second, 120*time.Second
			}
			return tgt, true
		}
		leases := func() []engine.LeaseLength {
			tgt, _ := targets("src")
			return []engine.LeaseLength{{Source: "src", For: int64(tgt.Lease)}}
		}
		busy := map[string]*peak{"src:1": {}, "src:2": {}}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get(HeaderEventKey)
			done := busy[key].enter()
			defer done()
			if key == "src:2" {
				time.Sleep(50 * time.Second) // within the new forward_timeout
			}
		})
		l.claim("src:1", "src", "a")
		l.claim("src:2", "src", "b")
		stop := runInBubble(t, Options{Store: l, Targets: targets, Leases: leases,
			Client: &http.Client{Transport: asyncTransport{h}}, Workers: 4,
			PollInterval: time.Second, SweepInterval: time.Second})
		time.Sleep(2 * time.Second) // src:1 delivered; src:2 parked for its slot (5 s)
		mu.Lock()
		reloaded = true
		mu.Unlock()
		time.Sleep(3 * time.Minute)
		stop()
		synctest.Wait()
		if m := busy["src:2"].most.Load(); m != 1 {
			t.Errorf("src:2: the handler held it %d times at once, want 1", m)
		}
		if ev := l.get("src:2"); ev.State != engine.StateDone {
			t.Errorf("src:2: %s after %d attempts (%q), want done", ev.State, ev.Attempts, ev.LastError)
		}
		handedBack := false
		for _, c := range l.failLog() {
			handedBack = handedBack || c.Key == "src:2" && c.Reason == ReasonLeaseTooShort
		}
		if !handedBack {
			t.Errorf("src:2 was not handed back as %q: %+v", ReasonLeaseTooShort, l.failLog())
		}
	})
}

// TestDialTimeoutIsNotAHandlerTimeout: a handler whose host drops the
// connection's SYNs never got the request; the attempt fails as "connect:
// timeout" and is retried after the backoff, not held until its lease's end
// as a timed-out attempt (whose handler may still be at work) is.
func TestDialTimeoutIsNotAHandlerTimeout(t *testing.T) {
	l := newLeader(t)
	l.claim("src:d", "src", "x")
	f := New(Options{Store: l, Targets: only(Target{URL: "http://127.0.0.1:9/h", Timeout: 10 * time.Second,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}),
		PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond})
	f.direct.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		// What net.Dialer returns when its timeout passes.
		return nil, &net.OpError{Op: "dial", Net: network, Err: dialTimeout{}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "a failed attempt", func() bool { return len(l.failLog()) > 0 })
	c := l.failLog()[0]
	if retry := time.Duration(c.RetryIn); retry > time.Second || c.Reason != reasonConnectTimeout {
		t.Errorf("unreachable handler: reason %q, next try in %v; want %q after the backoff (10ms)", c.Reason, retry, reasonConnectTimeout)
	}
}

type dialTimeout struct{}

func (dialTimeout) Error() string   { return "i/o timeout" }
func (dialTimeout) Timeout() bool   { return true }
func (dialTimeout) Temporary() bool { return true }

// TestAttemptEndsWithItsLease: an attempt whose timeout runs past its
// lease's end (here without lease lengths by source, so the event cannot be
// handed back for a longer one) is cut at the lease's end: past it the
// event may be leased again, and the handler would hold it twice. (The
// sweeps fall between whole seconds, so that the reclaim never meets the
// cut at one instant of the bubble's clock.)
func TestAttemptEndsWithItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		var held peak
		var mu sync.Mutex
		var cuts []time.Duration
		t0 := time.Now()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			done := held.enter()
			defer done()
			select {
			case <-time.After(50 * time.Second):
			case <-r.Context().Done():
				mu.Lock()
				cuts = append(cuts, time.Since(t0))
				mu.Unlock()
			}
		})
		l.claim("src:1", "src", "a")
		stop := runInBubble(t, Options{Store: l, Targets: only(Target{URL: "http://handler/src", Timeout: time.Minute,
			BackoffMin: time.Second, BackoffMax: time.Second, MaxAttempts: 3}),
			DefaultLease: 30 * time.Second, Client: &http.Client{Transport: handlerTransport{h}}, Workers: 4,
			PollInterval: 700 * time.Millisecond, SweepInterval: 700 * time.Millisecond})
		time.Sleep(3 * time.Minute)
		stop()
		synctest.Wait()
		if m := held.most.Load(); m != 1 {
			t.Errorf("the handler held the event %d times at once, want 1", m)
		}
		if len(cuts) == 0 || cuts[0] > 31*time.Second {
			t.Errorf("attempts cut at %v after the claim, want the first at its lease's end (30s)", cuts)
		}
	})
}

// TestUnlistedSourceIsNotHandedBackForEver: a source the lease lengths by
// source do not list (the engine keeps a bounded number of them) is leased
// for the default length again after a hand-back; an event whose lease no
// longer covers its timeout is then delivered and cut at the lease's end,
// not handed back on every poll without end.
func TestUnlistedSourceIsNotHandedBackForEver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLeader(t)
		l.claimLease("src:1", "src", "a", 30*time.Second)
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
		stop := runInBubble(t, Options{Store: l, Targets: only(Target{URL: "http://handler/src", Timeout: time.Minute, Lease: 2 * time.Minute}),
			Leases: func() []engine.LeaseLength { return []engine.LeaseLength{{Source: "other", For: int64(time.Minute)}} },
			Client: &http.Client{Transport: asyncTransport{h}}, PollInterval: time.Second, SweepInterval: time.Second})
		time.Sleep(10 * time.Minute)
		stop()
		synctest.Wait()
		if ev := l.get("src:1"); calls.Load() == 0 || ev.State != engine.StateDone {
			t.Fatalf("src:1 %s (%q) after %d hand-backs and %d deliveries; want delivered", ev.State, ev.LastError, len(l.failLog()), calls.Load())
		}
	})
}
