package forward

import (
	"bytes"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
)

// claimOrdered claims key for object at order time ot.
func (l *leader) claimOrdered(key, object string, ot int64) {
	l.t.Helper()
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: []byte(key),
		Retention: int64(24 * time.Hour), OrderObject: object, OrderTime: ot})
	if err != nil || !res.Created || res.State != engine.StatePending {
		l.t.Fatalf("claim %q: %+v %v", key, res, err)
	}
}

// TestOrderedObjectOneAtATime: with many workers, the newer event of an
// object is not delivered while the handler still holds the older one, and
// an unordered event or another object's goes meanwhile. The handler records
// what it holds; the assertions read that state, not the clock.
func TestOrderedObjectOneAtATime(t *testing.T) {
	l := newLeader(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var arrived []string
	holding := map[string]int{} // object -> requests being handled
	overlap := false
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(HeaderIdempotencyKey)
		obj := key[:len("src:A")]
		mu.Lock()
		arrived = append(arrived, key)
		holding[obj]++
		if holding[obj] > 1 && obj != "src:u" {
			overlap = true
		}
		mu.Unlock()
		defer func() { mu.Lock(); holding[obj]--; mu.Unlock() }()
		if key == "src:A1" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}}
	srv := serve(t, h)
	l.claimOrdered("src:A1", "A", 100)
	l.claimOrdered("src:A2", "A", 200)
	l.claimOrdered("src:A3", "A", 200) // a tie: after A2, in claim order
	l.claimOrdered("src:B1", "B", 100)
	l.claim("src:u1", "src", "x")
	start(t, l, nil, Options{Workers: 8, Targets: only(Target{URL: srv.URL, Timeout: time.Minute})})

	waitFor(t, "B1 and u1 done while A1 is held", func() bool {
		return stateIs(l, "src:B1", engine.StateDone)() && stateIs(l, "src:u1", engine.StateDone)()
	})
	ticks(t, l, 5) // several more lease rounds with A1 still in the handler
	if ev := l.get("src:A2"); ev.State != engine.StatePending || ev.Attempts != 0 {
		t.Fatalf("A2 while A1 is held: %+v, want pending and never leased", ev)
	}
	close(release)
	waitFor(t, "A3 done", stateIs(l, "src:A3", engine.StateDone))
	mu.Lock()
	defer mu.Unlock()
	var a []string
	for _, k := range arrived {
		if k[:len("src:A")] == "src:A" {
			a = append(a, k)
		}
	}
	if want := []string{"src:A1", "src:A2", "src:A3"}; !slices.Equal(a, want) || overlap {
		t.Fatalf("object A arrived as %v (overlap %v), want %v one at a time", a, overlap, want)
	}
}

// TestFailedAttemptsInHistory: a failing handler's status, answer (cut to
// engine.MaxAttemptBody bytes) and a transport error land in the event's
// attempt history, oldest first; the successful attempt adds nothing.
func TestFailedAttemptsInHistory(t *testing.T) {
	l := newLeader(t)
	long := bytes.Repeat([]byte("x"), 1000)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":"db down"}`))
		case 2:
			w.WriteHeader(http.StatusBadGateway)
			w.Write(long)
		}
	}}
	srv := serve(t, h)
	l.claim("src:h", "src", "x")
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond})})
	waitFor(t, "done", stateIs(l, "src:h", engine.StateDone))

	ev, err := l.eng.Get("src:h", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.History) != 2 {
		t.Fatalf("history %+v, want the 2 failed attempts", ev.History)
	}
	first, second := ev.History[0], ev.History[1]
	if first.Status != 500 || string(first.Body) != `{"error":"db down"}` || first.Error != "status 500" {
		t.Errorf("first attempt %+v", first)
	}
	if second.Status != 502 || !bytes.Equal(second.Body, long[:engine.MaxAttemptBody]) {
		t.Errorf("second attempt: status %d, %d body bytes", second.Status, len(second.Body))
	}
	if first.At <= 0 || second.At < first.At || first.Took <= 0 {
		t.Errorf("attempt times %d/%d, took %d", first.At, second.At, first.Took)
	}
}

// TestTransportErrorInHistory: an attempt without an answer is kept with
// status 0 and its error.
func TestTransportErrorInHistory(t *testing.T) {
	l := newLeader(t)
	slow := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }}
	srv := serve(t, slow)
	l.claim("src:t", "src", "x")
	start(t, l, nil, Options{Targets: only(Target{URL: srv.URL, Timeout: 20 * time.Millisecond, MaxAttempts: 1})})
	waitFor(t, "dead", stateIs(l, "src:t", engine.StateDead))
	ev, err := l.eng.Get("src:t", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.History) != 1 || ev.History[0].Status != 0 || ev.History[0].Error != "timeout" || ev.History[0].Body != nil {
		t.Fatalf("history %+v, want one timeout without status", ev.History)
	}
}

// TestOrderedSuccessorLeasedWhenTheHeadEnds: when an event with an order
// object ends, the dispatcher leases again at once: the next event of its
// object does not wait for a poll tick or a wake.
func TestOrderedSuccessorLeasedWhenTheHeadEnds(t *testing.T) {
	l := newLeader(t)
	h := &sink{}
	srv := serve(t, h)
	l.claimOrdered("src:A1", "A", 100)
	l.claimOrdered("src:A2", "A", 200)
	wake := make(chan struct{}, 1)
	start(t, l, nil, Options{Wake: wake, PollInterval: time.Hour, SweepInterval: time.Hour,
		Targets: only(Target{URL: srv.URL})})
	waitFor(t, "A2 done after A1, without a tick", stateIs(l, "src:A2", engine.StateDone))
	if h.n() != 2 || h.hit(0).header.Get(HeaderIdempotencyKey) != "src:A1" {
		t.Fatalf("handler got %d requests, the first %q", h.n(), h.hit(0).header.Get(HeaderIdempotencyKey))
	}
}
