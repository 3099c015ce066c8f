package forward

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"oncehook/engine"
)

// Workers are shared by two sources of events: the dispatcher's leases, and
// claims that carry their lease (the cluster's proposer reserves a worker
// when it packs a claim, and the claim's entry leases the event for it; see
// docs/architecture.md, "Delivery"). slots counts the workers taken by
// either.
//
// A reservation is not a worker's request to a handler: it stands for a
// claim on its way through Raft, for the commit's time. So reservations are
// counted apart (reserved): a claim may reserve a worker that is free, and,
// while no worker is free but some are not taken by an event already handed
// over, one of up to reserveCap more (small bodies, one active source). Had
// they counted as workers, a leader whose commits took longer than its
// deliveries (tens of milliseconds against one, and hundreds while the disk
// is slow) ran out of workers with most of them waiting for commits:
// claims then left their events pending, and the leases that followed took
// a log entry each and fell behind by seconds, while the handler was idle
// (docs/performance.md, "Reservations are not workers").
//
// A lease in flight takes every free worker, but claims may still reserve:
// a lease usually finds nothing due (the claims lease their own events), and
// refusing claims while it commits would leave them pending, wake the
// dispatcher, and start the next lease: one lease entry per claim again. So
// busy may exceed n, by the lease's workers and by reservations handed over
// (at most reserveFactor times n), never beyond maxSent times n: the jobs
// and freed channels hold that many for the largest pool, and an event
// beyond n waits in the jobs channel for the next free worker. Handlers
// never see more than n requests at once: there are n worker goroutines.
type slots struct {
	mu      sync.Mutex
	n       int // workers: the pool's size (poolsize.go)
	busy    int // delivering, waiting for a worker, or taken for a lease in flight
	leasing int // of busy: taken by the lease in flight
	// reserved: claims on their way through Raft with a worker reserved,
	// not yet handed over (DeliverLeased) nor given back (ReleaseSlot).
	reserved int
	// avgBody: the average body of the attempts of the last tick that
	// started any (0: none yet), which bounds reservations (reserveCap).
	avgBody int64
	// pace: deliveries per second over the last tick that attempted or
	// delivered any (0: none measured, or every attempt failed),
	// which bounds the reservations beyond the free workers (beyondFits).
	pace    float64
	gen     uint64 // the Run the counts belong to; 0: not running
	handed  []job  // leased by claims, not yet placed by the dispatcher
	changed chan struct{}
	// draining: Drain was called in this Run; no claim reserves a worker and
	// the dispatcher leases nothing. idle is closed, while draining, once
	// busy, reserved, recording and parked are all zero (checkIdle,
	// drain.go).
	draining bool
	idle     chan struct{}
	// parked: events the dispatcher holds for their rate-limit slot, on
	// no worker. A drain waits for them too: the dispatcher hands them
	// back (setParked).
	parked int
	// recording: outcomes whose handler answered, committing while their
	// worker delivers another event (forward.go, Run).
	recording int
	// bySource counts each source's events from their lease (or their
	// hand-over by a claim) until their worker is done with them, parked
	// ones included: what the source holds of the pool (quotas).
	bySource map[string]int
	// waiting: the sources the last lease left due events of (engine
	// Result.Waiting). A claim of a source that holds its share carries no
	// lease while another source is waiting.
	waiting []string
	// recent: when each source's event last left its worker. A source is
	// active while it holds workers or for activeFor after; while two are,
	// a source past its share leaves spare workers free (spare).
	recent map[string]time.Time
}

// activeFor is how long a source counts as active after its last delivery.
const activeFor = 10 * time.Second

// spareOf is how many workers a source past its share leaves free while
// another source is active: an eighth of the pool, so that the other
// source's next events find a worker at once instead of waiting for one of
// a slow handler's requests to end.
func spareOf(n int) int { return max(1, n/8) }

// shareOf is how many workers one source may hold while another source has
// events due: half the pool. A lease gives a source more only when no other
// source has any due (engine Command.Quotas), and a claim of a source that
// holds its share does not carry its lease.
func shareOf(n int) int { return max(1, n/2) }

// enter counts an event of source as holding a worker.
func (s *slots) enter(source string) {
	s.mu.Lock()
	s.bySource[source]++
	s.mu.Unlock()
}

// leave counts an event of source as done with its worker.
func (s *slots) leave(source string, now time.Time) {
	s.mu.Lock()
	if s.bySource[source]--; s.bySource[source] <= 0 {
		delete(s.bySource, source)
	}
	s.recent[source] = now
	s.mu.Unlock()
}

// activeLocked counts the active sources other than but (all with "").
func (s *slots) activeLocked(but string, now time.Time) int {
	n := 0
	for src := range s.bySource {
		if src != but {
			n++
		}
	}
	for src, at := range s.recent {
		switch {
		case now.Sub(at) > activeFor:
			delete(s.recent, src)
		case src != but && s.bySource[src] == 0:
			n++
		}
	}
	return n
}

// spare reports how many workers a lease keeps from the sources past their
// quotas: spareOf(n) while two sources are active or many are configured
// (Options.Sources), else none.
func (s *slots) spare(now time.Time, many bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !many && s.activeLocked("", now) < 2 {
		return 0
	}
	return spareOf(s.n)
}

// manySources reports whether more than one source is configured
// (Options.Sources); false when the Forwarder was not told.
func (f *Forwarder) manySources() bool {
	return f.opts.Sources != nil && f.opts.Sources() > 1
}

// InFlight returns, for each source, how many of its events hold a worker
// (leased and not yet answered, parked ones included); nil while the
// Forwarder is not running.
func (f *Forwarder) InFlight() map[string]int {
	s := f.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return nil
	}
	return maps.Clone(s.bySource)
}

// setWaiting records the sources the last lease left due events of.
func (s *slots) setWaiting(sources []string) {
	s.mu.Lock()
	s.waiting = sources
	s.mu.Unlock()
}

// waitingNow returns the sources the last lease left due events of. The
// slice is never written after setWaiting stored it: it may be read
// without the lock.
func (s *slots) waitingNow() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// othersWaitLocked reports whether a source other than source has due
// events the last lease left.
func (s *slots) othersWaitLocked(source string) bool {
	for _, w := range s.waiting {
		if w != source {
			return true
		}
	}
	return false
}

// quotas returns a lease's quotas: every source that holds workers may take
// what is left of its share first, and skip (sorted) none at all; the share,
// for the other sources.
func (s *slots) quotas(skip []string) ([]engine.Quota, int) {
	s.mu.Lock()
	share := shareOf(s.n)
	qs := make([]engine.Quota, 0, len(s.bySource)+len(skip))
	for src, k := range s.bySource {
		if _, skipped := slices.BinarySearch(skip, src); !skipped {
			qs = append(qs, engine.Quota{Source: src, Max: max(0, share-k)})
		}
	}
	s.mu.Unlock()
	for _, src := range skip {
		qs = append(qs, engine.Quota{Source: src, Hard: true})
	}
	slices.SortFunc(qs, func(a, b engine.Quota) int { return strings.Compare(a.Source, b.Source) })
	if len(qs) > engine.MaxQuotas {
		// More sources hold workers than a lease names: the oldest due
		// events of the rest go first, as without quotas.
		qs = qs[:engine.MaxQuotas]
	}
	return qs, share
}

// reserveFactor bounds the reservations of claims in flight to reserveFactor
// times the workers: at 6,500 events/s a commit slowed to 200 ms has 1,300
// claims in flight.
const reserveFactor = 4

// maxSent bounds the events sent to the workers and not yet freed, in pools:
// the pool's own, a lease in flight's, and what reservations hand over.
const maxSent = reserveFactor + 2

// reserveCap is how many reservations may be in flight at once when no
// worker is free for the next one (a reservation of a free worker, the rule
// before reservations were counted apart, is always allowed): up to
// reserveFactor times the pool, while the bodies are small enough that the
// events they hand over, with the pool's own and a lease's, stay within
// poolBytes (Options.PoolBytes). None before
// any body was seen (avgBody 0), nor for bodies so large that the pool and a
// lease fill poolBytes by themselves.
func reserveCap(n int, avgBody, poolBytes int64) int {
	if avgBody <= 0 {
		return 0
	}
	return int(max(0, min(int64(reserveFactor*n), poolBytes/avgBody-2*int64(n))))
}

// setPace records the deliveries per second of the last tick.
func (s *slots) setPace(perSec float64) {
	s.mu.Lock()
	s.pace = perSec
	s.mu.Unlock()
}

// beyondFits reports whether one more event handed over beyond the free
// workers would still start well inside its lease: the events ahead of it
// (every reservation, at most) drain at the last tick's pace, and the wait
// may take half of what the lease leaves beside the request's timeout. A
// slow handler's queue would otherwise hold claim-leased events past their
// lease's usable part, to be handed back and leased again; a failing one
// (no deliveries) gets none beyond the free workers.
func beyondFits(reserved int, pace float64, lease, timeout time.Duration) bool {
	margin := (lease - timeout) / 2
	return margin > 0 && float64(reserved+1) <= pace*margin.Seconds()
}

// setAvgBody records the average body of the last tick's attempts.
func (s *slots) setAvgBody(b int64) {
	s.mu.Lock()
	s.avgBody = b
	s.mu.Unlock()
}

// recordFactor bounds the outcomes committing in the background to
// recordFactor times the workers: enough for a commit as long as several
// handler answers (8 × 256 outcomes: 6,500 events/s for 300 ms), and a
// bound on what waits in memory (an outcome holds no request body; a sync
// handler's answer stays: up to 64 KiB each, so at most 8 x 1,024 x 64 KiB
// = 512 MiB with a grown pool of sync sources whose handlers all answer that
// much while commits stall).
const recordFactor = 8

// startRecording counts one more outcome committing in the background, if
// fewer than recordFactor times the pool's size are.
func (s *slots) startRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recording >= recordFactor*s.n {
		return false
	}
	s.recording++
	return true
}

// endRecording counts an outcome committed (or abandoned).
func (s *slots) endRecording() {
	s.mu.Lock()
	s.recording--
	s.checkIdle()
	s.mu.Unlock()
}

func newSlots() *slots {
	return &slots{changed: make(chan struct{}, 1), bySource: make(map[string]int), recent: make(map[string]time.Time)}
}

// open starts the accounting of a Run with n workers.
func (s *slots) open(n int) {
	s.mu.Lock()
	s.n, s.busy, s.leasing, s.reserved, s.handed, s.parked, s.avgBody, s.pace = n, 0, 0, 0, nil, 0, 0, 0
	s.draining, s.idle = false, nil
	clear(s.bySource)
	clear(s.recent)
	s.waiting = nil
	s.gen++
	if s.gen == 0 {
		s.gen++
	}
	s.mu.Unlock()
}

// close ends the Run: reservations and hand-overs of it are ignored from now
// (their events stay processing until their leases end and are reclaimed).
func (s *slots) close() {
	s.mu.Lock()
	s.gen++
	if s.gen == 0 {
		s.gen++
	}
	s.n, s.busy, s.leasing, s.reserved, s.handed, s.parked = 0, 0, 0, 0, nil, 0
	s.draining = false
	clear(s.bySource)
	clear(s.recent)
	s.waiting = nil
	s.wakeIdle()
	s.idle = nil
	s.mu.Unlock()
}

// size reports the pool's size (0 when not running).
func (s *slots) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// resize sets the pool's size of a running Run. Workers busy beyond a smaller
// size finish their events; no new one starts until busy is under it.
func (s *slots) resize(n int) {
	s.mu.Lock()
	if s.n > 0 {
		s.n = n
	}
	s.mu.Unlock()
	s.signal()
}

func (s *slots) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// take takes up to max free workers and says how many.
func (s *slots) take(max int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(max, s.n-s.busy)
	if k <= 0 || s.draining {
		return 0 // a parked event waits for its lease to end, not for a drain
	}
	s.busy += k
	return k
}

// setParked records how many events the dispatcher holds parked, and
// reports whether a drain waits (the dispatcher then hands them back).
func (s *slots) setParked(n int) (draining bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parked = n
	s.checkIdle()
	return s.draining
}

// takeForLease takes every free worker for a lease and says how many.
func (s *slots) takeForLease() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.n - s.busy
	if k <= 0 || s.draining {
		return 0
	}
	s.busy += k
	s.leasing = k
	return k
}

// leased ends the lease that took k workers and leased got events.
func (s *slots) leased(k, got int) {
	s.mu.Lock()
	s.busy -= k - got
	s.leasing = 0
	s.checkIdle()
	s.mu.Unlock()
}

// put gives back k workers.
func (s *slots) put(k int) {
	if k <= 0 {
		return
	}
	s.mu.Lock()
	s.busy -= k
	s.checkIdle()
	s.mu.Unlock()
}

// freeBesideLease reports how many workers are free or taken by the lease
// in flight (which gives back what it does not lease).
func (s *slots) freeBesideLease() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n - s.busy + s.leasing
}

// free reports how many workers are free.
func (s *slots) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n - s.busy
}

// takeHanded returns the events claims leased since the last call; each
// holds a worker. spare, emptied, collects the next ones: the dispatcher
// hands back the slice of the call before, so that under load the two
// slices are reused rather than grown anew for every entry.
func (s *slots) takeHanded(spare []job) []job {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handed
	s.handed = spare[:0]
	return h
}

// ReserveSlot reserves a worker for a claim's lease (cluster.LeaseSlots):
// one that is free, or, while the bodies are small, one of reserveCap
// beyond them (a reservation stands for a commit, not a request; see slots).
// It fails for every claim while the Forwarder is not running or every
// worker is taken by an event (a lease in flight takes none from it), and
// for a claim of a source whose rate limit stops its leases, or that holds
// its share of the workers while another source's events wait, or while
// only the spare workers are free and another source is active or
// configured (Options.Sources): that claim's event waits for a lease, where
// the other sources' due events go first. Reservations beyond the free
// workers go only to a source without a rate limit while no other source is
// active or waiting, and while the handlers' pace would start them well
// inside their lease (beyondFits): their events may wait for a worker, and
// would wait ahead of the others' or past their slots.
func (f *Forwarder) ReserveSlot(source string) (leaseFor time.Duration, ticket uint64, ok, more bool) {
	many := f.manySources() // before the lock: it reads the configuration
	// The running config's lease of the source, as a lease command names
	// it (Options.Leases): the claim stores it and is leased for it,
	// whatever length the intake that took the delivery had.
	leaseFor = f.opts.DefaultLease
	timeout := DefaultTimeout
	if t, known := f.opts.Targets(source); known {
		if t.Lease > 0 {
			leaseFor = t.Lease
		}
		if t.Timeout > 0 {
			timeout = t.Timeout
		}
	}
	s := f.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	taken := s.busy - s.leasing
	if s.n == 0 || s.draining || taken >= s.n {
		return 0, 0, false, false
	}
	beyond := taken+s.reserved >= s.n // no worker is free for it
	if beyond && s.reserved >= reserveCap(s.n, s.avgBody, f.opts.PoolBytes) {
		return 0, 0, false, false
	}
	if beyond && !beyondFits(s.reserved, s.pace, leaseFor, timeout) {
		return 0, 0, false, true // a source with a longer lease may fit
	}
	now := time.Now()
	if beyond && (s.othersWaitLocked(source) || s.activeLocked(source, now) > 0 || f.lim.limited(source, now)) {
		return 0, 0, false, true
	}
	if k := s.bySource[source]; k >= shareOf(s.n) && (s.othersWaitLocked(source) ||
		taken+s.reserved >= s.n-spareOf(s.n) && (many || s.activeLocked(source, now) > 0)) {
		return 0, 0, false, true
	}
	if f.lim.throttled(source, now) {
		return 0, 0, false, true
	}
	s.reserved++
	return leaseFor, s.gen, true, true
}

// DeliverLeased gives the worker reserved under ticket the event its claim
// leased (cluster.LeaseSlots). From a Run that ended, the event is dropped:
// its lease ends and the sweeper reclaims it.
func (f *Forwarder) DeliverLeased(ticket uint64, ev engine.Event) {
	s := f.slots
	s.mu.Lock()
	if ticket != s.gen || s.n == 0 {
		s.mu.Unlock()
		return
	}
	s.reserved--
	s.busy++
	s.handed = append(s.handed, job{ev: ev, leased: time.Now()})
	s.bySource[ev.Source]++
	s.mu.Unlock()
	s.signal()
}

// ReleaseSlot gives back the worker reserved under ticket (cluster.LeaseSlots).
func (f *Forwarder) ReleaseSlot(ticket uint64) {
	s := f.slots
	s.mu.Lock()
	if ticket != s.gen || s.n == 0 {
		s.mu.Unlock()
		return
	}
	s.reserved--
	s.checkIdle()
	s.mu.Unlock()
	s.signal()
}

// parkOne moves the worker of an event that was just parked to the parked
// count in one step, so that a drain never sees it in neither.
func (s *slots) parkOne() {
	s.mu.Lock()
	s.busy--
	s.parked++
	s.checkIdle()
	s.mu.Unlock()
}
