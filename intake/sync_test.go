package intake

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/providers"
)

// syncSources is a sync-mode source (docs/architecture.md, Sync mode).
const syncSources = `
[[source]]
name = "paid"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/paid"
mode = "sync"
forward_timeout = "100ms"
`

// leaseWhenPending waits for key to be pending and leases it for lease, as
// the forwarder does; false (the error reported) when that failed.
func (m *memStore) leaseWhenPending(t *testing.T, key string, lease time.Duration) (engine.Event, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := m.Wait(ctx, key, func(ev engine.Event) bool { return ev.State == engine.StatePending }); err != nil {
		t.Errorf("waiting for %s to be pending: %v", key, err)
		return engine.Event{}, false
	}
	r, err := m.apply(engine.Command{Op: engine.OpLease, Max: 1, LeaseFor: int64(lease)})
	if err != nil || len(r.Events) != 1 {
		t.Errorf("lease: %v %+v", err, r)
		return engine.Event{}, false
	}
	return r.Events[0], true
}

// handlerStep is what the test's stand-in for the forwarder does with the
// next pending event: answer it (status), or fail it for good (dead).
type handlerStep struct {
	status int // the handler's answer; 0: the attempt fails and the event is dead
	body   string
}

// deliver plays the leader's forwarder against the store: it waits for key
// to be pending, leases it, and completes it with the step's answer or fails
// it at its last attempt.
func (m *memStore) deliver(t *testing.T, key string, step handlerStep) {
	t.Helper()
	ev, ok := m.leaseWhenPending(t, key, time.Minute)
	if !ok {
		return
	}
	var err error
	if step.status == 0 {
		_, err = m.apply(engine.Command{Op: engine.OpFail, Key: key, Token: ev.Token, MaxAttempts: int(ev.Attempts), Reason: "handler failed"})
	} else {
		_, err = m.apply(engine.Command{Op: engine.OpComplete, Key: key, Token: ev.Token,
			Response: &engine.Response{Status: step.status, Body: []byte(step.body)}})
	}
	if err != nil {
		t.Errorf("delivery of %s: %v", key, err)
	}
}

// TestSyncAnswers: a sync source answers with the handler's answer, never
// acknowledges a failure, and re-arms a dead event when its provider
// retries with the same body; against a real engine, the forwarder played
// by the test.
func TestSyncAnswers(t *testing.T) {
	const key = "paid:msg_1"
	first := request{path: "/in/paid", body: `{"a":1}`, id: "msg_1"}
	other := request{path: "/in/paid", body: `{"a":2}`, id: "msg_1"}
	cases := []struct {
		name    string
		setup   []handlerStep // deliveries of the first request, before the retry
		retry   *request      // nil: the first request is the one checked
		handler *handlerStep  // the delivery while the checked request waits
		status  int
		body    string
		audit   int // audit entries after the row
	}{
		{name: "new: the handler's answer", handler: &handlerStep{201, "made"}, status: 201, body: "made"},
		{name: "new: a failure is 502", handler: &handlerStep{}, status: 502,
			body: `{"status":"handler_failed","key":"paid:msg_1","state":"dead"}` + "\n"},
		// No delivery at all within forward_timeout + 2 s: the event waits,
		// pending, and the answer says so.
		{name: "new: no answer in time is 504", status: 504,
			body: `{"status":"accepted_handler_timeout","key":"paid:msg_1","state":"pending"}` + "\n"},
		{name: "duplicate of a done event: the cached answer", setup: []handlerStep{{201, "made"}}, retry: &first,
			status: 201, body: "made"},
		{name: "duplicate with another body: conflict", setup: []handlerStep{{201, "made"}}, retry: &other,
			status: 409, body: `{"status":"conflict","key":"paid:msg_1"}` + "\n"},
		{name: "retry of a dead event re-arms it", setup: []handlerStep{{}}, retry: &first, handler: &handlerStep{200, "ok now"},
			status: 200, body: "ok now", audit: 1},
		{name: "retry of a dead event with another body: conflict, not re-armed", setup: []handlerStep{{}}, retry: &other,
			status: 409, body: `{"status":"conflict","key":"paid:msg_1"}` + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			secret, _ := providers.GenerateSecret("standard")
			mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
			store := newMemStore(t)
			f := &intakeFixture{t: t, store: store, secret: secret,
				in: New(Options{Store: store, Sources: loadSources(t, dir, syncSources)})}
			req := first
			if len(c.setup) > 0 {
				done := make(chan struct{})
				go func() {
					defer close(done)
					for _, s := range c.setup {
						store.deliver(t, key, s)
					}
				}()
				f.do(first)
				<-done
				req = *c.retry
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if c.handler != nil {
					store.deliver(t, key, *c.handler)
				}
			}()
			a := f.do(req)
			<-done
			if a.status != c.status || a.body != c.body {
				t.Fatalf("answer %d %q, want %d %q", a.status, a.body, c.status, c.body)
			}
			ev, err := store.Get(key, false)
			if err != nil {
				t.Fatal(err)
			}
			if len(ev.Audit) != c.audit {
				t.Fatalf("audit %+v, want %d entries", ev.Audit, c.audit)
			}
		})
	}
}

// TestSyncRearmOfASupersededEvent: on an ordered sync source, a provider's
// retry of a dead event whose object has a newer event delivered since is
// not re-armed (the handler would get the older one after the newer): the
// retry gets 409 "superseded" and the event stays dead.
func TestSyncRearmOfASupersededEvent(t *testing.T) {
	dir := t.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	store := newMemStore(t)
	src := syncSources + `order = { object = "json:obj", time = "json:ts" }` + "\n"
	f := &intakeFixture{t: t, store: store, secret: secret, in: New(Options{Store: store, Sources: loadSources(t, dir, src)})}
	old := request{path: "/in/paid", body: `{"obj":"Q","ts":1}`, id: "msg_1"}
	newer := request{path: "/in/paid", body: `{"obj":"Q","ts":2}`, id: "msg_2"}
	for _, step := range []struct {
		req    request
		key    string
		status int // the handler's; 0: fails for good
		want   int
	}{{old, "paid:msg_1", 0, 502}, {newer, "paid:msg_2", 200, 200}} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			store.deliver(t, step.key, handlerStep{status: step.status})
		}()
		if a := f.do(step.req); a.status != step.want {
			t.Fatalf("%s: %d %q, want %d", step.key, a.status, a.body, step.want)
		}
		<-done
	}
	a := f.do(old)
	if want := `{"status":"superseded","key":"paid:msg_1","state":"dead"}` + "\n"; a.status != 409 || a.body != want {
		t.Fatalf("retry of the older dead event: %d %q, want 409 %q", a.status, a.body, want)
	}
	if ev, err := store.Get("paid:msg_1", false); err != nil || ev.State != engine.StateDead || len(ev.Audit) != 0 {
		t.Fatalf("older event %v, audit %v (%v), want dead, untouched", ev.State, ev.Audit, err)
	}
}

// laggingStore is a follower's view: a Replay is committed through the
// leader, but this node applies it only when the test says so.
type laggingStore struct {
	*memStore
	t             *testing.T
	asked, waited chan struct{} // a Replay came; answerSync began to wait
	apply         chan struct{} // apply the Replay now
}

func (l *laggingStore) Replay(ctx context.Context, c engine.Command) (engine.Result, error) {
	close(l.asked)
	go func() {
		<-l.apply
		if _, err := l.memStore.Replay(ctx, c); err != nil {
			l.t.Errorf("the replay, applied late: %v", err)
		}
	}()
	return engine.Result{N: 1, State: engine.StatePending, Keys: c.Keys}, nil
}

func (l *laggingStore) Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error) {
	select {
	case <-l.waited:
	default:
		close(l.waited)
	}
	return l.memStore.Wait(ctx, key, final)
}

// TestSyncRearmOnAFollower: a retry of a dead sync event sent through a
// follower answers the handler's new answer, not the dead event's 502 that
// the follower's copy still shows: when its re-arm is committed before this
// node applies it, and when the leader refuses its re-arm because another
// retry, through another node, re-armed the event first.
func TestSyncRearmOnAFollower(t *testing.T) {
	const key = "paid:msg_1"
	for _, tc := range []struct {
		name  string
		store func(*laggingStore) Store
	}{
		{"its re-arm applied late", func(l *laggingStore) Store { return l }},
		{"re-armed elsewhere first", func(l *laggingStore) Store { return &rearmedElsewhere{l} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			secret, _ := providers.GenerateSecret("standard")
			mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
			mem := newMemStore(t)
			l := &laggingStore{memStore: mem, t: t, asked: make(chan struct{}), waited: make(chan struct{}), apply: make(chan struct{})}
			f := &intakeFixture{t: t, store: mem, secret: secret, in: New(Options{Store: tc.store(l), Sources: loadSources(t, dir, syncSources)})}
			first := request{path: "/in/paid", body: `{"a":1}`, id: "msg_1"}
			done := make(chan struct{})
			go func() {
				defer close(done)
				mem.deliver(t, key, handlerStep{}) // fails for good: dead
			}()
			if a := f.do(first); a.status != 502 {
				t.Fatalf("first answer %d %q, want 502", a.status, a.body)
			}
			<-done
			done = make(chan struct{})
			go func() {
				defer close(done)
				<-l.asked
				<-l.waited
				close(l.apply)
				mem.deliver(t, key, handlerStep{200, "ok now"})
			}()
			a := f.do(first)
			<-done
			if a.status != 200 || a.body != "ok now" {
				t.Fatalf("retry through a follower: %d %q, want the handler's 200 %q", a.status, a.body, "ok now")
			}
		})
	}
}

// rearmedElsewhere is a follower whose re-arm the leader refuses because
// another retry, through another node, re-armed the event first: this
// node's copy is still the dead event until that re-arm arrives (apply).
type rearmedElsewhere struct {
	*laggingStore
}

func (r *rearmedElsewhere) Replay(ctx context.Context, c engine.Command) (engine.Result, error) {
	close(r.asked)
	go func() {
		<-r.apply
		c.Who, c.Reason = "provider", "provider retry" // the other node's
		if _, err := r.memStore.Replay(ctx, c); err != nil {
			r.t.Errorf("the other re-arm: %v", err)
		}
	}()
	return engine.Result{}, fmt.Errorf("replay %s: %w", c.Keys[0], engine.ErrWrongState)
}

// laggingFollower is a node that relays its claims to a leader (the
// memStore) and has not applied the entries of the keys in hidden yet: it
// does not find them until show is closed. waited is signalled when a Wait
// for a hidden key begins.
type laggingFollower struct {
	*memStore
	hidden map[string]bool
	show   chan struct{}
	waited chan struct{}
}

func (l *laggingFollower) lagging(key string) bool {
	if !l.hidden[key] {
		return false
	}
	select {
	case <-l.show:
		return false
	default:
		return true
	}
}

func (l *laggingFollower) Lookup(key string) (engine.State, bool, error) {
	if l.lagging(key) {
		return 0, false, nil
	}
	return l.memStore.Lookup(key)
}

func (l *laggingFollower) Get(key string, withPayload bool) (engine.Event, error) {
	if l.lagging(key) {
		return engine.Event{}, fmt.Errorf("get %s: %w", key, engine.ErrNotFound)
	}
	return l.memStore.Get(key, withPayload)
}

func (l *laggingFollower) Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error) {
	if l.lagging(key) {
		select {
		case l.waited <- struct{}{}:
		default:
		}
		select {
		case <-l.show:
		case <-ctx.Done():
			return engine.Event{}, ctx.Err()
		}
	}
	return l.memStore.Wait(ctx, key, final)
}

// TestSyncDuplicateOnALaggingFollower: a follower relays a duplicate's claim
// to the leader, whose state has the event while the follower has not
// applied it yet. The answer is still the stored event's (the cached answer,
// the conflict, in progress, a re-arm), once the follower has it, never a
// bare 200 it cannot back: the handler may have failed. A follower that does
// not catch up within the claim timeout answers 503, retry.
func TestSyncDuplicateOnALaggingFollower(t *testing.T) {
	const key = "paid:msg_1"
	first := request{path: "/in/paid", body: `{"a":1}`, id: "msg_1"}
	other := request{path: "/in/paid", body: `{"a":2}`, id: "msg_1"}
	cases := []struct {
		name   string
		setup  *handlerStep // the first delivery's outcome; nil: still pending
		retry  request
		after  *handlerStep // the delivery of a re-armed event
		catch  bool         // the follower applies the entry while the retry waits
		status int
		body   string
	}{
		{"done, same body: the cached answer", &handlerStep{201, "made"}, first, nil, true, 201, "made"},
		{"done, another body: conflict", &handlerStep{201, "made"}, other, nil, true, 409, `{"status":"conflict","key":"paid:msg_1"}` + "\n"},
		{"dead: the retry re-arms it", &handlerStep{}, first, &handlerStep{200, "ok now"}, true, 200, "ok now"},
		{"pending: in progress", nil, first, nil, true, 409, `{"status":"in_progress","key":"paid:msg_1","state":"pending"}` + "\n"},
		{"not applied in time: 503", &handlerStep{201, "made"}, first, nil, false, 503,
			`{"status":"error","error":"duplicate of an event this node has not applied yet, retry"}` + "\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			secret, _ := providers.GenerateSecret("standard")
			mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
			leader := newMemStore(t)
			sources := loadSources(t, dir, syncSources)
			if c.setup != nil {
				lf := &intakeFixture{t: t, store: leader, secret: secret, in: New(Options{Store: leader, Sources: sources})}
				done := make(chan struct{})
				go func() {
					defer close(done)
					leader.deliver(t, key, *c.setup)
				}()
				lf.do(first)
				<-done
			} else if _, err := leader.Claim(context.Background(), engine.Command{Key: key, Source: "paid", Payload: []byte(first.body)}); err != nil {
				t.Fatal(err)
			}

			follower := &laggingFollower{memStore: leader, hidden: map[string]bool{key: true},
				show: make(chan struct{}), waited: make(chan struct{}, 1)}
			timeout := time.Minute
			if !c.catch {
				timeout = 50 * time.Millisecond
			}
			ff := &intakeFixture{t: t, store: leader, secret: secret,
				in: New(Options{Store: follower, Sources: sources, Timeout: timeout})}
			answered := make(chan struct{})
			caught := make(chan struct{})
			go func() {
				defer close(caught)
				if !c.catch {
					return
				}
				select {
				case <-follower.waited:
					close(follower.show)
				case <-answered:
					return // answered without waiting for the event
				}
				if c.after != nil {
					leader.deliver(t, key, *c.after)
				}
			}()
			a := ff.do(c.retry)
			close(answered)
			<-caught
			if a.status != c.status || a.body != c.body {
				t.Fatalf("answer %d %q, want %d %q", a.status, a.body, c.status, c.body)
			}
		})
	}
}

// answeredAtTheDeadline is a store whose wait for the handler's answer
// ends as the answer is applied: the wait reports its deadline, the event
// is done.
type answeredAtTheDeadline struct {
	*memStore
	t *testing.T
}

func (a answeredAtTheDeadline) Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error) {
	if ev, err := a.memStore.Get(key, false); err == nil && ev.State == engine.StatePending && ev.Attempts == 0 {
		a.memStore.deliver(a.t, key, handlerStep{status: 201, body: "made"})
		return ev, context.DeadlineExceeded
	}
	return a.memStore.Wait(ctx, key, final)
}

// TestSyncAnswerAppliedAtTheDeadline: a handler's answer applied just as
// the wait for it ended is relayed, not answered 504 as late.
func TestSyncAnswerAppliedAtTheDeadline(t *testing.T) {
	dir := t.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	mem := newMemStore(t)
	f := &intakeFixture{t: t, store: mem, secret: secret, in: New(Options{Store: answeredAtTheDeadline{mem, t}, Sources: loadSources(t, dir, syncSources)})}
	if a := f.do(request{path: "/in/paid", body: `{"a":1}`, id: "msg_1"}); a.status != 201 || a.body != "made" {
		t.Fatalf("answer %d %q, want the handler's 201 made", a.status, a.body)
	}
}

// rearmCutOff is a store whose re-arms end with an unknown outcome, as when
// the leader is killed while committing one.
type rearmCutOff struct{ *memStore }

var errOutcomeUnknown = errors.New("outcome unknown")

func (r rearmCutOff) Replay(context.Context, engine.Command) (engine.Result, error) {
	return engine.Result{}, fmt.Errorf("replay: %w", errOutcomeUnknown)
}

// TestRearmCutOffSaysWhatIsKnown: a re-arm whose commit ended in a kind of
// failure the store names is answered with that reason (an unknown outcome
// may have re-armed the event), not "not committed".
func TestRearmCutOffSaysWhatIsKnown(t *testing.T) {
	dir := t.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	mem := newMemStore(t)
	notCommitted := func(err error) string {
		if errors.Is(err, errOutcomeUnknown) {
			return "commit outcome unknown: not acknowledged, retry"
		}
		return ""
	}
	f := &intakeFixture{t: t, store: mem, secret: secret,
		in: New(Options{Store: rearmCutOff{mem}, Sources: loadSources(t, dir, syncSources), NotCommitted: notCommitted})}
	first := request{path: "/in/paid", body: `{"a":1}`, id: "msg_1"}
	done := make(chan struct{})
	go func() { defer close(done); mem.deliver(t, "paid:msg_1", handlerStep{}) }()
	if a := f.do(first); a.status != 502 {
		t.Fatalf("first answer %d %q, want 502", a.status, a.body)
	}
	<-done
	a := f.do(first)
	if a.status != 503 || !strings.Contains(a.body, "re-arm: commit outcome unknown") {
		t.Fatalf("the retry whose re-arm was cut off: %d %q, want 503 naming the unknown outcome", a.status, a.body)
	}
}

// failTimedOut plays a forwarder whose last attempt of key timed out,
// started at (its handler may have gone on running it): the event is dead.
func (m *memStore) failTimedOut(t *testing.T, key string, at time.Time) {
	t.Helper()
	ev, ok := m.leaseWhenPending(t, key, 30*time.Second)
	if !ok {
		return
	}
	if _, err := m.apply(engine.Command{Op: engine.OpFail, Key: key, Token: ev.Token, MaxAttempts: int(ev.Attempts), Reason: "timeout",
		Attempt: &engine.Attempt{At: at.UnixNano(), Took: int64(100 * time.Millisecond), Error: "timeout"}}); err != nil {
		t.Errorf("fail %s: %v", key, err)
	}
}

// TestRearmWaitsForATimedOutAttemptsLease: a provider's retry of a sync
// event whose last attempt timed out less than a lease ago is not re-armed:
// the handler may still be running that attempt, and a re-arm would start
// the event again beside it. It gets 503 with the wait in Retry-After and
// the event stays dead; once the lease is over, the retry re-arms it. A
// receiving node whose clock runs ahead of the leader's sees the lease over
// too early: the leader's engine refuses the re-arm on its own clock.
func TestRearmWaitsForATimedOutAttemptsLease(t *testing.T) {
	dir := t.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	mem := newMemStore(t)
	sources := loadSources(t, dir, syncSources)
	for _, tc := range []struct {
		id      string
		started time.Duration // the last attempt's start, before now
		ahead   time.Duration // the receiving node's clock ahead of the store's
		status  int
	}{
		{"msg_recent", time.Second, 0, 503},   // its 30 s lease runs for 29 s more
		{"msg_old", 31 * time.Second, 0, 200}, // its lease is over: re-armed, delivered again
		{"msg_node_ahead", time.Second, time.Minute, 503},
	} {
		f := &intakeFixture{t: t, store: mem, secret: secret, in: New(Options{Store: mem, Sources: sources,
			Now: func() time.Time { return time.Now().Add(tc.ahead) }})}
		req := request{path: "/in/paid", body: `{"a":1}`, id: tc.id}
		key := "paid:" + tc.id
		done := make(chan struct{})
		go func() { defer close(done); mem.failTimedOut(t, key, time.Now().Add(-tc.started)) }()
		if a := f.do(req); a.status != 502 {
			t.Fatalf("%s: first answer %d %q, want 502", tc.id, a.status, a.body)
		}
		<-done
		done = make(chan struct{})
		go func() {
			defer close(done)
			if tc.status == 200 {
				mem.deliver(t, key, handlerStep{200, "ok now"})
			}
		}()
		a := f.do(req)
		<-done
		if a.status != tc.status {
			t.Fatalf("%s: the retry got %d %q, want %d", tc.id, a.status, a.body, tc.status)
		}
		ev, _ := mem.Get(key, false)
		if tc.status == 503 {
			ra, _ := strconv.Atoi(a.header["Retry-After"])
			// This node's own refusal says the seconds left of its 30 s
			// lease (29, a second of it gone); one only the leader made,
			// a whole lease, all this node can tell.
			wantRA := tc.ahead == 0 && ra >= 20 && ra <= 29 || tc.ahead > 0 && ra == 30
			if !wantRA || !strings.Contains(a.body, "may still be running") || ev.State != engine.StateDead || len(ev.Audit) != 0 {
				t.Fatalf("%s: %q Retry-After %q, event %v with %d audit entries; want the wait, dead, not re-armed", tc.id, a.body, a.header["Retry-After"], ev.State, len(ev.Audit))
			}
		}
	}
}

// TestLastAttemptWait: the wait before a re-arm runs on the longer of the
// event's own lease and the source's current one, counts a stalled answer as
// a timeout, never exceeds one lease, and ignores an attempt stamped more
// than a lease ahead (by a leader whose clock ran ahead).
func TestLastAttemptWait(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UnixNano()
	at := func(ago time.Duration, reason string) engine.Event {
		return engine.Event{History: []engine.Attempt{{At: now - int64(ago), Error: reason}}}
	}
	withLease := func(ev engine.Event, lease time.Duration) engine.Event { ev.LeaseFor = int64(lease); return ev }
	src := int64(30 * time.Second)
	for _, tc := range []struct {
		name string
		ev   engine.Event
		want time.Duration
	}{
		{"no attempt", engine.Event{}, 0},
		{"a failure, not a timeout", at(time.Second, "status 500"), 0},
		{"a timeout a second ago", at(time.Second, "timeout"), 29 * time.Second},
		{"a stalled answer", at(time.Second, "read body: timeout"), 29 * time.Second},
		{"its lease is over", at(31*time.Second, "timeout"), 0},
		{"the event's longer lease", withLease(at(40*time.Second, "timeout"), 2*time.Minute), 80 * time.Second},
		{"stamped less than a lease ahead", at(-20*time.Second, "timeout"), 30 * time.Second},
		{"stamped an hour ahead", at(-time.Hour, "timeout"), 0},
	} {
		if got := lastAttemptWait(tc.ev, src, now); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
}

// mismatchMetrics counts the duplicates whose body differs.
type mismatchMetrics struct {
	noMetrics
	n atomic.Int32
}

func (m *mismatchMetrics) DuplicateBodyChanged(string) { m.n.Add(1) }

// TestDuplicateBodyCountedOnALaggingFollower: a duplicate with another body
// that reaches a follower which has not applied the event yet (the leader
// found it; the entry is on its way) is still counted, as it is where the
// event is applied: the answer waits a moment for the event to compare.
func TestDuplicateBodyCountedOnALaggingFollower(t *testing.T) {
	const key = "orders:msg_m"
	dir := t.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	leader := newMemStore(t)
	sources := loadSources(t, dir, tableSources)
	if _, err := leader.Claim(context.Background(), engine.Command{Key: key, Source: "orders", Payload: []byte(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	follower := &laggingFollower{memStore: leader, hidden: map[string]bool{key: true},
		show: make(chan struct{}), waited: make(chan struct{}, 1)}
	m := &mismatchMetrics{}
	ff := &intakeFixture{t: t, store: leader, secret: secret, in: New(Options{Store: follower, Sources: sources, Metrics: m})}
	answered, caught := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(caught)
		select {
		case <-follower.waited:
			close(follower.show)
		case <-answered:
		}
	}()
	a := ff.do(request{path: "/in/orders", body: `{"a":2}`, id: "msg_m"})
	close(answered)
	<-caught
	if a.status != 200 || !strings.Contains(a.body, `"duplicate"`) {
		t.Fatalf("answer %d %q, want 200 duplicate", a.status, a.body)
	}
	if got := m.n.Load(); got != 1 {
		t.Fatalf("%d duplicates counted with another body, want 1", got)
	}
}
