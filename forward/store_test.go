package forward

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"oncehook/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// leader is the test Store: it plays the Raft leader's role for a real engine
// in t.TempDir(), applying each call as one entry under the next index with
// Now stamped from its clock. The clock is time.Now (the fake one inside a
// synctest bubble) plus an offset the test can advance.
type leader struct {
	t   testing.TB
	eng *engine.Engine

	mu    sync.Mutex // serialises Apply, like the Raft log; guards index and the logs below
	index uint64
	fails []engine.Command // every Fail command applied
	done  []tokenErr       // every Complete: its token and the engine's answer

	offset    atomic.Int64 // ns added to time.Now
	leaseMax  atomic.Int64 // the largest max any Lease asked for
	leases    atomic.Int64 // Lease calls
	reclaims  atomic.Int64 // Reclaim calls
	expires   atomic.Int64 // Expire calls
	failLease atomic.Bool  // Lease returns an error (a lost quorum)
}

type tokenErr struct {
	token uint64
	err   error
}

var _ Store = (*leader)(nil)

// newLeader opens a real engine in t.TempDir() and checks its consistency at
// cleanup.
func newLeader(t testing.TB) *leader {
	t.Helper()
	eng, err := engine.Open(filepath.Join(t.TempDir(), "events.db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := eng.Check(); err != nil {
			t.Errorf("engine check: %v", err)
		}
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return &leader{t: t, eng: eng}
}

func (l *leader) now() int64 { return time.Now().UnixNano() + l.offset.Load() }

// advance moves the leader's clock d ahead of the wall clock.
func (l *leader) advance(d time.Duration) { l.offset.Add(int64(d)) }

// apply appends one entry holding cmd and returns its result; a rejected
// command's Err is returned as the error. Callers hold l.mu.
func (l *leader) applyLocked(cmd engine.Command) (engine.Result, error) {
	l.index++
	cmd.Now = l.now()
	res, err := l.eng.Apply(l.index, cmd)
	if err != nil {
		return engine.Result{}, err
	}
	if len(res) != 1 {
		return engine.Result{}, fmt.Errorf("apply: %d results for one command", len(res))
	}
	return res[0], res[0].Err
}

func (l *leader) apply(cmd engine.Command) (engine.Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applyLocked(cmd)
}

func (l *leader) LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) ([]engine.Event, []string, error) {
	l.leases.Add(1)
	for {
		old := l.leaseMax.Load()
		if int64(max) <= old || l.leaseMax.CompareAndSwap(old, int64(max)) {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if l.failLease.Load() {
		return nil, nil, fmt.Errorf("test: no quorum")
	}
	res, err := l.apply(engine.Command{Op: engine.OpLease, Max: max, LeaseFor: int64(leaseFor), Leases: leases, Quotas: quotas, Share: share, Spare: spare})
	return res.Events, res.Waiting, err
}

// Lease is LeaseFrom without quotas.
func (l *leader) Lease(ctx context.Context, max int, leaseFor time.Duration) ([]engine.Event, error) {
	evs, _, err := l.LeaseFrom(ctx, max, leaseFor, nil, nil, 0, 0)
	return evs, err
}

// Complete and Fail apply even when ctx has ended, as a Raft proposal that is
// already on its way would: the forwarder itself must not record an abandoned
// attempt.
func (l *leader) Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, payloadKeep time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.applyLocked(engine.Command{Op: engine.OpComplete, Key: key, Token: token, Response: resp, Step: step,
		PayloadRetention: int64(payloadKeep)})
	l.done = append(l.done, tokenErr{token, err})
	return err
}

func (l *leader) Fail(ctx context.Context, key string, token uint64, retryIn time.Duration, maxAttempts int, reason, step string, deadKeep time.Duration, at *engine.Attempt) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmd := engine.Command{Op: engine.OpFail, Key: key, Token: token, RetryIn: int64(retryIn),
		MaxAttempts: maxAttempts, Reason: reason, Step: step, DeadRetention: int64(deadKeep), Attempt: at}
	_, err := l.applyLocked(cmd)
	if err == nil {
		l.fails = append(l.fails, cmd)
	}
	return err
}

func (l *leader) HandBack(ctx context.Context, key string, token uint64, retryIn time.Duration, reason string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmd := engine.Command{Op: engine.OpFail, Key: key, Token: token, RetryIn: int64(retryIn), Reason: reason, Refund: true}
	_, err := l.applyLocked(cmd)
	if err == nil {
		l.fails = append(l.fails, cmd)
	}
	return err
}

func (l *leader) Reclaim(ctx context.Context, horizon time.Duration) (int, error) {
	l.reclaims.Add(1)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	res, err := l.apply(engine.Command{Op: engine.OpReclaim, Horizon: int64(horizon)})
	return res.N, err
}

func (l *leader) Expire(ctx context.Context) (int, []engine.Event, error) {
	l.expires.Add(1)
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	res, err := l.apply(engine.Command{Op: engine.OpExpire})
	return res.N, res.Events, err
}

func (l *leader) DropPayloads(ctx context.Context, legacyAge time.Duration, max int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	res, err := l.applyLocked(engine.Command{Op: engine.OpDropPayloads, Before: now, Since: now - int64(legacyAge), Max: max})
	return res.N, err
}

// claim stores a new event for source, as the intake would.
func (l *leader) claim(key, source string, body string, headers ...engine.Header) {
	l.t.Helper()
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: source,
		Payload: []byte(body), Headers: headers, Retention: int64(24 * time.Hour)})
	if err != nil || !res.Created {
		l.t.Fatalf("claim %q: created=%v err=%v", key, res.Created, err)
	}
}

// claimLease is claim with a per-event lease length.
func (l *leader) claimLease(key, source, body string, lease time.Duration) {
	l.t.Helper()
	res, err := l.apply(engine.Command{Op: engine.OpClaim, Key: key, Source: source,
		Payload: []byte(body), Retention: int64(24 * time.Hour), LeaseFor: int64(lease)})
	if err != nil || !res.Created {
		l.t.Fatalf("claim %q: created=%v err=%v", key, res.Created, err)
	}
}

func (l *leader) get(key string) engine.Event {
	l.t.Helper()
	ev, err := l.eng.Get(key, false)
	if err != nil {
		l.t.Fatalf("get %q: %v", key, err)
	}
	return ev
}

func (l *leader) failLog() []engine.Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]engine.Command(nil), l.fails...)
}

func (l *leader) completeLog() []tokenErr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]tokenErr(nil), l.done...)
}
