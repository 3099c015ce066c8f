package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"oncehook/engine"
)

// TestProposalsAfterCloseAreAnswered: a proposal submitted once the
// proposer has closed gets ErrShutdown at once. Its send to the queue can
// win against the stop signal after close emptied the queue; it used to sit
// there unanswered until its caller's deadline, then read "outcome unknown,
// may still commit" for a command that never reached raft (and a caller
// without a deadline waited forever).
func TestProposalsAfterCloseAreAnswered(t *testing.T) {
	p := newProposer(nil, 1, 64, maxEntryBytes, 0, 0)
	p.close()
	for i := range 64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := p.submitOne(ctx, engine.Command{Op: engine.OpClaim, Key: "src:k"}, false, false)
		cancel()
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("submit %d after close: %v, want ErrShutdown", i, err)
		}
	}
	if n := len(p.queue); n != 0 {
		t.Fatalf("%d proposals left in the queue", n)
	}
}
