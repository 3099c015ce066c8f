package intake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMaxConnsPerIPIsApplied: [node] max_conns_per_ip reaches the intake's
// server; a client address over it is refused with 429 at accept.
func TestMaxConnsPerIPIsApplied(t *testing.T) {
	in := New(Options{Store: nullStore{}, MaxConnsPerIP: 2})
	addr := serveTCP(t, in)
	// Two kept-alive connections, each proven open by an answered request.
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection within the cap: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	resp := rawRequest(t, "http://"+addr, "GET /livez HTTP/1.1\r\nHost: x", "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connection: status %d, want 429", resp.StatusCode)
	}
}

// TestMalformedRequestLogsNoRequestBytes: at debug, fasthttp's error for a
// malformed request quotes the request (every header, a gitlab token among
// them, and the body's start); the intake logs the reason without them.
func TestMalformedRequestLogsNoRequestBytes(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := New(Options{Store: nullStore{}, Logger: log})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := in.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	const token = "gitlab-token-SECRET-4444"
	for _, head := range []string{
		"POST /in/gitlab HTTP/1.1\r\nHost: x\r\nX-Gitlab-Token: " + token + "\r\nX-Gitlab-Event-UUID: u\x01x\r\nContent-Length: 2",
		"POST /in/gitlab HTTP/1.1\r\nHost: x\r\nX-Gitlab-Token: " + token + "\x01\r\nContent-Length: 2",
	} {
		resp := rawRequest(t, "http://"+ln.Addr().String(), head, "{}")
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("malformed request: %d %v, want 400 with nosniff", resp.StatusCode, resp.Header)
		}
	}
	srv.Shutdown() // waits for the connections: their lines are written
	<-served
	logged := out.String()
	if strings.Contains(logged, token) || strings.Contains(logged, "SECRET") {
		t.Fatalf("the log holds the request's token:\n%s", logged)
	}
	if !strings.Contains(logged, "request bytes not logged") {
		t.Fatalf("the log does not record the malformed requests:\n%s", logged)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestExpectContinueDecidedFromTheHead: a sender that asks before sending
// its body (Expect: 100-continue) is refused from the head alone when
// serveSource would refuse it for the head, instead of being told to send
// a body that is then refused; a welcome one is told 100 Continue.
func TestExpectContinueDecidedFromTheHead(t *testing.T) {
	f := newIntakeFixture(t)
	addr := serveTCP(t, f.in)
	for _, tt := range []struct {
		name, head string
		want       int
		why        string // the JSON error's text
	}{
		{"unknown source", "POST /in/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000", 404, "unknown source"},
		{"not POST", "PUT /in/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 10", 405, "method not allowed: use POST"},
		{"not POST, unknown source", "PUT /in/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 10", 405, "method not allowed: use POST"},
		{"over max_body", "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000", 413, "body larger than max_body"},
		{"compressed", "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 10", 415, "content-encoding not supported: signatures cover the raw body"},
		{"compressed, second header", "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Encoding: identity\r\ncontent-encoding: br\r\nContent-Length: 10", 415, "content-encoding not supported: signatures cover the raw body"},
		{"welcome", "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 10", 100, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "%s\r\nExpect: 100-continue\r\n\r\n", tt.head)
			r := bufio.NewReader(c)
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("HTTP/1.1 %d ", tt.want); !strings.HasPrefix(line, want) {
				t.Fatalf("first answer %q, want %q...", line, want)
			}
			if tt.want == 100 {
				return
			}
			// A refusal carries nosniff, as every intake answer does.
			head, err := textproto.NewReader(r).ReadMIMEHeader()
			if err != nil || head.Get("X-Content-Type-Options") != "nosniff" {
				t.Fatalf("refusal headers %v (%v), want X-Content-Type-Options: nosniff", head, err)
			}
			if tt.want == 405 && head.Get("Allow") != "POST" {
				t.Fatalf("405 headers %v, want Allow: POST", head)
			}
			// And says why, in the JSON every other refusal has.
			n, err := strconv.Atoi(head.Get("Content-Length"))
			if err != nil || head.Get("Content-Type") != "application/json" {
				t.Fatalf("refusal headers %v, want a JSON body with its length", head)
			}
			body := make([]byte, n)
			if _, err := io.ReadFull(r, body); err != nil {
				t.Fatal(err)
			}
			var e struct{ Status, Error string }
			if err := json.Unmarshal(body, &e); err != nil || e.Status != "error" || e.Error != tt.why {
				t.Fatalf("refusal body %q, want status error and %q", body, tt.why)
			}
		})
	}
	if n := f.store.index; n != 0 {
		t.Fatalf("%d commands applied, want none", n)
	}
}

// TestBodyMemoryIsCapped: bodies must be read whole before a signature can
// be checked, so the bytes of bodies in flight are capped across all
// connections, held as they arrive: while one sender holds a large share of
// the cap with a body it is slow to send, another whose body would pass the
// cap is answered 503 with Retry-After before the rest of its body is read,
// and once the first is done the cap is free again.
func TestBodyMemoryIsCapped(t *testing.T) {
	f := newIntakeFixture(t)
	// fasthttp reads a body that fits its 16 KiB buffer before the handler
	// runs: these are larger, read by the handler as they come.
	f.in.bodyMemory = 60000
	addr := serveTCP(t, f.in)
	// The slow sender: 40,000 bytes declared, 20,000 sent: it holds the
	// 16 KiB first step, then twice that once it sent more.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprint(slow, jsonPost(40000)+strings.Repeat("x", 20000))
	waitFor(t, "the slow body to hold what it sent", func() bool { return f.in.bodies.Load() == 32<<10 })

	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	fmt.Fprint(other, jsonPost(40000)+strings.Repeat("x", 20000))
	_ = other.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(other), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a body past the cap: %d %v, want 503 with Retry-After", resp.StatusCode, resp.Header)
	}
	// The slow sender finishes (an unsigned body: 401); its share is free.
	fmt.Fprint(slow, strings.Repeat("x", 20000))
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(slow), nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the slow sender's answer: %v %v, want 401", resp, err)
	}
	waitFor(t, "the cap to be free", func() bool { return f.in.bodies.Load() == 0 })
}

// TestBodyMemoryShareOfANetwork: one client network holds at most an
// eighth of the body memory cap (or one largest body): connections from
// 127.0.0.1 that declare bodies and send them slowly are refused 503 once
// they hold their share, while a body from 127.0.0.2 is still read; a body
// declared but not sent holds only the first step.
func TestBodyMemoryShareOfANetwork(t *testing.T) {
	f := newIntakeFixture(t)
	f.in.bodyMemory = 16 << 20 // share: 2 MiB
	addr := serveTCP(t, f.in)
	// A megabyte declared, 9 KB sent: the first step is held, not the
	// declared megabyte.
	idle := dialFrom(t, addr, "127.0.0.1")
	fmt.Fprint(idle, jsonPost(1<<20)+strings.Repeat("x", 9000))
	waitFor(t, "a declared body to hold the first step", func() bool { return f.in.bodies.Load() == 16<<10 })
	// A body past half a megabyte holds a megabyte.
	big := dialFrom(t, addr, "127.0.0.1")
	fmt.Fprint(big, jsonPost(1<<20)+strings.Repeat("x", 600<<10))
	waitFor(t, "a large body to hold a megabyte", func() bool { return f.in.bodies.Load() == 16<<10+1<<20 })
	// A third would pass the network's 2 MiB: refused, though the cap
	// (16 MiB) has room.
	same := dialFrom(t, addr, "127.0.0.1")
	fmt.Fprint(same, jsonPost(1<<20)+strings.Repeat("x", 1<<20))
	if code := answerStatus(t, same); code != http.StatusServiceUnavailable {
		t.Fatalf("a third body from the same network: %d, want 503", code)
	}
	other := dialFrom(t, addr, "127.0.0.2")
	fmt.Fprint(other, jsonPost(1<<20)+strings.Repeat("x", 1<<20))
	if code := answerStatus(t, other); code != http.StatusUnauthorized {
		t.Fatalf("a body from another network: %d, want 401 (read, then refused unsigned)", code)
	}
	idle.Close()
	big.Close()
	waitFor(t, "the cap to be free", func() bool { return f.in.bodies.Load() == 0 })
}

// TestLargeBodiesLeaveRoomForSmallOnes: bodies past 64 KiB, from as many
// networks as it takes, hold at most three quarters of the body memory
// cap; the next large one is refused 503, while a small body (most
// webhooks) from yet another network is still read.
func TestLargeBodiesLeaveRoomForSmallOnes(t *testing.T) {
	f := newIntakeFixture(t)
	f.in.bodyMemory = 4 << 20 // room for large bodies: 3 MiB; a network's share: one largest body (1 MiB)
	addr := serveTCP(t, f.in)
	// Three networks each send 600 KiB of a declared megabyte: each holds
	// a megabyte, the large bodies' room is full.
	for i, ip := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		c := dialFrom(t, addr, ip)
		fmt.Fprint(c, jsonPost(1<<20)+strings.Repeat("x", 600<<10))
		waitFor(t, fmt.Sprintf("large body %d to hold a megabyte", i+1), func() bool { return f.in.bodies.Load() == int64(i+1)<<20 })
	}
	large := dialFrom(t, addr, "127.0.0.4")
	fmt.Fprint(large, jsonPost(1<<20)+strings.Repeat("x", 600<<10))
	if code := answerStatus(t, large); code != http.StatusServiceUnavailable {
		t.Fatalf("a fourth large body: %d, want 503 (the large bodies' room is full)", code)
	}
	small := dialFrom(t, addr, "127.0.0.5")
	fmt.Fprint(small, jsonPost(40000)+strings.Repeat("x", 40000))
	if code := answerStatus(t, small); code != http.StatusUnauthorized {
		t.Fatalf("a small body beside them: %d, want 401 (read, then refused unsigned)", code)
	}
}

// TestBodyMemoryShareFitsTheLargestBody: a client network's share always
// holds one largest body read whole, the byte a chunked body is read past
// max_body included: a chunked body of exactly max_body is read (here 401,
// unsigned) and one a byte over is 413, not 503 (which a provider would
// retry forever), also when max_body is the whole share; one network's
// bodies in a row each get their share back.
func TestBodyMemoryShareFitsTheLargestBody(t *testing.T) {
	f := newIntakeFixture(t)
	f.in.bodyMemory = 2 << 20 // an eighth is under max_body (1 MiB): the share is one largest body
	addr := serveTCP(t, f.in)
	chunked := func(n int) int {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w := bufio.NewWriter(c)
		fmt.Fprint(w, "POST /in/jsonkey HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		for left := n; left > 0; left -= 64 << 10 {
			m := min(left, 64<<10)
			fmt.Fprintf(w, "%x\r\n%s\r\n", m, strings.Repeat("x", m))
		}
		fmt.Fprint(w, "0\r\n\r\n")
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return answerStatus(t, c)
	}
	for i := range 3 {
		if code := chunked(1 << 20); code != http.StatusUnauthorized {
			t.Fatalf("chunked body of exactly max_body, #%d: %d, want 401 (read whole)", i+1, code)
		}
	}
	if code := chunked(1<<20 + 1); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body a byte over max_body: %d, want 413", code)
	}
	waitFor(t, "the cap to be free", func() bool { return f.in.bodies.Load() == 0 })
}

// answerStatus reads the answer to a request sent on c and returns its
// status, failing t when none comes within 10 s.
func answerStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// serveTCP serves in with its real fasthttp server on a loopback port until
// the test ends, and returns the address.
func serveTCP(t *testing.T, in *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := in.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown()
		<-served
	})
	return ln.Addr().String()
}

// TestServerLogLinesHaveOneMessage: fasthttp's own messages, logged as JSON,
// carry the record's message once (a second "msg" key is dropped by most
// JSON readers, which keep the last), with the detail under its own key and
// without the request bytes fasthttp quotes.
func TestServerLogLinesHaveOneMessage(t *testing.T) {
	var buf bytes.Buffer
	l := fasthttpLogger{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Printf("error when serving connection %q<->%q: %v", "a", "b", fmt.Errorf("cannot parse: buffer size=12, contents: \"secret\""))
	line := buf.String()
	if n := strings.Count(line, `"msg":`); n != 1 {
		t.Fatalf("%d msg keys in %s", n, line)
	}
	var rec map[string]string
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "http server" ||
		!strings.Contains(rec["detail"], "error when serving connection") || strings.Contains(line, "secret") {
		t.Fatalf("log line %s (%v)", line, err)
	}
}

// jsonPost is the head of a JSON POST to the jsonkey source declaring a
// body of n bytes.
func jsonPost(n int) string {
	return fmt.Sprintf("POST /in/jsonkey HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", n)
}

// dialFrom connects to addr from the loopback address ip, a client network
// of its own.
func dialFrom(t *testing.T, addr, ip string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
