package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"oncehook/engine"
	"oncehook/failpoint"
)

// The headers every delivery carries (README.md, "What your handler
// receives"); handlers depend on these names.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderEventKey       = "Oncehook-Event-Key"
	HeaderSource         = "Oncehook-Source"
	HeaderAttempt        = "Oncehook-Attempt"
	HeaderFencingToken   = "Oncehook-Fencing-Token"
	// HeaderStep is what a handler may answer (2xx or not) to say how far it
	// got: a step number or name, at most engine.MaxStepLen printable ASCII
	// bytes. It is stored with the event through Raft.
	HeaderStep = "Oncehook-Step"
	// HeaderLastStep carries the last stored step on every later attempt
	// (after a failure, a reclaimed lease or a replay); absent when none.
	HeaderLastStep = "Oncehook-Last-Step"
	// HeaderReplayedAt is when the event was last replayed (RFC 3339, UTC):
	// by an operator, or by a provider's resend that re-armed a dead sync
	// event; absent on an event never replayed. A handler that records each
	// key's effect once tells by it a replay, which asks for the effect
	// again, from a redelivery, which does not.
	HeaderReplayedAt = "Oncehook-Replayed-At"
)

// replayedAt returns the time of ev's latest replay as HeaderReplayedAt
// carries it, "" when it was never replayed.
func replayedAt(ev *engine.Event) string {
	for i := len(ev.Audit) - 1; i >= 0; i-- {
		if ev.Audit[i].Action == "replay" {
			return time.Unix(0, ev.Audit[i].At).UTC().Format(time.RFC3339Nano)
		}
	}
	return ""
}

// ReasonNoTarget is the reason an event whose source has no target is
// handed back with.
const ReasonNoTarget = "no target for source"

// ReasonPaused is the reason an event parked for its source's rate is
// handed back with when the source was paused meanwhile.
const ReasonPaused = "source paused"

// ReasonStopping is the reason an event parked for its source's rate is
// handed back with when the leader drains (a graceful stop or a hand-over).
const ReasonStopping = "handed back while its slot waited: the leader stopped"

// ReasonLeaseEnded is the reason an event is handed back with when its
// lease no longer leaves its timeout by the time a worker has it (leaseLeft).
const ReasonLeaseEnded = "lease ended before the attempt could start"

// ReasonLeaseTooShort is the reason an event is handed back with when its
// lease is shorter than its source's forward_timeout (a reload lengthened
// both): the next lease has the new length.
const ReasonLeaseTooShort = "lease shorter than forward_timeout (a reload changed them): leased again"

// leaseLeft reports whether ev's lease, taken at leased, still lasts past
// an attempt started now: its end minus its target's timeout; when it does
// not, the reason to hand the event back with. Events are
// leased, parked and queued so that they start well before that; an event
// that did not (the process was stopped, or the machine stalled, between
// its lease and now) must not go out. Its lease may have been reclaimed
// and the event leased again, here or on a newer leader, or will be before
// the answer comes: the handler would hold it twice, and on an ordered
// source could get it after a newer event of its object.
//
// A reload can raise a source's forward_timeout past the length of a lease
// taken before it (config keeps a timeout under the lease it sets, and the
// next lease has the new length): such an event is handed back, to be leased
// again for the new length, rather than started with a deadline its lease
// does not cover.
func (f *Forwarder) leaseLeft(ev *engine.Event, leased, now time.Time) (bool, string) {
	tgt, ok := f.opts.Targets(ev.Source)
	if !ok {
		return true, "" // try hands it back as ReasonNoTarget
	}
	end := f.leaseEnd(ev, leased)
	length := f.leaseLength(ev)
	timeout := tgt.withDefaults().Timeout
	last := end.Add(-timeout)
	if timeout >= length {
		if f.leasedBySource(ev.Source) {
			return false, ReasonLeaseTooShort
		}
		// A source whose leases are not given by source (past the engine's
		// limit on how many it keeps, or in tests) is leased for the
		// default length again, so a hand-back would come back the same:
		// the lease's end is the limit, and try cuts the attempt there.
		last = end
	}
	if now.After(last) {
		return false, ReasonLeaseEnded
	}
	return true, ""
}

// leasedBySource reports whether the next lease of source's events has the
// length the running config gives it (Options.Leases lists it). Called only
// for an event whose lease no longer covers its timeout: rare enough to
// look through the list.
func (f *Forwarder) leasedBySource(source string) bool {
	if f.opts.Leases == nil {
		return false
	}
	for _, l := range f.opts.Leases() {
		if l.Source == source {
			return true
		}
	}
	return false
}

// leaseEnd is when ev's lease, taken at leased (or later: an attempt's
// start), ends for this node: its end by the wall clock, or its length after
// leased by the monotonic clock when that is sooner. The lease was granted
// before leased, so the latter is never early; a wall clock stepped back
// (here, or on the leader that stamped the lease, whose reclaim then cuts
// the lease to its length: engine Command.Horizon) would otherwise stretch
// the lease by the step: an attempt started after the leader's end, a wait
// for the end held that much longer. The result reads the monotonic clock.
func (f *Forwarder) leaseEnd(ev *engine.Event, leased time.Time) time.Time {
	byLength := leased.Add(f.leaseLength(ev))
	if ev.LeaseUntil == 0 {
		return byLength
	}
	if left := time.Until(time.Unix(0, ev.LeaseUntil)); left < time.Until(byLength) {
		return time.Now().Add(left)
	}
	return byLength
}

// leaseLength is the length of ev's lease: its own, or the default.
func (f *Forwarder) leaseLength(ev *engine.Event) time.Duration {
	if ev.LeaseFor > 0 {
		return time.Duration(ev.LeaseFor)
	}
	return f.opts.DefaultLease
}

// maxReason bounds a failure reason kept with the event.
const maxReason = 120

// withDefaults fills t's zero fields.
func (t Target) withDefaults() Target {
	if t.Timeout <= 0 {
		t.Timeout = DefaultTimeout
	}
	if t.BackoffMin <= 0 {
		t.BackoffMin = DefaultBackoffMin
	}
	if t.BackoffMax <= 0 {
		t.BackoffMax = DefaultBackoffMax
	}
	t.BackoffMax = max(t.BackoffMax, t.BackoffMin)
	if t.MaxAttempts <= 0 {
		t.MaxAttempts = DefaultMaxAttempts
	}
	return t
}

// attemptOf is the 1-based number of the attempt a leased event is on. The
// engine counts attempts started: its Lease increments Attempts (a reclaimed
// lease stays counted), and its Fail makes the event dead when Attempts has
// reached MaxAttempts. So the leased value is the number of this attempt.
func attemptOf(ev engine.Event) int {
	return max(int(ev.Attempts), 1)
}

// answer is what one POST came to.
type answer struct {
	status     int           // 0 when there was no response
	body       []byte        // up to MaxBody; read only for a sync target's 2xx
	retryAfter time.Duration // > 0: the handler's Retry-After on 429/503, clamped
	hold       time.Duration // > 0: the same Retry-After, capped at MaxHold only: holds the source
	reason     string        // "" for a 2xx; else the short failure reason
	// timedOut: the attempt outlasted its timeout, the request or the
	// answer's body (a sync answer cut off mid-body): the handler may still
	// be working on it.
	timedOut bool
	step     string // the handler's Oncehook-Step, when valid
	// contentType is a sync target's 2xx Content-Type (answerType), "" when
	// it sent none or one not kept.
	contentType string
}

// attempt is one delivery attempt whose handler answered (or that had no
// target), waiting to be recorded.
type attempt struct {
	ev    engine.Event
	n     int // the attempt's number, 1 for the first delivery
	tgt   Target
	a     answer
	start time.Time
	took  time.Duration
}

// try runs one attempt of ev: it POSTs ev and returns what to record, or nil
// when ctx ended first (then the event is left processing for its lease to
// expire). A handler's Retry-After hold takes effect here, before the worker
// is free, so that the dispatcher leases no more of its source meanwhile.
func (f *Forwarder) try(ctx context.Context, ev engine.Event, leased time.Time) *attempt {
	if ctx.Err() != nil {
		return nil
	}
	at := &attempt{ev: ev, n: attemptOf(ev), start: time.Now()}
	tgt, ok := f.opts.Targets(ev.Source)
	at.tgt = tgt.withDefaults()
	if ok {
		// An attempt never outlives its lease: past its end the event may
		// be leased again and the handler would hold it twice. leaseLeft
		// starts only attempts whose timeout the lease covers, so this
		// binds only where it could not tell (see there).
		deadline := at.start.Add(at.tgt.Timeout)
		if end := f.leaseEnd(&ev, leased); end.Before(deadline) {
			deadline = end
		}
		at.a = f.post(ctx, ev, at.n, at.tgt, deadline)
	} else {
		at.a.reason = ReasonNoTarget
	}
	at.took = time.Since(at.start)
	if ctx.Err() != nil {
		// Cancelled (leadership lost, a stop): nothing is recorded and the
		// lease decides; a handler call that was made is counted as one
		// whose outcome could not be committed.
		if ok {
			f.cutOff(ev, at.n, at.took)
		}
		return nil
	}
	if at.a.hold > 0 {
		now := time.Now()
		if f.lim != nil && f.lim.setHold(ev.Source, now, now.Add(at.a.hold)) {
			f.log.Info("handler asked to wait; holding its source", "source", ev.Source,
				"status", at.a.status, "retry_after", at.a.hold)
		}
	}
	return at
}

// record records an attempt's outcome: Complete for a 2xx, Fail otherwise.
// An event whose source a reload removed between its lease and its start
// (parked for a rate slot, or queued for a worker) had no attempt: it is
// handed back and held like the source's other events, not failed.
func (f *Forwarder) record(ctx context.Context, at *attempt) {
	if at.a.reason == ReasonNoTarget {
		f.handBack(ctx, at.ev, f.opts.PollInterval, ReasonNoTarget)
		return
	}
	if at.a.reason == "" {
		failpoint.Inject(failpoint.AfterHandlerDoneBeforeApply)
		f.complete(ctx, at.ev, at.n, at.tgt, at.a, at.took)
	} else {
		f.fail(ctx, at.ev, at.n, at.tgt, at.a, at.start, at.took)
	}
}

// post sends ev to tgt and reads what it needs of the answer.
func (f *Forwarder) post(ctx context.Context, ev engine.Event, attempt int, tgt Target, deadline time.Time) answer {
	var resp *http.Response
	var err error
	rctx := ctx
	if pt := f.plainTarget(tgt.URL); pt != nil {
		resp, err = f.direct.post(ctx, deadline, pt.addr, tgt.Sync, func(w *bufio.Writer) error {
			return writeDelivery(w, pt, &ev, attempt)
		})
	} else {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		req, rerr := http.NewRequestWithContext(rctx, http.MethodPost, tgt.URL, bytes.NewReader(ev.Payload))
		if rerr != nil {
			return answer{reason: "bad target url"}
		}
		f.setHeaders(req.Header, ev, attempt)
		resp, err = f.client.Do(req)
	}
	if err != nil {
		r := errReason(rctx, err)
		return answer{reason: r, timedOut: r == reasonTimeout}
	}
	a := answer{status: resp.StatusCode}
	if v, ok := resp.Header[HeaderStep]; ok && len(v) > 0 {
		if validStep(v[0]) {
			a.step = v[0]
		} else {
			f.log.Warn("handler step ignored: want at most 128 printable ASCII bytes", "key", ev.Key, "len", len(v[0]))
		}
	}
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok2xx && tgt.Sync {
		a.contentType = answerType(resp.Header.Get("Content-Type"))
		a.body, err = io.ReadAll(io.LimitReader(resp.Body, MaxBody))
		if err != nil {
			// The cached answer would be cut short: try again instead.
			closeBody(resp.Body)
			r := errReason(rctx, err)
			return answer{status: resp.StatusCode, reason: "read body: " + r, timedOut: r == reasonTimeout}
		}
		if len(a.body) == MaxBody {
			var one [1]byte
			if n, _ := io.ReadFull(resp.Body, one[:]); n > 0 {
				// The sender and every duplicate get the cut answer (the
				// cache keeps no more): say so where the operator looks.
				f.log.Warn("sync answer cut: the sender gets only its first 64 KiB", "key", ev.Key, "source", ev.Source)
			}
		}
	}
	if !ok2xx {
		// The start of the answer goes into the attempt history; a body cut
		// short is still worth showing.
		a.body, _ = io.ReadAll(io.LimitReader(resp.Body, engine.MaxAttemptBody))
	}
	closeBody(resp.Body)
	if ok2xx {
		return a
	}
	a.reason = "status " + strconv.Itoa(resp.StatusCode)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		now := time.Now()
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), now, tgt.BackoffMin, tgt.BackoffMax); ok {
			a.retryAfter = d
		}
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), now, 0, MaxHold); ok {
			a.hold = d
		}
	}
	return a
}

// maxContentType bounds the Content-Type kept with a sync answer; a media
// type with its parameters is far shorter.
const maxContentType = 256

// answerType is the Content-Type of a handler's answer as the sender will
// get it with the cached answer: "" for a longer one or one with a control
// byte (the intake would not send it as is), which the sender then gets
// without one.
func answerType(v string) string {
	if len(v) > maxContentType {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return ""
		}
	}
	return v
}

// plainTarget returns the target to post to directly (request.go), or nil
// when the request takes f.client.
func (f *Forwarder) plainTarget(rawURL string) *plainTarget {
	if f.direct == nil {
		return nil
	}
	return f.plain.get(rawURL)
}

// closeBody reads what is left of a body, up to MaxBody, so that the
// connection can be reused, and closes it. A longer body closes the connection.
func closeBody(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(b, MaxBody))
	_ = b.Close()
}

// setHeaders writes the stored headers, then ours over them.
func (f *Forwarder) setHeaders(h http.Header, ev engine.Event, attempt int) {
	for _, kv := range ev.Headers {
		if !forwardable(kv.Name, kv.Value) {
			continue
		}
		h.Add(kv.Name, kv.Value)
	}
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "oncehook")
	}
	h.Set(HeaderIdempotencyKey, ev.Key)
	h.Set(HeaderEventKey, ev.Key)
	h.Set(HeaderSource, ev.Source)
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	h.Set(HeaderFencingToken, strconv.FormatUint(ev.Token, 10))
	if ev.Step != "" {
		h.Set(HeaderLastStep, ev.Step)
	} else {
		h.Del(HeaderLastStep) // never a stored provider header's
	}
	if at := replayedAt(&ev); at != "" {
		h.Set(HeaderReplayedAt, at)
	} else {
		h.Del(HeaderReplayedAt)
	}
}

// validStep reports whether a handler's step can be stored: 1 to
// engine.MaxStepLen bytes of printable ASCII. The engine refuses anything else,
// and a refused Complete would leave a delivered event to its lease.
func validStep(s string) bool {
	if s == "" || len(s) > engine.MaxStepLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// forwardable reports whether a stored header can be passed on: not one that
// describes this connection or message framing (the client sets those), and a
// valid name and value, so that a bad stored header cannot fail every attempt.
// ownPrefix starts every header oncehook sets on a delivery.
const ownPrefix = "Oncehook-"

func forwardable(name, value string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
		"Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect":
		return false
	}
	// Oncehook-* is this node's namespace: a handler may take any header
	// in it for one oncehook set, so none comes from a sender.
	if len(name) >= len(ownPrefix) && strings.EqualFold(name[:len(ownPrefix)], ownPrefix) {
		return false
	}
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c may appear in a header name (RFC 9110 tchar).
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// reasonTimeout is the failure reason of an attempt that outlasted its
// target's timeout.
const reasonTimeout = engine.AttemptTimeout

// errReason turns a failed request into a short reason: "timeout",
// "connect: connection refused", "request: EOF". It never includes the URL or
// anything of a body.
func errReason(rctx context.Context, err error) string {
	// A connection that was never made first: the handler got nothing, so
	// a dial that timed out (a host that drops SYNs) is not a timeout of
	// the handler, which may still be at work (fail waits for the lease's
	// end after one).
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		if op.Timeout() {
			return reasonConnectTimeout
		}
		return clip("connect: " + innermost(op.Err).Error())
	}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return reasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return reasonTimeout
	}
	return clip("request: " + innermost(err).Error())
}

// reasonConnectTimeout is the reason of an attempt whose connection to the
// handler was not made in time.
const reasonConnectTimeout = "connect: timeout"

// innermost unwraps err down to its root cause (a single chain).
func innermost(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

func clip(s string) string {
	if len(s) > maxReason {
		return s[:maxReason]
	}
	return s
}

// complete records a 2xx.
func (f *Forwarder) complete(ctx context.Context, ev engine.Event, attempt int, tgt Target, a answer, took time.Duration) {
	var resp *engine.Response
	if tgt.Sync {
		resp = &engine.Response{Status: a.status, Body: a.body, ContentType: a.contentType}
	}
	err := f.opts.Store.Complete(ctx, ev.Key, ev.Token, resp, a.step, tgt.PayloadRetention)
	if err != nil && ctx.Err() != nil {
		f.cutOff(ev, attempt, took) // unknown whether it committed; the lease decides
		return
	}
	fin := Finish{Key: ev.Key, Source: ev.Source, Token: ev.Token, Attempt: attempt, Status: a.status}
	switch {
	case err == nil:
		fin.Outcome, fin.Response = OutcomeDone, resp
		f.log.Debug("delivered", "key", ev.Key, "attempt", attempt, "status", a.status, "took", took)
	case lostLease(err):
		fin.Outcome = OutcomeFenced
		f.log.Info("late completion fenced", "key", ev.Key, "token", ev.Token, "attempt", attempt, "err", err)
	default:
		fin.Outcome = OutcomeError
		f.log.Warn("complete failed; the lease will expire", "key", ev.Key, "token", ev.Token, "err", err)
	}
	f.finish(fin, took)
}

// fail records a failed attempt, started at start, with its retry delay.
func (f *Forwarder) fail(ctx context.Context, ev engine.Event, attempt int, tgt Target, a answer, start time.Time, took time.Duration) {
	retryIn := a.retryAfter
	if retryIn <= 0 {
		retryIn = Backoff(attempt, tgt.BackoffMin, tgt.BackoffMax, f.jitter())
	}
	// The source's hold is this leader's alone; the event's own time is
	// replicated, so it keeps the hold the handler asked for past a change
	// of leader.
	retryIn = max(retryIn, a.hold)
	maxAttempts := tgt.MaxAttempts
	if a.timedOut && ev.LeaseUntil != 0 {
		// The handler may still be working on it: the next attempt starts
		// no sooner than the lease's end, which forward_timeout < lease
		// leaves it, so that one handler never runs the event twice at once.
		over := f.leaseEnd(&ev, start)
		retryIn = max(retryIn, time.Until(over))
		if ev.OrderObject != "" && maxAttempts > 0 && attempt >= maxAttempts {
			// Dead, the event releases its object, and the next event of
			// the object would reach the handler while it may still run
			// this one; so it goes dead only once its lease has ended. A
			// drain (a hand-over, a stop) does not wait that long: the
			// attempt is recorded as not the last, and whichever node leads
			// then retries the event once more after the lease's end.
			reached, release := f.waitForLeaseEnd(ctx, over)
			defer release()
			if !reached {
				maxAttempts = 0
			}
		}
	}
	at := &engine.Attempt{At: start.UnixNano(), Took: int64(took), Status: a.status, Error: a.reason, Body: a.body}
	err := f.opts.Store.Fail(ctx, ev.Key, ev.Token, retryIn, maxAttempts, a.reason, a.step, tgt.DeadRetention, at)
	if err != nil && ctx.Err() != nil {
		f.cutOff(ev, attempt, took)
		return
	}
	fin := Finish{Key: ev.Key, Source: ev.Source, Token: ev.Token, Attempt: attempt, Status: a.status, Reason: a.reason}
	switch {
	case err == nil && maxAttempts > 0 && attempt >= maxAttempts:
		fin.Outcome = OutcomeDead
		f.log.Warn("dead letter", "key", ev.Key, "attempts", attempt, "reason", a.reason, "handler", handlerOrigin(tgt.URL))
	case err == nil:
		fin.Outcome = OutcomeRetry
		f.log.Info("delivery failed; will retry", "key", ev.Key, "attempt", attempt, "reason", a.reason, "retry_in", retryIn,
			"handler", handlerOrigin(tgt.URL))
	case lostLease(err):
		fin.Outcome = OutcomeFenced
		f.log.Info("late failure fenced", "key", ev.Key, "token", ev.Token, "attempt", attempt, "err", err)
	default:
		fin.Outcome = OutcomeError
		f.log.Warn("fail failed; the lease will expire", "key", ev.Key, "token", ev.Token, "err", err)
	}
	f.finish(fin, took)
}

// waitForLeaseEnd waits until a lease's end (leaseEnd) and reports whether it
// got there; it gives up when the run ends or a drain starts (a drain waits
// for this worker). From shortly before the end until release is called
// (after the attempt is recorded) the sweeper reclaims nothing, so that it
// cannot take the lease from under the Fail proposed at its end.
func (f *Forwarder) waitForLeaseEnd(ctx context.Context, end time.Time) (reached bool, release func()) {
	const step = 100 * time.Millisecond
	ending := false
	release = func() {
		if ending {
			f.endingLeases.Add(-1)
			ending = false
		}
	}
	for {
		left := time.Until(end)
		if left <= 0 {
			return true, release
		}
		if ctx.Err() != nil || f.slots.isDraining() {
			return false, release
		}
		if left <= step && !ending {
			f.endingLeases.Add(1)
			ending = true
		}
		t := time.NewTimer(min(left, step))
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// handBack returns a leased event that could not start inside its lease
// (doc.go, "Rate limits"), or whose source is no longer configured, to
// pending for retryIn, without calling its handler. The engine counted an
// attempt when it leased the event; the hand-back takes it back, so the
// handler's next Oncehook-Attempt and max_attempts count real attempts only.
//
// The engine keeps one reason per event, its last_error. A hand-back is no
// failure, so an event a handler failed before keeps that failure there (an
// operator looking at a retrying event wants the handler's 503, not "rate
// limited"); the hand-back's own reason is recorded only on an event that
// has none, or only an earlier hand-back's, and always in the log line.
func (f *Forwarder) handBack(ctx context.Context, ev engine.Event, retryIn time.Duration, reason string) {
	if ctx.Err() != nil {
		return
	}
	recorded := reason
	if ev.LastError != "" && !handBackReason(ev.LastError) {
		recorded = ev.LastError
	}
	err := f.opts.Store.HandBack(ctx, ev.Key, ev.Token, retryIn, recorded)
	switch {
	case ctx.Err() != nil:
	case err == nil:
		f.log.Info("handed back without a delivery", "key", ev.Key, "source", ev.Source, "reason", reason, "retry_in", retryIn)
	case lostLease(err):
		f.log.Info("hand-back fenced", "key", ev.Key, "token", ev.Token, "err", err)
	default:
		f.log.Warn("hand-back failed; the lease will expire", "key", ev.Key, "token", ev.Token, "err", err)
	}
}

// handBackReason reports whether r is a reason a hand-back records, not a
// failure: a later hand-back records its own instead.
func handBackReason(r string) bool {
	switch r {
	case ReasonRateLimited, ReasonPaused, ReasonStopping, ReasonLeaseEnded, ReasonLeaseTooShort, ReasonNoTarget:
		return true
	}
	return false
}

// lostLease reports whether a Complete or Fail was refused because the event
// is no longer leased under our token: a newer lease fenced it, it was
// reclaimed and is pending, an operator moved it, or it expired.
func lostLease(err error) bool {
	return errors.Is(err, engine.ErrStaleToken) || errors.Is(err, engine.ErrWrongState) ||
		errors.Is(err, engine.ErrNotFound)
}

// cutOff counts a handler call whose outcome was not recorded because the
// run ended under it (the node lost leadership or quorum, or stops): the
// lease expires and the event goes out again, so operators see these
// repeats coming as outcome "error".
func (f *Forwarder) cutOff(ev engine.Event, attempt int, took time.Duration) {
	f.log.Info("delivery outcome not recorded: no longer leading; the lease will expire",
		"key", ev.Key, "token", ev.Token, "attempt", attempt)
	if f.opts.Observe != nil { // not OnFinish: there is no outcome to hand a waiter
		f.opts.Observe(ev.Source, OutcomeError, took)
	}
}

func (f *Forwarder) finish(fin Finish, took time.Duration) {
	if f.opts.Observe != nil {
		f.opts.Observe(fin.Source, fin.Outcome, took)
	}
	if f.opts.OnFinish != nil {
		f.opts.OnFinish(fin)
	}
}

// jitter draws u in [0, 1) for Backoff.
func (f *Forwarder) jitter() float64 {
	if f.opts.Rand == nil {
		return rand.Float64()
	}
	f.randMu.Lock()
	defer f.randMu.Unlock()
	return f.opts.Rand.Float64()
}

// handlerOrigin is the scheme and host a delivery went to, for the log: a
// wrong forward shows where it dialed, while a path or query that may carry
// a token, and any user:password, stay out of it.
func handlerOrigin(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return "(unparsable forward URL)"
	}
	return u.Scheme + "://" + u.Host
}
