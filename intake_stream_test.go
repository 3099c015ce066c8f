package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawRequest sends head (request line and headers, without the blank line)
// and then body, and reads the answer without sending anything more. The
// answer must come from the headers alone when the intake refuses before
// reading the body: a server that waited for the declared body would time
// out on its own read deadline (408) instead.
func rawRequest(t *testing.T, addr, head, body string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%s\r\n\r\n%s", head, body); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	resp.Body.Close()
	return resp
}

// TestIntakeDecidesBeforeReadingTheBody: an unknown source, a refused client
// address and a declared body over the source's max_body are answered from
// the headers, before the rest of the body is sent: of a 64 MiB body nothing
// past the 8 KiB fasthttp reads with the headers is read or buffered, and the
// connection is closed.
func TestIntakeDecidesBeforeReadingTheBody(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "fenced"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/fenced"
allow_ips = ["192.0.2.0/24"]
`)
	const huge = 64 << 20
	for _, tc := range []struct {
		name, path string
		length     int
		status     int
		closed     bool // a rest over fasthttp's 256 KiB drain allowance closes the connection
	}{
		{"unknown source", "/in/nope", huge, http.StatusNotFound, true},
		{"refused address", "/in/fenced", huge, http.StatusForbidden, true},
		{"just over max_body", "/in/orders", 65<<10 + 1, http.StatusRequestEntityTooLarge, false},
		{"over every limit", "/in/orders", huge, http.StatusRequestEntityTooLarge, true},
		{"not a webhook path", "/elsewhere", huge, http.StatusNotFound, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d", tc.path, tc.length)
			// fasthttp reads the first 8 KiB of a body with the headers;
			// the rest is never read.
			resp := rawRequest(t, tn.intake, head, strings.Repeat("a", 8<<10))
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if resp.Close != tc.closed {
				t.Fatalf("connection closed %v, want %v", resp.Close, tc.closed)
			}
		})
	}
}

// TestChunkedBodyOverMaxBody: a chunked body has no declared length; it is
// refused as soon as it passes max_body, and one within the limit is read
// whole.
func TestChunkedBodyOverMaxBody(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	chunk := strings.Repeat("a", 16<<10)
	var over strings.Builder
	for range 5 { // 80 KiB against the orders source's 64 KiB
		fmt.Fprintf(&over, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	over.WriteString("0\r\n\r\n")
	head := "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
	if resp := rawRequest(t, tn.intake, head, over.String()); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked 80 KiB: status %d, want 413", resp.StatusCode)
	}

	body := orderBody("evt_chunked", "obj_chunked", 1)
	var req strings.Builder
	for _, h := range tn.signed(body, "msg_chunked") {
		fmt.Fprintf(&req, "\r\n%s: %s", h.Name, h.Value)
	}
	half := len(body) / 2
	chunked := fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:])
	if resp := rawRequest(t, tn.intake, head+req.String(), chunked); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("chunked signed body: status %d, want 202", resp.StatusCode)
	}
}

// TestTruncatedBodyIsRefused: a client that declares more than it sends and
// closes its side gets 400, and nothing is stored.
func TestTruncatedBodyIsRefused(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_trunc", "obj_trunc", 1)
	var hs strings.Builder
	for _, h := range tn.signed(body, "msg_trunc") {
		fmt.Fprintf(&hs, "\r\n%s: %s", h.Name, h.Value)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(tn.intake, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Length: %d%s\r\n\r\n%s", len(body)+10, hs.String(), body)
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if _, err := tn.event("orders:msg_trunc"); err == nil {
		t.Fatal("a truncated body was stored")
	}
}

// TestChunkedTrailersAreRefused: fields sent in a chunked body's trailer
// are not headers. A body whose signature comes only in the trailer (a
// proxy in front that checks or strips headers never sees it) is refused,
// as is any other trailer field, and nothing is stored.
func TestChunkedTrailersAreRefused(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_trailer", "obj_trailer", 1)
	var sig strings.Builder
	for _, h := range tn.signed(body, "msg_trailer") {
		fmt.Fprintf(&sig, "%s: %s\r\n", h.Name, h.Value)
	}
	head := "POST /in/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
	for _, tc := range []struct{ name, head, trailer string }{
		{"signature in the trailer", head + "\r\nTrailer: webhook-id, webhook-timestamp, webhook-signature", sig.String()},
		{"an extra field in the trailer", head + "\r\n" + strings.TrimSuffix(sig.String(), "\r\n"), "X-Extra: 1\r\n"},
	} {
		chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, tc.trailer)
		resp := rawRequest(t, tn.intake, tc.head, chunked)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", tc.name, resp.StatusCode)
		}
	}
	if _, err := tn.event("orders:msg_trailer"); err == nil {
		t.Fatal("a delivery with trailer fields was stored")
	}
}
