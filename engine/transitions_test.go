package engine

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// step is one command of a transition scenario and what it must produce.
type step struct {
	cmd Command
	tok int // 1: use the token of the latest lease, 2: of the lease before it

	err     error // Result.Err (errors.Is)
	created bool  // Result.Created
	state   State // Result.State, when non-zero
	n       int   // Result.N (always checked)

	key      string // when set, the event's state after the step
	keyState State  // 0 with key set: the event must not exist
	attempts int    // with key set and keyState non-zero: Event.Attempts

	check func(t *testing.T, h *harness, r Result)
}

func runSteps(t *testing.T, h *harness, steps []step) {
	t.Helper()
	var tokens []uint64
	for i, s := range steps {
		c := s.cmd
		switch s.tok {
		case 1:
			c.Token = tokens[len(tokens)-1]
		case 2:
			c.Token = tokens[len(tokens)-2]
		}
		r := h.one(c)
		if len(r.Events) > 0 {
			tokens = append(tokens, r.Events[0].Token)
		}
		if !errors.Is(r.Err, s.err) || (s.err == nil && r.Err != nil) {
			t.Fatalf("step %d (op %d %q): err = %v, want %v", i, c.Op, c.Key, r.Err, s.err)
		}
		if r.Created != s.created {
			t.Fatalf("step %d (op %d %q): created = %v, want %v", i, c.Op, c.Key, r.Created, s.created)
		}
		if s.state != 0 && r.State != s.state {
			t.Fatalf("step %d (op %d %q): state = %d, want %d", i, c.Op, c.Key, r.State, s.state)
		}
		if r.N != s.n {
			t.Fatalf("step %d (op %d %q): n = %d, want %d", i, c.Op, c.Key, r.N, s.n)
		}
		if s.key != "" {
			ev, err := h.e.Get(s.key, true)
			switch {
			case s.keyState == 0 && !errors.Is(err, ErrNotFound):
				t.Fatalf("step %d: Get(%q) = %v, %v; want ErrNotFound", i, s.key, ev.State, err)
			case s.keyState != 0 && err != nil:
				t.Fatalf("step %d: Get(%q): %v", i, s.key, err)
			case s.keyState != 0 && ev.State != s.keyState:
				t.Fatalf("step %d: %q state = %d, want %d", i, s.key, ev.State, s.keyState)
			case s.keyState != 0 && int(ev.Attempts) != s.attempts:
				t.Fatalf("step %d: %q attempts = %d, want %d", i, s.key, ev.Attempts, s.attempts)
			}
		}
		if s.check != nil {
			s.check(t, h, r)
		}
	}
}

func TestTransitions(t *testing.T) {
	const k = "src:evt_1"
	lease := leaseCmd(t0+sec, 10)
	tests := []struct {
		name  string
		steps []step
	}{
		{"claim new is pending", []step{
			{cmd: claimCmd(k, t0), created: true, state: StatePending, key: k, keyState: StatePending,
				check: func(t *testing.T, h *harness, r Result) {
					ev := h.get(k)
					if ev.Source != "src" || ev.CreatedAt != t0 || ev.UpdatedAt != t0 || ev.NextAttemptAt != t0 || ev.Token != 0 {
						t.Errorf("new event = %+v", ev)
					}
					if string(ev.Payload) != "payload of "+k || len(ev.Headers) != 1 || ev.Headers[0].Value != "application/json" {
						t.Errorf("payload %q headers %v", ev.Payload, ev.Headers)
					}
					if want := t0 + 25*hour; ev.ExpiresAt != want {
						t.Errorf("ExpiresAt = %d, want %d (end of the bucket holding now+retention)", ev.ExpiresAt, want)
					}
				}},
		}},
		{"duplicate claim changes nothing", []step{
			{cmd: claimCmd(k, t0), created: true, state: StatePending},
			{cmd: func() Command { c := claimCmd(k, t0+5*sec); c.Payload = []byte("other body"); return c }(),
				created: false, state: StatePending, key: k, keyState: StatePending,
				check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); string(ev.Payload) != "payload of "+k || ev.UpdatedAt != t0 {
						t.Errorf("duplicate changed the event: %+v", ev)
					}
				}},
		}},
		{"duplicate of a done event reports done", []step{
			{cmd: claimCmd(k, t0), created: true, state: StatePending},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 0, t0+2*sec), tok: 1, state: StateDone},
			{cmd: claimCmd(k, t0+3*sec), state: StateDone},
		}},
		{"lease hands out payload and token", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1, key: k, keyState: StateProcessing, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					ev := r.Events[0]
					if ev.Key != k || ev.Token != h.idx || ev.LeaseUntil != t0+31*sec || ev.Attempts != 1 {
						t.Errorf("leased event = %+v (index %d)", ev, h.idx)
					}
					if string(ev.Payload) != "payload of "+k || len(ev.Headers) != 1 {
						t.Errorf("lease payload %q headers %v", ev.Payload, ev.Headers)
					}
				}},
		}},
		{"lease uses the event's own lease length", []step{
			{cmd: func() Command { c := claimCmd(k, t0); c.LeaseFor = 5 * sec; return c }(), created: true},
			{cmd: lease, n: 1, check: func(t *testing.T, h *harness, r Result) {
				if got := r.Events[0].LeaseUntil; got != t0+6*sec {
					t.Errorf("LeaseUntil = %d, want now+5s", got-t0)
				}
			}},
		}},
		{"lease of nothing", []step{
			{cmd: lease, n: 0},
		}},
		{"lease of nothing due", []step{
			{cmd: claimCmd(k, t0+hour), created: true},
			{cmd: lease, n: 0, key: k, keyState: StatePending, attempts: 0},
		}},
		{"lease is oldest due first and stops at max", []step{
			{cmd: claimCmd("src:c", t0+2), created: true},
			{cmd: claimCmd("src:a", t0+3), created: true},
			{cmd: claimCmd("src:b", t0+1), created: true},
			{cmd: leaseCmd(t0+sec, 2), n: 2, check: func(t *testing.T, h *harness, r Result) {
				if got := []string{r.Events[0].Key, r.Events[1].Key}; !slices.Equal(got, []string{"src:b", "src:c"}) {
					t.Errorf("leased %v, want oldest due first", got)
				}
			}},
			{cmd: leaseCmd(t0+sec, 2), n: 1, key: "src:a", keyState: StateProcessing, attempts: 1},
		}},
		{"complete", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 0, t0+2*sec), tok: 1, state: StateDone, key: k, keyState: StateDone, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); ev.UpdatedAt != t0+2*sec || ev.LeaseUntil != 0 || ev.Response != nil {
						t.Errorf("done event = %+v", ev)
					}
				}},
		}},
		{"complete caches the response", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: func() Command {
				c := completeCmd(k, 0, t0+2*sec)
				c.Response = &Response{Status: 201, Body: []byte(`{"ok":true}`)}
				return c
			}(), tok: 1, state: StateDone, check: func(t *testing.T, h *harness, r Result) {
				ev, err := h.e.Get(k, false)
				if err != nil || ev.Response == nil || ev.Response.Status != 201 || string(ev.Response.Body) != `{"ok":true}` {
					t.Errorf("Get = %+v, %v; want the cached response", ev.Response, err)
				}
				if ev.Payload != nil {
					t.Errorf("Get without payload returned %q", ev.Payload)
				}
			}},
		}},
		{"complete with a stale token after re-lease", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 31*sec}, n: 1, key: k, keyState: StatePending, attempts: 1},
			{cmd: leaseCmd(t0+32*sec, 1), n: 1, key: k, keyState: StateProcessing, attempts: 2},
			{cmd: completeCmd(k, 0, t0+33*sec), tok: 2, err: ErrStaleToken, key: k, keyState: StateProcessing, attempts: 2},
			{cmd: failCmd(k, 0, t0+33*sec, 5), tok: 2, err: ErrStaleToken, key: k, keyState: StateProcessing, attempts: 2},
			{cmd: completeCmd(k, 0, t0+34*sec), tok: 1, state: StateDone},
			{cmd: completeCmd(k, 0, t0+35*sec), tok: 2, err: ErrStaleToken, key: k, keyState: StateDone, attempts: 2},
		}},
		{"complete of an unknown key", []step{
			{cmd: completeCmd("src:nope", 7, t0), err: ErrNotFound},
		}},
		{"complete of a pending event", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: completeCmd(k, 0, t0), err: ErrWrongState, key: k, keyState: StatePending},
			{cmd: completeCmd(k, 99, t0), err: ErrWrongState, key: k, keyState: StatePending},
		}},
		{"complete with a token from the future", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 1<<40, t0+2*sec), err: ErrStaleToken, key: k, keyState: StateProcessing, attempts: 1},
		}},
		{"fail retries later", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(k, 0, t0+2*sec, 3), tok: 1, state: StatePending, key: k, keyState: StatePending, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					ev := h.get(k)
					if ev.NextAttemptAt != t0+12*sec || ev.LastError != "handler 500" || ev.LeaseUntil != 0 {
						t.Errorf("failed event = %+v", ev)
					}
				}},
			{cmd: leaseCmd(t0+11*sec, 10), n: 0},
			{cmd: leaseCmd(t0+12*sec, 10), n: 1, key: k, keyState: StateProcessing, attempts: 2},
		}},
		{"fail at max attempts is dead", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(k, 0, t0+2*sec, 2), tok: 1, state: StatePending},
			{cmd: leaseCmd(t0+12*sec, 1), n: 1},
			{cmd: failCmd(k, 0, t0+13*sec, 2), tok: 1, state: StateDead, key: k, keyState: StateDead, attempts: 2},
			{cmd: leaseCmd(t0+hour, 10), n: 0},
		}},
		{"a refunded fail gives the attempt back and never kills", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1, attempts: 1, key: k, keyState: StateProcessing},
			{cmd: refundCmd(k, t0+2*sec, 1), tok: 1, state: StatePending, key: k, keyState: StatePending, attempts: 0},
			{cmd: leaseCmd(t0+12*sec, 1), n: 1, key: k, keyState: StateProcessing, attempts: 1},
			{cmd: refundCmd(k, t0+13*sec, 1), tok: 1, state: StatePending, key: k, keyState: StatePending, attempts: 0},
			{cmd: leaseCmd(t0+23*sec, 1), n: 1, key: k, keyState: StateProcessing, attempts: 1},
			{cmd: failCmd(k, 0, t0+24*sec, 1), tok: 1, state: StateDead, key: k, keyState: StateDead, attempts: 1},
		}},
		{"fail without a limit never dies", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(k, 0, t0+2*sec, 0), tok: 1, state: StatePending, key: k, keyState: StatePending, attempts: 1},
		}},
		{"fail after done", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 0, t0+2*sec), tok: 1, state: StateDone},
			{cmd: failCmd(k, 0, t0+3*sec, 3), tok: 1, err: ErrWrongState, key: k, keyState: StateDone, attempts: 1},
		}},
		{"fail of an unknown key", []step{
			{cmd: failCmd("src:nope", 3, t0, 3), err: ErrNotFound},
		}},
		{"reclaim waits for the lease end", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 30*sec}, n: 0, key: k, keyState: StateProcessing, attempts: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 31*sec}, n: 1, key: k, keyState: StatePending, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); ev.NextAttemptAt != t0+31*sec || ev.LeaseUntil != 0 || ev.LastError != reclaimReason {
						t.Errorf("reclaimed event = %+v", ev)
					}
				}},
			{cmd: Command{Op: OpReclaim, Now: t0 + hour}, n: 0},
		}},
		{"a late complete after reclaim is rejected", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: Command{Op: OpReclaim, Now: t0 + 31*sec}, n: 1},
			{cmd: completeCmd(k, 0, t0+32*sec), tok: 1, err: ErrWrongState, key: k, keyState: StatePending, attempts: 1},
		}},
		{"replay of a dead event", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(k, 0, t0+2*sec, 1), tok: 1, state: StateDead},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}, Who: "ops", Reason: "fixed the handler"},
				n: 1, state: StatePending, key: k, keyState: StatePending, attempts: 0,
				check: func(t *testing.T, h *harness, r Result) {
					if !slices.Equal(r.Keys, []string{k}) {
						t.Errorf("Keys = %v", r.Keys)
					}
					ev := h.get(k)
					want := []AuditEntry{{At: t0 + hour, Who: "ops", Action: "replay", Reason: "fixed the handler", From: StateDead}}
					if !slices.Equal(ev.Audit, want) || ev.NextAttemptAt != t0+hour {
						t.Errorf("replayed event = %+v", ev)
					}
				}},
			{cmd: leaseCmd(t0+hour, 10), n: 1, key: k, keyState: StateProcessing, attempts: 1},
		}},
		{"replay of a done event keeps its payload", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 0, t0+2*sec), tok: 1, state: StateDone},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}, Who: "ops"}, n: 1, state: StatePending,
				key: k, keyState: StatePending, check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); string(ev.Payload) != "payload of "+k || len(ev.Audit) != 1 || ev.Audit[0].From != StateDone {
						t.Errorf("replayed event = %+v", ev)
					}
				}},
		}},
		{"a re-arm only from dead leaves a done event alone", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: completeCmd(k, 0, t0+2*sec), tok: 1, state: StateDone},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}, OnlyFrom: StateDead, Who: "provider"}, err: ErrWrongState, n: 0,
				key: k, keyState: StateDone, attempts: 1, check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); len(ev.Audit) != 0 {
						t.Errorf("a re-arm only from dead touched a done event: %+v", ev)
					}
				}},
		}},
		{"a re-arm only from dead moves a dead event", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: failCmd(k, 0, t0+2*sec, 1), tok: 1, state: StateDead},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}, OnlyFrom: StateDead, Who: "provider"}, n: 1,
				state: StatePending, key: k, keyState: StatePending},
		}},
		{"replay of a pending event", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}}, err: ErrWrongState, n: 0,
				key: k, keyState: StatePending, check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get(k); len(ev.Audit) != 0 || ev.UpdatedAt != t0 {
						t.Errorf("replay touched a pending event: %+v", ev)
					}
				}},
		}},
		{"replay of a processing event", []step{
			{cmd: claimCmd(k, t0), created: true},
			{cmd: lease, n: 1},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{k}}, err: ErrWrongState, key: k, keyState: StateProcessing, attempts: 1},
		}},
		{"replay of an unknown key", []step{
			{cmd: Command{Op: OpReplay, Now: t0, Keys: []string{"src:nope"}}, err: ErrNotFound},
		}},
		{"replay of several keys skips the misses", []step{
			{cmd: claimCmd("src:a", t0), created: true},
			{cmd: claimCmd("src:b", t0), created: true},
			{cmd: leaseCmd(t0, 1), n: 1},
			{cmd: failCmd("src:a", 0, t0, 1), tok: 1, state: StateDead},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, Keys: []string{"src:b", "src:a", "src:zz", "src:a"}}, n: 1,
				state: StatePending, check: func(t *testing.T, h *harness, r Result) {
					if !slices.Equal(r.Keys, []string{"src:a"}) {
						t.Errorf("Keys = %v", r.Keys)
					}
				}},
		}},
		{"replay by state, source and since", []step{
			{cmd: claimCmd("src:a", t0), created: true},
			{cmd: func() Command { c := claimCmd("other:b", t0); c.Source = "other"; return c }(), created: true},
			{cmd: claimCmd("src:c", t0), created: true},
			{cmd: claimCmd("src:d", t0), created: true},
			{cmd: leaseCmd(t0, 10), n: 4},
			{cmd: failCmd("src:a", 0, t0+10*sec, 1), tok: 1, state: StateDead},
			{cmd: failCmd("other:b", 0, t0+10*sec, 1), tok: 1, state: StateDead},
			{cmd: failCmd("src:c", 0, t0+1*sec, 1), tok: 1, state: StateDead},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, State: StateDead, Source: "src", Since: t0 + 5*sec, Who: "ops"},
				n: 1, state: StatePending, check: func(t *testing.T, h *harness, r Result) {
					if !slices.Equal(r.Keys, []string{"src:a"}) {
						t.Errorf("Keys = %v, want only src:a (other source, too old, processing skipped)", r.Keys)
					}
				}},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, State: StateDead, Who: "ops"}, n: 2, state: StatePending,
				check: func(t *testing.T, h *harness, r Result) {
					if !slices.Equal(r.Keys, []string{"other:b", "src:c"}) {
						t.Errorf("Keys = %v", r.Keys)
					}
				}},
			{cmd: Command{Op: OpReplay, Now: t0 + hour, State: StateDead}, n: 0, key: "src:d", keyState: StateProcessing, attempts: 1},
		}},
		{"drop payloads of events done before", []step{
			{cmd: claimCmd("src:a", t0), created: true},
			{cmd: claimCmd("src:b", t0), created: true},
			{cmd: leaseCmd(t0, 10), n: 2},
			{cmd: completeCmd("src:a", 0, t0+10*sec), tok: 1, state: StateDone},
			{cmd: completeCmd("src:b", 0, t0+20*sec), tok: 1, state: StateDone},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + 10*sec}, n: 0},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + 20*sec}, n: 1, key: "src:a", keyState: StateDone, attempts: 1,
				check: func(t *testing.T, h *harness, r Result) {
					if ev := h.get("src:a"); ev.Payload != nil || ev.Headers != nil {
						t.Errorf("payload of src:a still there: %q", ev.Payload)
					}
					if ev := h.get("src:b"); string(ev.Payload) != "payload of src:b" {
						t.Errorf("payload of src:b = %q", ev.Payload)
					}
				}},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + hour}, n: 1},
			{cmd: Command{Op: OpDropPayloads, Now: t0 + hour, Before: t0 + hour}, n: 0},
		}},
		{"expire whole buckets", []step{
			{cmd: func() Command { c := claimCmd("src:a", t0+10*sec); c.Retention = hour; return c }(), created: true},
			{cmd: func() Command { c := claimCmd("src:b", t0+10*sec); c.Retention = 2 * hour; return c }(), created: true},
			{cmd: leaseCmd(t0+20*sec, 10), n: 2},
			{cmd: completeCmd("src:a", 0, t0+20*sec), tok: 1},
			{cmd: completeCmd("src:b", 0, t0+20*sec), tok: 1},
			{cmd: Command{Op: OpExpire, Now: t0 + 2*hour - 1}, n: 0, key: "src:a", keyState: StateDone, attempts: 1},
			{cmd: Command{Op: OpExpire, Now: t0 + 2*hour}, n: 1, key: "src:a"},
			{cmd: Command{Op: OpExpire, Now: t0 + 2*hour}, n: 0, key: "src:b", keyState: StateDone, attempts: 1},
			{cmd: Command{Op: OpExpire, Now: t0 + 3*hour}, n: 1, key: "src:b"},
			{cmd: claimCmd("src:a", t0+3*hour), created: true, state: StatePending},
		}},
		{"expire of every state", []step{
			{cmd: claimCmd("src:a", t0), created: true},
			{cmd: claimCmd("src:b", t0), created: true},
			{cmd: claimCmd("src:c", t0), created: true},
			{cmd: claimCmd("src:d", t0), created: true},
			{cmd: leaseCmd(t0, 3), n: 3},
			{cmd: func() Command { c := completeCmd("src:a", 0, t0); c.Response = &Response{Status: 200}; return c }(), tok: 1, state: StateDone},
			{cmd: failCmd("src:b", 0, t0, 1), tok: 1, state: StateDead},
			// Only the done event goes: the dead letter, the processing and
			// the pending event move to later buckets (nothing unfinished is
			// forgotten; the dead letter gets DefaultDeadRetention).
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour}, n: 1, key: "src:a",
				check: func(t *testing.T, h *harness, r Result) {
					s, src := mustCounts(t, h.e)
					if s[StateDead] != 1 || s[StateProcessing] != 1 || s[StatePending] != 1 || s[StateDone] != 0 || src["src"] != 3 {
						t.Errorf("counts after expiry: %v %v", s, src)
					}
					if ev := h.get("src:b"); ev.ExpiresAt != bucketEnd(t0+25*hour+DefaultDeadRetention, hour) {
						t.Errorf("dead letter expires at %d, want %d", ev.ExpiresAt, bucketEnd(t0+25*hour+DefaultDeadRetention, hour))
					}
					for _, k := range []string{"src:c", "src:d"} {
						// A fresh window: the bucket of now + the claim's
						// window (24 h rounded up to a bucket end: 25 h).
						if ev := h.get(k); ev.ExpiresAt != t0+51*hour || ev.RetentionWindow() != 25*hour {
							t.Errorf("%s expires at %d (window %d), want %d", k, ev.ExpiresAt, ev.RetentionWindow(), t0+51*hour)
						}
					}
				}},
			// The dead letter, kept for its dead retention, goes when that ends.
			{cmd: Command{Op: OpExpire, Now: t0 + 25*hour + DefaultDeadRetention + hour}, n: 1, key: "src:b",
				check: func(t *testing.T, h *harness, r Result) {
					if len(r.Events) != 1 || r.Events[0].Key != "src:b" || r.Events[0].Source != "src" || r.Events[0].State != StateDead {
						t.Errorf("expired dead letters = %+v", r.Events)
					}
				}},
		}},
		{"noop", []step{
			{cmd: Command{Op: OpNoop, Now: t0}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, newHarness(t, Options{NoSync: true}), tt.steps)
		})
	}
}

func TestBadCommands(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	tests := []struct {
		name string
		cmd  Command
	}{
		{"op zero", Command{Now: t0, Key: "src:a"}},
		{"unknown op", Command{Op: 200, Now: t0, Key: "src:a"}},
		{"claim without key", Command{Op: OpClaim, Now: t0, Source: "src"}},
		{"claim key too long", Command{Op: OpClaim, Now: t0, Key: long, Source: "src"}},
		{"claim without source", Command{Op: OpClaim, Now: t0, Key: "src:a"}},
		{"claim negative retention", Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src", Retention: -1}},
		{"claim negative lease", Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src", LeaseFor: -1}},
		{"claim order object too long", Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src", OrderObject: long}},
		{"claim too many headers", Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src", Headers: make([]Header, MaxHeaders+1)}},
		{"claim now out of range", Command{Op: OpClaim, Now: maxTime, Key: "src:a", Source: "src"}},
		{"lease max zero", Command{Op: OpLease, Now: t0, LeaseFor: sec}},
		{"lease without length", Command{Op: OpLease, Now: t0, Max: 1}},
		{"complete without key", Command{Op: OpComplete, Now: t0, Token: 1}},
		{"fail negative retry", Command{Op: OpFail, Now: t0, Key: "src:a", Token: 1, RetryIn: -1}},
		{"replay without keys or state", Command{Op: OpReplay, Now: t0}},
		{"replay of pending by state", Command{Op: OpReplay, Now: t0, State: StatePending}},
		{"replay keys and state", Command{Op: OpReplay, Now: t0, Keys: []string{"src:a"}, State: StateDead}},
		{"replay empty key", Command{Op: OpReplay, Now: t0, Keys: []string{""}}},
		{"replay only from without keys", Command{Op: OpReplay, Now: t0, State: StateDead, OnlyFrom: StateDead}},
		{"replay only from pending", Command{Op: OpReplay, Now: t0, Keys: []string{"src:a"}, OnlyFrom: StatePending}},
		{"replay negative lease", Command{Op: OpReplay, Now: t0, Keys: []string{"src:a"}, OnlyFrom: StateDead, LeaseFor: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			before := mustHash(t, h.e)
			rs := h.apply(tt.cmd, Command{Op: OpNoop, Now: t0})
			if !errors.Is(rs[0].Err, ErrBadCommand) {
				t.Fatalf("err = %v, want ErrBadCommand", rs[0].Err)
			}
			if rs[1].Err != nil {
				t.Fatalf("the next command of the entry failed: %v", rs[1].Err)
			}
			// Only the applied index moved.
			h2 := newHarness(t, Options{NoSync: true})
			h2.apply(Command{Op: OpNoop, Now: t0})
			if mustHash(t, h.e) != mustHash(t, h2.e) || before == mustHash(t, h.e) {
				t.Fatalf("a rejected command changed the state")
			}
		})
	}
}

func TestRejectionDoesNotAbortBatch(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	rs, err := h.e.ApplyBatch([]Entry{
		{Index: 1, Cmds: []Command{claimCmd("src:a", t0), completeCmd("src:zz", 1, t0), {Op: 99}}},
		{Index: 2, Cmds: []Command{claimCmd("src:b", t0), claimCmd("src:a", t0)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0][0].Created || !errors.Is(rs[0][1].Err, ErrNotFound) || !errors.Is(rs[0][2].Err, ErrBadCommand) {
		t.Fatalf("entry 1 results = %+v", rs[0])
	}
	if !rs[1][0].Created || rs[1][1].Created || rs[1][1].State != StatePending {
		t.Fatalf("entry 2 results = %+v", rs[1])
	}
	if h.e.LastApplied() != 2 {
		t.Fatalf("LastApplied = %d", h.e.LastApplied())
	}
}

func TestAlreadyApplied(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	if _, err := h.e.Apply(5, claimCmd("src:a", t0)); err != nil {
		t.Fatal(err)
	}
	before := mustHash(t, h.e)
	for _, idx := range []uint64{0, 3, 5} {
		rs, err := h.e.Apply(idx, claimCmd("src:b", t0), leaseCmd(t0, 10))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if !errors.Is(r.Err, ErrAlreadyApplied) {
				t.Fatalf("Apply(%d): err = %v, want ErrAlreadyApplied", idx, r.Err)
			}
		}
	}
	if mustHash(t, h.e) != before || h.e.LastApplied() != 5 {
		t.Fatalf("an already applied entry changed the state")
	}
	// In one batch: the second entry with the same index is skipped.
	rs, err := h.e.ApplyBatch([]Entry{
		{Index: 6, Cmds: []Command{claimCmd("src:c", t0)}},
		{Index: 6, Cmds: []Command{claimCmd("src:d", t0)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0][0].Created || !errors.Is(rs[1][0].Err, ErrAlreadyApplied) {
		t.Fatalf("results = %+v", rs)
	}
	if _, _, err := h.e.Exists("src:d"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.e.Exists("src:d"); ok {
		t.Fatalf("the skipped entry was applied")
	}
}

func TestSameTokenNeverLeasedTwice(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	// Lease, reclaim and lease again inside one entry: the second lease must
	// not hand out the same token again.
	rs := h.apply(leaseCmd(t0, 1), Command{Op: OpReclaim, Now: t0 + hour}, leaseCmd(t0+hour, 1))
	if rs[0].N != 1 || rs[1].N != 1 || rs[2].N != 0 {
		t.Fatalf("lease, reclaim, lease = %d, %d, %d events; want 1, 1, 0", rs[0].N, rs[1].N, rs[2].N)
	}
	if r := h.one(leaseCmd(t0+hour, 1)); r.N != 1 || r.Events[0].Token != h.idx {
		t.Fatalf("next entry's lease = %+v", r)
	}
}

func TestOrderingGuard(t *testing.T) {
	order := func(key string, now, orderTime int64) Command {
		c := claimCmd(key, now)
		c.OrderObject, c.OrderTime = "pi_123", orderTime
		return c
	}
	h := newHarness(t, Options{NoSync: true})
	// payment_failed (newer) arrives first, then processing (older).
	if r := h.one(order("src:payment_failed", t0, 200)); !r.Created || r.State != StatePending {
		t.Fatalf("newer claim = %+v", r)
	}
	if r := h.one(order("src:processing", t0+sec, 100)); !r.Created || r.State != StateStale {
		t.Fatalf("older claim = %+v, want created and stale", r)
	}
	// An equal time is not older; a newer one advances the object.
	if r := h.one(order("src:same_time", t0+sec, 200)); r.State != StatePending {
		t.Fatalf("same-time claim = %+v", r)
	}
	if r := h.one(order("src:newest", t0+sec, 300)); r.State != StatePending {
		t.Fatalf("newest claim = %+v", r)
	}
	if r := h.one(order("src:late_200", t0+sec, 250)); r.State != StateStale {
		t.Fatalf("claim between = %+v", r)
	}
	// Another object is independent.
	c := order("src:other", t0+sec, 1)
	c.OrderObject = "pi_999"
	if r := h.one(c); r.State != StatePending {
		t.Fatalf("other object = %+v", r)
	}
	r := h.one(leaseCmd(t0+hour, 100))
	var leased []string
	for _, ev := range r.Events {
		leased = append(leased, ev.Key)
	}
	slices.Sort(leased)
	// One event per object at a time, the oldest first (order_test.go).
	if want := []string{"src:other", "src:payment_failed"}; !slices.Equal(leased, want) {
		t.Fatalf("leased %v, want %v (stale events are never leased, one per object)", leased, want)
	}
	if r := h.one(Command{Op: OpReclaim, Now: t0 + 2*hour}); r.N != 2 {
		t.Fatalf("reclaim = %d", r.N)
	}
	if r := h.one(leaseCmd(t0+2*hour, 100)); r.N != 2 {
		t.Fatalf("second lease = %d events, want 2", r.N)
	}
	if ev := h.get("src:processing"); ev.State != StateStale || ev.Attempts != 0 {
		t.Fatalf("stale event = %+v", ev)
	}
	s, _ := mustCounts(t, h.e)
	if s[StateStale] != 2 || s[StateProcessing] != 2 || s[StatePending] != 2 {
		t.Fatalf("counts = %v", s)
	}
	// The guard's entries expire with the buckets of the events that set
	// them; the stale events go, the processing ones move to a later bucket
	// and keep their object's entry as long: an older claim is still stale.
	if r := h.one(Command{Op: OpExpire, Now: t0 + 48*hour}); r.N != 2 {
		t.Fatalf("expire = %d", r.N)
	}
	if r := h.one(order("src:after_expiry", t0+48*hour, 1)); r.State != StateStale {
		t.Fatalf("older claim while its object's events are kept = %+v", r)
	}
	// Once those are finished and expired, the entry goes with them.
	for _, key := range []string{"src:other", "src:payment_failed"} {
		h.one(completeCmd(key, h.token(key), t0+48*hour))
	}
	for range 3 { // the object's queue, one at a time
		for _, ev := range h.one(leaseCmd(t0+48*hour, 100)).Events {
			h.one(completeCmd(ev.Key, ev.Token, t0+48*hour))
		}
	}
	if s, _ := mustCounts(t, h.e); s[StatePending]+s[StateProcessing] != 0 {
		t.Fatalf("counts = %v, want every event finished", s)
	}
	if r := h.one(Command{Op: OpExpire, Now: t0 + 200*hour}); r.N == 0 {
		t.Fatalf("expire = %d", r.N)
	}
	if r := h.one(order("src:after_expiry_2", t0+200*hour, 1)); r.State != StatePending {
		t.Fatalf("after every event of the object expired = %+v", r)
	}
}

func TestQueries(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	for i := range 10 {
		c := claimCmd(keyN(i), t0+int64(i))
		if i%2 == 1 {
			c.Source, c.Key = "other", "other:"+keyN(i)
		}
		h.one(c)
	}
	h.one(leaseCmd(t0+2, 2)) // src:...0 and other:...1

	st, ok, err := h.e.Exists(keyN(0))
	if err != nil || !ok || st != StateProcessing {
		t.Fatalf("Exists = %v %v %v", st, ok, err)
	}
	for _, k := range []string{"src:missing", "", strings.Repeat("x", 600)} {
		if _, ok, err := h.e.Exists(k); ok || err != nil {
			t.Fatalf("Exists(%q) = %v, %v", k, ok, err)
		}
	}
	if _, err := h.e.Get("src:missing", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}

	keys := func(evs []Event) []string {
		var out []string
		for _, ev := range evs {
			if ev.Payload != nil || ev.Headers != nil {
				t.Errorf("List returned a payload for %q", ev.Key)
			}
			out = append(out, ev.Key)
		}
		return out
	}
	tests := []struct {
		f    ListFilter
		want []string
	}{
		{ListFilter{Limit: 3}, []string{"other:" + keyN(1), "other:" + keyN(3), "other:" + keyN(5)}},
		{ListFilter{After: "other:" + keyN(9), Limit: 2}, []string{keyN(0), keyN(2)}},
		{ListFilter{Source: "src", After: keyN(4)}, []string{keyN(6), keyN(8)}},
		{ListFilter{Source: "src", Limit: 2}, []string{keyN(0), keyN(2)}},
		{ListFilter{Source: "src", After: "a"}, []string{keyN(0), keyN(2), keyN(4), keyN(6), keyN(8)}},
		{ListFilter{Source: "src", After: keyN(8)}, nil},
		{ListFilter{Source: "other", After: "other:" + keyN(5)}, []string{"other:" + keyN(7), "other:" + keyN(9)}},
		{ListFilter{State: StateProcessing}, []string{"other:" + keyN(1), keyN(0)}},
		{ListFilter{State: StatePending, Source: "src"}, []string{keyN(2), keyN(4), keyN(6), keyN(8)}},
		{ListFilter{State: StatePending, Source: "src", After: keyN(4), AfterTime: t0 + 4, Limit: 1}, []string{keyN(6)}},
		{ListFilter{State: StatePending, After: keyN(8), AfterTime: t0 + 8}, []string{"other:" + keyN(9)}},
		{ListFilter{State: StatePending, After: "other:" + keyN(9), AfterTime: t0 + 9}, nil},
		{ListFilter{State: StateDone}, nil},
	}
	for _, tt := range tests {
		evs, err := h.e.List(tt.f)
		if err != nil {
			t.Fatalf("List(%+v): %v", tt.f, err)
		}
		if got := keys(evs); !slices.Equal(got, tt.want) {
			t.Errorf("List(%+v) = %v, want %v", tt.f, got, tt.want)
		}
	}
	if _, err := h.e.List(ListFilter{State: 9}); !errors.Is(err, ErrBadCommand) {
		t.Errorf("List with a bad state: %v", err)
	}

	s, src := mustCounts(t, h.e)
	if s[StatePending] != 8 || s[StateProcessing] != 2 || len(s) != 2 || src["src"] != 5 || src["other"] != 5 || len(src) != 2 {
		t.Fatalf("Counts = %v %v", s, src)
	}
}

// TestListBySourceWalksItsScope: without a state, a listing by source walks
// the keys that start with "source:" and stops after them, rather than
// reading every event in the store to filter it. A key outside its source's
// scope (the intake never makes one) is therefore not listed under it.
func TestListBySourceWalksItsScope(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	claim := func(source, key string, at int64) {
		c := claimCmd(key, at)
		c.Source = source
		if r := h.one(c); r.Err != nil {
			t.Fatalf("claim %s: %v", key, r.Err)
		}
	}
	claim("src", "src:a", t0)
	claim("src", "src:b", t0+1)
	claim("srcx", "srcx:a", t0+2) // a source whose name extends src's
	claim("sr", "sr:a", t0+3)     // and one whose name src extends
	claim("src", "zz:unscoped", t0+4)
	tests := []struct {
		f    ListFilter
		want []string
	}{
		{ListFilter{Source: "src"}, []string{"src:a", "src:b"}},
		{ListFilter{Source: "srcx"}, []string{"srcx:a"}},
		{ListFilter{Source: "sr"}, []string{"sr:a"}},
		{ListFilter{Source: "s"}, nil},
		{ListFilter{Source: "src", After: "src:a"}, []string{"src:b"}},
		{ListFilter{Source: "src", After: "sr:z"}, []string{"src:a", "src:b"}},
		{ListFilter{Source: "src", After: "zz"}, nil},
		{ListFilter{After: "srcx:a"}, []string{"zz:unscoped"}},
		{ListFilter{State: StatePending, Source: "src"}, []string{"src:a", "src:b", "zz:unscoped"}},
	}
	for _, tt := range tests {
		evs, err := h.e.List(tt.f)
		if err != nil {
			t.Fatalf("List(%+v): %v", tt.f, err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, ev.Key)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("List(%+v) = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestDecodeRecordErrorNamesKey(t *testing.T) {
	ev := Event{State: StatePending, Source: "src"}
	good := appendRecord(nil, &ev, 0)
	for _, b := range [][]byte{nil, {9}, good[:len(good)-1], append(bytes.Clone(good), 0), {recordVersion, 7, 0}} {
		var got Event
		_, err := decodeRecord([]byte("src:the_key"), b, &got)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "src:the_key") {
			t.Errorf("decodeRecord(%x) = %v; want ErrCorrupt naming the key", b, err)
		}
	}
}
