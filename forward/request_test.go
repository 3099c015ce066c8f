package forward

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// directBytes is what a delivery of ev to rawURL writes on the direct path;
// ok is false when the URL takes the ordinary one.
func directBytes(t testing.TB, rawURL string, ev engine.Event, attempt int) (b []byte, ok bool) {
	pt := parsePlain(rawURL)
	if pt == nil {
		return nil, false
	}
	// Written twice, as a request sent again on a new connection is: the
	// same bytes both times.
	var out [2][]byte
	for i := range out {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := writeDelivery(w, pt, &ev, attempt); err != nil {
			t.Fatalf("writeDelivery: %v", err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		out[i] = buf.Bytes()
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatalf("writeRequest wrote a different request the second time:\n%q\n%q", out[0], out[1])
	}
	return out[0], true
}

// requestBytes is what Request.Write writes for the same delivery, as the
// ordinary path sends it.
func requestBytes(t testing.TB, rawURL string, ev engine.Event, attempt int) []byte {
	req, err := http.NewRequest(http.MethodPost, rawURL, bytes.NewReader(ev.Payload))
	if err != nil {
		t.Fatalf("NewRequest(%q): %v", rawURL, err)
	}
	(&Forwarder{}).setHeaders(req.Header, ev, attempt)
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		t.Fatalf("Request.Write: %v", err)
	}
	return buf.Bytes()
}

func TestDirectRequestBytes(t *testing.T) {
	hdr := func(kv ...string) []engine.Header {
		var hs []engine.Header
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, engine.Header{Name: kv[i], Value: kv[i+1]})
		}
		return hs
	}
	base := engine.Event{Key: "stripe:evt_1", Source: "stripe", Token: 42, Payload: []byte(`{"id":"evt_1"}`)}
	cases := []struct {
		name string
		url  string
		edit func(ev *engine.Event)
	}{
		{"plain", "http://127.0.0.1:9000/stripe", nil},
		{"query", "http://127.0.0.1:9000/hooks/in?team=a&x=%20y", nil},
		{"no path", "http://localhost:9000", nil},
		{"no port", "http://handler.internal/x", nil},
		{"empty port", "http://127.0.0.1:/x", nil},
		{"ipv6", "http://[::1]:9000/x", nil},
		{"escaped path", "http://127.0.0.1:9000/a%2Fb/c%20d", nil},
		{"empty body", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Payload = nil }},
		{"provider headers", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Headers = hdr("Stripe-Signature", "t=1,v1=abc", "content-type", "application/json; charset=utf-8",
				"X-Many", "one", "x-many", "two", "Zz-Last", "z", "A-First", "a")
		}},
		{"stored user agent", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Headers = hdr("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		}},
		{"blank user agent", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Headers = hdr("User-Agent", "") }},
		{"spaced user agent", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Headers = hdr("User-Agent", " \t ") }},
		{"two user agents", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Headers = hdr("User-Agent", "a", "User-Agent", "b") }},
		{"spaces around values", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Headers = hdr("X-Pad", "  v  \t", "X-Tab", "\tv") }},
		{"headers we set", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Headers = hdr(HeaderIdempotencyKey, "spoofed", HeaderFencingToken, "1", HeaderLastStep, "spoofed", HeaderSource, "x")
		}},
		{"headers never forwarded", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Headers = hdr("Host", "evil", "Content-Length", "1", "Transfer-Encoding", "chunked", "Connection", "close", "Bad Name", "x", "X-Ctl", "a\r\nb")
		}},
		{"step", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Step = "charged" }},
		{"replayed", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Audit = []engine.AuditEntry{{At: 1733360000123456789, Who: "ops", Action: "replay"}, {At: 1733370000000000000, Who: "ops", Action: "replay"}}
			ev.Headers = hdr("Oncehook-Replayed-At", "spoofed")
		}},
		{"headers we set, lower case", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			ev.Headers = hdr("idempotency-key", "spoofed", "oncehook-attempt", "9", "oncehook-last-step", "x")
			ev.Step = "real"
		}},
		{"empty user agent first", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Headers = hdr("user-agent", "", "User-Agent", "b") }},
		{"more headers than the stack holds", "http://127.0.0.1:9000/x", func(ev *engine.Event) {
			for i := range 24 {
				ev.Headers = append(ev.Headers, engine.Header{Name: fmt.Sprintf("X-H%02d", 23-i), Value: strconv.Itoa(i)})
			}
		}},
		{"key with spaces", "http://127.0.0.1:9000/x", func(ev *engine.Event) { ev.Key = " stripe:evt 1 " }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := base
			if tc.edit != nil {
				tc.edit(&ev)
			}
			got, ok := directBytes(t, tc.url, ev, 3)
			if !ok {
				t.Fatalf("parsePlain(%q) = nil, want a plain target", tc.url)
			}
			if want := requestBytes(t, tc.url, ev, 3); !bytes.Equal(got, want) {
				t.Errorf("direct request differs from Request.Write:\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestParsePlainRefuses(t *testing.T) {
	for _, u := range []string{
		"https://127.0.0.1:9000/x",
		"http://user:pass@127.0.0.1:9000/x",
		"http:opaque",
		"http:///x",
		"http://[fe80::1%25eth0]:9000/x",
		"http://héllo.internal/x",
		"http://127.0.0.1:9000/x\x7f",
		"ftp://127.0.0.1/x",
		"::not a url",
	} {
		if pt := parsePlain(u); pt != nil {
			t.Errorf("parsePlain(%q) = %+v, want nil (the ordinary path)", u, *pt)
		}
	}
}

func TestPlainTargetsBounded(t *testing.T) {
	var p plainTargets
	for i := range 3 * maxPlainTargets {
		u := "http://127.0.0.1:9000/" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "/" + strings.Repeat("y", i)
		if p.get(u) == nil {
			t.Fatalf("get(%q) = nil", u)
		}
		if n := len(p.m); n > maxPlainTargets {
			t.Fatalf("%d URLs cached, want at most %d", n, maxPlainTargets)
		}
	}
}

// FuzzDirectRequest: whatever the stored headers, key, step and path, the
// direct path writes the bytes Request.Write writes, or leaves the URL to
// the ordinary path.
func FuzzDirectRequest(f *testing.F) {
	f.Add("/stripe", "Stripe-Signature", "t=1,v1=abc", "user-agent", "Stripe/1.0", "stripe:evt_1", "", []byte(`{}`))
	f.Add("/x?y=%20", "X-A", " a ", "X-A", "b", "k", "step-1", []byte{})
	f.Add("", "Host", "evil", "Content-Length", "9", "k\r\nX: y", "s\n", []byte("body"))
	f.Fuzz(func(t *testing.T, path, n1, v1, n2, v2, key, step string, payload []byte) {
		rawURL := "http://127.0.0.1:9000" + path
		if _, err := http.NewRequest(http.MethodPost, rawURL, nil); err != nil {
			if parsePlain(rawURL) != nil {
				t.Fatalf("parsePlain accepts %q, which NewRequest refuses: %v", rawURL, err)
			}
			return
		}
		ev := engine.Event{Key: key, Source: "src", Step: step, Token: 7, Payload: payload,
			Headers: []engine.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}}}
		got, ok := directBytes(t, rawURL, ev, 1)
		if !ok {
			return
		}
		var req bytes.Buffer
		r, _ := http.NewRequest(http.MethodPost, rawURL, bytes.NewReader(payload))
		(&Forwarder{}).setHeaders(r.Header, ev, 1)
		if err := r.Write(&req); err != nil {
			t.Fatalf("direct path took %q, which Request.Write refuses: %v", rawURL, err)
		}
		if !bytes.Equal(got, req.Bytes()) {
			t.Fatalf("direct request differs from Request.Write:\n got %q\nwant %q", got, req.Bytes())
		}
	})
}

// TestDirectPostResendsTheSameRequest: a handler that closes its
// connection after each answer makes every later post find its idle
// connection dead and send the request again on a new one, headers and
// body unchanged.
func TestDirectPostResendsTheSameRequest(t *testing.T) {
	type seen struct{ ua, key, body string }
	got := make(chan seen, 8)
	closed := make(chan struct{}, 8)
	url, conns := rawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		defer func() { closed <- struct{}{} }()
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		got <- seen{req.Header.Get("User-Agent"), req.Header.Get(HeaderIdempotencyKey), string(b)}
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		c.Close()
	})
	tr := newTransport(1)
	defer tr.CloseIdleConnections()
	pt := parsePlain(url + "/hook")
	ev := engine.Event{Key: "src:evt_1", Source: "src", Token: 9, Payload: []byte("payload"),
		Headers: []engine.Header{{Name: "User-Agent", Value: "Provider/2"}}}
	for i := range 3 {
		resp, err := tr.post(context.Background(), time.Now().Add(5*time.Second), pt.addr, false, func(w *bufio.Writer) error {
			return writeDelivery(w, pt, &ev, 1)
		})
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		closeBody(resp.Body)
		if s := <-got; s != (seen{"Provider/2", "src:evt_1", "payload"}) {
			t.Fatalf("post %d: handler got %+v", i, s)
		}
		<-closed // its connection is gone: the next post finds it dead
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (each post after the first sent again on a new one)", n)
	}
}

// writeRequest writes a POST of body to pt with the User-Agent ua and the
// other headers h, as Request.Write writes it: request line, Host,
// User-Agent, Content-Length, then h sorted by name (Header.Write cleans
// the values the same way). h must hold none of the headers Request.Write
// writes itself. The transport's tests post arbitrary headers with it, and
// BenchmarkDeliveryRequest measures against it the map writeDelivery does
// without.
func writeRequest(w *bufio.Writer, pt *plainTarget, ua string, h http.Header, body []byte) error {
	writeRequestHead(w, pt, ua, len(body))
	if err := h.Write(w); err != nil {
		return err
	}
	w.WriteString("\r\n")
	_, err := w.Write(body)
	return err
}

// BenchmarkDeliveryRequest: writing a delivery's request (a GitHub event of
// 1 KiB with three stored headers) with writeDelivery, and as before it, by
// way of setHeaders' map and writeRequest.
func BenchmarkDeliveryRequest(b *testing.B) {
	pt := parsePlain("http://127.0.0.1:9000/hook")
	ev := engine.Event{Key: "github:0f3c1a2b-1111-2222-3333-444455556666", Source: "github", Token: 123456,
		Payload: make([]byte, 1024), Headers: []engine.Header{{Name: "Content-Type", Value: "application/json"},
			{Name: "X-GitHub-Event", Value: "push"}, {Name: "User-Agent", Value: "GitHub-Hookshot/abc"}}}
	w := bufio.NewWriterSize(io.Discard, 8<<10)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			writeDelivery(w, pt, &ev, 1)
			w.Flush()
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h := make(http.Header, len(ev.Headers)+6)
			(&Forwarder{}).setHeaders(h, ev, 1)
			ua := h.Get("User-Agent")
			h.Del("User-Agent")
			writeRequest(w, pt, ua, h, ev.Payload)
			w.Flush()
		}
	})
}

// TestHandlerOriginKeepsSecretsOut: the failure log names where a delivery
// went, never a path, query or user:password that may hold a token.
func TestHandlerOriginKeepsSecretsOut(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:9000/hook?token=s3cret": "http://127.0.0.1:9000",
		"https://user:pw@handler.internal/x":      "https://handler.internal",
		"::not a url":                             "(unparsable forward URL)",
	} {
		if got := handlerOrigin(in); got != want {
			t.Errorf("handlerOrigin(%q) = %q, want %q", in, got, want)
		}
	}
}
