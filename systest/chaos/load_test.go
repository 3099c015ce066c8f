package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"oncehook/providers"
)

// Outcomes of one intake request as the checker sees them.
const (
	outNew     = "new"     // 202: this request created the event
	outDup     = "dup"     // 200 duplicate
	outUnknown = "unknown" // timeout, reset, 503 or another 5xx: may or may not have committed
	outRefused = "refused" // connection refused, or 408: nothing reached a claim
	outReject  = "401"     // signature refused (S11: the receiving node's clock is skewed); nothing stored
	outError   = "error"   // any other status: a bug in the harness or oncehook
)

// op is one recorded intake request.
type op struct {
	Client  int    // porcupine client id: no two ops of one client overlap
	ID      string // event id; the key is "orders:"+ID
	Node    int
	Kind    string // fresh | redeliver | storm | retry
	Call    int64  // ns since the run's base time (monotonic)
	Return  int64
	Status  int
	Outcome string
	Answer  string `json:",omitempty"` // the start of the body of an unexpected answer (outError)
}

// loadGen sends signed Standard Webhooks deliveries from the client namespace,
// round-robin and at random over the three nodes, and records every request.
// It is closed-loop (each worker waits for its answer), bounded by count and
// by time.
type loadGen struct {
	c       *cluster
	base    time.Time
	seed    uint64
	workers int
	maxOps  int64
	scheme  providers.Scheme
	pad     string

	mu      sync.Mutex
	ops     []op
	sent    []string // ids sent so far (for redeliveries)
	retryQ  []string // ids whose outcome was unknown (a provider retries them)
	retries map[string]int

	gate sync.RWMutex // held for writing while the load is paused

	seq     atomic.Int64
	nops    atomic.Int64
	clients atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func newLoadGen(c *cluster, seed uint64, workers int, maxOps int64) *loadGen {
	s, _ := providers.Lookup("standard")
	return &loadGen{c: c, base: time.Now(), seed: seed, workers: workers, maxOps: maxOps, scheme: s,
		pad: strings.Repeat("p", 700), retries: map[string]int{}, stop: make(chan struct{})}
}

// now is the run's monotonic clock in ns.
func (g *loadGen) now() int64 { return int64(time.Since(g.base)) }

func (g *loadGen) start(deadline time.Duration) {
	end := time.Now().Add(deadline)
	for w := 0; w < g.workers; w++ {
		g.wg.Add(1)
		go g.worker(w, end)
	}
}

// pause stops new requests until resume (requests in flight finish).
func (g *loadGen) pause()  { g.gate.Lock() }
func (g *loadGen) resume() { g.gate.Unlock() }

func (g *loadGen) halt() {
	close(g.stop)
	g.wg.Wait()
}

func (g *loadGen) stopped(end time.Time) bool {
	select {
	case <-g.stop:
		return true
	default:
	}
	return time.Now().After(end) || g.nops.Load() >= g.maxOps
}

// worker sends to its home node (w mod 3), so that a node that hangs (paused,
// partitioned) holds only its own workers and the others keep measuring the
// rest of the cluster. A storm sends copies of one new id to all three nodes
// at once; the worker does not wait for it, but starts no new storm while its
// last one is still out.
func (g *loadGen) worker(w int, end time.Time) {
	defer g.wg.Done()
	rng := rand.New(rand.NewPCG(g.seed, uint64(w)+1))
	home := w % 3
	client := int(g.clients.Add(1)) - 1
	var storm sync.WaitGroup
	stormOut := atomic.Bool{}
	defer storm.Wait()
	for !g.stopped(end) {
		g.gate.RLock() // blocks while paused
		g.gate.RUnlock()
		p := rng.Float64()
		switch {
		case p < 0.08 && !stormOut.Load():
			id := g.newID()
			k := 3 + rng.IntN(4)
			stormOut.Store(true)
			var each sync.WaitGroup
			for j := 0; j < k; j++ {
				cl := int(g.clients.Add(1)) - 1
				each.Add(1)
				storm.Add(1)
				go func(j, cl int) {
					defer storm.Done()
					defer each.Done()
					g.send(cl, id, (home+j)%3, "storm")
				}(j, cl)
			}
			go func() { each.Wait(); stormOut.Store(false) }()
		case p < 0.18:
			if id, kind, ok := g.pickOld(rng); ok {
				g.send(client, id, home, kind)
				continue
			}
			fallthrough
		default:
			g.send(client, g.newID(), home, "fresh")
		}
	}
}

func (g *loadGen) newID() string {
	id := fmt.Sprintf("s%d-e%07d", g.seed, g.seq.Add(1))
	g.mu.Lock()
	g.sent = append(g.sent, id)
	g.mu.Unlock()
	return id
}

// pickOld returns an id to send again: an unknown one first (a provider
// retries until it sees a 2xx), else any earlier one (a re-delivery).
func (g *loadGen) pickOld(rng *rand.Rand) (string, string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.retryQ); n > 0 {
		id := g.retryQ[0]
		g.retryQ = g.retryQ[1:]
		return id, "retry", true
	}
	if len(g.sent) == 0 {
		return "", "", false
	}
	return g.sent[rng.IntN(len(g.sent))], "redeliver", true
}

func (g *loadGen) send(client int, id string, node int, kind string) {
	g.nops.Add(1)
	o := g.deliver(id, node)
	o.Client, o.Kind = client, kind
	g.mu.Lock()
	g.ops = append(g.ops, o)
	if o.Outcome == outUnknown || o.Outcome == outRefused || o.Outcome == outReject {
		if g.retries[id] < 3 {
			g.retries[id]++
			g.retryQ = append(g.retryQ, id)
		}
	}
	g.mu.Unlock()
	if o.Outcome == outUnknown || o.Outcome == outRefused || o.Outcome == outReject {
		// A provider backs off; so does this worker (bounded, short).
		select {
		case <-time.After(50 * time.Millisecond):
		case <-g.stop:
		}
	}
}

// deliver sends one signed delivery of id to node and classifies the answer;
// it records nothing.
func (g *loadGen) deliver(id string, node int) op {
	n := g.c.nodes[node]
	body := []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"marker":"CHAOS-BODY-MARKER","pad":%q}`, id, g.pad))
	hs, _ := g.scheme.Sign(body, []byte(g.c.secret), time.Now(), id, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, n.intakeURL()+"/in/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	o := op{ID: id, Node: node, Call: g.now()}
	resp, err := g.c.http.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		o.Status = resp.StatusCode
		switch {
		case resp.StatusCode == 202:
			o.Outcome = outNew
		case resp.StatusCode == 200 && bytes.Contains(b, []byte(`"duplicate"`)):
			o.Outcome = outDup
		case resp.StatusCode >= 500:
			o.Outcome = outUnknown
		case resp.StatusCode == 401:
			o.Outcome = outReject
		case resp.StatusCode == http.StatusRequestTimeout:
			// The node could not read the whole request within its read
			// timeout (a frozen node, SIGCONT onto a starved CPU): answered
			// before any claim, and retried like any refusal.
			o.Outcome = outRefused
		default:
			o.Outcome = outError
			o.Answer = string(b[:min(len(b), 200)])
		}
	} else if errors.Is(err, syscall.ECONNREFUSED) {
		o.Outcome = outRefused
	} else {
		o.Outcome = outUnknown
	}
	o.Return = g.now()
	return o
}

func (g *loadGen) history() []op {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]op(nil), g.ops...)
}
