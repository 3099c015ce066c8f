package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestRelayedErrorsNameTheirKindOnce: a follower reads the leader's refusal
// as the same kind of error (a caller branches on it), and its text names
// the kind once, however the leader's own message ended.
func TestRelayedErrorsNameTheirKindOnce(t *testing.T) {
	for _, c := range []struct {
		leader error
		want   error
	}{
		{translateApplyErr(raft.ErrLeadershipLost), ErrIndeterminate},
		{translateApplyErr(raft.ErrNotLeader), ErrNoLeader},
		{fmt.Errorf("propose: %w", ErrNotLeader), ErrNoLeader},
		{fmt.Errorf("wait for commit: context deadline exceeded: %w", ErrIndeterminate), ErrIndeterminate},
	} {
		got := statusErr(errStatus(c.leader), []byte(c.leader.Error()))
		if !errors.Is(got, c.want) {
			t.Errorf("%v relayed as %v, want %v", c.leader, got, c.want)
		}
		for _, kind := range []error{ErrIndeterminate, ErrNoLeader, ErrNotLeader} {
			if n := strings.Count(got.Error(), kind.Error()); n > 1 {
				t.Errorf("%q names %q %d times", got, kind, n)
			}
		}
	}
}

// TestTransferInProgressIsNotCommitted: a leader handing over refuses new
// entries before appending them, so a claim refused that way is known not
// committed (retry at once), not "outcome unknown".
func TestTransferInProgressIsNotCommitted(t *testing.T) {
	err := translateApplyErr(raft.ErrLeadershipTransferInProgress)
	if !errors.Is(err, ErrNoLeader) || errors.Is(err, ErrIndeterminate) {
		t.Fatalf("%v: want ErrNoLeader, not ErrIndeterminate", err)
	}
}
