package forward

import (
	"sync"
	"time"

	"oncehook/engine"
)

// Workers are shared by two sources of events: the dispatcher's leases, and
// claims that carry their lease (the cluster's proposer reserves a free worker
// when it packs a claim, and the claim's entry leases the event for it; see
// docs/architecture.md, "Delivery"). slots counts the workers taken by
// either.
//
// A lease in flight takes every free worker, but claims may still reserve
// the workers it takes: a lease usually finds nothing due (the claims lease
// their own events), and refusing claims while it commits would leave them
// pending, wake the dispatcher, and start the next lease: one lease entry per
// claim again. So busy may exceed n by what claims reserved while a lease was
// in flight, never by more than n: the jobs and freed channels hold twice the
// largest pool, and an event beyond n waits in the jobs channel for the next
// free worker.
type slots struct {
	mu      sync.Mutex
	n       int    // workers: the pool's size (poolsize.go)
	busy    int    // delivering, reserved by a claim, or taken for a lease in flight
	leasing int    // of busy: taken by the lease in flight
	gen     uint64 // the Run the counts belong to; 0: not running
	handed  []job  // leased by claims, not yet placed by the dispatcher
	changed chan struct{}
	// draining: Drain was called in this Run; no claim reserves a worker and
	// the dispatcher leases nothing. idle is closed when busy reaches zero
	// while draining (drain.go).
	draining bool
	idle     chan struct{}
	// recording: outcomes whose handler answered, committing while their
	// worker delivers another event (forward.go, Run).
	recording int
}

// recordFactor bounds the outcomes committing in the background to
// recordFactor times the workers: enough for a commit as long as several
// handler answers, and a bound on what waits in memory.
const recordFactor = 4

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

func newSlots() *slots { return &slots{changed: make(chan struct{}, 1)} }

// open starts the accounting of a Run with n workers.
func (s *slots) open(n int) {
	s.mu.Lock()
	s.n, s.busy, s.leasing, s.handed = n, 0, 0, nil
	s.draining, s.idle = false, nil
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
	s.n, s.busy, s.leasing, s.handed = 0, 0, 0, nil
	s.draining = false
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

// free reports how many workers are free.
func (s *slots) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n - s.busy
}

// takeHanded returns the events claims leased since the last call; each
// holds a worker.
func (s *slots) takeHanded() []job {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handed
	s.handed = nil
	return h
}

// ReserveSlot takes a free worker for a claim's lease (cluster.LeaseSlots).
// It fails while the Forwarder is not running or every worker is taken (a
// lease in flight takes none from it; see slots).
func (f *Forwarder) ReserveSlot() (time.Duration, uint64, bool) {
	s := f.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 || s.draining || s.busy-s.leasing >= s.n {
		return 0, 0, false
	}
	s.busy++
	return f.opts.DefaultLease, s.gen, true
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
	s.handed = append(s.handed, job{ev: ev, leased: time.Now()})
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
	s.busy--
	s.checkIdle()
	s.mu.Unlock()
	s.signal()
}
