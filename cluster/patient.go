package cluster

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// raft counts every failed append to a follower and waits before the next
// one, twice as long after each failure up to 10 s, and only a successful
// append resets the count. A follower whose process is down refuses the
// connection within microseconds, so ten seconds of outage were enough to
// reach the longest wait: a node restarted after that got its first entry
// up to ten seconds after its start, though heartbeats reached it at once
// (docs/operations.md, "Three nodes").
//
// patientTransport makes a refused append look like one to a host that does
// not answer: it tries again every redialEvery and fails only when waiting
// is no longer worth it, so that raft counts few failures however long the
// outage, and the first try after the peer is back succeeds. Nothing was
// sent when a connection was refused, so sending the same request again is
// what raft itself would do next. Only appends (and heartbeats, which are
// appends) and snapshots wait: votes and a leadership transfer's TimeoutNow
// still fail at once, as raft expects of an unreachable peer (a transfer
// blocks the leader's applies until its TimeoutNow returns).
//
// An append the follower refuses because it cannot store it is sent again
// the same way (errCannotStore).
//
// Every refused call waits for up to wait. Past that, it goes on only while
// the request still matters: this node still leads in the request's term
// and the peer is still in the configuration (raft stops replicating to a
// peer in those two cases, and its goroutine would otherwise be held
// sending a stale request), and for at most longWait. A bounded wait alone
// (30 s) let the failures add up again after a few minutes of outage: five
// minutes gave a 2.5 s wait, six and more the full 10 s.
type patientTransport struct {
	*raft.NetworkTransport
	wait, longWait time.Duration

	// raft is the node's raft once it exists; until then no call waits
	// past wait.
	raft atomic.Pointer[raft.Raft]

	halt     chan struct{}
	haltOnce sync.Once
	// reach, when set, hears each refused try of a peer and the success
	// after them: raft sees neither while the transport waits.
	reach *peerReach
	// onRefused, in tests, sees every refusal that will be tried again;
	// stillWanted, in tests, stands for the question asked of raft.
	onRefused   func()
	stillWanted func(id raft.ServerID, term uint64) bool

	// The followers this leader is resending to because they could not
	// store an append, since when: the follower's own readiness and metrics
	// say so, but an operator reads the leader's status and log first.
	storeMu    sync.Mutex
	notStoring map[raft.ServerID]time.Time
	// onStore, when set, hears the start (since zero) and the end of each
	// such run of resends; the node logs them.
	onStore func(id raft.ServerID, since time.Time, err error)
}

const (
	redialEvery  = 50 * time.Millisecond
	patientFor   = 30 * time.Second
	patientUntil = time.Hour
)

func newPatientTransport(t *raft.NetworkTransport, wait, longWait time.Duration) *patientTransport {
	return &patientTransport{NetworkTransport: t, wait: wait, longWait: longWait, halt: make(chan struct{})}
}

// stop ends the waits: raft's shutdown waits for the goroutines in them.
func (p *patientTransport) stop() {
	p.haltOnce.Do(func() { close(p.halt) })
}

// AppendEntries sends an append, again while the peer refuses connections
// or cannot store the entries.
func (p *patientTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	send := args
	err := p.patiently(id, args.Term, func() error {
		err := p.NetworkTransport.AppendEntries(id, target, send, resp)
		if err == nil && cannotStore(send, resp) {
			// Until the follower can store again, ask with the first
			// entry alone: a whole batch (64 entries of up to a MiB each)
			// every retry would load the leader's link and the follower.
			one := *args
			one.Entries = args.Entries[:1]
			send = &one
			return errCannotStore
		}
		if err == nil && send != args && resp.Success {
			// It stored the first entry: now the whole batch (the
			// follower skips the entry it holds).
			send = args
			err = p.NetworkTransport.AppendEntries(id, target, send, resp)
			if err == nil && cannotStore(send, resp) {
				return errCannotStore
			}
		}
		return err
	})
	if errors.Is(err, errCannotStore) {
		return nil // raft reads the refusal in resp, as the peer sent it
	}
	return err
}

// A follower that cannot store what the leader sends (a full disk) refuses
// the append, and raft counts that as it counts an unreachable peer: its
// wait before the next try doubles up to 10 s, so a follower whose disk was
// freed waited that long for its next entry (and stayed not ready) though
// it could store again at once. The patient transport sends the append's
// first entry again every storeRetryEvery instead, and the whole append once
// that is stored, on the same patience as a refused connection but only
// while this node leads in the request's term with the peer a member (a
// resend is delivered, unlike a refused dial): the first try after the disk
// is freed succeeds.
var errCannotStore = errors.New("the peer cannot store the entries")

const storeRetryEvery = 500 * time.Millisecond

// cannotStore reports whether resp refuses args because the follower could
// not read or write its log. A follower refuses an append of the leader's
// term for a log that does not match (it sets NoRetryBackoff, and raft
// goes back to find where the logs agree), or else because storing failed.
func cannotStore(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	return !resp.Success && !resp.NoRetryBackoff && resp.Term == args.Term && len(args.Entries) > 0
}

// InstallSnapshot sends a snapshot, again while the peer refuses
// connections: a follower down long enough for the leader's log to move
// past it is sent the snapshot instead of entries, on the same count of
// failures. A refused dial read nothing from data.
func (p *patientTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return p.patiently(id, args.Term, func() error {
		return p.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
	})
}

// patiently calls send until it does not fail with a refused connection, or
// waiting is over (see patientTransport).
func (p *patientTransport) patiently(id raft.ServerID, term uint64, send func() error) error {
	var retry *time.Timer
	start := time.Now()
	refused := false
	var storeSince time.Time
	for {
		err := send()
		if err == nil && refused && p.reach != nil {
			p.reach.observe(raft.ResumedHeartbeatObservation{PeerID: id}, time.Now())
		}
		every := redialEvery
		if errors.Is(err, errCannotStore) {
			every = storeRetryEvery
		}
		if !storeSince.IsZero() && !errors.Is(err, errCannotStore) {
			p.storing(id, storeSince, err)
			storeSince = time.Time{}
		}
		if err == nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errCannotStore)) || !p.goOn(id, term, time.Since(start)+every, errors.Is(err, errCannotStore)) {
			if !storeSince.IsZero() {
				p.storing(id, storeSince, err)
			}
			return err
		}
		if errors.Is(err, errCannotStore) && storeSince.IsZero() {
			storeSince = p.storing(id, time.Time{}, err)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused = true
			if p.reach != nil {
				p.reach.observe(raft.FailedHeartbeatObservation{PeerID: id}, time.Now())
			}
		}
		if p.onRefused != nil {
			p.onRefused()
		}
		if retry == nil {
			retry = time.NewTimer(every)
			defer retry.Stop()
		} else {
			retry.Reset(every)
		}
		select {
		case <-retry.C:
		case <-p.halt:
			if !storeSince.IsZero() {
				p.storing(id, storeSince, err)
			}
			return err
		}
	}
}

// storing records the start (since zero; it returns the start's time) or
// the end of the run of resends to a follower that cannot store begun at
// since; err is why it ended (nil: it stores again, errCannotStore: this
// leader stopped resending). A run of an earlier term ending late leaves a
// later run's record alone.
func (p *patientTransport) storing(id raft.ServerID, since time.Time, err error) time.Time {
	p.storeMu.Lock()
	if since.IsZero() {
		if p.notStoring == nil {
			p.notStoring = map[raft.ServerID]time.Time{}
		}
		p.notStoring[id] = time.Now()
		since = p.notStoring[id]
		p.storeMu.Unlock()
		if p.onStore != nil {
			p.onStore(id, time.Time{}, err)
		}
		return since
	}
	if at, ok := p.notStoring[id]; ok && at.Equal(since) {
		delete(p.notStoring, id)
	}
	p.storeMu.Unlock()
	if p.onStore != nil {
		p.onStore(id, since, err)
	}
	return since
}

// peersNotStoring lists the followers being resent an append they could
// not store, by id.
func (p *patientTransport) peersNotStoring() []string {
	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	ids := make([]string, 0, len(p.notStoring))
	for id := range p.notStoring {
		ids = append(ids, string(id))
	}
	slices.Sort(ids)
	return ids
}

// goOn says whether a call refused after waiting for waited tries again.
// A resend that reaches the peer (delivered: an append it could not store,
// unlike a refused dial) goes again only while this node leads in its term
// with the peer a member.
func (p *patientTransport) goOn(id raft.ServerID, term uint64, waited time.Duration, delivered bool) bool {
	switch {
	case waited <= p.wait && !delivered:
		return true
	case waited > p.longWait:
		return false
	case p.stillWanted != nil:
		return p.stillWanted(id, term)
	}
	return leadsWith(p.raft.Load(), id, term)
}

// leadsWith says whether r leads in term with id in its latest
// configuration, which raft keeps where any goroutine can read it.
func leadsWith(r *raft.Raft, id raft.ServerID, term uint64) bool {
	if r == nil || r.State() != raft.Leader || r.CurrentTerm() != term {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == id })
}
