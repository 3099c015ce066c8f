package intake

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"oncehook/providers"
)

// serveWithReadTimeout serves f's intake on a loopback port with the read
// timeout given (10 s in the binary; only the duration differs).
func serveWithReadTimeout(t *testing.T, f *intakeFixture, readTimeout time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := f.in.HTTPServer()
	srv.ReadTimeout = readTimeout
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(); <-served })
	return ln.Addr().String()
}

// standardHeaders signs body for f's standard source as header lines.
func standardHeaders(t *testing.T, f *intakeFixture, id, body string) string {
	t.Helper()
	s, _ := providers.Lookup("standard")
	hs, err := s.Sign([]byte(body), []byte(f.secret), time.Now(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%s: %s\r\n", h.Name, h.Value)
	}
	return b.String()
}

// rawExchange writes raw on a new connection and reads one answer.
func rawExchange(t *testing.T, addr, raw string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestChunkedBodyStallIs408: a chunked body that stops arriving is a 408
// wherever it stops (a sender retries a 408, not always a 400); fasthttp
// wraps a timeout inside a chunk's framing in an error that hides it.
func TestChunkedBodyStallIs408(t *testing.T) {
	f := newIntakeFixture(t)
	addr := serveWithReadTimeout(t, f, 300*time.Millisecond)
	body := `{"a":1}`
	head := "POST /in/orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + standardHeaders(t, f, "msg_stall", body) + "\r\n"
	for _, tc := range []struct{ name, raw string }{
		{"before the next chunk's size", head + "7\r\n" + body + "\r\n"},
		{"before a chunk's CRLF", head + "7\r\n" + body},
		{"inside the size line", head + "7\r"},
	} {
		if status, answer := rawExchange(t, addr, tc.raw); status != http.StatusRequestTimeout {
			t.Errorf("stalled %s: %d %s, want 408", tc.name, status, answer)
		}
	}
	if _, err := f.store.Get("orders:msg_stall", false); err == nil {
		t.Error("a stalled body was claimed")
	}
}

// TestTrailerFasthttpForbidsGetsTheTrailerAnswer: a trailer field fasthttp
// refuses itself (Authorization, Host, Content-Type...) gets the answer
// every other trailer field gets, not a malformed-body one.
func TestTrailerFasthttpForbidsGetsTheTrailerAnswer(t *testing.T) {
	f := newIntakeFixture(t)
	addr := serveWithReadTimeout(t, f, 5*time.Second)
	body := `{"a":1}`
	const want = "trailer fields after a chunked body are not accepted"
	for _, trailer := range []string{"X-A: y", "Authorization: Bearer x", "Content-Type: text/plain"} {
		raw := "POST /in/orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + standardHeaders(t, f, "msg_tr", body) +
			"\r\n7\r\n" + body + "\r\n0\r\n" + trailer + "\r\n\r\n"
		if status, answer := rawExchange(t, addr, raw); status != http.StatusBadRequest || !strings.Contains(answer, want) {
			t.Errorf("trailer %q: %d %s, want 400 %q", trailer, status, answer, want)
		}
	}
}
