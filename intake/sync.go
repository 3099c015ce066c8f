package intake

// Sync mode's retries: a provider that resends a sync event whose handler
// failed for good (dead) is asking for the effect again, and a sync answer
// never acknowledges a failure (docs/architecture.md, Sync mode).

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/engine"
)

// lastAttemptWait is how long the lease of ev's last attempt still runs at
// now (unix ns, this node's clock), when that attempt timed out (its handler
// may have gone on past the timeout): engine.LastAttemptWait. The leader's
// engine decides the same on its own clock when it applies the re-arm
// (engine.ErrLastAttemptRunning); asking this node's copy first spares the
// Raft round, and guards where the leader runs a release without the check.
func lastAttemptWait(ev engine.Event, srcLease, now int64) time.Duration {
	if len(ev.History) == 0 {
		return 0
	}
	return time.Duration(engine.LastAttemptWait(ev.History[len(ev.History)-1], ev.LeaseFor, srcLease, now))
}

// Audit fields of a re-arm by a provider's retry.
const (
	rearmWho    = "provider"
	rearmReason = "provider retry"
)

// rearm moves key's dead event back to pending through the replay path (an
// audit entry, attempts 0, due now) and answers like a new sync event: the
// handler's answer, 502 when it fails, 504 when it is slower than the wait.
// A retry that finds the event re-armed already (a concurrent retry, an
// operator replay) waits for that attempt. Nothing is answered 2xx before
// the handler answered 2xx.
//
// A replay also moves a done event, so a retry must not re-arm an event that
// another retry re-armed and the handler completed meanwhile: the replay
// carries OnlyFrom dead, which the engine checks on committed state, so two
// retries racing through two nodes re-arm the event once. On this node the
// re-arms of one key also run one at a time (no needless Raft rounds).
func (in *Server) rearm(ctx *fasthttp.RequestCtx, src *Source, key []byte) int {
	rctx, cancel := context.WithTimeout(context.Background(), in.timeout)
	before, wait, err := in.rearmOnce(rctx, string(key), src.leaseFor)
	cancel()
	var fresh func(engine.Event) bool
	switch {
	case errors.Is(err, engine.ErrLastAttemptRunning):
		// Re-armed now, the event would reach the handler beside that
		// run; the forwarder waits for a timed-out attempt's lease to end
		// before any retry of its own, and so does this one.
		if wait <= 0 {
			// The leader refused on its clock, behind this node's: how
			// long is its to know; a lease is as long as it can be.
			wait = time.Duration(max(before.LeaseFor, src.leaseFor))
		}
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
		return writeError(ctx, fasthttp.StatusServiceUnavailable,
			"the handler may still be running this event's last attempt (it timed out); retry once its lease has ended")
	case err == nil:
		in.log.Info("dead sync event re-armed by a provider retry", "source", src.name, "key", string(key))
		// On a follower the re-arm is committed before this node applies
		// it: its copy is still the dead event, which is no answer.
		fresh = func(ev engine.Event) bool { return !sameLastAudit(ev, before) }
	case errors.Is(err, engine.ErrSuperseded):
		// On an ordered source a newer event of its object was claimed
		// since: delivered now, this one would reach the handler after it.
		// It stays dead (an operator may still replay it), and a dead
		// event is never answered 2xx.
		in.log.Info("dead sync event not re-armed: a newer event of its object was claimed", "source", src.name, "key", string(key))
		return writeClaim(ctx, fasthttp.StatusConflict, "superseded", key, engine.StateDead, true)
	case errors.Is(err, engine.ErrWrongState):
		// Re-armed already, on the leader, by another retry (sent to
		// another node, or through it): wait for the same attempt. This
		// node's copy may not show the re-arm yet, and its dead state is
		// no answer: a re-arm always appends an audit entry.
		fresh = func(ev engine.Event) bool { return !sameLastAudit(ev, before) }
	case errors.Is(err, errNotDead):
		// Re-armed already, and this node has applied it: wait for the
		// same attempt.
	case errors.Is(err, engine.ErrNotFound):
		// Expired since the lookup: the next retry claims it anew.
		ctx.Response.Header.Set("Retry-After", "1")
		return writeError(ctx, fasthttp.StatusServiceUnavailable, "event expired meanwhile, retry")
	default:
		in.log.Warn("re-arm not committed", "source", src.name, "key", string(key), "err", err)
		ctx.Response.Header.Set("Retry-After", "1")
		msg := "re-arm not committed, retry"
		if reason := in.notCommitted(err); reason != "" {
			// The cluster's reason says what is known: an outcome unknown
			// may have re-armed the event (the retry then finds it so).
			msg = "re-arm: " + reason
		}
		return writeError(ctx, fasthttp.StatusServiceUnavailable, msg)
	}
	return in.answerSync(ctx, src, key, fresh)
}

// sameLastAudit reports whether a and b end with the same audit entry (or
// both have none): a replay always appends one.
func sameLastAudit(a, b engine.Event) bool {
	if len(a.Audit) != len(b.Audit) {
		return false
	}
	return len(a.Audit) == 0 || a.Audit[len(a.Audit)-1] == b.Audit[len(b.Audit)-1]
}

// errNotDead: the event left dead before this retry could re-arm it.
var errNotDead = errors.New("event no longer dead")

// rearmOnce replays key's event if it is still dead, one re-arm of a key at
// a time on this node (see rearm), and returns the event as it was before,
// with the wait this node's own check of a timed-out last attempt found (0
// when it let the re-arm through).
func (in *Server) rearmOnce(ctx context.Context, key string, lease int64) (engine.Event, time.Duration, error) {
	for {
		in.rearmMu.Lock()
		busy, ok := in.rearming[key]
		if !ok {
			if in.rearming == nil {
				in.rearming = make(map[string]chan struct{})
			}
			in.rearming[key] = make(chan struct{})
			in.rearmMu.Unlock()
			break
		}
		in.rearmMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return engine.Event{}, 0, ctx.Err()
		}
	}
	defer func() {
		in.rearmMu.Lock()
		close(in.rearming[key])
		delete(in.rearming, key)
		in.rearmMu.Unlock()
	}()
	ev, err := in.store.Get(key, false)
	if err != nil {
		return ev, 0, err
	}
	if ev.State != engine.StateDead {
		return ev, 0, errNotDead
	}
	if wait := lastAttemptWait(ev, lease, in.now().UnixNano()); wait > 0 {
		return ev, wait, engine.ErrLastAttemptRunning
	}
	_, err = in.store.Replay(ctx, engine.Command{
		Op:       engine.OpReplay,
		Keys:     []string{key},
		OnlyFrom: engine.StateDead, // never a done event another retry re-armed and the handler completed
		LeaseFor: lease,            // the source's, for the leader's check of a timed-out last attempt
		Who:      rearmWho,
		Reason:   rearmReason,
	})
	return ev, 0, err
}
