package forward

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
)

// TestSweeperRetention: the sweeper drops a done event's payload once its
// source's payload_retention passed (the key stays), and reports each dead
// letter Expire deleted once its dead_retention passed.
func TestSweeperRetention(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Oncehook-Event-Key") == "src:dies" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}}
	srv := serve(t, h)
	l.claim("src:ok", "src", "kept a while")
	l.claim("src:dies", "src", "never taken")
	var mu sync.Mutex
	var expired []engine.Event
	var logs lockedLog
	start(t, l, nil, Options{
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Targets: only(Target{URL: srv.URL, MaxAttempts: 1, PayloadRetention: time.Hour, DeadRetention: 48 * time.Hour}),
		Limits:  func() Limits { return Limits{PayloadAge: time.Hour} },
		DeadExpired: func(ev engine.Event) {
			mu.Lock()
			expired = append(expired, ev)
			mu.Unlock()
		},
		ExpireInterval: 5 * time.Millisecond,
	})
	waitFor(t, "done and dead", func() bool {
		return stateIs(l, "src:ok", engine.StateDone)() && stateIs(l, "src:dies", engine.StateDead)()
	})
	payload := func(key string) []byte {
		ev, err := l.eng.Get(key, true)
		if err != nil {
			t.Fatalf("Get(%s): %v", key, err)
		}
		return ev.Payload
	}
	if string(payload("src:ok")) != "kept a while" {
		t.Fatal("payload dropped before its payload_retention")
	}
	l.advance(2 * time.Hour)
	waitFor(t, "payload dropped", func() bool { return payload("src:ok") == nil })
	if ev := l.get("src:ok"); ev.State != engine.StateDone {
		t.Fatalf("after the drop: %+v, want the key kept, done", ev)
	}
	// Past the 24 h retention of the claims: the done key goes, the dead
	// letter stays for its 48 h.
	l.advance(25 * time.Hour)
	waitFor(t, "done key expired", func() bool {
		_, err := l.eng.Get("src:ok", false)
		return err != nil
	})
	if ev := l.get("src:dies"); ev.State != engine.StateDead {
		t.Fatalf("dead letter = %+v", ev)
	}
	l.advance(48 * time.Hour)
	waitFor(t, "dead letter expired and reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(expired) == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if ev := expired[0]; ev.Key != "src:dies" || ev.Source != "src" {
		t.Fatalf("reported %+v", ev)
	}
	if out := logs.String(); !strings.Contains(out, `level=WARN msg="dead letter expired"`) || !strings.Contains(out, "key=src:dies") {
		t.Fatalf("no warn line naming the expired dead letter:\n%s", out)
	}
}

// lockedLog is a log sink safe for the forwarder's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSweeperRepairsSchedulesFromAClockAhead: a retry stamped while the
// leader's clock ran an hour ahead is due within the horizon once the clock
// is back, not an hour later.
func TestSweeperRepairsSchedulesFromAClockAhead(t *testing.T) {
	l := newLeader(t)
	h := &sink{serve: func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}}
	srv := serve(t, h)
	l.claim("src:a", "src", "x")
	l.advance(time.Hour) // the clock jumps forward
	var horizon sync.Mutex
	limit := time.Duration(0)
	start(t, l, nil, Options{
		Targets: only(Target{URL: srv.URL, BackoffMin: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}),
		Limits: func() Limits {
			horizon.Lock()
			defer horizon.Unlock()
			return Limits{Horizon: limit}
		},
	})
	waitFor(t, "first attempt failed", func() bool { return h.n() == 1 && stateIs(l, "src:a", engine.StatePending)() })
	l.advance(-time.Hour) // and back
	ticks(t, l, 3)
	if h.n() != 1 {
		t.Fatal("retried before the repair")
	}
	horizon.Lock()
	limit = 50 * time.Millisecond
	horizon.Unlock()
	waitFor(t, "delivered after the repair", stateIs(l, "src:a", engine.StateDone))
}

// batchedDrops is a Store whose DropPayloads reports full batches a few
// times, to show that the sweeper keeps sending while a batch is full.
type batchedDrops struct {
	*leader
	mu    sync.Mutex
	full  int      // full batches left to report
	calls []string // "expire" and "drop", in order
}

func (b *batchedDrops) Expire(ctx context.Context) (int, []engine.Event, error) {
	b.mu.Lock()
	b.calls = append(b.calls, "expire")
	b.mu.Unlock()
	return b.leader.Expire(ctx)
}

func (b *batchedDrops) DropPayloads(ctx context.Context, legacyAge time.Duration, max int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, "drop")
	if b.full > 0 {
		b.full--
		return max, nil
	}
	return 0, nil
}

func (b *batchedDrops) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// TestSweeperDropsPayloadsInBatches: after each Expire the sweeper sends
// DropPayloads again while it reports a full batch (DropBatch).
func TestSweeperDropsPayloadsInBatches(t *testing.T) {
	l := newLeader(t)
	s := &batchedDrops{leader: l, full: 2}
	f := New(Options{Store: s, Targets: only(Target{URL: "http://127.0.0.1:1"}), ExpireInterval: 5 * time.Millisecond,
		PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "two expire ticks", func() bool {
		calls := s.log()
		return len(calls) > 1 && slices.Index(calls[1:], "expire") >= 0
	})
	want := []string{"expire", "drop", "drop", "drop", "expire"}
	if got := s.log()[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("sweeper calls %q, want %q", got, want)
	}
}

// cutShortExpire is a Store whose Expire loses leadership part way: the
// commands before it committed and deleted a dead letter, then ctx ends.
type cutShortExpire struct {
	*leader
	cancel context.CancelFunc
}

func (c *cutShortExpire) Expire(ctx context.Context) (int, []engine.Event, error) {
	c.cancel()
	return 1, []engine.Event{{Key: "src:gone", Source: "src", State: engine.StateDead}}, ctx.Err()
}

// TestDeadLettersReportedWhenExpireIsCutShort: the dead letters an expire
// deleted before leadership ended are logged and counted all the same;
// nobody else will report them.
func TestDeadLettersReportedWhenExpireIsCutShort(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var reported []string
	var logs lockedLog
	f := New(Options{
		Store:       &cutShortExpire{leader: newLeader(t), cancel: cancel},
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
		DeadExpired: func(ev engine.Event) { reported = append(reported, ev.Key) },
	})
	if f.expire(ctx) {
		t.Fatal("expire went on after its context ended")
	}
	if !slices.Equal(reported, []string{"src:gone"}) || !strings.Contains(logs.String(), "dead letter expired") {
		t.Fatalf("reported %v, log %q; want the dead letter reported and logged", reported, logs.String())
	}
}
