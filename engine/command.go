package engine

import "strings"

// This file is the contract between the engine and its callers (cluster, forward,
// the intake). Names and meanings here are fixed; the encoding and the storage
// behind them are the engine's own business.

// State is the lifecycle state of one event (docs/architecture.md, Event
// states).
type State uint8

// The states of an event. The zero value is not a state.
const (
	StatePending    State = 1 // claimed and durable, waiting for a lease
	StateProcessing State = 2 // leased to a worker until LeaseUntil under Token
	StateDone       State = 3 // the handler answered 2xx
	StateDead       State = 4 // max attempts reached (dead letter)
	StateStale      State = 5 // older than the newest event for its order object; never forwarded
)

// Op names a command.
type Op uint8

// The commands the engine applies.
const (
	OpClaim        Op = 1 // claim Key for Source, store Payload+Headers
	OpLease        Op = 2 // lease up to Max due pending events for LeaseFor; token = entry index
	OpComplete     Op = 3 // Key done under Token, optionally caching Response
	OpFail         Op = 4 // Key failed under Token: pending again after RetryIn, or dead at MaxAttempts
	OpReclaim      Op = 5 // every processing event whose lease ended by Now returns to pending
	OpReplay       Op = 6 // Keys, or State+Source+Since, back to pending with an audit record
	OpExpire       Op = 7 // end every retention bucket that ended by Now (docs/architecture.md, Event states: expiry)
	OpDropPayloads Op = 8 // drop payloads of done events due for it before Before (at most Max; 0: all)
	OpNoop         Op = 9 // does nothing; used as a barrier and in tests
	// OpPause holds Source: Lease leases none of its pending events until
	// OpResume (from format 21 they stay in the due index, whose paused
	// runs Lease passes over; before, they moved to the held index). Who
	// and Reason are recorded. N is 1 when the source was not paused, else
	// 0 (no change).
	OpPause Op = 10
	// OpResume releases a paused Source: its events go out at their own
	// times, oldest first (held ones, from an older format's pause, return
	// to the due index). N is 1 when the source was paused, else 0 (no
	// change).
	OpResume Op = 11
	// OpPurge deletes up to Max events in State (dead, done or stale) whose
	// UpdatedAt is before Before, of Source when set, with everything they
	// own. Who and Reason are the operator's (the leader logs them). Result
	// Keys names the deleted keys; fewer than Max means none is left.
	OpPurge Op = 12
	// OpIdentify names the cluster Key when its file has no name yet (the
	// first one applied stays; identity.go). N is 1 when it named it.
	OpIdentify Op = 13
)

// Quota limits how many events one lease takes from Source. A lease takes
// due events oldest first, by (NextAttemptAt, key), across every source; once
// it took Max of Source's, it takes Source's only when every other source's
// due events are taken (Hard: not even then). Max 0 with Hard skips the
// source; Max 0 without puts it behind every other.
// LeaseLength is a source's lease length (ns) on a lease command.
type LeaseLength struct {
	Source string
	For    int64
}

type Quota struct {
	Source string
	Max    int
	Hard   bool
}

// Bounds of a lease's quotas.
const (
	MaxQuotas = 1024    // quotas in one lease
	maxQuota  = 1 << 24 // a quota's Max
)

// Header is one provider header kept with an event and passed to its handler.
type Header struct {
	Name  string
	Value string
}

// Response is a handler's answer cached for sync-mode duplicates.
type Response struct {
	Status int
	Body   []byte
	// ContentType is the handler's Content-Type header, "" when it sent
	// none (format 10: older entries and values have none).
	ContentType string
}

// Command is one state change. Every time is unix nanoseconds. Now is stamped by
// the proposer (the Raft leader) when the command enters the log; durations are
// relative to Now so that a follower can build a command without reading a clock
// that matters. The engine never reads a clock or random numbers.
type Command struct {
	Op  Op
	Now int64

	Key    string // claim, complete, fail
	Source string // claim; replay filter; pause, resume

	// Claim.
	Payload   []byte
	Headers   []Header
	Retention int64 // the key lives at least Now+Retention (rounded up to a whole bucket)
	// Ordering guard: when OrderObject is set, a claim whose OrderTime is older
	// than the newest OrderTime applied for that object becomes StateStale;
	// else it joins the object's queue, and Lease hands out one event per
	// object at a time, oldest first (order.go).
	OrderObject string
	OrderTime   int64
	// BodyKey is the replay guard's key for the claim's verified body (the
	// source and a hash of the body; docs/security.md). When another event
	// already holds it, the claim is a duplicate of that event: nothing is
	// stored and Result.Keys names the original key. A new event holds its
	// BodyKey as long as the event exists. "": no guard.
	BodyKey string
	// LeaseFor on a claim is stored with the event and is its lease length
	// (per source); on a lease command it is the default for events without one.

	// Lease.
	Max      int   // at most this many events
	LeaseFor int64 // lease end = Now+event's LeaseFor, or Now+this when the event has none
	// Quotas limit what a lease takes from some sources (sorted by Source,
	// each source once; due.go). Share is the quota (not hard) of every
	// source Quotas does not name; 0: none.
	Quotas []Quota
	Share  int
	// Spare on a lease: once the quotas are spent, the lease takes no more
	// than Max-Spare events in all, so that the last Spare free workers stay
	// for events within their quotas (0 <= Spare <= Max).
	Spare int
	// Leases on a lease: the lease length of some sources' events as the
	// running configuration says now (sorted by Source, each source once).
	// An event of a named source is leased for that length, which is stored
	// with it, in place of the one stored at its claim: a reload that
	// changes a source's lease reaches the events claimed before it. An
	// event of a source not named keeps its stored length.
	Leases []LeaseLength

	// Complete, Fail.
	Token    uint64    // fencing token the worker holds
	Response *Response // complete: cached answer (sync mode); may be nil
	// Step is the handler's Oncehook-Step on this attempt (at most
	// MaxStepLen printable ASCII bytes): stored as the event's Step. ""
	// keeps the stored step (the handler reported none).
	Step string

	// PayloadRetention on a complete: the payload is dropped (DropPayloads)
	// from Now+PayloadRetention; 0: the event is due for it at once (as
	// entries written before this field). The key stays until its expiry.
	PayloadRetention int64

	// Fail.
	RetryIn     int64  // next try = Now+RetryIn (jitter decided by the leader)
	MaxAttempts int    // attempts after this failure >= MaxAttempts -> dead (Attempts counts leases; <= 0: no limit)
	Reason      string // fail: last error; replay, pause, resume: the operator's reason
	// Refund on a fail: the lease's attempt never started (the forwarder
	// handed the event back: a rate limit, or its source no longer
	// configured), so Attempts goes back down by one and the event is
	// never made dead by it; MaxAttempts is not compared.
	Refund bool
	// Attempt is the failed attempt this Fail records in the event's
	// attempt history (history.go); nil records none. The engine cuts its
	// Body to MaxAttemptBody bytes and its Error like a reason.
	Attempt *Attempt
	// DeadRetention on a fail that makes the event dead: its expiry moves to
	// at least the end of the bucket holding Now+DeadRetention, and Expire
	// deletes it then. 0 (older entries): it is kept DefaultDeadRetention
	// from the Expire that finds it.
	DeadRetention int64

	// Replay: either Keys, or State (done, dead or stale; + optional Source) with
	// UpdatedAt >= Since (0: no bound). From format 21 a replay by state
	// with a Max (1..MaxReplayBatch) visits at most Max entries of the
	// state, from the cursor (Since, Key) exclusive when Key is set, of
	// events updated before Before (0: before Now, the first command's);
	// Result.More, its cursor and Result.Before say where and how far the
	// next command goes on.
	Keys  []string
	State State
	Since int64
	Who   string // replay, pause, resume: the operator
	// OnlyFrom on a replay by Keys: only events in this state move; the
	// others are left as they are (a single key answers ErrWrongState). A
	// provider's retry re-arms a dead event with it, so that two retries
	// racing through two nodes cannot replay an event the first one's
	// delivery has meanwhile completed. 0: any replayable state. From
	// format 20 such a re-arm also leaves a dead event whose last attempt
	// timed out while its lease runs at Now (ErrLastAttemptRunning), the
	// lease being the longer of the event's and LeaseFor (the source's).
	OnlyFrom State

	// DropPayloads, Purge. DropPayloads: Before is Now; done events completed
	// before payload retention existed (no drop time) are due when completed
	// before Since (0: before Before).
	Before int64

	// Reclaim: Horizon bounds how far ahead of Now a schedule may be (the
	// longest backoff_max and lease of any source): a due entry later than
	// Now+Horizon is rescheduled to Now+Horizon, a lease ending later is cut
	// to end at Now plus the event's lease length (LeaseFor; the horizon when
	// it has none or a longer one). It repairs what a leader stamped while
	// its clock ran ahead, or before its clock stepped back: the attempt
	// under such a lease may have started a moment ago, and keeps its whole
	// length (before format 22 the lease was cut to Now, and the event
	// leased again while that attempt could still run). 0: no bound.
	Horizon int64

	// LeaseNow on a claim: when the new event may go at once (pending, its
	// source not paused, the head of its order object's queue), the claim
	// leases it under the entry's index, until Now plus the event's LeaseFor,
	// or plus LeaseNow when it has none; Result.Events then holds it, as a
	// lease would. The leader's proposer sets it when its forwarder has a free
	// worker (claimlease.go). 0: the claim only claims.
	LeaseNow int64

	// format is the FormatVersion of the binary that wrote the log entry
	// this command came from, when older than this binary's (0: this
	// binary's, as for a command built in process). Apply gives a command
	// the meanings of its writer (semantics), so replicas that run
	// different binaries during a rolling upgrade stay byte-identical.
	format uint8
}

// semantics is the FormatVersion whose meanings apply to c.
func (c *Command) semantics() int {
	if c.format == 0 {
		return FormatVersion
	}
	return int(c.format)
}

// AuditEntry records an operator action on an event.
type AuditEntry struct {
	At     int64
	Who    string
	Action string // "replay"
	Reason string
	From   State
}

// Attempt is one failed delivery attempt kept in an event's history.
type Attempt struct {
	At     int64  // when the attempt started
	Took   int64  // how long it took (ns)
	Status int    // the handler's HTTP status; 0 when there was no answer
	Error  string // the failure: a transport error, or why the answer failed
	Body   []byte // the first MaxAttemptBody bytes of the handler's answer
}

// AttemptTimeout is the Error of an attempt the handler did not answer
// within the forward timeout; an answer whose body stalled past it is
// recorded as "read body: timeout".
const AttemptTimeout = "timeout"

// TimedOut reports whether the attempt ended at its timeout rather than at
// the handler's answer: the handler may have gone on running it.
func (at *Attempt) TimedOut() bool {
	return at.Error == AttemptTimeout || strings.HasSuffix(at.Error, ": "+AttemptTimeout)
}

// LastAttemptWait is how long (ns) after now the lease of an event's last
// attempt still runs, when that attempt timed out; 0 when it did not, or
// its lease is over. The lease is the longer of the event's own (evLease)
// and srcLease (the source's current one: a reload may have changed it).
// The wait is at most one lease, and an attempt stamped more than a lease
// after now is not waited for: a leader whose clock ran ahead stamped it,
// and no lease this clock can time explains it (the fencing token still
// guards that attempt's result).
func LastAttemptWait(last Attempt, evLease, srcLease, now int64) int64 {
	lease := max(evLease, srcLease)
	if !last.TimedOut() || last.At-now > lease {
		return 0
	}
	return min(max(last.At+lease-now, 0), lease)
}

// Event is the stored view of one claimed key.
type Event struct {
	Key           string
	Source        string
	State         State
	Attempts      uint32 // delivery attempts started: +1 per lease, 0 after a replay
	Token         uint64 // fencing token of the latest lease (0 before the first)
	CreatedAt     int64
	UpdatedAt     int64
	NextAttemptAt int64
	LeaseUntil    int64
	ExpiresAt     int64 // end of the retention bucket that holds the key
	// Retention is the key's retention window once its expiry moved: its
	// claim's ExpiresAt minus CreatedAt (the claim's retention rounded up to
	// a bucket); 0 while it has not moved (the window is then
	// ExpiresAt-CreatedAt, see RetentionWindow). A replay, and an Expire that
	// finds the event unfinished, move ExpiresAt to the bucket of
	// Now+window; the window itself never changes.
	Retention int64
	// PayloadDropAt is when a done event's payload becomes due for
	// DropPayloads (its done index time); 0 when not done, dropped, or
	// completed by an entry without PayloadRetention (due at UpdatedAt).
	PayloadDropAt int64
	LeaseFor      int64 // lease length stored at claim time (0: the lease command's)
	LastError     string
	// Step is the last step a handler reported (Oncehook-Step) on complete or
	// fail; "" when none has. A reclaim or a replay keeps it, and the next
	// attempt sends it as Oncehook-Last-Step.
	Step     string
	Headers  []Header  // filled together with Payload
	Response *Response // cached handler answer (Get)
	Audit    []AuditEntry
	Payload  []byte // filled by Lease results and by Get when asked

	// Ordering (a claim with an OrderObject): the object, and the event's
	// place in the object's queue of unfinished events: its order time,
	// then the Raft index and position in its entry of the claim (ties of
	// order time go in claim order). A replay moves the event to the tail
	// of its queue (order.go).
	OrderObject string
	OrderTime   int64
	OrderIndex  uint64
	OrderPos    uint32
	// History is the event's last failed attempts, oldest first (at most
	// maxHistory); filled by Get.
	History []Attempt
}

// Result is the outcome of one command. A rejected command (stale token, wrong
// state, unknown key) carries its error in Err; it never aborts the batch.
type Result struct {
	// Claim: Created is true for a new key; State is the state after the command
	// (for a duplicate, the state the existing event is in).
	Created bool
	State   State
	// Held on a claim that created a pending event: no lease can take it
	// yet (its source is paused, or it is an ordered event behind another of
	// its object), so a new lease would find nothing of it.
	Held bool
	// Lease: the events now processing, oldest due first, with payload, headers
	// and the new Token.
	// Expire: the dead letters it deleted (record fields only), for the
	// leader's log and metrics.
	Events []Event
	// Waiting on a lease: the sources, sorted, that still have events due
	// by its Now that it did not take (it reached Max, or their quotas).
	Waiting []string
	// Lease, Reclaim, Replay, Expire, DropPayloads, Purge: how many events changed.
	// Pause, Resume: 1 when the source's paused state changed, else 0.
	N int
	// Replay: the keys that moved (for the operator's report); Purge: the
	// keys deleted. Claim: when
	// the replay guard matched (Command.BodyKey), the one key that holds the
	// body; the duplicate is of that event.
	Keys []string
	// Expire with a Max: entries of ended buckets remain for the next
	// command. (Not relayed: expire runs on the leader.) Replay by state
	// with a Max: entries remain past the cursor, the last entry it
	// visited (After, updated at AfterTime), where the next one goes on.
	More      bool
	After     string
	AfterTime int64
	// Before on a replay by state with a Max: the bound its batches keep
	// (the first one's Now), for the next command.
	Before int64
	Err    error
}

// MaxReplayBatch bounds the entries one replay by state visits (format 21);
// the caller loops on Result.More.
const MaxReplayBatch = 10000

// Entry is one Raft log entry's worth of commands, applied under its index.
type Entry struct {
	Index uint64
	Cmds  []Command
}

// SourceState is a source's pause state (Engine.Sources).
type SourceState struct {
	Paused bool
	Since  int64 // Command.Now of the pause
	Who    string
	Reason string
}

// Backlog is a source's pending events (Engine.Backlog).
type Backlog struct {
	Pending int
	// OldestPendingAt is the earliest NextAttemptAt among the pending events
	// (the time the longest-waiting one became due; for a new event its
	// CreatedAt); 0 when none is pending.
	OldestPendingAt int64
}
