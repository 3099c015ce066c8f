package main

// Sync mode's retries: a provider that resends a sync event whose handler
// failed for good (dead) is asking for the effect again, and a sync answer
// never acknowledges a failure (docs/architecture.md, Sync mode).

import (
	"context"
	"errors"

	"github.com/valyala/fasthttp"

	"oncehook/engine"
)

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
func (in *intake) rearm(ctx *fasthttp.RequestCtx, src *source, key []byte) int {
	rctx, cancel := context.WithTimeout(context.Background(), in.timeout)
	_, err := in.store.Replay(rctx, engine.Command{
		Op:     engine.OpReplay,
		Keys:   []string{string(key)},
		Who:    rearmWho,
		Reason: rearmReason,
	})
	cancel()
	switch {
	case err == nil:
		in.log.Info("dead sync event re-armed by a provider retry", "source", src.name, "key", string(key))
	case errors.Is(err, engine.ErrWrongState):
		// Re-armed already: wait for the same attempt.
	case errors.Is(err, engine.ErrNotFound):
		// Expired since the lookup: the next retry claims it anew.
		ctx.Response.Header.Set("Retry-After", "1")
		return writeError(ctx, fasthttp.StatusServiceUnavailable, "event expired meanwhile, retry")
	default:
		in.log.Warn("re-arm not committed", "source", src.name, "key", string(key), "err", err)
		ctx.Response.Header.Set("Retry-After", "1")
		return writeError(ctx, fasthttp.StatusServiceUnavailable, "re-arm not committed, retry")
	}
	return in.answerSync(ctx, src, key)
}
