package forward

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// plainAnswers are answers of the plain kind and of the kinds left to
// http.ReadResponse: each is read both ways by TestPlainAnswer and seeds
// FuzzPlainAnswer.
var plainAnswers = []struct {
	name  string
	raw   string
	plain bool // read by readPlainHead
}{
	{"200 with a body", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", true},
	{"202 without a body", "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nDate: Wed, 02 Dec 2026 12:00:00 GMT\r\n\r\n", true},
	{"status without a reason", "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", true},
	{"204", "HTTP/1.1 204 No Content\r\n\r\n", true},
	{"204 that names a length", "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", true},
	{"304", "HTTP/1.1 304 Not Modified\r\n\r\n", true},
	{"connection close", "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 4\r\n\r\noops", true},
	{"keep-alive, as node answers", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\nok", true},
	{"connection tokens", "HTTP/1.1 200 OK\r\nconnection: Keep-Alive , CLOSE\r\nContent-Length: 0\r\n\r\n", true},
	{"step and retry-after", "HTTP/1.1 429 Too Many Requests\r\noncehook-step:  charged \t\r\nRetry-After: 30\r\nRetry-After: 60\r\nOncehook-Step: second\r\ncontent-length: 0\r\n\r\n", true},
	{"empty step", "HTTP/1.1 200 OK\r\nOncehook-Step:\r\nContent-Length: 0\r\n\r\n", true},
	{"leading zeros", "HTTP/1.1 200 OK\r\nContent-Length: 0003\r\n\r\nabcdef", true},
	{"next answer behind", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n", true},
	{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", true},
	{"content types: the first counts", "HTTP/1.1 200 OK\r\ncontent-type:  application/json; charset=utf-8 \r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", true},
	{"empty content type first", "HTTP/1.1 200 OK\r\nContent-Type:\r\nContent-Type: text/xml\r\nContent-Length: 0\r\n\r\n", true},
	{"non-ASCII value", "HTTP/1.1 200 OK\r\nX-Note: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n", true},
	{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false},
	{"no length: body to the end", "HTTP/1.1 200 OK\r\n\r\nuntil close", false},
	{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false},
	{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", false},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false},
	{"100 continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false},
	{"folded header", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", false},
	{"space before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", false},
	{"bare newlines", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", false},
	{"other connection token", "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n", false},
	{"head not received whole", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", false},
	{"bad status", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", false},
	{"status 99", "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n", false},
}

// TestPlainAnswer: the plain answers are read by readPlainHead and the
// others left untouched, and whatever it reads agrees with http.ReadResponse.
func TestPlainAnswer(t *testing.T) {
	for _, c := range plainAnswers {
		t.Run(c.name, func(t *testing.T) {
			if plain := comparePlainAnswer(t, []byte(c.raw)); plain != c.plain {
				t.Fatalf("read by readPlainHead: %v, want %v", plain, c.plain)
			}
		})
	}
}

// FuzzPlainAnswer: for any bytes a handler may answer, readPlainHead either
// leaves them to http.ReadResponse or reads what it reads.
func FuzzPlainAnswer(f *testing.F) {
	for _, c := range plainAnswers {
		f.Add([]byte(c.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		comparePlainAnswer(t, raw)
	})
}

// comparePlainAnswer reads raw with readPlainHead and, when it is read,
// with http.ReadResponse too, and fails on any difference in what the
// forwarder uses: status, the three headers, Close, the body (and whether
// it was cut short) and what is left on the connection after it. Read
// without its Content-Type, the answer has none and is otherwise the same.
func comparePlainAnswer(t *testing.T, raw []byte) (plain bool) {
	t.Helper()
	br := bufio.NewReaderSize(bytes.NewReader(raw), 4<<10)
	br.Peek(1)
	buffered := br.Buffered()
	h, ok := readPlainHead(br)
	if br.Buffered() != buffered {
		t.Fatal("readPlainHead consumed bytes")
	}
	if !ok {
		return false
	}
	got := h.response(br, true)
	gotBody, gotErr := io.ReadAll(got.Body)
	gotRest, _ := io.ReadAll(br)

	untyped := bufio.NewReaderSize(bytes.NewReader(raw), 4<<10)
	untyped.Peek(1)
	uh, _ := readPlainHead(untyped)
	u := uh.response(untyped, false)
	if _, ok := u.Header["Content-Type"]; ok || u.StatusCode != got.StatusCode || u.Header[HeaderStep] == nil != (got.Header[HeaderStep] == nil) {
		t.Fatalf("read without its type: %d %v; with it: %d %v", u.StatusCode, u.Header, got.StatusCode, got.Header)
	}
	if ub, _ := io.ReadAll(u.Body); !bytes.Equal(ub, gotBody) {
		t.Fatalf("read without its type, body %q; with it %q", ub, gotBody)
	}

	std := bufio.NewReaderSize(bytes.NewReader(raw), 4<<10)
	want, err := http.ReadResponse(std, postRequest)
	if err != nil {
		t.Fatalf("read as plain (status %d), but http.ReadResponse: %v", h.status, err)
	}
	wantBody, wantErr := io.ReadAll(want.Body)
	wantRest, _ := io.ReadAll(std)

	if got.StatusCode != want.StatusCode || got.Close != want.Close || got.ContentLength != want.ContentLength {
		t.Fatalf("status, close, length %d %v %d; http.ReadResponse %d %v %d",
			got.StatusCode, got.Close, got.ContentLength, want.StatusCode, want.Close, want.ContentLength)
	}
	if g, w := got.Header.Get("Content-Type"), want.Header.Get("Content-Type"); g != w {
		t.Fatalf("Content-Type %q; http.ReadResponse %q", g, w)
	}
	for _, name := range []string{HeaderStep, "Retry-After"} {
		g, gok := got.Header[name]
		w, wok := want.Header[name]
		if gok != wok || gok && g[0] != w[0] {
			t.Fatalf("%s %q (%v); http.ReadResponse %q (%v)", name, g, gok, w, wok)
		}
	}
	if !bytes.Equal(gotBody, wantBody) || (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("body %q (%v); http.ReadResponse %q (%v)", gotBody, gotErr, wantBody, wantErr)
	}
	if gotErr == nil && !bytes.Equal(gotRest, wantRest) {
		t.Fatalf("left after the body %q; http.ReadResponse %q", gotRest, wantRest)
	}
	return true
}

// TestPlainBodyCutShort: a handler that closes the connection inside a
// body it announced longer gives an error, never the end of the body (which
// would put the connection back for the next delivery).
func TestPlainBodyCutShort(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
	br.Peek(1)
	h, ok := readPlainHead(br)
	if !ok {
		t.Fatal("not read as plain")
	}
	b, err := io.ReadAll(h.response(br, false).Body)
	if string(b) != "abc" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body %q, %v; want abc, unexpected EOF", b, err)
	}
}

// BenchmarkReadAnswer: reading a typical handler's answer (Go's net/http
// server, 202 with a short body) with readPlainHead and with
// http.ReadResponse.
func BenchmarkReadAnswer(b *testing.B) {
	raw := []byte("HTTP/1.1 202 Accepted\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Wed, 02 Dec 2026 12:00:00 GMT\r\nContent-Length: 3\r\n\r\nok\n")
	for _, plain := range []bool{true, false} {
		name := "ReadResponse"
		if plain {
			name = "plain"
		}
		b.Run(name, func(b *testing.B) {
			r := bytes.NewReader(raw)
			br := bufio.NewReaderSize(r, 4<<10)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(raw)
				br.Reset(r)
				br.Peek(1)
				var resp *http.Response
				if plain {
					h, ok := readPlainHead(br)
					if !ok {
						b.Fatal("not read as plain")
					}
					resp = h.response(br, false)
				} else {
					resp, _ = http.ReadResponse(br, postRequest)
				}
				closeBody(resp.Body)
			}
		})
	}
}
