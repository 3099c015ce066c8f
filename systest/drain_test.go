package systest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"oncehook/internal/testcluster"
)

// slowHandler takes its time over every delivery, as a handler that writes
// to a database does. It counts a delivery when it arrives: the business
// effect starts then, whether or not the sender waits for the answer.
type slowHandler struct {
	took     time.Duration
	inFlight atomic.Int64
	mu       sync.Mutex
	runs     map[string]int
}

func (h *slowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	h.runs[r.Header.Get("Idempotency-Key")]++
	h.mu.Unlock()
	h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	time.Sleep(h.took) // the handler's own work, not the test waiting
	w.WriteHeader(http.StatusOK)
}

func (h *slowHandler) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

// TestLeaderStopFinishesDeliveries stops the leader with SIGTERM while its
// handler is answering. The leader lets those deliveries finish and records
// them before it hands leadership over, so no event reaches the handler a
// second time when its lease ends (an answer that arrived after the
// hand-over could not be recorded, and the next leader would run the event
// again).
func TestLeaderStopFinishesDeliveries(t *testing.T) {
	handOverUnderLoad(t, func(t *testing.T, c *testCluster, leader *clusterNode) {
		if err := leader.Proc.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM the leader: %v", err)
		}
	}, func(t *testing.T, c *testCluster, leader *clusterNode) {
		select {
		case <-leader.Proc.Done():
		case <-time.After(testcluster.StopTimeout):
			t.Fatalf("%s did not stop within %s of SIGTERM", leader.ID, testcluster.StopTimeout)
		}
		if code := leader.Proc.ExitCode(); code != 0 {
			t.Errorf("the stopped leader exited %d\n%s", code, leader.Proc.Output())
		}
	})
}

// TestTransferLeaderFinishesDeliveries: `oncehook raft transfer-leader`
// moves leadership to the node named, under load, the same way: no event
// reaches the handler twice.
func TestTransferLeaderFinishesDeliveries(t *testing.T) {
	var to *clusterNode
	handOverUnderLoad(t, func(t *testing.T, c *testCluster, leader *clusterNode) {
		to = c.Other(leader)
		t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(filepath.Dir(leader.Cfg), "admin.token"))
		out, code := run(t, leader.Dir, "raft", "transfer-leader", "-addr", leader.Admin, "-to", to.ID)
		if code != 0 || !strings.Contains(out, "leader is now "+to.ID) {
			t.Fatalf("transfer-leader -to %s: exit %d\n%s", to.ID, code, out)
		}
	}, func(t *testing.T, c *testCluster, leader *clusterNode) {
		if l := c.Leader(); l != to {
			t.Errorf("leader after the transfer is %s, want %s", l.ID, to.ID)
		}
	})
}

// startSlowHandler serves a handler that takes 300 ms per delivery on
// loopback until the test ends, and returns it with its URL.
func startSlowHandler(t *testing.T) (*slowHandler, string) {
	t.Helper()
	h := &slowHandler{took: 300 * time.Millisecond, runs: map[string]int{}}
	return h, serveHandler(t, h)
}

// handOverUnderLoad sends 40 events through a slow handler over three
// nodes, makes the leader hand over (handOver) while the handler is
// answering, checks what the hand-over left (after), and then that every
// event is done on the other nodes and reached the handler exactly once.
func handOverUnderLoad(t *testing.T, handOver, after func(*testing.T, *testCluster, *clusterNode)) {
	if testing.Short() {
		t.Skip("spawns three processes")
	}
	h, url := startSlowHandler(t)
	c := startCluster(t, 3, url)
	leader := c.Leader()

	const total = 40
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var handedOver atomic.Bool
	ids := make(chan int, total)
	for i := range total {
		ids <- i
	}
	close(ids)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range ids {
				id := fmt.Sprintf("drain_%03d", i)
				for try := 0; try < 100 && ctx.Err() == nil; try++ {
					nd := c.Nodes[(i+try)%3]
					if nd == leader && handedOver.Load() {
						continue
					}
					if code := c.send(ctx, nd, id); code/100 == 2 {
						break
					}
					time.Sleep(50 * time.Millisecond) // a provider's retry
				}
			}
		})
	}
	testcluster.WaitFor(t, "the handler answering deliveries", 30*time.Second, func() bool {
		return h.inFlight.Load() > 0
	})
	handedOver.Store(true)
	handOver(t, c, leader)
	wg.Wait()
	after(t, c, leader)
	if out := leader.Proc.Output(); strings.Contains(out, "deliveries still in flight") {
		t.Errorf("the leader gave up waiting for its deliveries:\n%s", out)
	}

	others := []*clusterNode{c.Other(leader)}
	others = append(others, c.Other(leader, others[0]))
	testcluster.WaitFor(t, "every event done on the two other nodes", 60*time.Second, func() bool {
		for _, nd := range others {
			st, ok := c.Status(nd)
			if !ok || st.Counts["done"] != total {
				return false
			}
		}
		return true
	})
	for i := range total {
		key := fmt.Sprintf("orders:drain_%03d", i)
		if n := h.count(key); n != 1 {
			t.Errorf("%s reached the handler %d times, want 1", key, n)
		}
	}
}

// TestSingleNodeStopFinishesDeliveries: a node alone, stopped while its
// handler answers, records those answers before raft stops, so after the
// restart no event reaches the handler again.
func TestSingleNodeStopFinishesDeliveries(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	h, url := startSlowHandler(t)
	c := startCluster(t, 1, url)
	nd := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const total = 10
	for i := range total {
		if code := c.send(ctx, nd, fmt.Sprintf("alone_%02d", i)); code/100 != 2 {
			t.Fatalf("send %d: %d", i, code)
		}
	}
	testcluster.WaitFor(t, "the handler answering deliveries", 30*time.Second, func() bool {
		return h.inFlight.Load() > 0
	})
	c.StopNode(nd)
	if out := nd.Proc.Output(); strings.Contains(out, "deliveries still in flight") {
		t.Errorf("the node gave up waiting for its deliveries:\n%s", out)
	}
	c.StartNode(nd)
	c.WaitReady(nd)
	testcluster.WaitFor(t, "every event done", 60*time.Second, func() bool {
		st, ok := c.Status(nd)
		return ok && st.Counts["done"] == total
	})
	for i := range total {
		key := fmt.Sprintf("orders:alone_%02d", i)
		if n := h.count(key); n != 1 {
			t.Errorf("%s reached the handler %d times, want 1", key, n)
		}
	}
}
