package connlimit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// idleCount is the length of l's idle list.
func (l *Listener) idleCount() int {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	n := 0
	for c := l.idleHead; c != nil; c = c.next {
		n++
	}
	return n
}

// serveIdle serves 200s on a listener of total cap limit over a real
// net/http server whose connection-state hook tells the listener which
// connections are idle.
func serveIdle(t *testing.T, total int, minIdle time.Duration) (*Listener, string) {
	t.Helper()
	slow := make(chan struct{}) // a request to /slow is served until the test ends
	t.Cleanup(func() { close(slow) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := Wrap(ln, Limits{Total: total}, Options{Name: "test", Logger: slog.New(slog.DiscardHandler), MinIdle: minIdle,
		Refuse: func(c net.Conn, over string) {
			io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		}})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-slow
			}
		}),
		ConnState: func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateIdle:
				wl.ConnState(c, true)
			case http.StateActive, http.StateHijacked:
				wl.ConnState(c, false)
			}
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(wl) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return wl, ln.Addr().String()
}

// get sends one keep-alive request on c and returns its status (0 when the
// connection answered nothing: closed).
func get(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// servedOnce connects from ip, has one request answered, and returns the
// connection once its listener holds it idle, the only one.
func servedOnce(t *testing.T, wl *Listener, addr, ip string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	br := bufio.NewReader(c)
	if st := get(t, c, br); st != 200 {
		t.Fatalf("the first request from %s: %d", ip, st)
	}
	waitFor(t, ip+"'s connection idle", func() bool { return wl.idleCount() == 1 })
	return c, br
}

// TestIdleConnectionGivesWay: at the total cap, a new connection takes the
// place of the one idle longest between requests, which its server sees
// closed; a connection in the middle of a request, or idle for less than
// MinIdle, keeps its place and the new one is refused.
func TestIdleConnectionGivesWay(t *testing.T) {
	t.Run("the oldest idle goes", func(t *testing.T) {
		wl, addr := serveIdle(t, 2, time.Nanosecond)
		a, ab := servedOnce(t, wl, addr, "127.0.0.1")
		b := dialFrom(t, "127.0.0.2", addr)
		bb := bufio.NewReader(b)
		if get(t, b, bb) != 200 {
			t.Fatal("b's request failed")
		}
		waitFor(t, "both connections idle", func() bool { return wl.idleCount() == 2 })
		c := dialFrom(t, "127.0.0.3", addr)
		if st := get(t, c, bufio.NewReader(c)); st != 200 {
			t.Fatalf("a connection over the cap with two idle answered %d, want 200", st)
		}
		// a went idle first: closed, so it reads EOF; b still serves.
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := ab.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("the oldest idle connection read %v, want EOF (closed)", err)
		}
		if st := get(t, b, bb); st != 200 {
			t.Errorf("the younger idle connection answered %d, want 200", st)
		}
		if n := wl.Reaped(); n != 1 {
			t.Errorf("reaped %d, want 1", n)
		}
		if n := wl.Refused(); n != 0 {
			t.Errorf("refused %d, want 0", n)
		}
	})
	t.Run("a request being served stays", func(t *testing.T) {
		wl, addr := serveIdle(t, 1, time.Nanosecond)
		a := dialFrom(t, "127.0.0.1", addr)
		io.WriteString(a, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		waitFor(t, "the request to be served", func() bool { return wl.Open() == 1 && wl.idleCount() == 0 })
		b := dialFrom(t, "127.0.0.2", addr)
		if st := get(t, b, bufio.NewReader(b)); st != 503 {
			t.Errorf("over the cap beside a request being served: %d, want the 503 refusal", st)
		}
		if n := wl.Reaped(); n != 0 {
			t.Errorf("reaped %d, want 0", n)
		}
	})
	// A head trickled a byte at a time is waited for like silence: bytes
	// arriving do not make a connection served.
	t.Run("a head that trickles goes", func(t *testing.T) {
		wl, addr := serveIdle(t, 1, time.Nanosecond)
		a, ab := servedOnce(t, wl, addr, "127.0.0.1")
		io.WriteString(a, "GET / HTTP/1.1\r\nHo") // a's next head, a piece of it
		b := dialFrom(t, "127.0.0.2", addr)
		if st := get(t, b, bufio.NewReader(b)); st != 200 {
			t.Fatalf("a connection over the cap beside a trickling head: %d, want 200", st)
		}
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := ab.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("the trickling connection read %v, want EOF (closed)", err)
		}
	})
	t.Run("a connection silent since it connected goes", func(t *testing.T) {
		wl, addr := serveIdle(t, 1, time.Nanosecond)
		a := dialFrom(t, "127.0.0.1", addr)
		waitFor(t, "the silent connection to be accepted", func() bool { return wl.Open() == 1 })
		b := dialFrom(t, "127.0.0.2", addr)
		if st := get(t, b, bufio.NewReader(b)); st != 200 {
			t.Fatalf("a connection over the cap beside a silent one: %d, want 200", st)
		}
		_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the silent connection read %v, want EOF (closed)", err)
		}
	})
	// A new connection its own network's cap refuses closes nobody's.
	t.Run("a network at its cap closes nothing", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wl := Wrap(ln, Limits{Total: 2, PerNetwork: 1}, Options{Name: "test", Logger: slog.New(slog.DiscardHandler), MinIdle: time.Nanosecond})
		defer wl.Close()
		accepted := make(chan net.Conn, 4)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := wl.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		defer func() { wl.Close(); <-done }()
		dialFrom(t, "127.0.0.1", ln.Addr().String())
		dialFrom(t, "127.0.0.2", ln.Addr().String())
		for range 2 {
			c := <-accepted
			defer c.Close()
		}
		dialFrom(t, "127.0.0.1", ln.Addr().String())
		waitFor(t, "the third connection refused", func() bool { return wl.Refused() == 1 })
		if n := wl.Reaped(); n != 0 {
			t.Errorf("reaped %d for a connection its network's cap refused, want 0", n)
		}
		if n := wl.Open(); n != 2 {
			t.Errorf("open %d, want 2", n)
		}
	})
	t.Run("idle for less than MinIdle stays", func(t *testing.T) {
		wl, addr := serveIdle(t, 1, time.Hour)
		a, ab := servedOnce(t, wl, addr, "127.0.0.1")
		b := dialFrom(t, "127.0.0.2", addr)
		if st := get(t, b, bufio.NewReader(b)); st != 503 {
			t.Errorf("over the cap beside a connection idle a moment: %d, want the 503 refusal", st)
		}
		if st := get(t, a, ab); st != 200 {
			t.Errorf("the idle connection answered %d after the refusal, want 200", st)
		}
	})
}

// TestConnStateTakesTLS: a TLS server's hook gives the TLS connection; the
// listener finds its own beneath it, and ignores a connection it did not
// accept.
func TestConnStateTakesTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := Wrap(ln, Limits{}, Options{Name: "test", Logger: slog.New(slog.DiscardHandler)})
	defer wl.Close()
	dialFrom(t, "127.0.0.1", ln.Addr().String())
	c, err := wl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := wl.idleCount(); n != 1 {
		t.Fatalf("idle after the accept: %d, want 1 (silent since it connected)", n)
	}
	tc := tls.Server(c, &tls.Config{})
	wl.ConnState(tc, false)
	if n := wl.idleCount(); n != 0 {
		t.Fatalf("idle after the TLS connection went active: %d, want 0", n)
	}
	wl.ConnState(tc, true)
	if n := wl.idleCount(); n != 1 {
		t.Fatalf("idle after the TLS connection's idle hook: %d, want 1", n)
	}
	other, peer := net.Pipe()
	defer other.Close()
	defer peer.Close()
	wl.ConnState(tls.Server(other, &tls.Config{}), true)
	wl.ConnState(other, true)
	if n := wl.idleCount(); n != 1 {
		t.Fatalf("a connection the listener did not accept went on its idle list (%d on it, want 1)", n)
	}
	// A closed connection never goes back on the list.
	c.Close()
	wl.ConnState(c, true)
	if n := wl.idleCount(); n != 0 {
		t.Fatalf("a closed connection is on the idle list (%d)", n)
	}
}
