package forward

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/engine"
)

// TestAnswerBeforeTheBodyIsRead: a handler that answers on the headers
// alone, without reading a body too large for the sockets' buffers, and
// closes (net/http's server resets the connection once its wait for the
// unread body ends), gave an answer: the writes fail on the reset, and the
// answer, already received, is the attempt's outcome. Before, the attempt
// failed with "broken pipe", was sent again on a new connection, and the
// event went dead with every attempt answered 200.
func TestAnswerBeforeTheBodyIsRead(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   engine.State
	}{
		{http.StatusOK, engine.StateDone},
		{http.StatusRequestEntityTooLarge, engine.StateDead},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			l := newLeader(t)
			var calls atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.WriteHeader(tc.status) // not interested: the body stays unread
			})}
			served := make(chan struct{})
			go func() { defer close(served); _ = srv.Serve(ln) }()
			t.Cleanup(func() { srv.Close(); <-served })
			l.claim("src:big", "src", strings.Repeat("x", 16<<20))
			start(t, l, &recorder{}, Options{Targets: only(Target{URL: "http://" + ln.Addr().String() + "/hook",
				MaxAttempts: 1})})
			waitFor(t, "the event finished", func() bool {
				st := l.get("src:big").State
				return st == engine.StateDone || st == engine.StateDead
			})
			ev := l.get("src:big")
			if ev.State != tc.want || calls.Load() != 1 {
				t.Fatalf("handler answered %d, called %d times: event %s after %d attempts (%q); want %s after one call",
					tc.status, calls.Load(), ev.State, ev.Attempts, ev.LastError, tc.want)
			}
			if tc.status != http.StatusOK && !strings.Contains(ev.LastError, "413") {
				t.Fatalf("the last error %q does not name the handler's answer", ev.LastError)
			}
		})
	}
}

// triggerConn runs trigger before the first write after it is armed.
type triggerConn struct {
	net.Conn
	armed   *atomic.Bool
	trigger func()
}

func (c *triggerConn) Write(p []byte) (int, error) {
	if c.armed.CompareAndSwap(true, false) {
		c.trigger()
	}
	return c.Conn.Write(p)
}

// TestIdleCloseAnswerIsNotTheOutcome: a server that times out a kept-alive
// connection may send a 408 as it closes it. When that happens as the next
// request goes out on it, the writes fail and the 408 is in the receive
// buffer, but it answers no request of ours: the request is sent again on a
// new connection, where the handler gets it, instead of the 408 being taken
// for the handler's answer.
func TestIdleCloseAnswerIsNotTheOutcome(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trigger, sent := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var got []string
	var conns atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := conns.Add(1) == 1
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					mu.Lock()
					got = append(got, req.Header.Get(HeaderEventKey))
					mu.Unlock()
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
						return
					}
					if first {
						// The idle timeout of this connection: a 408 and a close.
						<-trigger
						_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
						close(sent)
						return
					}
				}
			})
		}
	})

	l := newLeader(t)
	var armed atomic.Bool
	var once sync.Once
	f := New(Options{Store: l, Targets: only(Target{URL: "http://" + ln.Addr().String() + "/h", MaxAttempts: 1, Timeout: 10 * time.Second}),
		PollInterval: 5 * time.Millisecond, SweepInterval: 5 * time.Millisecond, Workers: 1})
	f.direct.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &triggerConn{Conn: c, armed: &armed, trigger: func() {
			once.Do(func() {
				close(trigger)
				<-sent // the 408 and the close are on their way before the body
			})
		}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()

	l.claim("src:small", "src", "a")
	waitFor(t, "the first event done", func() bool { return l.get("src:small").State == engine.StateDone })
	armed.Store(true)
	l.claim("src:big", "src", strings.Repeat("x", 16<<20))
	waitFor(t, "the second event finished", func() bool {
		st := l.get("src:big").State
		return st == engine.StateDone || st == engine.StateDead
	})
	if ev := l.get("src:big"); ev.State != engine.StateDone {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("src:big %s (%q); the handler got %v", ev.State, ev.LastError, got)
	}
}

// TestEarlyAnswerOnAKeptAliveConnection: a handler's answer on the headers
// alone counts on a kept-alive connection too; the request is not sent
// again on a new connection (which ran the handler twice in one attempt).
func TestEarlyAnswerOnAKeptAliveConnection(t *testing.T) {
	l := newLeader(t)
	var big, conns atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > 1<<20 {
				big.Add(1)
				w.WriteHeader(http.StatusOK) // the body stays unread
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
		}),
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	start(t, l, &recorder{}, Options{Targets: only(Target{URL: "http://" + ln.Addr().String() + "/hook", MaxAttempts: 1}), Workers: 1})
	l.claim("src:small", "src", "a")
	waitFor(t, "the small event done", func() bool { return l.get("src:small").State == engine.StateDone })
	l.claim("src:big", "src", strings.Repeat("x", 16<<20))
	waitFor(t, "the big event finished", func() bool {
		st := l.get("src:big").State
		return st == engine.StateDone || st == engine.StateDead
	})
	if ev := l.get("src:big"); ev.State != engine.StateDone || big.Load() != 1 {
		t.Fatalf("src:big %s (%q); the handler ran it %d times over %d connections, want done after once", ev.State, ev.LastError, big.Load(), conns.Load())
	}
}
