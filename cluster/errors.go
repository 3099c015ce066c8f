package cluster

import (
	"errors"
	"fmt"
)

// Outcomes callers branch on.
var (
	// ErrNotLeader: a leader-only operation ran on a node that is not the leader.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader: there is no known leader (election in progress or no quorum);
	// the intake answers 503 with Retry-After.
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrIndeterminate: the command may or may not have been committed (leadership
	// lost or a timeout after it entered the log). Never acknowledge it; a retry
	// of the same claim converges on the committed state either way.
	ErrIndeterminate = errors.New("cluster: outcome unknown")
	// ErrRemoved: this node learnt from the other members that it is no
	// longer in the cluster's configuration; it commits nothing. It wraps
	// ErrNoLeader, which callers already answer as not committed.
	ErrRemoved = fmt.Errorf("cluster: this node is not a member of the cluster (removed): %w", ErrNoLeader)
	// ErrShutdown: the node is closing.
	ErrShutdown = errors.New("cluster: shutting down")
	// ErrUnauthorized: a peer presented a wrong cluster token or certificate.
	ErrUnauthorized = errors.New("cluster: peer not authorised")
	// ErrBadMember: a join names an id or address no member could have, or
	// a node that does not answer there as that id: adding it would count
	// a voter that can never vote toward the quorum.
	ErrBadMember = errors.New("cluster: not a node that can join")
	// ErrMemberSlow: the node to add took the connection to its cluster
	// port but did not answer in time (a node starting on a busy host, most
	// often the one asking to be added): nothing changed, ask again.
	ErrMemberSlow = errors.New("cluster: the node to add did not answer in time")
	// ErrStandalone: a node running without a cluster port was asked to
	// add a member; none could ever reach it.
	ErrStandalone = errors.New("cluster: this node runs without [cluster]: it has no cluster port for members to reach")
	// ErrNoQuorumLeft: removing the member would leave a configuration
	// whose majority does not answer now; the cluster would commit nothing
	// until it did.
	ErrNoQuorumLeft = errors.New("cluster: the voters left would be no quorum")
)

var (
	// errFragment: a fragment that does not continue the entry joined so
	// far (fsm.joinFragment). Its entry is applied nowhere.
	errFragment = errors.New("cluster: fragment without the ones before it")
	// errJoining: raft asked for a snapshot between an entry's fragments.
	errJoining = errors.New("cluster: an entry's fragments are being joined")
)
