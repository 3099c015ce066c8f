package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"oncehook/engine"

	"oncehook/idleconn"
)

// rawServer answers each connection with handle, which reads requests from br
// and writes answers to the connection, until handle returns.
func rawServer(t testing.TB, handle func(n int, c net.Conn, br *bufio.Reader)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(conns.Add(1))
			wg.Go(func() {
				defer c.Close()
				handle(n, c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String(), &conns
}

func post(t *testing.T, c *http.Client, url, body string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set(HeaderIdempotencyKey, "k")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// TestTransportKeepsAliveAndReadsEveryFraming: content-length, chunked and
// empty answers, informational answers skipped, one connection for all.
func TestTransportKeepsAliveAndReadsEveryFraming(t *testing.T) {
	answers := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops",
	}
	url, conns := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, _ := io.ReadAll(req.Body)
			if string(body) != fmt.Sprintf("body %d", i) || req.Header.Get(HeaderIdempotencyKey) != "k" {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
				continue
			}
			c.Write([]byte(answers[i%len(answers)]))
		}
	})
	c := NewClient(1)
	defer c.CloseIdleConnections()
	want := []struct {
		code int
		body string
	}{{200, "hello"}, {201, "abcde"}, {204, ""}, {500, "oops"}}
	for i, w := range want {
		code, body, err := post(t, c, url, fmt.Sprintf("body %d", i))
		if err != nil || code != w.code || body != w.body {
			t.Fatalf("answer %d = %d %q, %v; want %d %q", i, code, body, err, w.code, w.body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestTransportResendsOnAClosedIdleConnection: a handler that closes a
// kept-alive connection gets the next request on a new one.
func TestTransportResendsOnAClosedIdleConnection(t *testing.T) {
	var got atomic.Int64
	url, conns := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		got.Add(1)
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		// Then close: the client still holds the connection as idle.
	})
	c := NewClient(1)
	defer c.CloseIdleConnections()
	for i := range 3 {
		if code, _, err := post(t, c, url, "x"); err != nil || code != 200 {
			t.Fatalf("request %d: %d, %v", i, code, err)
		}
		time.Sleep(20 * time.Millisecond) // let the close arrive
	}
	if got.Load() != 3 || conns.Load() < 3 {
		t.Errorf("handler got %d requests on %d connections, want 3 on 3", got.Load(), conns.Load())
	}
}

// TestTransportConnectionClose: an answer with Connection: close is not
// followed by a reuse of its connection.
func TestTransportConnectionClose(t *testing.T) {
	url, conns := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			c.Write([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		}
	})
	c := NewClient(1)
	defer c.CloseIdleConnections()
	for i := range 2 {
		if code, _, err := post(t, c, url, "x"); err != nil || code != 200 {
			t.Fatalf("request %d: %d, %v", i, code, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

// TestTransportCancelAndTimeout: a handler that never answers is given up
// on at the request's deadline, and at once when its context is cancelled.
func TestTransportCancelAndTimeout(t *testing.T) {
	release := make(chan struct{})
	url, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		<-release
	})
	defer close(release)
	c := NewClient(1)
	defer c.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("x"))
	start := time.Now()
	_, err := c.Do(req)
	if err == nil || errReason(ctx, err) != "timeout" || time.Since(start) > 2*time.Second {
		t.Fatalf("deadline: %v after %s (reason %q)", err, time.Since(start), errReason(ctx, err))
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx2, http.MethodPost, url, strings.NewReader("x"))
	time.AfterFunc(50*time.Millisecond, cancel2)
	start = time.Now()
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("cancel: %v after %s", err, time.Since(start))
	}
}

// TestTransportRefused: a handler that is not listening is a connect error.
func TestTransportRefused(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + ln.Addr().String()
	ln.Close()
	c := NewClient(1)
	ctx := context.Background()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("x"))
	_, err := c.Do(req)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !strings.HasPrefix(errReason(ctx, err), "connect: ") {
		t.Fatalf("err %v (reason %q)", err, errReason(ctx, err))
	}
}

// TestTransportHTTPSFallsBack: https goes through http.Transport (here it
// fails certificate verification, which only TLS does).
func TestTransportHTTPSFallsBack(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	c := NewClient(1)
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	if _, err := c.Do(req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("err %v, want a certificate error", err)
	}
}

// BenchmarkTransport: one 1 KiB POST to a local handler per op, through
// http.Transport and through NewClient's transport, 16 at a time;
// cpu-ns/op is the whole process (client and the httptest handler).
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	payload := bytes.Repeat([]byte("x"), 1024)
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"http.Transport", &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}},
		{"direct", newTransport(64)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: tc.rt, CheckRedirect: noRedirect}
			defer c.CloseIdleConnections()
			b.SetParallelism(8)
			b.ReportAllocs()
			cpu0 := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, bytes.NewReader(payload))
					req.Header.Set(HeaderIdempotencyKey, "k")
					resp, err := c.Do(req)
					if err != nil {
						b.Error(err)
						cancel()
						return
					}
					closeBody(resp.Body)
					cancel()
				}
			})
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
	// post: the forwarder's own deliveries (request.go, answer.go).
	b.Run("post", func(b *testing.B) {
		t := newTransport(64)
		defer t.CloseIdleConnections()
		pt := parsePlain(srv.URL)
		h := http.Header{HeaderIdempotencyKey: {"k"}}
		b.SetParallelism(8)
		b.ReportAllocs()
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := t.post(context.Background(), time.Now().Add(5*time.Second), pt.addr, false, func(w *bufio.Writer) error {
					return writeRequest(w, pt, "oncehook", h, payload)
				})
				if err != nil {
					b.Error(err)
					return
				}
				closeBody(resp.Body)
			}
		})
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestTransportHandlerClosedEveryIdleConnection: a handler that restarted
// (a deploy), or that closes connections idle for a few seconds, closed
// every connection the transport keeps idle. The next request must reach
// it on the first call, on one new connection, not fail on a second dead
// one and spend one of the event's attempts.
func TestTransportHandlerClosedEveryIdleConnection(t *testing.T) {
	const kept = 8
	for _, how := range []string{"post", "http.Client"} {
		t.Run(how, func(t *testing.T) {
			var mu sync.Mutex
			var open []net.Conn
			arrived := make(chan struct{}, kept)
			release := make(chan struct{})
			ended := make(chan struct{}, kept+2)
			url, conns := rawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
				defer func() { ended <- struct{}{} }()
				mu.Lock()
				open = append(open, c)
				mu.Unlock()
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if n <= kept && req.Header.Get("Burst") != "" {
						// The burst's requests are answered together, so
						// that each holds a connection of its own.
						arrived <- struct{}{}
						<-release
					}
					c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				}
			})
			tr := newTransport(kept)
			defer tr.CloseIdleConnections()
			pt := parsePlain(url + "/hook")
			send := func(burst bool) error {
				h := http.Header{HeaderIdempotencyKey: {"k"}}
				if burst {
					h.Set("Burst", "1")
				}
				var resp *http.Response
				var err error
				if how == "post" {
					resp, err = tr.post(context.Background(), time.Now().Add(5*time.Second), pt.addr, false, func(w *bufio.Writer) error {
						return writeRequest(w, pt, "oncehook", h, []byte("x"))
					})
				} else {
					req, _ := http.NewRequest(http.MethodPost, url+"/hook", strings.NewReader("x"))
					req.Header = h
					resp, err = (&http.Client{Transport: tr}).Do(req)
				}
				if err != nil {
					return err
				}
				closeBody(resp.Body)
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}

			var wg sync.WaitGroup
			errs := make(chan error, kept)
			for range kept {
				wg.Go(func() { errs <- send(true) })
			}
			for range kept {
				<-arrived
			}
			close(release)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if n := conns.Load(); n != kept {
				t.Fatalf("%d connections after the burst, want %d", n, kept)
			}

			// The handler closes every connection, as a restart does.
			mu.Lock()
			for _, c := range open {
				c.Close()
			}
			mu.Unlock()
			for range kept {
				<-ended
			}

			if err := send(false); err != nil {
				t.Fatalf("first request after the handler closed its connections: %v", err)
			}
			if n := conns.Load(); n != kept+1 {
				t.Fatalf("%d connections, want %d: the request should go on one new connection", n, kept+1)
			}
			if err := send(false); err != nil {
				t.Fatalf("second request: %v", err)
			}
			if n := conns.Load(); n != kept+1 {
				t.Fatalf("%d connections, want %d: the new connection should be kept", n, kept+1)
			}
		})
	}
}

// TestTransportDropsConnectionsWithStrayBytes: bytes a handler sends beyond
// its answer (a second answer, a body after a 204, a Content-Length shorter
// than what it wrote), with the answer or later while the connection is
// idle, are not taken for the answer to the next request: that request
// goes on a new connection and gets its own answer. Reading them as its
// answer would record a handler's 500 as done, for another source's event.
// (Bytes that arrive only after the next request went out cannot be told
// from its answer, as with any HTTP/1.1 client.)
func TestTransportDropsConnectionsWithStrayBytes(t *testing.T) {
	const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	cases := []struct {
		name         string
		answer, late string
	}{
		{"a second answer with the first", okAnswer + okAnswer, ""},
		{"a second answer while idle", okAnswer, okAnswer},
		{"a body after a 204", "HTTP/1.1 204 No Content\r\n\r\n" + okAnswer, ""},
		{"a body after a 204, while idle", "HTTP/1.1 204 No Content\r\n\r\n", okAnswer},
		{"more than Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n", ""},
		{"stray bytes while idle", okAnswer, "ok"},
	}
	for _, tc := range cases {
		for _, how := range []string{"post", "http.Client"} {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				writeLate := make(chan struct{})
				var once sync.Once
				release := func() { once.Do(func() { close(writeLate) }) }
				url, conns := rawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
					for i := 0; ; i++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if n > 1 || i > 0 {
							c.Write([]byte("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nfail"))
							continue
						}
						c.Write([]byte(tc.answer))
						if tc.late != "" {
							<-writeLate
							c.Write([]byte(tc.late))
						}
					}
				})
				// Registered after rawServer's, so run before it waits for
				// the handler, which may be waiting for this.
				t.Cleanup(release)
				tr := newTransport(4)
				defer tr.CloseIdleConnections()
				pt := parsePlain(url + "/hook")
				send := func() (int, error) {
					var resp *http.Response
					var err error
					if how == "post" {
						h := http.Header{HeaderIdempotencyKey: {"k"}}
						resp, err = tr.post(context.Background(), time.Now().Add(5*time.Second), pt.addr, false, func(w *bufio.Writer) error {
							return writeRequest(w, pt, "oncehook", h, []byte("x"))
						})
					} else {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						defer cancel()
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/hook", strings.NewReader("x"))
						resp, err = (&http.Client{Transport: tr}).Do(req)
					}
					if err != nil {
						return 0, err
					}
					closeBody(resp.Body)
					return resp.StatusCode, nil
				}

				first, err := send()
				if err != nil || first/100 != 2 {
					t.Fatalf("first request: %d, %v", first, err)
				}
				if tc.late != "" {
					release()
					// Wait until the stray bytes have reached the idle connection.
					tr.mu.Lock()
					idle := append([]*conn(nil), tr.idle[pt.addr]...)
					tr.mu.Unlock()
					if len(idle) != 1 {
						t.Fatalf("%d idle connections after the first answer, want 1", len(idle))
					}
					deadline := time.Now().Add(5 * time.Second)
					for idleconn.Reusable(idle[0].nc) {
						if time.Now().After(deadline) {
							t.Fatal("the stray bytes never arrived")
						}
						time.Sleep(time.Millisecond)
					}
				}
				second, err := send()
				if err != nil || second != 500 {
					t.Fatalf("second request: %d, %v; want the handler's own 500, not the stray bytes", second, err)
				}
				if n := conns.Load(); n != 2 {
					t.Errorf("%d connections, want 2: the second request on a new one", n)
				}
			})
		}
	}
}

// TestTransportDoesNotReuseAnUpgradedConnection: after a 101 the
// connection speaks another protocol; the next request takes a new one.
func TestTransportDoesNotReuseAnUpgradedConnection(t *testing.T) {
	url, conns := rawServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		if n == 1 {
			c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: other\r\nConnection: Upgrade\r\n\r\n"))
			// The other protocol answers whatever comes next with bytes
			// that happen to read as an HTTP answer.
			if _, err := br.ReadByte(); err == nil {
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nup"))
			}
			return
		}
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	})
	tr := newTransport(4)
	defer tr.CloseIdleConnections()
	pt := parsePlain(url + "/hook")
	codes := []int{}
	for range 2 {
		resp, err := tr.post(context.Background(), time.Now().Add(5*time.Second), pt.addr, false, func(w *bufio.Writer) error {
			return writeRequest(w, pt, "oncehook", http.Header{HeaderIdempotencyKey: {"k"}}, []byte("x"))
		})
		if err != nil {
			t.Fatal(err)
		}
		closeBody(resp.Body)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != http.StatusSwitchingProtocols || codes[1] != 200 || conns.Load() != 2 {
		t.Fatalf("answers %v on %d connections, want [101 200] on 2", codes, conns.Load())
	}
}

// TestTransportBoundsTheAnswerHead: a handler that sends headers without
// end (or informational answers without end) fails its attempt once the
// heads pass maxAnswerHead, saying so wherever the cut falls in a line,
// instead of growing the node's memory until the timeout.
func TestTransportBoundsTheAnswerHead(t *testing.T) {
	for _, tt := range []struct{ name, first, line string }{
		{"long header lines", "HTTP/1.1 200 OK\r\n", "X-Junk: " + strings.Repeat("a", 1000) + "\r\n"},
		{"short header lines", "HTTP/1.1 200 OK\r\n", "a:b\r\n"},
		{"informational answers", "", "HTTP/1.1 100 Continue\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				if _, err := c.Write([]byte(tt.first)); err != nil {
					return
				}
				lines := []byte(strings.Repeat(tt.line, 4096/len(tt.line)+1))
				for sent := 0; sent < 4<<20; sent += len(lines) { // four times the limit, then stalls
					if _, err := c.Write(lines); err != nil {
						return
					}
				}
			})
			c := NewClient(1)
			defer c.CloseIdleConnections()
			_, _, err := post(t, c, url, "x")
			if err == nil || !strings.Contains(err.Error(), "answer head is over") {
				t.Fatalf("an endless head: %v; want the head refused", err)
			}
		})
	}
}

// TestTransportHeadCutByTheDeadline: a handler that has sent part of its
// status line when the attempt's time is up timed out; what it sent is not
// a malformed answer. The forwarder's direct post has a deadline of its own
// (forward_timeout) inside a longer context, as here.
func TestTransportHeadCutByTheDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	url, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		c.Write([]byte("HTTP/1.1 2"))
		<-release
	})
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	pt := parsePlain(url + "/hook")
	ev := engine.Event{Key: "src:evt_1", Source: "src", Token: 9, Payload: []byte("payload")}
	_, err := tr.post(context.Background(), time.Now().Add(300*time.Millisecond), pt.addr, false, func(w *bufio.Writer) error {
		return writeDelivery(w, pt, &ev, 1)
	})
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a head cut off at the deadline: %v; want a timeout", err)
	}
}

// TestTransportClosesAnUnreadBody: closing an answer's body before its end
// closes the connection instead of reading the rest (net/http's body would
// read a handler's endless 2xx body until the attempt's deadline).
func TestTransportClosesAnUnreadBody(t *testing.T) {
	written := make(chan int64, 1)
	url, _ := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		n, _ := c.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"))
		total := int64(n)
		chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 1<<16, strings.Repeat("x", 1<<16)))
		for total < 1<<32 { // 4 GiB: far more than any deadline lets through
			n, err := c.Write(chunk)
			total += int64(n)
			if err != nil {
				break
			}
		}
		written <- total
	})
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	pt := parsePlain(url + "/hook")
	ev := engine.Event{Key: "src:evt_1", Source: "src", Token: 9, Payload: []byte("payload")}
	resp, err := tr.post(context.Background(), time.Now().Add(time.Minute), pt.addr, false, func(w *bufio.Writer) error {
		return writeDelivery(w, pt, &ev, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := <-written; n > 64<<20 {
		t.Fatalf("the handler wrote %d bytes before the connection closed; want the rest left unread", n)
	}
}
