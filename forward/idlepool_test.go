package forward

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// burstServer answers every request 200 on kept-alive connections. A request
// with a Burst header is held until its burst is released (burst.release),
// so that each request of a burst holds a connection of its own. ended is
// told each time a connection ends.
func burstServer(t *testing.T) (url string, conns func() int64, b *burst, ended <-chan struct{}) {
	t.Helper()
	b = &burst{arrived: make(chan struct{}, 1024)}
	b.hold = make(chan struct{})
	end := make(chan struct{}, 1024)
	u, n := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		defer func() { end <- struct{}{} }()
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if req.Header.Get("Burst") != "" {
				b.mu.Lock()
				hold := b.hold
				b.mu.Unlock()
				b.arrived <- struct{}{}
				<-hold
			}
			if _, err := c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")); err != nil {
				return
			}
		}
	})
	return u, n.Load, b, end
}

// burst holds the Burst requests of burstServer.
type burst struct {
	arrived chan struct{}
	mu      sync.Mutex
	hold    chan struct{}
}

// release lets the held requests answer; the next ones are held again.
func (b *burst) release() {
	b.mu.Lock()
	close(b.hold)
	b.hold = make(chan struct{})
	b.mu.Unlock()
}

// TestForwarderKeepsAConnectionPerWorker: the forwarder's own client keeps
// as many idle connections as its pool may grow to. A pool grown past the
// idle cap closed a connection after most answers and dialled a new one for
// the next request: thousands of connections a minute while a leader caught
// up with a backlog (docs/performance.md, "Connections kept for the whole
// pool").
func TestForwarderKeepsAConnectionPerWorker(t *testing.T) {
	const most = 100 // more than the 64 a client for 4 workers keeps
	url, conns, b, _ := burstServer(t)
	f := New(Options{Workers: 4, MaxWorkers: most})
	defer f.client.CloseIdleConnections()

	send := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/hook", strings.NewReader("x"))
		req.Header.Set("Burst", "1")
		resp, err := f.client.Do(req)
		if err != nil {
			return err
		}
		closeBody(resp.Body)
		return nil
	}
	// Two bursts of as many requests at once as the pool may make: the
	// second finds every connection of the first one idle.
	for round := 1; round <= 2; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, most)
		for range most {
			wg.Go(func() { errs <- send() })
		}
		for range most {
			<-b.arrived
		}
		b.release()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := conns(); n != most {
			t.Fatalf("%d connections after burst %d, want %d: idle ones were closed and new ones dialled", n, round, most)
		}
	}
}

// TestTransportClosesConnectionsABurstLeftIdle: idle connections are reused
// last in, first out, so the ones a burst opened beyond what the load needs
// afterwards sit at the bottom and are never reached; put closes them once
// they have been idle for idleFor, instead of keeping them (and a socket and
// buffers each, on both ends) open for good.
func TestTransportClosesConnectionsABurstLeftIdle(t *testing.T) {
	url, conns, _, ended := burstServer(t)
	tr := newTransport(8)
	defer tr.CloseIdleConnections()
	addr := parsePlain(url + "/hook").addr
	deadline := time.Now().Add(10 * time.Second)

	var opened []*conn
	for range 3 {
		c, reused, err := tr.get(context.Background(), deadline, addr, true)
		if err != nil || reused {
			t.Fatalf("get: reused %v, %v", reused, err)
		}
		opened = append(opened, c)
	}
	for _, c := range opened {
		tr.put(addr, c)
	}
	// The first two were put back idleFor ago; the third is the one the
	// next request takes.
	tr.mu.Lock()
	for _, c := range tr.idle[addr][:2] {
		c.used = c.used.Add(-tr.idleFor)
	}
	tr.mu.Unlock()

	resp, err := tr.post(context.Background(), deadline, addr, false, func(w *bufio.Writer) error {
		return writeRequest(w, parsePlain(url+"/hook"), "oncehook", http.Header{HeaderIdempotencyKey: {"k"}}, []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	closeBody(resp.Body)

	for range 2 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the connections idle for idleFor were not closed")
		}
	}
	tr.mu.Lock()
	idle := len(tr.idle[addr])
	tr.mu.Unlock()
	if idle != 1 || conns() != 3 {
		t.Fatalf("%d idle and %d dialled, want 1 and 3", idle, conns())
	}
}

// TestTransportClosesAQuietHandlersIdleConnections: a handler that gets no
// more deliveries after a burst does not keep its connections: closeStale
// (the sweeper's tick) closes those idle for idleFor, to every handler,
// and keeps the younger ones. put alone only reaches the handler it puts a
// connection back for.
func TestTransportClosesAQuietHandlersIdleConnections(t *testing.T) {
	urlA, _, _, endedA := burstServer(t)
	urlB, _, _, _ := burstServer(t)
	tr := newTransport(8)
	defer tr.CloseIdleConnections()
	addrA, addrB := parsePlain(urlA+"/hook").addr, parsePlain(urlB+"/hook").addr
	deadline := time.Now().Add(10 * time.Second)
	open := func(addr string, n int) {
		var cs []*conn
		for range n {
			c, _, err := tr.get(context.Background(), deadline, addr, true)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
		}
		for _, c := range cs {
			tr.put(addr, c)
		}
	}
	open(addrA, 3)
	open(addrB, 2)
	now := time.Now()
	tr.mu.Lock()
	for _, c := range tr.idle[addrA] {
		c.used = now.Add(-2 * tr.idleFor) // A's burst was long ago
	}
	tr.idle[addrB][0].used = now.Add(-tr.idleFor) // one of B's just reached it
	tr.mu.Unlock()

	tr.closeStale(now)
	for range 3 {
		select {
		case <-endedA:
		case <-time.After(10 * time.Second):
			t.Fatal("a quiet handler's idle connections were not closed")
		}
	}
	tr.mu.Lock()
	a, b := len(tr.idle[addrA]), len(tr.idle[addrB])
	tr.mu.Unlock()
	if a != 0 || b != 1 {
		t.Fatalf("idle after closeStale: %d to the quiet handler, %d to the other; want 0 and 1", a, b)
	}
	tr.closeStale(now) // nothing more is stale
	tr.mu.Lock()
	b = len(tr.idle[addrB])
	tr.mu.Unlock()
	if b != 1 {
		t.Fatalf("a second closeStale closed a connection idle for less than idleFor (%d left)", b)
	}
}

// TestSweeperClosesIdleConnections: the running forwarder's sweeper is
// what calls closeStale, so a connection left idle to a handler that gets
// nothing more is closed without another delivery.
func TestSweeperClosesIdleConnections(t *testing.T) {
	url, _, _, ended := burstServer(t)
	l := newLeader(t)
	f := New(Options{Store: l, Targets: only(Target{URL: url}), Workers: 2, PollInterval: time.Hour, SweepInterval: 10 * time.Millisecond})
	defer f.client.CloseIdleConnections()    // a failure here must not leave the server's handler waiting
	f.direct.idleFor = 50 * time.Millisecond // set before anything runs
	runF(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/hook", strings.NewReader("x"))
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	closeBody(resp.Body)
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("the sweeper did not close a connection idle past idleFor")
	}
}
