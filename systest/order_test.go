package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"oncehook/internal/testcluster"
	"slices"
	"sync"
	"testing"
	"time"
)

// orderHandler holds the first event of object X until released and records,
// per arrival, the key and whether that first event had been answered 2xx.
type orderHandler struct {
	mu       sync.Mutex
	arrivals []string
	answered bool // the held event was answered 200
	early    []string
	release  chan struct{}
	url      string
}

func newOrderHandler(t *testing.T, held string) *orderHandler {
	h := &orderHandler{release: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		h.mu.Lock()
		h.arrivals = append(h.arrivals, key)
		if key != held && !h.answered {
			h.early = append(h.early, key)
		}
		h.mu.Unlock()
		if key == held {
			select {
			case <-h.release:
			case <-r.Context().Done(): // the forward timeout: the attempt fails and is retried
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			h.mu.Lock()
			h.answered = true
			h.mu.Unlock()
		}
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.url = "http://" + ln.Addr().String()
	return h
}

func (h *orderHandler) seen() (arrivals, early []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.arrivals), slices.Clone(h.early)
}

// sendOrdered posts a signed event of object obj created at created.
func (c *testCluster) sendOrdered(ctx context.Context, nd *clusterNode, id, obj string, created int64) int {
	return c.sendBody(ctx, nd, id, []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"obj":%q,"created":%d}`, id, obj, created)))
}

// TestOrderedSourceDeliversOneAtATime: on a source with `order`, two more
// events of an object (one a tie on the order time) are not delivered while
// the handler holds the first (which times out and is retried meanwhile);
// once it is answered they arrive in order. Another object's event is not
// held back.
func TestOrderedSourceDeliversOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	h := newOrderHandler(t, "orders:x1")
	c := startClusterWith(t, 1, h.url, `order = { object = "json:obj", time = "json:created" }`)
	nd := c.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	send := func(id, obj string, created int64) {
		t.Helper()
		if code := c.sendOrdered(ctx, nd, id, obj, created); code != 202 {
			t.Fatalf("send %s: %d, want 202", id, code)
		}
	}
	send("x1", "X", 100)
	testcluster.WaitFor(t, "x1 at the handler", 20*time.Second, func() bool { a, _ := h.seen(); return len(a) > 0 })
	send("x2", "X", 200)
	send("x3", "X", 200) // the same order time: after x2, in claim order
	send("y1", "Y", 100)
	testcluster.WaitFor(t, "y1 delivered while x1 is held", 20*time.Second, func() bool { return c.eventState(nd, "orders:y1") == "done" })
	// Several lease rounds after the claims, x2 and x3 still wait.
	st, _ := c.Status(nd)
	testcluster.WaitFor(t, "lease rounds after the claims", 20*time.Second, func() bool {
		s, ok := c.Status(nd)
		return ok && s.AppliedIndex >= st.AppliedIndex+5
	})
	for _, k := range []string{"orders:x2", "orders:x3"} {
		code, b := get("http://"+nd.Admin+"/v1/events/"+k, c.Token)
		var ev struct {
			State    string `json:"state"`
			Attempts int    `json:"attempts"`
		}
		if json.Unmarshal(b, &ev); code != 200 || ev.State != "pending" || ev.Attempts != 0 {
			t.Fatalf("%s while x1 is held: %d %s, want pending, never attempted", k, code, b)
		}
	}
	close(h.release)
	testcluster.WaitFor(t, "x3 delivered", 30*time.Second, func() bool { return c.eventState(nd, "orders:x3") == "done" })
	arrivals, early := h.seen()
	if len(early) != 1 || early[0] != "orders:y1" {
		t.Fatalf("delivered before x1 was answered: %v, want only y1 (arrivals %v)", early, arrivals)
	}
	var x []string
	for _, k := range arrivals {
		if k != "orders:y1" && (len(x) == 0 || x[len(x)-1] != k) {
			x = append(x, k)
		}
	}
	if want := []string{"orders:x1", "orders:x2", "orders:x3"}; !slices.Equal(x, want) {
		t.Fatalf("object X arrived as %v, want %v", arrivals, want)
	}
}
