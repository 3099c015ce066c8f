package forward

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/internal/testcluster"
)

// hit is one request a test handler received.
type hit struct {
	header http.Header
	body   []byte
}

// sink is a test handler: it records every request, then lets serve answer it
// (n is the 1-based number of the request). A nil serve answers 200.
type sink struct {
	mu    sync.Mutex
	hits  []hit
	serve func(n int, w http.ResponseWriter, r *http.Request)
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.hits = append(s.hits, hit{r.Header.Clone(), body})
	n := len(s.hits)
	s.mu.Unlock()
	if s.serve != nil {
		s.serve(n, w, r)
	}
}

func (s *sink) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hits)
}

func (s *sink) hit(i int) hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[i]
}

// serve starts a loopback server for h, closed at cleanup (after the
// forwarder, which is registered later, has stopped).
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// recorder collects what Observe and OnFinish report.
type recorder struct {
	mu       sync.Mutex
	outcomes []string
	fins     []Finish
}

func (r *recorder) observe(source, outcome string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, outcome)
}

func (r *recorder) finish(f Finish) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fins = append(r.fins, f)
}

func (r *recorder) count(outcome string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.outcomes {
		if o == outcome {
			n++
		}
	}
	return n
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

func (r *recorder) finishes() []Finish {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.fins)
}

// only returns a Targets lookup with one source, "src".
func only(tgt Target) func(string) (Target, bool) {
	return func(source string) (Target, bool) {
		if source != "src" {
			return Target{}, false
		}
		return tgt, true
	}
}

// running is a Forwarder started by start.
type running struct {
	t    *testing.T
	f    *Forwarder
	stop func() time.Duration // cancels Run and waits for it; how long that took
}

// start runs a Forwarder on l with opts (Store, Observe and OnFinish filled in
// when nil) and stops it at cleanup. Short intervals keep tests quick.
func start(t *testing.T, l *leader, rec *recorder, opts Options) running {
	t.Helper()
	opts.Store = l
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	if opts.SweepInterval == 0 {
		opts.SweepInterval = 5 * time.Millisecond
	}
	if rec != nil {
		opts.Observe, opts.OnFinish = rec.observe, rec.finish
	}
	f := New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	var once sync.Once
	var took time.Duration
	stop := func() time.Duration {
		once.Do(func() {
			t0 := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("Run did not return 10s after cancel")
			}
			took = time.Since(t0)
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return running{t, f, stop}
}

// waitFor polls cond every 2 ms until it holds; it fails t after 10 s. Some
// states these tests wait for last only a backoff of 10-20 ms.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testcluster.WaitForEvery(t, what, 10*time.Second, 2*time.Millisecond, cond)
}

func stateIs(l *leader, key string, want engine.State) func() bool {
	return func() bool {
		ev, err := l.eng.Get(key, false)
		return err == nil && ev.State == want
	}
}

// ticks waits for n more sweeper ticks: time passing, observed, not slept.
func ticks(t *testing.T, l *leader, n int64) {
	t.Helper()
	from := l.reclaims.Load()
	waitFor(t, "sweeper ticks", func() bool { return l.reclaims.Load() >= from+n })
}

func TestDeliveryHeadersAndBody(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	body := `{"id":"evt_1","amount":42}` + "\n\x00binary\xff"
	l.claim("src:evt_1", "src", body,
		engine.Header{Name: "Content-Type", Value: "application/json; charset=utf-8"},
		engine.Header{Name: "Stripe-Signature", Value: "t=1,v1=abc"},
		engine.Header{Name: "Idempotency-Key", Value: "provider-own"}, // gitlab's; ours wins
		engine.Header{Name: "Oncehook-Fencing-Token", Value: "999999"},
		engine.Header{Name: "Content-Length", Value: "1"}, // framing is the client's
		engine.Header{Name: "X-Bad", Value: "a\r\nInjected: 1"},
		engine.Header{Name: "oncehook-verified", Value: "yes"}, // our namespace: none from a sender
	)
	rec := &recorder{}
	r := start(t, l, rec, Options{Targets: only(Target{URL: srv.URL + "/hook"})})

	waitFor(t, "done", stateIs(l, "src:evt_1", engine.StateDone))
	ticks(t, l, 3)
	r.stop()
	if h.n() != 1 {
		t.Fatalf("handler got %d requests, want 1", h.n())
	}
	got := h.hit(0)
	ev := l.get("src:evt_1")
	want := map[string]string{
		"Content-Type":           "application/json; charset=utf-8",
		"Stripe-Signature":       "t=1,v1=abc",
		"Idempotency-Key":        "src:evt_1",
		"Oncehook-Event-Key":     "src:evt_1",
		"Oncehook-Source":        "src",
		"Oncehook-Attempt":       "1",
		"Oncehook-Fencing-Token": strconv.FormatUint(ev.Token, 10),
	}
	for name, v := range want {
		if vs := got.header.Values(name); len(vs) != 1 || vs[0] != v {
			t.Errorf("%s = %q, want [%q]", name, vs, v)
		}
	}
	if v := got.header.Get("X-Bad"); v != "" || got.header.Get("Injected") != "" {
		t.Errorf("an invalid stored header was forwarded: X-Bad=%q", v)
	}
	if v := got.header.Values("Oncehook-Verified"); len(v) != 0 {
		t.Errorf("a sender's Oncehook-* header was forwarded: %q", v)
	}
	if !bytes.Equal(got.body, []byte(body)) {
		t.Errorf("body = %q, want %q", got.body, body)
	}
	if ev.Token == 0 || ev.Attempts != 1 {
		t.Errorf("event token %d attempts %d, want a token and 1 attempt", ev.Token, ev.Attempts)
	}
	if o := rec.list(); !slices.Equal(o, []string{OutcomeDone}) {
		t.Errorf("outcomes = %v, want [done]", o)
	}
	fins := rec.finishes()
	if len(fins) != 1 || fins[0].Key != "src:evt_1" || fins[0].Status != 200 || fins[0].Token != ev.Token ||
		fins[0].Attempt != 1 || fins[0].Response != nil {
		t.Errorf("OnFinish got %+v", fins)
	}
}

func TestRetriesThenDone(t *testing.T) {
	const failures = 4
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= failures {
			http.Error(w, "secret-looking body must not be kept", http.StatusInternalServerError)
		}
	}}
	srv := serve(t, h)
	l.claim("src:k", "src", "payload")
	rec := &recorder{}
	lo, hi := 2*time.Millisecond, 5*time.Millisecond
	start(t, l, rec, Options{
		Targets: only(Target{URL: srv.URL, BackoffMin: lo, BackoffMax: hi, MaxAttempts: 10}),
		Rand:    rand.New(rand.NewPCG(1, 2)),
	})

	waitFor(t, "done", stateIs(l, "src:k", engine.StateDone))
	if h.n() != failures+1 {
		t.Fatalf("handler got %d requests, want %d", h.n(), failures+1)
	}
	var last uint64
	for i := range failures + 1 {
		hd := h.hit(i).header
		if a := hd.Get("Oncehook-Attempt"); a != strconv.Itoa(i+1) {
			t.Errorf("request %d: Oncehook-Attempt %q, want %d", i+1, a, i+1)
		}
		tok, _ := strconv.ParseUint(hd.Get("Oncehook-Fencing-Token"), 10, 64)
		if tok <= last {
			t.Errorf("request %d: token %d not above the previous %d", i+1, tok, last)
		}
		last = tok
	}
	fails := l.failLog()
	if len(fails) != failures {
		t.Fatalf("%d Fail commands, want %d", len(fails), failures)
	}
	for i, c := range fails {
		b := min(lo<<i, hi)
		if d := time.Duration(c.RetryIn); d < b/2 || d > b {
			t.Errorf("retry %d waits %v, want within [%v, %v]", i+1, d, b/2, b)
		}
		if c.Reason != "status 500" || c.MaxAttempts != 10 {
			t.Errorf("fail %d: reason %q max %d", i+1, c.Reason, c.MaxAttempts)
		}
	}
	ev := l.get("src:k")
	if ev.Attempts != failures+1 {
		t.Errorf("attempts = %d, want %d", ev.Attempts, failures+1)
	}
	// The event is done once Complete commits; the forwarder reports the
	// outcome just after.
	waitFor(t, "the done outcome reported", func() bool { return rec.count(OutcomeDone) == 1 })
	if got := rec.count(OutcomeRetry); got != failures || rec.count(OutcomeDone) != 1 {
		t.Errorf("outcomes = %v", rec.list())
	}
}

func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }}
	srv := serve(t, h)
	l.claim("src:dead", "src", "x")
	rec := &recorder{}
	start(t, l, rec, Options{Targets: only(Target{URL: srv.URL, BackoffMin: time.Millisecond,
		BackoffMax: time.Millisecond, MaxAttempts: 3})})

	waitFor(t, "dead", stateIs(l, "src:dead", engine.StateDead))
	ticks(t, l, 5)
	if h.n() != 3 {
		t.Errorf("handler got %d requests, want 3", h.n())
	}
	ev := l.get("src:dead")
	if ev.Attempts != 3 || ev.LastError != "status 502" {
		t.Errorf("attempts %d last error %q", ev.Attempts, ev.LastError)
	}
	// Outcomes are reported after their commands commit, each from its own
	// goroutine: the dead one can be reported before the second retry.
	waitFor(t, "three outcomes reported", func() bool { return len(rec.list()) == 3 })
	if o := rec.list(); rec.count(OutcomeRetry) != 2 || rec.count(OutcomeDead) != 1 {
		t.Errorf("outcomes = %v, want two retries and one dead", o)
	}
}

func TestRedirectIsFailure(t *testing.T) {
	l := newLeader(t)
	elsewhere := &sink{}
	other := serve(t, elsewhere)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}}
	srv := serve(t, h)
	l.claim("src:r", "src", "x")
	// A caller's own client without CheckRedirect still follows none.
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer client.CloseIdleConnections()
	start(t, l, nil, Options{Client: client, Targets: only(Target{URL: srv.URL, MaxAttempts: 1})})

	waitFor(t, "dead", stateIs(l, "src:r", engine.StateDead))
	if ev := l.get("src:r"); ev.LastError != "status 307" {
		t.Errorf("last error %q, want status 307", ev.LastError)
	}
	if elsewhere.n() != 0 {
		t.Errorf("redirect was followed")
	}
	if client.CheckRedirect != nil {
		t.Errorf("New changed the caller's client")
	}
}

func TestFailureReasons(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	slow := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }}
	slowSrv := serve(t, slow)
	big := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write(bytes.Repeat([]byte("body-text "), 20000))
	}}
	bigSrv := serve(t, big)

	for _, tc := range []struct {
		name, url, prefix string
	}{
		{"refused", closed, "connect: "},
		{"timeout", slowSrv.URL, "timeout"},
		{"status", bigSrv.URL, "status 400"},
		{"bad url", "::not a url", "bad target url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLeader(t)
			l.claim("src:e", "src", "x")
			start(t, l, nil, Options{Targets: only(Target{URL: tc.url, Timeout: 50 * time.Millisecond, MaxAttempts: 1})})
			waitFor(t, "dead", stateIs(l, "src:e", engine.StateDead))
			reason := l.get("src:e").LastError
			t.Logf("reason %q", reason)
			if !strings.HasPrefix(reason, tc.prefix) || len(reason) > maxReason ||
				strings.Contains(reason, "body-text") || strings.Contains(reason, "127.0.0.1") {
				t.Errorf("reason %q, want prefix %q, short, no body, no address", reason, tc.prefix)
			}
		})
	}
}

// TestRetryAfter: a 429 or 503 with Retry-After is retried after it, at
// least BackoffMin; past BackoffMax the event keeps the hold of its source
// (MaxHold at most) as its own retry time, which is replicated: the hold
// itself is the leader's, and a new leader would retry it at BackoffMax.
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		status int
		header string
		want   time.Duration // 0: the normal backoff
	}{
		{429, "3", 3 * time.Second},
		{503, "3", 3 * time.Second},
		{429, "0", time.Second},  // raised to BackoffMin
		{503, "100000", MaxHold}, // over BackoffMax: the source's hold, at most MaxHold, kept in the event's own time (a new leader knows it)
		{500, "3", 0},            // only 429 and 503 are honoured
		{429, "Wed, 21 Oct 2015 07:28:00 GMT", 0},
		{429, "", 0},
	} {
		t.Run(strconv.Itoa(tc.status)+"/"+tc.header, func(t *testing.T) {
			l := newLeader(t)
			srv := serve(t, &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
			}})
			l.claim("src:ra", "src", "x")
			start(t, l, nil, Options{
				Targets: only(Target{URL: srv.URL, BackoffMin: time.Second, BackoffMax: 10 * time.Second}),
				Rand:    rand.New(rand.NewPCG(3, 4)),
			})
			waitFor(t, "a failure", func() bool { return len(l.failLog()) == 1 })
			got := time.Duration(l.failLog()[0].RetryIn)
			if tc.want != 0 && got != tc.want {
				t.Errorf("retry in %v, want %v", got, tc.want)
			}
			if tc.want == 0 && (got < 500*time.Millisecond || got > time.Second) {
				t.Errorf("retry in %v, want the first backoff within [0.5s, 1s]", got)
			}
		})
	}
}

// TestHandBackKeepsTheHandlersError: an event its handler failed, handed
// back on its next lease (here its source was removed by a reload), still
// shows the handler's failure as its last error; the hand-back is no
// failure and spends no attempt.
func TestHandBackKeepsTheHandlersError(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		http.Error(w, "ledger offline", http.StatusServiceUnavailable)
	}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tgts := &mutableTargets{m: map[string]Target{"src": {URL: srv.URL, MaxAttempts: 5, BackoffMin: time.Minute, BackoffMax: time.Minute}}}
	l.claim("src:k", "src", "x")
	rec := &recorder{}
	start(t, l, rec, Options{Targets: tgts.get})
	waitFor(t, "the failed attempt", func() bool { return len(l.failLog()) == 1 })
	failed := l.get("src:k")
	if failed.State != engine.StatePending || !strings.Contains(failed.LastError, "503") {
		t.Fatalf("after the 503: %v %q, want pending with the handler's error", failed.State, failed.LastError)
	}

	tgts.mu.Lock()
	delete(tgts.m, "src")
	tgts.mu.Unlock()
	l.advance(2 * time.Minute)
	waitFor(t, "the hand-back", func() bool { return len(l.failLog()) == 2 })
	if c := l.failLog()[1]; !c.Refund {
		t.Fatalf("second fail %+v, want a hand-back", c)
	}
	ev := l.get("src:k")
	if ev.State != engine.StatePending || ev.LastError != failed.LastError || ev.Attempts != failed.Attempts {
		t.Fatalf("after the hand-back: %v %q, %d attempts; want pending, %q, %d", ev.State, ev.LastError, ev.Attempts, failed.LastError, failed.Attempts)
	}
	if !handBackReason(ReasonNoTarget) || handBackReason(failed.LastError) {
		t.Errorf("handBackReason: a hand-back's reason and a failure not told apart")
	}
}

// TestNoTargetForSource: the events of a source that is not configured (a
// reload removed or renamed it) are held, not failed: the one leased is
// handed back without spending its last attempt, later leases skip the
// source while other sources deliver, and once the source is configured
// again its event is delivered.
func TestNoTargetForSource(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var mu sync.Mutex
	configured := map[string]bool{"src": true}
	targets := func(source string) (Target, bool) {
		mu.Lock()
		defer mu.Unlock()
		return Target{URL: srv.URL}, configured[source]
	}
	l.claim("gone:k", "gone", "x")
	rec := &recorder{}
	start(t, l, rec, Options{Targets: targets})
	waitFor(t, "the hand-back", func() bool { return len(l.failLog()) == 1 })
	c := l.failLog()[0]
	if c.Key != "gone:k" || c.Reason != ReasonNoTarget || !c.Refund || time.Duration(c.RetryIn) > time.Second {
		t.Fatalf("fail command %+v, want a hand-back (a refund) of gone:k", c)
	}
	if ev := l.get("gone:k"); ev.State != engine.StatePending || ev.LastError != ReasonNoTarget {
		t.Fatalf("event %v %q, want pending with the reason", ev.State, ev.LastError)
	}

	// Another source delivers meanwhile, and many leases later, past any
	// retry time, the held event was not leased again.
	l.advance(time.Hour)
	l.claim("src:a", "src", "y")
	waitFor(t, "the other source's delivery", func() bool { return h.n() == 1 })
	leases := l.leases.Load()
	waitFor(t, "more leases", func() bool { return l.leases.Load() >= leases+20 })
	if n := len(l.failLog()); n != 1 {
		t.Fatalf("%d hand-backs, want 1: the source's events were leased again: %+v", n, l.failLog())
	}
	if ev := l.get("gone:k"); ev.State != engine.StatePending || ev.Attempts != 0 {
		t.Fatalf("held event %v attempts %d, want pending with its lease's attempt taken back", ev.State, ev.Attempts)
	}

	mu.Lock()
	configured["gone"] = true
	mu.Unlock()
	waitFor(t, "the held event delivered", func() bool { return l.get("gone:k").State == engine.StateDone })
	if h.n() != 2 {
		t.Fatalf("handler got %d deliveries, want 2", h.n())
	}
	// The handler's first sight of it is its first attempt.
	if got := h.hit(1).header.Get("Oncehook-Attempt"); got != "1" {
		t.Errorf("the held event's delivery says Oncehook-Attempt %q, want 1", got)
	}
}

// A handler slower than its lease: the sweeper reclaims the event, a second
// worker delivers it under a newer token, and the first worker's late 2xx is
// fenced instead of completing over the newer lease.
func TestFencedLateCompletion(t *testing.T) {
	l := newLeader(t)
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	arrived := make(chan int, 2)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		arrived <- n
		gate := gate1
		if n > 1 {
			gate = gate2
		}
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}}
	srv := serve(t, h)
	l.claimLease("src:f", "src", "x", time.Minute)
	rec := &recorder{}
	var reclaimed atomic.Int64
	start(t, l, rec, Options{Workers: 4, Targets: only(Target{URL: srv.URL, Timeout: time.Hour}),
		LeasesReclaimed: func(n int) { reclaimed.Add(int64(n)) }})

	if n := <-arrived; n != 1 {
		t.Fatalf("first request is number %d", n)
	}
	t1 := l.get("src:f").Token
	l.advance(2 * time.Minute) // the first lease has ended; the sweeper reclaims it
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no second delivery after the lease expired")
	}
	t2 := l.get("src:f").Token
	if t2 <= t1 {
		t.Fatalf("second lease token %d not above %d", t2, t1)
	}
	if n := reclaimed.Load(); n != 1 {
		t.Errorf("LeasesReclaimed counted %d, want the one reclaim", n)
	}

	close(gate1) // the slow handler answers 200 now, under t1
	waitFor(t, "fenced", func() bool { return rec.count(OutcomeFenced) == 1 })
	if ev := l.get("src:f"); ev.State != engine.StateProcessing || ev.Token != t2 {
		t.Fatalf("after the late 2xx: %v token %d, want processing under %d", ev.State, ev.Token, t2)
	}
	close(gate2)
	waitFor(t, "done", stateIs(l, "src:f", engine.StateDone))

	cs := l.completeLog()
	if len(cs) != 2 || cs[0].token != t1 || !errors.Is(cs[0].err, engine.ErrStaleToken) ||
		cs[1].token != t2 || cs[1].err != nil {
		t.Errorf("completes = %+v, want [{%d stale} {%d nil}]", cs, t1, t2)
	}
	if ev := l.get("src:f"); ev.Token != t2 || ev.Attempts != 2 {
		t.Errorf("done under token %d attempts %d, want %d and 2", ev.Token, ev.Attempts, t2)
	}
	for i, want := range []string{"1", "2"} {
		if a := h.hit(i).header.Get("Oncehook-Attempt"); a != want {
			t.Errorf("request %d: attempt %q, want %s", i+1, a, want)
		}
	}
	// The done outcome is reported just after Complete commits.
	waitFor(t, "the done outcome reported", func() bool { return rec.count(OutcomeDone) == 1 })
	if o := rec.list(); !slices.Equal(o, []string{OutcomeFenced, OutcomeDone}) {
		t.Errorf("outcomes = %v, want fenced done", o)
	}
}

func TestSyncTargetCachesResponse(t *testing.T) {
	l := newLeader(t)
	long := bytes.Repeat([]byte("0123456789abcdef"), (MaxBody+1000)/16)
	srv := serve(t, &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		switch r.Header.Get("Oncehook-Event-Key") {
		case "src:long":
			w.Write(long)
		case "src:whole":
			w.Write(long[:MaxBody])
		default:
			io.WriteString(w, `{"ok":true}`)
		}
	}})
	l.claim("src:s", "src", "x")
	l.claim("src:long", "src", "y")
	l.claim("src:whole", "src", "z")
	rec := &recorder{}
	var logs lockedLog
	start(t, l, rec, Options{Targets: only(Target{URL: srv.URL, Sync: true}), Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	waitFor(t, "done", stateIs(l, "src:s", engine.StateDone))
	waitFor(t, "done", stateIs(l, "src:long", engine.StateDone))
	waitFor(t, "done", stateIs(l, "src:whole", engine.StateDone))
	// The cut is logged, once, for the answer that was cut and no other.
	if got := strings.Count(logs.String(), "sync answer cut"); got != 1 || !strings.Contains(logs.String(), "key=src:long") {
		t.Errorf("want one line saying src:long's answer was cut, got %d in:\n%s", got, logs.String())
	}
	if ev := l.get("src:whole"); ev.Response == nil || len(ev.Response.Body) != MaxBody {
		t.Errorf("an answer of exactly %d bytes not cached whole", MaxBody)
	}
	ev := l.get("src:s")
	if ev.Response == nil || ev.Response.Status != 201 || string(ev.Response.Body) != `{"ok":true}` {
		t.Errorf("cached response %+v", ev.Response)
	}
	ev = l.get("src:long")
	if ev.Response == nil || ev.Response.Status != 201 || !bytes.Equal(ev.Response.Body, long[:MaxBody]) {
		t.Errorf("long response not cached as its first %d bytes", MaxBody)
	}
	waitFor(t, "finishes", func() bool { return len(rec.finishes()) == 3 })
	for _, f := range rec.finishes() {
		if f.Outcome != OutcomeDone || f.Response == nil || f.Response.Status != 201 {
			t.Errorf("finish %+v", f)
		}
	}
}

// Cancelling Run with a handler in flight: Run returns promptly, the request
// is cancelled, and the event stays processing for its lease to expire.
func TestCancelLeavesEventProcessing(t *testing.T) {
	l := newLeader(t)
	entered := make(chan struct{})
	srv := serve(t, &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done()
	}})
	l.claim("src:c", "src", "x")
	rec := &recorder{}
	r := start(t, l, rec, Options{Targets: only(Target{URL: srv.URL, Timeout: time.Hour})})
	<-entered
	if took := r.stop(); took > 2*time.Second {
		t.Errorf("Run took %v to return after cancel", took)
	}
	ev := l.get("src:c")
	if ev.State != engine.StateProcessing || ev.Attempts != 1 || ev.LastError != "" {
		t.Errorf("event %v attempts %d last error %q, want processing, 1, none", ev.State, ev.Attempts, ev.LastError)
	}
	if len(l.failLog()) != 0 || len(l.completeLog()) != 0 || len(rec.finishes()) != 0 {
		t.Errorf("an abandoned attempt was recorded: fails %v completes %v finishes %v",
			l.failLog(), l.completeLog(), rec.finishes())
	}
	// The handler was called: the call is counted, as one whose outcome
	// could not be committed (it will be repeated after the lease).
	if o := rec.list(); !slices.Equal(o, []string{OutcomeError}) {
		t.Errorf("outcomes = %v, want [error]", o)
	}
}

// completeCutOff is a Store whose Complete waits for the run to end, as a
// leader's does when it loses its quorum during the commit.
type completeCutOff struct {
	*leader
	entered chan struct{}
}

func (c completeCutOff) Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, keep time.Duration) error {
	close(c.entered)
	<-ctx.Done()
	return ctx.Err()
}

// A handler call answered 2xx whose Complete never committed (leadership
// lost during it) is counted as outcome error: the event goes out again
// after its lease, and the repeat is expected.
func TestCutOffCompleteIsCountedAsError(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	l.claim("src:c", "src", "x")
	rec := &recorder{}
	store := completeCutOff{leader: l, entered: make(chan struct{})}
	f := New(Options{Store: store, PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond,
		Observe: rec.observe, OnFinish: rec.finish, Targets: only(Target{URL: srv.URL})})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	<-store.entered
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if h.n() != 1 || l.get("src:c").State != engine.StateProcessing {
		t.Fatalf("handler calls %d, state %v: want 1 and processing", h.n(), l.get("src:c").State)
	}
	if o := rec.list(); !slices.Equal(o, []string{OutcomeError}) || len(rec.finishes()) != 0 {
		t.Errorf("outcomes %v finishes %v, want [error] and none", o, rec.finishes())
	}
}

func TestInFlightNeverExceedsWorkers(t *testing.T) {
	const workers, events = 2, 7
	l := newLeader(t)
	release := make(chan struct{})
	var cur, peak atomic.Int64
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		c := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}}
	srv := serve(t, h)
	for i := range events {
		l.claim("src:"+strconv.Itoa(i), "src", "x")
	}
	start(t, l, nil, Options{Workers: workers, Targets: only(Target{URL: srv.URL})})

	waitFor(t, "workers busy", func() bool { return h.n() == workers })
	ticks(t, l, 5)
	if h.n() != workers || l.leaseMax.Load() > workers {
		t.Fatalf("%d requests in flight with %d workers; largest lease %d", h.n(), workers, l.leaseMax.Load())
	}
	close(release)
	for i := range events {
		waitFor(t, "done", stateIs(l, "src:"+strconv.Itoa(i), engine.StateDone))
	}
	if peak.Load() > workers || h.n() != events {
		t.Errorf("peak concurrency %d, requests %d", peak.Load(), h.n())
	}
}

func TestWakeLeasesPromptly(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	wake := make(chan struct{}, 1)
	start(t, l, nil, Options{Wake: wake, PollInterval: time.Hour, SweepInterval: time.Hour,
		Targets: only(Target{URL: srv.URL})})
	waitFor(t, "the first lease", func() bool { return l.leases.Load() == 1 })
	l.claim("src:w", "src", "x")
	wake <- struct{}{}
	waitFor(t, "done after a wake", stateIs(l, "src:w", engine.StateDone))
}

func TestLeaseErrorsAreNotFatal(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	l.failLease.Store(true)
	l.claim("src:q", "src", "x")
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL})})
	waitFor(t, "lease attempts", func() bool { return l.leases.Load() >= 3 })
	if h.n() != 0 {
		t.Fatalf("delivered without a lease")
	}
	l.failLease.Store(false)
	waitFor(t, "done once leases work", stateIs(l, "src:q", engine.StateDone))
}

func TestSweeperExpiresRetention(t *testing.T) {
	l := newLeader(t)
	srv := serve(t, &sink{})
	_, err := l.apply(engine.Command{Op: engine.OpClaim, Key: "src:old", Source: "src",
		Payload: []byte("x"), Retention: int64(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, l, nil, Options{ExpireInterval: 5 * time.Millisecond, Targets: only(Target{URL: srv.URL})})
	waitFor(t, "done", stateIs(l, "src:old", engine.StateDone))
	l.advance(3 * time.Hour) // past any retention bucket holding now+1m
	waitFor(t, "expired", func() bool {
		_, err := l.eng.Get("src:old", false)
		return errors.Is(err, engine.ErrNotFound)
	})
}

func TestRunErrors(t *testing.T) {
	if err := New(Options{}).Run(context.Background()); !errors.Is(err, ErrNoStore) {
		t.Errorf("Run without a store: %v", err)
	}
	l := newLeader(t)
	f := New(Options{Store: l, Targets: only(Target{}), PollInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	waitFor(t, "running", func() bool { return l.leases.Load() >= 1 })
	if err := f.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	// Runnable again, as on the next leadership term.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- f.Run(ctx) }()
	waitFor(t, "running again", func() bool { return l.leases.Load() >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("second term Run: %v", err)
	}
}

// Response bodies are drained, so one worker delivering one event after
// another keeps a single keep-alive connection.
func TestConnectionsReused(t *testing.T) {
	const events = 6
	l := newLeader(t)
	srv := httptest.NewUnstartedServer(&sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		if n%2 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
		w.Write(bytes.Repeat([]byte("x"), 8<<10))
	}})
	var conns atomic.Int64
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	for i := range events {
		l.claim("src:"+strconv.Itoa(i), "src", "x")
	}
	start(t, l, nil, Options{Workers: 1, Targets: only(Target{URL: srv.URL, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})})
	for i := range events {
		waitFor(t, "done", stateIs(l, "src:"+strconv.Itoa(i), engine.StateDone))
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for sequential deliveries, want 1", n)
	}
}

// TestHandlerRestartSpendsNoAttempt: a handler restarted (a deploy) closed
// every connection the forwarder kept to it; the next event reaches it at
// its first attempt, with no failure recorded, though every kept connection
// is dead.
func TestHandlerRestartSpendsNoAttempt(t *testing.T) {
	const burst = 8
	l := newLeader(t)
	arrived := make(chan struct{}, burst)
	release := make(chan struct{})
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		if n <= burst { // answered together: one connection each
			arrived <- struct{}{}
			<-release
		}
	}}
	srv := serve(t, h)
	for i := range burst {
		l.claim("src:burst"+strconv.Itoa(i), "src", "x")
	}
	start(t, l, nil, Options{Workers: burst, Targets: only(Target{URL: srv.URL, BackoffMin: time.Second, BackoffMax: time.Second, MaxAttempts: 3})})
	for range burst {
		<-arrived
	}
	close(release)
	for i := range burst {
		waitFor(t, "the burst delivered", stateIs(l, "src:burst"+strconv.Itoa(i), engine.StateDone))
	}

	srv.CloseClientConnections() // the restart: every kept connection is closed
	l.claim("src:after", "src", "x")
	waitFor(t, "the event after the restart delivered", stateIs(l, "src:after", engine.StateDone))
	if ev := l.get("src:after"); ev.Attempts != 1 {
		t.Errorf("the event took %d attempts, want 1", ev.Attempts)
	}
	if fails := l.failLog(); len(fails) != 0 {
		t.Errorf("%d failures recorded (first: %q), want none", len(fails), fails[0].Reason)
	}
	if got := h.hit(h.n() - 1).header.Get("Oncehook-Attempt"); got != "1" {
		t.Errorf("the handler saw attempt %q, want 1", got)
	}
}

// commitThenLose is a Store whose Complete commits, then the run ends: the
// node lost leadership right after the commit, before the worker looked.
type commitThenLose struct {
	*leader
	lose func()
}

func (c commitThenLose) Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, keep time.Duration) error {
	err := c.leader.Complete(ctx, key, token, resp, step, keep)
	c.lose()
	<-ctx.Done()
	return err
}

// A completion that committed is counted as done even when the run ended
// right after it: it was recorded, and nothing will repeat it.
func TestCommittedCompleteIsCountedAsDone(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	l.claim("src:a", "src", "x")
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	f := New(Options{Store: commitThenLose{l, cancel}, PollInterval: 5 * time.Millisecond, SweepInterval: time.Hour,
		Observe: rec.observe, Targets: only(Target{URL: srv.URL})})
	if err := f.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ev := l.get("src:a"); ev.State != engine.StateDone {
		t.Fatalf("event %v, want done", ev.State)
	}
	if o := rec.list(); !slices.Equal(o, []string{OutcomeDone}) {
		t.Errorf("outcomes %v, want [done]", o)
	}
}
