package forward

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"oncehook/engine"
)

// Store is the replicated event state as the forwarder needs it. Every call is a
// Raft command on the leader; times are stamped by the leader. The cluster node
// satisfies it; tests use a real engine behind a small adapter.
type Store interface {
	// LeaseFrom moves up to max due pending events to processing under a new fencing
	// token and returns them, oldest due first, with Payload and Headers. An
	// event's lease lasts its source's length in leases (the running
	// config's, sorted by source; engine Command.Leases), else its own
	// LeaseFor (set at claim), else leaseFor. It never returns more than max
	// events.
	// quotas, share and spare limit what it takes of each source (engine
	// Command.Quotas, Share and Spare); waiting names the sources that still have
	// due events it did not take (engine Result.Waiting).
	LeaseFrom(ctx context.Context, max int, leaseFor time.Duration, leases []engine.LeaseLength, quotas []engine.Quota, share, spare int) (evs []engine.Event, waiting []string, err error)
	// Complete marks key done under token, caching resp when it is not nil.
	// step is the handler's Oncehook-Step ("" keeps the stored one). The
	// payload is dropped payloadKeep from now (DropPayloads).
	// errors.Is(err, engine.ErrStaleToken) when a newer lease fenced the token.
	Complete(ctx context.Context, key string, token uint64, resp *engine.Response, step string, payloadKeep time.Duration) error
	// Fail records a failed attempt under token: the event is pending again
	// retryIn from now, or dead when its attempts reach maxAttempts, and then
	// kept deadKeep from now. reason is kept as the event's last error, step
	// (when not "") as its step; at (when not nil) joins the event's attempt
	// history.
	Fail(ctx context.Context, key string, token uint64, retryIn time.Duration, maxAttempts int, reason, step string, deadKeep time.Duration, at *engine.Attempt) error
	// HandBack returns a leased event whose attempt never started to
	// pending retryIn from now, and takes back the attempt its lease counted
	// (engine Command.Refund): never dead, no attempt history.
	HandBack(ctx context.Context, key string, token uint64, retryIn time.Duration, reason string) error
	// Reclaim returns every processing event whose lease has ended to pending
	// and says how many moved. With horizon > 0 it first repairs schedules
	// further ahead than that (engine Command.Horizon).
	Reclaim(ctx context.Context, horizon time.Duration) (int, error)
	// Expire ends every retention bucket that has ended and says how many
	// events went, and which dead letters among them.
	Expire(ctx context.Context) (int, []engine.Event, error)
	// DropPayloads drops the payloads of done events whose payload retention
	// passed, at most max of them; done events completed without one go when
	// done longer than legacyAge. It says how many went.
	DropPayloads(ctx context.Context, legacyAge time.Duration, max int) (int, error)
}

// Limits are the bounds the sweeper sends, derived from every source's
// settings (Options.Limits).
type Limits struct {
	// Horizon: the longest backoff_max and lease of any source (and
	// MaxHold). A retry due, or a lease ending, further ahead than this was
	// stamped by a leader whose clock ran ahead, and is repaired.
	Horizon time.Duration
	// PayloadAge: the longest payload_retention of any source, for done
	// events completed before payload drop times were recorded.
	PayloadAge time.Duration
}

// Target is where and how one source's events are delivered. Zero durations and
// a zero MaxAttempts take the defaults below.
type Target struct {
	URL         string        // the handler, e.g. "http://127.0.0.1:9000/stripe"
	Timeout     time.Duration // per request; default DefaultTimeout
	BackoffMin  time.Duration // first retry waits about this; default DefaultBackoffMin
	BackoffMax  time.Duration // no retry waits longer; default DefaultBackoffMax
	MaxAttempts int           // the event is dead after this many failed attempts; default DefaultMaxAttempts
	Sync        bool          // cache the handler's status and body with Complete (sync-mode sources)
	// MaxRate is the most deliveries per second started to this handler; 0
	// (or less): no limit. Burst is how many may start at once after a quiet
	// spell; less than 1: ceil(MaxRate). See doc.go, "Rate limits".
	MaxRate float64
	Burst   int
	// DeadRetention: a dead letter is kept this long after it went dead
	// (0: the engine's default). PayloadRetention: a done event's payload is
	// dropped this long after it completed (0: at the next sweep).
	DeadRetention    time.Duration
	PayloadRetention time.Duration
	// Lease is the source's lease length now; the caller passes it on
	// through Options.Leases. 0: the length stored at the event's claim.
	Lease time.Duration
}

// Defaults for a Target's zero fields and for events whose source has no
// target (it was removed by a reload).
const (
	DefaultTimeout     = 10 * time.Second
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 10 * time.Minute
	DefaultMaxAttempts = 8
)

// Outcomes reported to Options.Observe and in Finish.Outcome.
const (
	OutcomeDone   = "done"   // the handler answered 2xx and Complete committed
	OutcomeRetry  = "retry"  // the attempt failed; the event is pending again
	OutcomeDead   = "dead"   // the attempt failed and was the last one allowed
	OutcomeFenced = "fenced" // the lease was no longer ours; the result was discarded
	OutcomeError  = "error"  // not recorded (the Store call failed, or the run ended under it); the lease will expire and be reclaimed
)

// MaxBody is the most of a handler's response body that is read, and cached for
// a sync target. The rest is discarded.
const MaxBody = 64 << 10

// Finish is the recorded outcome of one delivery attempt, given to
// Options.OnFinish after the Store call that recorded it returned.
type Finish struct {
	Key     string
	Source  string
	Token   uint64 // the fencing token the attempt ran under
	Attempt int    // 1 for the first delivery
	Outcome string // one of the Outcome constants
	// Status is the handler's HTTP status, or 0 when there was none (timeout,
	// connection error, no target).
	Status int
	// Response is what Complete cached: set for OutcomeDone on a Sync target.
	Response *engine.Response
	// Reason is the short failure reason for OutcomeRetry and OutcomeDead.
	Reason string
}

// Options configures a Forwarder. Only Store and Targets are required.
type Options struct {
	Store Store
	// Targets looks up a source's target at delivery time, so a reload takes
	// effect on the next attempt. It is called from every worker at once and
	// must be safe for that (e.g. read an atomic.Pointer to the current map).
	// false: no target (a reload removed the source): its events are held,
	// handed back and skipped by leases until it has one again.
	Targets func(source string) (Target, bool)
	// Sources, when set, says how many sources are configured now (a reload
	// may change it). With more than one, a source past its share of the
	// pool never takes its spare workers (spareOf), even while no other
	// source is active, so that another source's first events find a worker
	// at once instead of waiting for one of a slow handler's requests to
	// end (doc.go, "Sharing the workers"). nil: the spare workers are kept
	// only while two sources are active.
	Sources func() int
	// LimitedSources, when set, names the sources configured with a
	// MaxRate now (a reload may change them); the caller keeps the slice
	// and must not change it. Their first lease under this leader, or
	// after a reload turned their rate on, is capped by their bucket's
	// room like every later one (limiter.room). nil: a source's first
	// lease is capped only from the lease after its first booking, so a
	// backlog found by a new leader was leased whole and the events past
	// the bucket's budget were handed back behind newer ones.
	LimitedSources func() []string
	// Leases, when set, gives each configured source's lease length now,
	// sorted by source; the caller keeps the slice and must not change it.
	// Every lease carries them, so that an event claimed before a reload
	// that changed its source's lease is leased for the new length: with
	// the one stored at its claim, a raised forward_timeout could outlast
	// the lease (the handler would get the event again while it still ran
	// it) and a lowered lease could end past the reclaim horizon (reclaimed
	// at once, again and again). nil: the lengths stored at claim.
	Leases func() []engine.LeaseLength
	// Client makes the outgoing requests. nil: a client tuned for local
	// handlers (keep-alives, as many idle connections per host as the pool may
	// grow to, at least 64, no proxy), whose
	// plain-HTTP requests are written without an http.Request (request.go).
	// Redirects are never followed: when Client.CheckRedirect is nil, a copy
	// of the client with one returning http.ErrUseLastResponse is used.
	Client *http.Client
	// Workers is the number of concurrent requests to handlers, the pool's
	// size at the start of a Run and its least (see MaxWorkers); default 16.
	// A worker is free again when its handler answered: the outcome is
	// recorded (Complete or Fail, a Raft commit) in the background, with at
	// most recordFactor*Workers outcomes waiting to commit; beyond that a
	// worker waits for its own. Claims that carry their lease may add
	// events waiting for a worker (claimlease.go); handlers never get more
	// than the pool's size of requests at once.
	Workers int
	// MaxWorkers is how far the pool may grow while it is what limits
	// delivery (poolsize.go): every worker busy, events waiting, and each
	// step up answered by more 2xx per tick. Not above Workers: a fixed pool.
	MaxWorkers int
	// PoolBytes bounds the pool's growth by memory: every request in flight
	// holds its event's body, and as many events again may wait for a
	// worker (a lease's), so the pool grows to at most PoolBytes / (2 × the
	// average body delivered), and never below Workers; claims reserve
	// workers beyond the free ones only within what is left of PoolBytes
	// (claimlease.go, reserveCap). 0: DefaultPoolBytes.
	PoolBytes int64
	// OnWorkers, when set, is told the pool's size when Run starts, each
	// time it changes, and 0 when Run returns. It runs on the dispatcher and
	// must not block.
	OnWorkers func(n int)
	// Wake is signalled when new events may be due (a claim committed on this
	// leader); give it a buffer of one and send without blocking, so that many
	// claims make one lease. nil: rely on PollInterval.
	Wake <-chan struct{}
	// PollInterval is how often due events (new or retries) are looked for
	// without a Wake; default 1s.
	PollInterval time.Duration
	// SweepInterval is how often expired leases are reclaimed; default 1s.
	SweepInterval time.Duration
	// ExpireInterval is how often ended retention buckets are expired, and
	// payloads due dropped; default 1m.
	ExpireInterval time.Duration
	// PayloadInterval is how often payloads due are dropped between two
	// expires; default 1s. The payloads a node holds are those of the last
	// payload_retention plus this: at a minute, a node taking 14,000 events
	// a second grew its file by a minute of payloads before each drop
	// (docs/performance.md, "Payloads dropped every second"). Not used when
	// it is not shorter than ExpireInterval. The store proposes nothing
	// when nothing is due (cluster.Node.DropPayloads).
	PayloadInterval time.Duration
	// DefaultLease is the lease length for events stored without their own;
	// default 30s.
	DefaultLease time.Duration
	// Rand draws the retry jitter. It is used under a lock. nil: the global
	// math/rand/v2 source.
	Rand *rand.Rand
	// Logger; nil discards.
	Logger *slog.Logger
	// Observe, when set, is called once per attempt with the source, the
	// outcome (an Outcome constant) and how long the handler took.
	Observe func(source, outcome string, d time.Duration)
	// OnFinish, when set, is called once per attempt after the Store call
	// that records its outcome returned (Outcome says what it answered). It
	// runs on a worker and must not block. It wakes sync-mode waiters on this
	// node, the leader, with the handler's answer, including a failed one
	// (Status, Reason), which the store keeps only as LastError. Waiters on a
	// follower are not reached by it: the cluster's FSM must wake them when it
	// applies a Complete or Fail (see doc.go). It is not called for attempts
	// abandoned because Run's context ended (Observe counts those as
	// OutcomeError).
	OnFinish func(Finish)
	// RateLimited, when set, is called once per delivery that waited for its
	// source's rate limit or Retry-After hold before it started, with how long
	// it waited since it was leased. It runs on the dispatcher and must not
	// block.
	RateLimited func(source string, waited time.Duration)
	// Paused, when set, reports whether a source is paused in the
	// replicated state. Leases skip a paused source already; an event leased
	// before the pause and parked for its source's max_rate is handed back
	// when its slot comes instead of delivered, so that a pause stops a
	// throttled source's deliveries as it stops the others'.
	Paused func(source string) bool
	// Limits, when set, gives the sweeper's bounds (see Limits); it is
	// called on every sweep, so a reload takes effect. nil: no schedule
	// repair, and payloads without a drop time are never dropped.
	Limits func() Limits
	// DeadExpired, when set, is called for each dead letter Expire deleted
	// (after it was logged at warn). It runs on the sweeper.
	DeadExpired func(engine.Event)
	// PayloadsDropped, when set, is called with the number of payloads each
	// sweep dropped, when it dropped any. It runs on the sweeper.
	PayloadsDropped func(n int)
	// LeasesReclaimed, when set, is called with the number of events whose
	// lease ended unanswered (a worker of a leader that died or stalled, a
	// handler slower than its lease), each reclaimed to pending and sent
	// again. It runs on the sweeper.
	LeasesReclaimed func(n int)
}

// Defaults for zero Options fields.
const (
	DefaultWorkers         = 16
	DefaultPollInterval    = time.Second
	DefaultSweepInterval   = time.Second
	DefaultExpireInterval  = time.Minute
	DefaultPayloadInterval = time.Second
	DefaultLease           = 30 * time.Second
	DefaultPoolBytes       = 256 << 20
)

// ErrRunning is returned by Run when the Forwarder is already running.
var ErrRunning = errors.New("forward: already running")

// ErrNoStore is returned by Run when Options.Store or Options.Targets is nil.
var ErrNoStore = errors.New("forward: Options.Store and Options.Targets are required")

// Forwarder delivers leased events to their handlers. Create it with New and
// run it with Run while this node is the leader; it can be run again after Run
// returned (on the next leadership term).
type Forwarder struct {
	opts   Options // defaults filled in; read-only after New
	client *http.Client
	// direct is client's transport when it is the forwarder's own: plain
	// HTTP deliveries then skip the client (request.go).
	direct  *transport
	plain   plainTargets
	log     *slog.Logger
	running atomic.Bool

	randMu sync.Mutex // guards opts.Rand, which is not safe for concurrent use

	lim *limiter // this Run's rate limits; set before Run starts its goroutines

	slots *slots // workers taken by leases and by claims that carry theirs (claimlease.go)

	// orphans are the sources whose events were leased while no target was
	// configured for them; leases skip them (skipOrphans). The dispatcher's
	// goroutine alone uses it; Run makes it.
	orphans map[string]bool

	// Since the dispatcher last looked (poolsize.go): 2xx answers, and the
	// attempts started with the bytes of their bodies.
	delivered, attempts, bodyBytes atomic.Int64
	workers                        atomic.Int32 // worker goroutines running

	// endingLeases counts the workers about to record an attempt at its
	// lease's end (waitForLeaseEnd); the sweeper reclaims nothing meanwhile,
	// or its reclaim could take the lease first and the event would be
	// delivered once more.
	endingLeases atomic.Int32
}

// New returns a Forwarder with opts' zero fields set to their defaults.
func New(opts Options) *Forwarder {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.PayloadInterval <= 0 {
		opts.PayloadInterval = DefaultPayloadInterval
	}
	if opts.ExpireInterval <= 0 {
		opts.ExpireInterval = DefaultExpireInterval
	}
	if opts.DefaultLease <= 0 {
		opts.DefaultLease = DefaultLease
	}
	if opts.PoolBytes <= 0 {
		opts.PoolBytes = DefaultPoolBytes
	}
	f := &Forwarder{opts: opts, log: opts.Logger, slots: newSlots()}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.log = f.log.With("component", "forward")
	switch {
	case opts.Client == nil:
		// As many idle connections as the pool may grow to: a pool above
		// the idle cap closed a connection after most answers and dialled
		// one before the next request, as it caught up with a backlog,
		// which is when the CPU was shortest (docs/performance.md,
		// "Connections kept for the whole pool").
		f.client = NewClient(max(opts.Workers, opts.MaxWorkers))
		f.direct = f.client.Transport.(*transport)
	case opts.Client.CheckRedirect == nil:
		c := *opts.Client
		c.CheckRedirect = noRedirect
		f.client = &c
	default:
		f.client = opts.Client
	}
	return f
}

// NewClient returns the client New uses when Options.Client is nil: keep-alives
// with up to max(64, workers) idle connections per host (New passes the most
// workers the pool may grow to), no proxy (handlers are
// local), no transparent compression, and redirects returned, not followed.
// Plain-HTTP handlers are called on the worker's goroutine (see transport.go);
// https goes through an http.Transport. Request timeouts come from each
// Target, per request.
func NewClient(workers int) *http.Client {
	return &http.Client{
		Transport:     newTransport(max(64, workers)),
		CheckRedirect: noRedirect,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Run leases and delivers events and runs the sweeper until ctx is cancelled,
// then stops leasing, cancels in-flight requests without recording their
// outcome, waits for every goroutine it started, and returns nil. It returns
// ErrNoStore or ErrRunning at once when it cannot start.
func (f *Forwarder) Run(ctx context.Context) error {
	if f.opts.Store == nil || f.opts.Targets == nil {
		return ErrNoStore
	}
	if !f.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer f.running.Store(false)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	n := f.opts.Workers
	sizer := newPoolSizer(n, f.opts.MaxWorkers)
	f.lim = newLimiter(f.opts.DefaultLease)
	f.orphans = map[string]bool{}
	f.delivered.Store(0)
	f.attempts.Store(0)
	f.bodyBytes.Store(0)
	// At most maxSent times the pool's size of events are ever sent and
	// not yet freed (f.slots: a lease in flight takes the free workers, and
	// claims reserved meanwhile may hand over reserveFactor times the pool
	// beyond the events workers hold), so neither jobs nor freed, sized for
	// the largest pool, ever blocks its sender. The freed token is true for an event with an order
	// object: its end may let the next event of its object go (the engine
	// leases one per object at a time), so the dispatcher leases again at
	// once.
	jobs := make(chan job, maxSent*sizer.max)
	freed := make(chan bool, maxSent*sizer.max)
	kick := make(chan struct{}, 1) // events may be due (a reclaim, an ordered event recorded): lease soon

	var wg sync.WaitGroup
	// Outcomes the workers leave to commit in the background go to an idle
	// recorder, or to a new one when none is idle. A recorder then waits
	// for the next outcome instead of ending: the commit path needs more
	// stack than a new goroutine starts with, and a goroutine per outcome
	// grew a new stack every time (about 5 % of a busy leader's CPU). At
	// most maxIdleRecorders wait; the others end.
	outcomes := make(chan outcome)
	var idleRecorders atomic.Int32
	recorder := func(o outcome) {
		for {
			f.record(ctx, o.at)
			f.slots.endRecording()
			if o.ordered { // the next event of its object may go now
				select {
				case kick <- struct{}{}:
				default:
				}
			}
			if idleRecorders.Add(1) > maxIdleRecorders {
				idleRecorders.Add(-1)
				return
			}
			select {
			case o = <-outcomes:
				idleRecorders.Add(-1)
			case <-ctx.Done():
				idleRecorders.Add(-1)
				return
			}
		}
	}
	// deliver runs one job on a worker.
	deliver := func(j job) {
		ordered := j.ev.OrderObject != ""
		if j.handBack > 0 {
			reason := j.reason
			if reason == "" {
				reason = ReasonRateLimited
			}
			f.handBack(ctx, j.ev, j.handBack, reason)
			f.slots.leave(j.ev.Source, time.Now())
			freed <- ordered
			return
		}
		if ok, reason := f.leaseLeft(&j.ev, j.leased, time.Now()); !ok {
			// The attempt is refunded; a newer lease fences the hand-back.
			f.handBack(ctx, j.ev, f.opts.PollInterval, reason)
			f.slots.leave(j.ev.Source, time.Now())
			freed <- ordered
			return
		}
		f.attempts.Add(1)
		f.bodyBytes.Add(int64(len(j.ev.Payload)))
		at := f.try(ctx, j.ev, j.leased)
		if at != nil && at.a.reason == "" {
			f.delivered.Add(1)
		}
		if at == nil || !f.slots.startRecording() {
			if at != nil {
				f.record(ctx, at)
			}
			f.slots.leave(j.ev.Source, time.Now())
			freed <- ordered
			return
		}
		// The handler answered: the worker is free for the next event
		// while the outcome commits (workers bound the requests to
		// handlers, not the commits; see Workers). What waits to commit
		// holds no request body (a sync handler's answer, at most
		// MaxBody, stays): a commit slowed by a busy disk keeps
		// thousands of outcomes waiting.
		at.ev.Payload, at.ev.Headers = nil, nil
		f.slots.leave(j.ev.Source, time.Now())
		freed <- false
		select {
		case outcomes <- outcome{at: at, ordered: ordered}:
		default:
			wg.Go(func() { recorder(outcome{at: at, ordered: ordered}) })
		}
	}
	// There are as many workers as the pool's size: they are started as it
	// grows, and as it shrinks as many are told to quit (each after the job
	// it has). More workers than the size would let events that wait in jobs
	// (claims may reserve workers a lease in flight also took) reach the
	// handlers at once, beyond the size.
	quit := make(chan struct{}, sizer.max)
	worker := func() {
		f.workers.Add(1)
		defer f.workers.Add(-1)
		for {
			select {
			case <-quit:
				return
			case j, ok := <-jobs:
				if !ok {
					return
				}
				deliver(j)
			}
		}
	}
	started := 0
	resize := func(to int) {
		for ; started < to; started++ {
			wg.Go(worker)
		}
		for ; started > to; started-- {
			quit <- struct{}{}
		}
	}
	resize(n)
	wg.Go(func() { f.sweep(ctx, kick) })

	f.log.Info("forwarder started", "workers", n, "max_workers", sizer.max)
	f.slots.open(n)
	f.onWorkers(n)
	var avgBody int64 // bytes, over the last tick that started an attempt
	lastTick := time.Now()
	f.dispatch(ctx, jobs, freed, kick, func(saturated bool) {
		now := time.Now()
		delivered := f.delivered.Swap(0)
		a := f.attempts.Swap(0)
		if p, ok := tickPace(a, delivered, now.Sub(lastTick)); ok {
			f.slots.setPace(p)
		}
		lastTick = now
		if a > 0 {
			avgBody = max(1, f.bodyBytes.Swap(0)/a)
			f.slots.setAvgBody(avgBody)
		}
		most := f.opts.MaxWorkers
		if avgBody > 0 {
			most = int(min(int64(most), f.opts.PoolBytes/(2*avgBody)))
		}
		sizer.limit(most)
		k := sizer.step(saturated, int(delivered))
		if was := f.slots.size(); k != was {
			resize(k)
			f.slots.resize(k)
			f.onWorkers(k)
			f.log.Debug("delivery workers", "workers", k, "was", was)
		}
	})
	f.slots.close()
	f.onWorkers(0)
	cancel()
	close(jobs)
	wg.Wait()
	f.client.CloseIdleConnections()
	f.log.Info("forwarder stopped")
	return nil
}

// tickPace is the deliveries per second of a tick of length d that started
// attempts and delivered delivered, and whether the tick says anything: a
// quiet one (nothing started, nothing delivered) keeps the last pace, as
// avgBody is kept, so that the next burst starts with the reservations its
// handler's pace allows; a tick whose attempts all failed says 0.
func tickPace(attempts, delivered int64, d time.Duration) (float64, bool) {
	if d <= 0 || attempts == 0 && delivered == 0 {
		return 0, false
	}
	return float64(delivered) / d.Seconds(), true
}

// outcome is a delivery's outcome for a recorder to commit; ordered tells
// that its event has an order object.
type outcome struct {
	at      *attempt
	ordered bool
}

// maxIdleRecorders bounds the recorders kept waiting for outcomes: about
// what a leader at full speed has committing at once.
const maxIdleRecorders = 128

// job is one leased event for a worker: deliver it, or, when handBack > 0,
// hand it back to pending for handBack without calling the handler.
type job struct {
	ev       engine.Event
	leased   time.Time
	handBack time.Duration
	reason   string // why it is handed back; "": ReasonRateLimited
}

// maxParked bounds the events parked for their rate limit, with
// parkFactor*Workers when that is more.
const (
	maxParked  = 1024
	parkFactor = 16
)

// onWorkers tells Options.OnWorkers the pool's size.
func (f *Forwarder) onWorkers(n int) {
	if f.opts.OnWorkers != nil {
		f.opts.OnWorkers(n)
	}
}

// dispatch is the leasing loop. It returns when ctx ends. On every
// PollInterval tick it calls size with whether every worker was busy while
// events were waiting to be leased (poolsize.go).
//
// Every lease carries quotas (slots.quotas): a source that holds workers may
// take what is left of its share (half the pool) before the others' due
// events, and the rest only after them; so one source's backlog never keeps
// another's events from the workers that free up (doc.go, "Sharing the
// workers").
//
// Rate limits (doc.go, "Rate limits"): the Store cannot give an event back
// without counting an attempt (Lease counts it; Fail and Reclaim keep it).
// So an event of a rate-limited source is not handed back for want of a
// token: it is parked here, on no worker, with its slot booked in the
// source's bucket, and given to a worker when the slot comes, which is
// always before its lease's end minus its timeout. Other sources' events go
// to workers at once. To keep that promise the dispatcher limits how many
// events of a throttled source are leased: a lease takes no more than the
// slots the source can still book within half of (lease - timeout) (a hard
// quota, limiter.room; 0 while it has slots booked further ahead), and no
// lease is made while maxParked events are parked. Only an event
// that cannot start inside its lease in any case (a Retry-After hold longer
// than the lease, a per-event lease shorter than the default, a rate lowered
// by a reload) is handed back (Store.HandBack), its attempt refunded.
func (f *Forwarder) dispatch(ctx context.Context, jobs chan<- job, freed <-chan bool, kick <-chan struct{}, size func(saturated bool)) {
	tick := time.NewTicker(f.opts.PollInterval)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()

	var park parkQueue
	f.lim.parked = func(src string, gen uint64) int {
		n := 0
		for _, p := range park {
			if p.ev.Source == src && p.gen == gen && !p.rebook {
				n++
			}
		}
		return n
	}
	parkCap := max(maxParked, parkFactor*f.opts.Workers)
	// Workers are counted in f.slots, which claims that carry their lease
	// share: an event holds one from its lease (or its claim's reservation)
	// until its worker is done, except while it is parked.
	// want: there may be due events we have not leased. It is set by a wake,
	// a tick or a reclaim, and stays set after a lease that filled every free
	// slot; a short lease or a failed one clears it.
	want := true
	// spareStop > 0: the last lease stopped at the spare workers (engine
	// Command.Spare) with events of sources past their quotas left; the
	// next lease waits until more workers than that are free, or until new
	// events may be due (a wake, a kick, a tick).
	spareStop := 0
	send := func(j job) { jobs <- j }
	var handed []job // takeHanded's spare
	// lease: the lease in flight's result, nil while none is. wokeDuring:
	// events may have come due since it was proposed (a wake, a kick, a
	// tick, an ordered event's end), so that its result, short as it may
	// be, does not clear want.
	var lease chan leaseResult
	wokeDuring := false
	var afterLease []job // events claims leased for a rate-limited source during a lease
	var leaseWG sync.WaitGroup
	defer leaseWG.Wait() // ctx has ended: the lease returns soon
	for {
		now := time.Now()
		// Events leased by claims, each with its worker.
		handed = f.slots.takeHanded(handed)
		for _, j := range handed { // counted in bySource by DeliverLeased
			j.leased = now // what waited so far was the commit, not a rate limit
			if lease != nil && f.lim.limited(j.ev.Source, now) {
				// The lease in flight was sized to the slots its source
				// had left (limiter.room): its events book them first.
				afterLease = append(afterLease, j)
				continue
			}
			f.place(j, now, &park, send)
		}
		clear(handed) // placed: the slice must not keep their payloads alive
		if lease == nil && len(afterLease) > 0 {
			for _, j := range afterLease {
				j.leased = now // it waited for the lease's commit, not a rate limit
				f.place(j, now, &park, send)
			}
			clear(afterLease)
			afterLease = afterLease[:0]
		}
		if f.slots.setParked(len(park)) && len(park) > 0 {
			// A drain: hand the parked events back (Drain waits for it).
			f.handBackParked(ctx, &park, now)
			f.slots.setParked(0)
		}
		// Parked events whose slot came, while there are free workers.
		for len(park) > 0 && !park[0].start.After(now) && f.slots.take(1) == 1 {
			p := park.pop()
			if f.opts.Paused != nil && f.opts.Paused(p.ev.Source) {
				j := p.job
				j.handBack, j.reason = f.opts.PollInterval, ReasonPaused
				send(j) // back to pending, to be leased after the resume
				continue
			}
			if p.rebook || f.lim.held(p.ev.Source, p.start) {
				// Its source's rate changed (a reload), or a hold came after
				// the slot was booked: book again.
				f.place(p.job, now, &park, send)
				continue
			}
			if f.opts.RateLimited != nil {
				f.opts.RateLimited(p.ev.Source, now.Sub(p.leased))
			}
			send(p.job)
		}

		full, fullUntil := f.lim.full(now)
		full = f.skipOrphans(full)
		if lease == nil && want && len(park) < parkCap && ctx.Err() == nil && !(spareStop > 0 && f.slots.free() <= spareStop) {
			spareStop = 0
			if free := f.slots.takeForLease(); free > 0 { // none while draining
				quotas, share := f.slots.quotas(full)
				if f.opts.LimitedSources != nil {
					f.lim.ensure(f.opts.LimitedSources(), f.opts.Targets, now)
				}
				quotas = f.lim.room(quotas, now, free, f.slots.waitingNow())
				spare := min(f.slots.spare(now, f.manySources()), free)
				var leases []engine.LeaseLength
				if f.opts.Leases != nil {
					leases = f.opts.Leases()
				}
				// The lease commits on its own goroutine: meanwhile the
				// events claims leased are placed at once, as are the
				// workers that finish, instead of waiting for the lease's
				// commit (docs/performance.md, "The dispatcher does not
				// wait for its lease").
				done := make(chan leaseResult, 1)
				lease, wokeDuring = done, false
				leaseWG.Go(func() {
					evs, waiting, err := f.opts.Store.LeaseFrom(ctx, free, f.opts.DefaultLease, leases, quotas, share, spare)
					done <- leaseResult{evs: evs, waiting: waiting, err: err, free: free, spare: spare, full: full}
				})
			}
		}

		var timerC <-chan time.Time
		if at := f.wakeAt(park, fullUntil); !at.IsZero() {
			timer.Reset(max(time.Until(at), 0))
			timerC = timer.C
		}

		select {
		case <-ctx.Done():
			return
		case r := <-lease:
			lease = nil
			f.slots.setWaiting(r.waiting)
			switch {
			case ctx.Err() != nil:
				// Leadership ended mid-lease: anything leased stays
				// processing until its lease expires.
				return
			case r.err != nil:
				f.slots.leased(r.free, 0)
				f.log.Warn("lease failed", "err", r.err)
				want = wokeDuring // else try again on the next tick or wake
			default:
				evs := r.evs
				if len(evs) > r.free {
					f.log.Error("store leased more events than asked; extras left to expire",
						"asked", r.free, "got", len(evs))
					evs = evs[:r.free]
				}
				f.slots.leased(r.free, len(evs))
				now := time.Now()
				for _, ev := range evs {
					f.slots.enter(ev.Source)
					f.place(job{ev: ev, leased: now}, now, &park, send)
				}
				for _, j := range afterLease {
					j.leased = now // it waited for the lease's commit, not a rate limit
					f.place(j, now, &park, send)
				}
				clear(afterLease)
				afterLease = afterLease[:0]
				want = len(evs) == r.free
				if !want && r.spare > 0 && waitingBeyond(r.waiting, r.full) {
					// The spare workers stopped it: lease again once
					// more workers than them are free.
					want, spareStop = true, r.spare
				}
				if wokeDuring {
					// New events may have come due while it committed.
					want, spareStop = true, 0
				}
				// Some may have parked: the loop leases again at once for
				// the workers still free.
			}
		case <-f.opts.Wake:
			want, spareStop, wokeDuring = true, 0, true
		case <-kick:
			want, spareStop, wokeDuring = true, 0, true
		case <-tick.C:
			// Saturated: every worker busy but the spare ones, with events
			// waiting.
			size(want && f.slots.freeBesideLease() <= f.slots.spare(time.Now(), f.manySources()))
			want, spareStop, wokeDuring = true, 0, true
			f.rebookChangedRates(&park, time.Now())
		case <-timerC:
			// A parked event's slot came, or a full source has room again:
			// its due events may be leased now.
			if !fullUntil.IsZero() {
				want, spareStop, wokeDuring = true, 0, true
			}
		case <-f.slots.changed: // a claim leased an event, or gave its worker back
		case ordered := <-freed:
			done, more := collectFreed(freed, ordered)
			want = want || more
			wokeDuring = wokeDuring || more
			f.slots.put(done)
		}
		if f.slots.setParked(len(park)) && len(park) > 0 {
			timer.Stop()
			continue // a drain began: hand the parked events back first
		}
		timer.Stop() // timers are unbuffered (Go 1.23+): nothing stale is left
	}
}

// leaseResult is what a lease the dispatcher proposed returned, with the
// workers it took (free), the spare workers it kept, and the sources it
// skipped as full.
type leaseResult struct {
	evs         []engine.Event
	waiting     []string
	err         error
	free, spare int
	full        []string
}

// skipOrphans adds to full (sorted) the sources whose events were leased
// while they had no target and still have none, so that leases skip them
// (a hard quota of 0) and their events stay pending; a source configured
// again is dropped from the set, and its events are leased as before.
func (f *Forwarder) skipOrphans(full []string) []string {
	if len(f.orphans) == 0 {
		return full
	}
	for src := range f.orphans {
		if _, ok := f.opts.Targets(src); ok {
			delete(f.orphans, src)
			f.log.Info("a source is configured again; its held events are delivered", "source", src)
			continue
		}
		if _, found := slices.BinarySearch(full, src); !found {
			full = append(full, src)
		}
	}
	slices.Sort(full)
	return full
}

// waitingBeyond reports whether waiting (sorted) names a source that full
// (sorted) does not: a source whose due events a lease left for want of room.
func waitingBeyond(waiting, full []string) bool {
	for _, w := range waiting {
		if _, skipped := slices.BinarySearch(full, w); !skipped {
			return true
		}
	}
	return false
}

// wakeAt is when the dispatcher must look again without a wake: the next
// parked event's slot, while a worker is free for it, or when the first full
// source has room again (fullUntil; zero: none is full), whichever is first;
// zero for neither.
func (f *Forwarder) wakeAt(park parkQueue, fullUntil time.Time) time.Time {
	var at time.Time
	if len(park) > 0 && f.slots.free() > 0 {
		at = park[0].start
	}
	if !fullUntil.IsZero() && (at.IsZero() || fullUntil.Before(at)) {
		at = fullUntil
	}
	return at
}

// collectFreed counts the worker that just finished and every other that
// finished meanwhile, so one lease fills them all. want reports whether any
// of them delivered an ordered event (its object's next may now be due).
func collectFreed(freed <-chan bool, ordered bool) (done int, want bool) {
	done, want = 1, ordered
	for {
		select {
		case ordered := <-freed:
			done++
			want = want || ordered
		default:
			return done, want
		}
	}
}

// place sends a leased event to a worker when its source lets it start now,
// parks it until its booked slot when that comes before its lease's end minus
// its timeout, and otherwise sends it to a worker to be handed back. The
// caller took a worker for it (f.slots); a parked event gives it back.
func (f *Forwarder) place(j job, now time.Time, park *parkQueue, send func(job)) {
	tgt, ok := f.opts.Targets(j.ev.Source)
	if !ok {
		// Its source was removed from the config (or renamed): hold its
		// events, as a pause would, until it is configured again. Failing
		// them would dead-letter a backlog within minutes of a reload.
		if !f.orphans[j.ev.Source] {
			f.orphans[j.ev.Source] = true
			f.log.Warn("events of a source that is not configured are held until it is", "source", j.ev.Source)
		}
		j.handBack, j.reason = f.opts.PollInterval, ReasonNoTarget
		send(j)
		return
	}
	tgt = tgt.withDefaults()
	lease := time.Unix(0, j.ev.LeaseUntil)
	if j.ev.LeaseUntil == 0 {
		lease = j.leased.Add(f.opts.DefaultLease)
	}
	deadline := lease.Add(-tgt.Timeout)
	start, gen, ok := f.lim.book(j.ev.Source, tgt, now, deadline)
	switch {
	case !ok:
		j.handBack = max(start.Sub(now), time.Millisecond)
		send(j)
	case start.After(now):
		park.push(parked{job: j, start: start, gen: gen})
		f.slots.parkOne() // a parked event holds no worker
	default:
		if f.opts.RateLimited != nil && now.After(j.leased) {
			f.opts.RateLimited(j.ev.Source, now.Sub(j.leased))
		}
		send(j)
	}
}

// sweep reclaims expired leases and expires ended retention buckets until ctx
// ends. A reclaim that moved events kicks the dispatcher.
func (f *Forwarder) sweep(ctx context.Context, kick chan<- struct{}) {
	reclaim := time.NewTicker(f.opts.SweepInterval)
	defer reclaim.Stop()
	expire := time.NewTicker(f.opts.ExpireInterval)
	defer expire.Stop()
	var payloads <-chan time.Time // nil: expire drops them often enough
	if f.opts.PayloadInterval < f.opts.ExpireInterval {
		t := time.NewTicker(f.opts.PayloadInterval)
		defer t.Stop()
		payloads = t.C
	}
	var hz horizon
	for {
		select {
		case <-ctx.Done():
			return
		case <-reclaim.C:
			if f.direct != nil {
				f.direct.closeStale(time.Now())
			}
			if f.endingLeases.Load() > 0 {
				continue // the next tick reclaims what this one would have
			}
			n, err := f.opts.Store.Reclaim(ctx, hz.next(f.limits().Horizon, time.Now()))
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				f.log.Warn("reclaim failed", "err", err)
			case n > 0:
				f.log.Info("reclaimed expired leases", "events", n)
				if f.opts.LeasesReclaimed != nil {
					f.opts.LeasesReclaimed(n)
				}
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		case <-expire.C:
			if !f.expire(ctx) {
				return
			}
		case <-payloads:
			if !f.dropPayloads(ctx) {
				return
			}
		}
	}
}

// horizon is the schedule horizon a reclaim sends. A reload that lowers
// Limits.Horizon (a shorter lease or backoff_max) must not cut the leases
// granted under the longer one while their workers still deliver them: the
// higher horizon stays in force until it has passed since it last was.
type horizon struct {
	d     time.Duration
	until time.Time
}

// next returns the horizon to send now, cur being the configured one
// (0: no bound).
func (h *horizon) next(cur time.Duration, now time.Time) time.Duration {
	if cur == 0 || h.d == 0 || cur >= h.d || !now.Before(h.until) {
		h.d, h.until = cur, now.Add(cur)
	}
	return h.d
}

func (f *Forwarder) limits() Limits {
	if f.opts.Limits == nil {
		return Limits{}
	}
	return f.opts.Limits()
}

// expire ends the retention buckets that ended, logging and reporting each
// dead letter deleted, then drops the payloads that are due. It reports
// false when ctx ended.
func (f *Forwarder) expire(ctx context.Context) bool {
	n, dead, err := f.opts.Store.Expire(ctx)
	// The dead letters deleted by the commands that committed are told
	// first, even when leadership ended part way: nobody else will.
	for _, ev := range dead {
		f.log.Warn("dead letter expired", "key", ev.Key, "source", ev.Source,
			"dead_since", time.Unix(0, ev.UpdatedAt).UTC(), "last_error", ev.LastError)
		if f.opts.DeadExpired != nil {
			f.opts.DeadExpired(ev)
		}
	}
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		f.log.Warn("expire failed", "err", err)
	case n > 0:
		f.log.Info("expired retention buckets", "events", n)
	}
	return f.dropPayloads(ctx)
}

// dropPayloads drops the payloads that are due, a batch at a time. It
// reports false when ctx ended.
func (f *Forwarder) dropPayloads(ctx context.Context) bool {
	age, dropped := f.limits().PayloadAge, 0
	for {
		n, err := f.opts.Store.DropPayloads(ctx, age, DropBatch)
		dropped += n
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil:
			f.log.Warn("dropping payloads failed", "err", err)
		case n == DropBatch:
			continue // more are due
		}
		break
	}
	if dropped > 0 {
		// Debug, and counted in the metrics: under load this runs every second.
		f.log.Debug("dropped payloads after payload_retention", "events", dropped)
		if f.opts.PayloadsDropped != nil {
			f.opts.PayloadsDropped(dropped)
		}
	}
	return true
}

// DropBatch is the most payloads one DropPayloads command drops; the sweeper
// sends more while a command drops that many. Each payload dropped rewrites
// its event's record, so a command's apply delays the claims of its entry:
// 1,000 a command put the claim p99.9 of a busy node at 36-38 ms, 250 at
// 29-32 ms (docs/performance.md, "Payloads dropped every second").
const DropBatch = 250

// drainHandBacks is how many parked events a drain hands back at once.
const drainHandBacks = 64

// handBackParked hands every parked event back to pending, soonest slot
// first, many at a time: each hand-back waits for its commit, and one at a
// time a thousand parked events (a throttled source's budget) outlast the
// drain's time, leaving the rest processing with an attempt spent. At once,
// their commands share log entries.
func (f *Forwarder) handBackParked(ctx context.Context, park *parkQueue, now time.Time) {
	sem := make(chan struct{}, drainHandBacks)
	var wg sync.WaitGroup
	var sources []string
	for len(*park) > 0 && ctx.Err() == nil {
		p := park.pop()
		sources = append(sources, p.ev.Source)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f.handBack(ctx, p.ev, max(p.start.Sub(now), time.Millisecond), ReasonStopping)
		})
	}
	wg.Wait()
	for _, src := range sources {
		f.slots.leave(src, now)
	}
	*park = (*park)[:0]
}
