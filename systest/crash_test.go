package systest

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"oncehook/internal/testcluster"
)

// holdingHandler holds the first delivery it gets until its sender goes
// away (the node is killed with it on the wire) and answers every later one
// 200, recording the attempt and fencing token of each.
type holdingHandler struct {
	url     string
	arrived chan struct{} // closed when the first delivery arrived
	once    sync.Once
	mu      sync.Mutex
	seen    []delivered
}

type delivered struct {
	key     string
	attempt int
	token   uint64
}

func (h *holdingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	attempt, _ := strconv.Atoi(r.Header.Get("Oncehook-Attempt"))
	token, _ := strconv.ParseUint(r.Header.Get("Oncehook-Fencing-Token"), 10, 64)
	h.mu.Lock()
	h.seen = append(h.seen, delivered{r.Header.Get("Idempotency-Key"), attempt, token})
	first := len(h.seen) == 1
	h.mu.Unlock()
	if first {
		h.once.Do(func() { close(h.arrived) })
		<-r.Context().Done() // the node died with the request open
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *holdingHandler) deliveries() []delivered {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]delivered(nil), h.seen...)
}

func startHoldingHandler(t *testing.T) *holdingHandler {
	t.Helper()
	h := &holdingHandler{arrived: make(chan struct{})}
	h.url = serveHandler(t, h)
	return h
}

// TestKillMidDeliveryDeliversAfterRestart: a node SIGKILLed while its
// handler holds an acknowledged event (nothing recorded, no hand-back: a
// crash, not a stop) delivers the event again after its restart, once the
// lease of the attempt the crash cut off has ended, with a newer fencing
// token, and completes it.
func TestKillMidDeliveryDeliversAfterRestart(t *testing.T) {
	h := startHoldingHandler(t)
	c := startCluster(t, 1, h.url)
	nd := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code := c.send(ctx, nd, "evt_killed_mid_delivery"); code != http.StatusAccepted {
		t.Fatalf("claim: %d, want 202", code)
	}
	select {
	case <-h.arrived:
	case <-ctx.Done():
		t.Fatal("the first delivery never reached the handler")
	}
	c.KillNode(nd)
	c.StartNode(nd)
	c.WaitReady(nd)
	const key = "orders:evt_killed_mid_delivery"
	testcluster.WaitFor(t, "the event done after the restart", 30*time.Second, func() bool {
		return c.eventState(nd, key) == "done"
	})
	got := h.deliveries()
	if len(got) != 2 {
		t.Fatalf("deliveries %+v, want the one the kill cut off and one after the restart", got)
	}
	if got[1].key != key || got[1].attempt < 2 || got[1].token <= got[0].token {
		t.Fatalf("delivery after the restart %+v (before it %+v): want attempt 2 or more with a newer token", got[1], got[0])
	}
}
