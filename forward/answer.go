package forward

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
)

// A direct delivery (request.go) reads the handler's answer without
// http.ReadResponse when the answer is of the plain kind nearly every handler
// sends: HTTP/1.1, a final status, its length in one Content-Length (or
// none needed: 204, 304), no Transfer-Encoding, a Connection header of
// "close" or "keep-alive" at most, and the whole head already received.
// The forwarder wants only the status, two headers (HeaderStep,
// Retry-After), the body and whether the connection may be reused;
// ReadResponse builds a map of every header and several strings and readers
// for each answer, about a sixth of a delivery's CPU besides the system
// calls. Anything else, or anything this reader is unsure of, goes to
// ReadResponse untouched: the plain reading must agree with it wherever it
// answers (FuzzPlainAnswer checks that).

// plainHead is what readPlainHead takes from an answer's head.
type plainHead struct {
	status     int
	length     int64 // bytes of body that follow the head
	close      bool  // the handler closes the connection after this answer
	step       string
	hasStep    bool
	retryAfter string
	hasRetry   bool
	// typeAt and typeEnd bound the first Content-Type's value in the head
	// (typeEnd 0: none); response copies it out only when asked, as only a
	// sync source's answer keeps it.
	typeAt, typeEnd int
	headLen         int // bytes of the head, up to and with its blank line
}

// maxPlainLength bounds the Content-Length read here; longer ones (18
// digits and up, far beyond any answer the forwarder reads) go to
// ReadResponse.
const maxPlainLength = 1<<53 - 1

// readPlainHead parses the head at the start of br's buffered bytes without
// consuming anything. ok is false when the answer is not of the plain kind
// or its head has not been received whole.
func readPlainHead(br *bufio.Reader) (h plainHead, ok bool) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return h, false
	}
	head := buf[:end+2] // every line with its CRLF
	h.headLen = end + 4

	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	// "HTTP/1.1 " status [" " reason]
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || len(line) > 12 && line[12] != ' ' {
		return h, false
	}
	for _, b := range line[9:12] {
		if b < '0' || b > '9' {
			return h, false
		}
		h.status = h.status*10 + int(b-'0')
	}
	if h.status < 200 || h.status > 599 || !plainText(line[12:]) {
		return h, false
	}

	lengths, typeSeen := 0, false
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 || !tokenName(name) || !plainText(value) {
			return h, false // folded lines, spaces before the colon, control bytes
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Type")):
			if !typeSeen && len(value) > 0 {
				// value is a sub-slice of buf: its place in the head.
				h.typeAt = cap(buf) - cap(value)
				h.typeEnd = h.typeAt + len(value)
			}
			typeSeen = true // the first one counts, as for Header.Get
		case bytes.EqualFold(name, []byte("Content-Length")):
			lengths++
			n, ok := plainLength(value)
			if !ok || lengths > 1 {
				return h, false
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return h, false
		case bytes.EqualFold(name, []byte("Connection")):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				switch tok = bytes.Trim(tok, " \t"); {
				case bytes.EqualFold(tok, []byte("close")):
					h.close = true
				case bytes.EqualFold(tok, []byte("keep-alive")):
				default:
					return h, false
				}
			}
		case bytes.EqualFold(name, []byte(HeaderStep)):
			if !h.hasStep {
				h.step, h.hasStep = string(value), true
			}
		case bytes.EqualFold(name, []byte("Retry-After")):
			if !h.hasRetry {
				h.retryAfter, h.hasRetry = string(value), true
			}
		}
	}
	switch {
	case h.status == http.StatusNoContent || h.status == http.StatusNotModified:
		h.length = 0 // never a body, whatever Content-Length says
	case lengths == 0:
		return h, false // a body that runs to the connection's end
	}
	return h, true
}

// plainLength parses a Content-Length value: digits only.
func plainLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 16 {
		return 0, false
	}
	var n int64
	for _, b := range v {
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + int64(b-'0')
	}
	return n, n <= maxPlainLength
}

// tokenName reports whether b is a header name of token characters
// (RFC 9110, 5.6.2; isTokenChar).
func tokenName(b []byte) bool {
	for _, c := range b {
		if !isTokenChar(c) {
			return false
		}
	}
	return true
}

// plainText reports whether b holds no control byte but tabs: nothing that
// ReadResponse might read differently.
func plainText(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// response consumes the head from br and returns the answer as
// http.ReadResponse would, with only what the forwarder reads of it: the
// status code (not the Status line), Oncehook-Step and Retry-After, the
// Content-Type when withType is set, the length, Close and the body.
func (h *plainHead) response(br *bufio.Reader, withType bool) *http.Response {
	var ctype string
	if withType && h.typeEnd > 0 {
		buf, _ := br.Peek(h.headLen) // buffered: cannot fail
		ctype = string(buf[h.typeAt:h.typeEnd])
	}
	_, _ = br.Discard(h.headLen) // buffered: cannot fail
	pa := &plainAnswer{body: fixedBody{br: br, left: h.length}}
	r := &pa.resp
	r.StatusCode = h.status
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.ContentLength = h.length
	r.Close = h.close
	if h.hasStep || h.hasRetry || ctype != "" {
		r.Header = make(http.Header, 3)
		if ctype != "" {
			r.Header["Content-Type"] = []string{ctype}
		}
		if h.hasStep {
			r.Header[HeaderStep] = []string{h.step}
		}
		if h.hasRetry {
			r.Header["Retry-After"] = []string{h.retryAfter}
		}
	}
	r.Body = &pa.body
	return r
}

// plainAnswer holds an answer and its body reader in one allocation.
type plainAnswer struct {
	resp http.Response
	body fixedBody
}

// fixedBody reads a body of a known length from the connection.
type fixedBody struct {
	br   *bufio.Reader
	left int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		// The handler closed the connection inside the body: never the
		// end of a body, which would let the connection be reused.
		err = io.ErrUnexpectedEOF
	}
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
