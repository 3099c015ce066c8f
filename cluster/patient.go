package cluster

import (
	"errors"
	"io"
	"sync"
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
// not answer: it tries again every redialEvery, for up to patientFor, and
// fails only then. raft then counts one failure per patientFor of outage
// instead of one per refusal, and the first try after the peer is back
// succeeds. Nothing was sent when a connection was refused, so sending the
// same request again is what raft itself would do next. Only appends (and
// heartbeats, which are appends) and snapshots wait: votes and a leadership
// transfer's TimeoutNow still fail at once, as raft expects of an
// unreachable peer (a transfer blocks the leader's applies until its
// TimeoutNow returns).
type patientTransport struct {
	*raft.NetworkTransport
	wait time.Duration

	halt     chan struct{}
	haltOnce sync.Once
	// onRefused, in tests, sees every refusal that will be tried again.
	onRefused func()
}

const (
	redialEvery = 50 * time.Millisecond
	patientFor  = 30 * time.Second
)

func newPatientTransport(t *raft.NetworkTransport, wait time.Duration) *patientTransport {
	return &patientTransport{NetworkTransport: t, wait: wait, halt: make(chan struct{})}
}

// stop ends the waits: raft's shutdown waits for the goroutines in them.
func (p *patientTransport) stop() {
	p.haltOnce.Do(func() { close(p.halt) })
}

// AppendEntries sends an append, again while the peer refuses connections.
func (p *patientTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return p.patiently(func() error {
		return p.NetworkTransport.AppendEntries(id, target, args, resp)
	})
}

// InstallSnapshot sends a snapshot, again while the peer refuses
// connections: a follower down long enough for the leader's log to move
// past it is sent the snapshot instead of entries, on the same count of
// failures. A refused dial read nothing from data.
func (p *patientTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return p.patiently(func() error {
		return p.NetworkTransport.InstallSnapshot(id, target, args, resp, data)
	})
}

// patiently calls send until it does not fail with a refused connection, or
// for p.wait.
func (p *patientTransport) patiently(send func() error) error {
	var retry *time.Timer
	deadline := time.Now().Add(p.wait)
	for {
		err := send()
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Until(deadline) < redialEvery {
			return err
		}
		if p.onRefused != nil {
			p.onRefused()
		}
		if retry == nil {
			retry = time.NewTimer(redialEvery)
			defer retry.Stop()
		} else {
			retry.Reset(redialEvery)
		}
		select {
		case <-retry.C:
		case <-p.halt:
			return err
		}
	}
}
