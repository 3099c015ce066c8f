package forward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"oncehook/idleconn"
)

// transport is the RoundTripper of NewClient. A plain-HTTP request runs on
// the caller's goroutine over a kept-alive connection: the request is
// written with Request.Write and the answer parsed with http.ReadResponse,
// one write and one read per delivery. http.Transport runs two goroutines
// per connection and hands every request and answer between them and the
// caller; on the leader, where each event costs one delivery, that hand-off
// was about a quarter of a delivery's CPU. Anything else (https, a URL with
// user info) goes to the fallback http.Transport.
//
// Differences from http.Transport that matter here: the request is written
// whole before the answer is read (a handler that answers early and closes
// the connection while a large body is still being sent gives a write
// error, which is a retry like any other failure); a request that fails on
// a reused connection before any byte of an answer arrived (the handler
// closed an idle connection) is sent once more on a new connection, as
// http.Transport does for requests whose body can be rewound; and where
// http.Transport's reader goroutine notices an idle connection's stray
// answer or close, this transport peeks at an idle connection before it
// reuses it (idleconn) and keeps none with bytes left after an answer. The
// forwarder's own posts (post) also read plain answers without
// http.ReadResponse (forward/answer.go).
type transport struct {
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback *http.Transport
	maxIdle  int // idle connections kept per host
	idleFor  time.Duration

	mu   sync.Mutex // guards idle
	idle map[string][]*conn
}

// conn is one kept-alive connection to a handler.
type conn struct {
	nc    net.Conn
	head  headLimit // what br reads through: bounds an answer's head
	br    *bufio.Reader
	bw    *bufio.Writer
	probe *idleconn.Probe // looks at it before a reuse
	used  time.Time       // when it was last put back idle
}

func newTransport(maxIdle int) *transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &transport{
		dial: d.DialContext,
		fallback: &http.Transport{
			Proxy:                 nil,
			DialContext:           d.DialContext,
			MaxIdleConns:          4 * maxIdle,
			MaxIdleConnsPerHost:   maxIdle,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   5 * time.Second,
			ExpectContinueTimeout: time.Second,
			DisableCompression:    true,
		},
		maxIdle: maxIdle,
		idleFor: 90 * time.Second,
		idle:    make(map[string][]*conn),
	}
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.User != nil || req.URL.Host == "" {
		return t.fallback.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	deadline, _ := ctx.Deadline()
	for attempt := 0; ; attempt++ {
		c, reused, err := t.get(ctx, deadline, addr, attempt > 0)
		if err != nil {
			closeReqBody(req)
			return nil, err
		}
		resp, unanswered, err := t.exchange(ctx, deadline, c, reused, addr, func(w *bufio.Writer) error { return req.Write(w) }, req)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		if !retryable(ctx, reused, attempt, unanswered, err) {
			closeReqBody(req)
			return nil, err
		}
		// The handler closed an idle connection before reading this
		// request: nothing reached it. Send it again on a new one.
		t.dropIdle(addr)
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
		}
	}
}

// post is RoundTrip for a POST to a plain-HTTP handler at addr without an
// http.Request: write writes the whole request (forward/request.go). The
// request may be written twice, as RoundTrip may send one twice. ctx
// cancels it; deadline ends it, as a request context's deadline does. The
// answer's Content-Type is read only when withType is set.
func (t *transport) post(ctx context.Context, deadline time.Time, addr string, withType bool, write func(*bufio.Writer) error) (*http.Response, error) {
	req := postRequest
	if withType {
		req = typedPostRequest
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := t.get(ctx, deadline, addr, attempt > 0)
		if err != nil {
			return nil, err
		}
		resp, unanswered, err := t.exchange(ctx, deadline, c, reused, addr, write, req)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		if !retryable(ctx, reused, attempt, unanswered, err) {
			return nil, err
		}
		t.dropIdle(addr)
	}
}

// postRequest stands for the requests post sends where http.ReadResponse
// wants the request an answer is to.
// typedPostRequest is the same for an answer whose Content-Type is kept.
var postRequest, typedPostRequest = &http.Request{Method: http.MethodPost}, &http.Request{Method: http.MethodPost}

// retryable reports whether a request that failed with err is sent once
// more on a new connection: only the first try, on a reused connection,
// that failed before any byte of an answer came, not by ctx or a deadline.
func retryable(ctx context.Context, reused bool, attempt int, unanswered bool, err error) bool {
	return reused && attempt == 0 && unanswered && ctx.Err() == nil && !isTimeout(err)
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// exchange writes a request on c with write and reads the answer to req. On
// success the connection belongs to the answer's body until it is closed.
// unanswered reports a failure before any byte of an answer arrived. The
// connection's deadline is deadline (none when zero); cancelling ctx
// interrupts the write, the read and the body's reads.
func (t *transport) exchange(ctx context.Context, deadline time.Time, c *conn, reused bool, addr string, write func(*bufio.Writer) error, req *http.Request) (resp *http.Response, unanswered bool, err error) {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, true, err
	}
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	fail := func(unanswered bool, err error) (*http.Response, bool, error) {
		stop()
		if cerr := ctx.Err(); cerr != nil {
			return nil, unanswered, cerr
		}
		return nil, unanswered, err
	}
	werr := write(c.bw)
	if werr == nil {
		werr = c.bw.Flush()
	}
	broken := false
	if werr != nil {
		// A handler may answer before it has read the whole body (a 2xx
		// on the headers alone, a 413) and close, and the writes then fail
		// on the reset; its answer is already in the receive buffer, and
		// is the attempt's outcome, as net/http's client takes it. The
		// connection is not used again.
		if ctx.Err() != nil || isTimeout(werr) || !answerWaiting(c, deadline) || ctx.Err() != nil {
			return fail(true, werr)
		}
		broken = true
	} else if _, err := c.br.Peek(1); err != nil {
		return fail(true, err)
	}
	// The heads of the answer, informational ones included, are read
	// within maxAnswerHead bytes; the body has limits of its own.
	c.head.left = maxAnswerHead - int64(c.br.Buffered())
	defer func() { c.head.left = -1 }()
	for {
		var resp *http.Response
		var h plainHead
		plain := false
		if req == postRequest || req == typedPostRequest { // post's answers only: see forward/answer.go
			h, plain = readPlainHead(c.br)
		}
		if plain {
			resp = h.response(c.br, req == typedPostRequest)
		} else if resp, err = http.ReadResponse(c.br, req); err != nil {
			if c.head.left == 0 && !errors.Is(err, errAnswerHead) {
				// Cut mid-line at the limit, the head parses as a malformed one.
				err = errAnswerHead
			} else if !time.Now().Before(deadline) {
				// A head cut off by the deadline parses as a malformed
				// one (bufio hands back the part of a line it has without
				// the error): the attempt timed out.
				err = fmt.Errorf("%w (answer cut off at the deadline: %v)", os.ErrDeadlineExceeded, err)
			}
			return fail(false, err)
		}
		if reused && broken && resp.StatusCode == http.StatusRequestTimeout {
			// A server closing a kept-alive connection it found idle may
			// say 408 as it goes, and the request's writes then fail on
			// the close: no answer to this request, which is sent again on
			// a new connection (post). A 408 to a request written whole is
			// its answer, as net/http's client takes it.
			c.nc.Close() // the body is not read: it may drip
			resp.Body.Close()
			return fail(true, errIdleClosed)
		}
		// Informational answers (103 Early Hints...) precede the real one.
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		// A 101's connection now speaks another protocol: never reused.
		keep := !broken && !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
		resp.Body = &body{ReadCloser: resp.Body, t: t, c: c, addr: addr, keep: keep, stop: stop}
		return resp, false, nil
	}
}

// errIdleClosed fails a request that a kept-alive connection answered 408.
var errIdleClosed = errors.New("the kept-alive connection answered 408 (closed as idle)")

// answerWaiting reports whether an answer's first byte can be read from c
// after its request's write failed: one already received, or one arriving
// within earlyAnswerWait (never past deadline).
func answerWaiting(c *conn, deadline time.Time) bool {
	wait := time.Now().Add(earlyAnswerWait)
	if !deadline.IsZero() && deadline.Before(wait) {
		wait = deadline
	}
	if err := c.nc.SetReadDeadline(wait); err != nil {
		return false
	}
	_, err := c.br.Peek(1)
	// ctx's cancel sets a deadline in the past: the caller checks ctx after.
	_ = c.nc.SetReadDeadline(deadline)
	return err == nil
}

// earlyAnswerWait bounds the wait for an answer after a failed write: a
// handler that answered before the reset sent it before, so it is there or
// on its way.
const earlyAnswerWait = 100 * time.Millisecond

// maxAnswerHead bounds the bytes of a handler's answer heads (status lines
// and headers, informational answers included), as net/http's client
// bounds them: a handler that sends headers without end would otherwise
// grow the node's memory until the attempt's timeout.
const maxAnswerHead = 1 << 20

// errAnswerHead fails an answer whose heads are longer than maxAnswerHead.
var errAnswerHead = fmt.Errorf("the handler's answer head is over %d bytes", maxAnswerHead)

// headLimit is the reader under a connection's bufio.Reader: while left is
// not negative (an answer's head is being read) it reads at most left more
// bytes, then fails with errAnswerHead.
type headLimit struct {
	r    io.Reader
	left int64 // -1: no limit
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errAnswerHead
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// aLongTimeAgo is a deadline in the past: it makes pending I/O fail at once.
var aLongTimeAgo = time.Unix(1, 0)

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// body hands the connection back when the answer was read to its end.
type body struct {
	io.ReadCloser
	t      *transport
	c      *conn
	addr   string // host:port the connection goes to
	keep   bool   // the connection may be reused after this answer
	eof    bool
	closed bool
	stop   func() bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.eof {
		// The rest is not wanted, and net/http's body reads all of it to
		// close (a handler's endless 2xx body, until the deadline): the
		// connection goes instead.
		b.c.nc.Close()
		b.ReadCloser.Close()
		b.stop()
		return nil
	}
	err := b.ReadCloser.Close()
	stopped := b.stop()
	// Bytes already read past the answer's end are bytes nobody asked for
	// (a second answer, a body after a 204): the next request on this
	// connection would take them for its answer.
	if b.eof && b.keep && stopped && err == nil && b.c.br.Buffered() == 0 && b.c.nc.SetDeadline(time.Time{}) == nil {
		b.t.put(b.addr, b.c)
		return nil
	}
	b.c.nc.Close()
	return err
}

// get returns an idle connection to addr, or a new one, dialled before
// deadline (when not zero); fresh asks for a new one. reused tells which.
// An idle connection the handler closed, or on which it sent bytes after
// its answer, is closed instead of used (idleconn): those bytes would be
// read as the answer to this request, which may be another source's event.
// Bytes that arrive only after the request went out cannot be told from
// its answer, by this transport or any HTTP/1.1 client.
func (t *transport) get(ctx context.Context, deadline time.Time, addr string, fresh bool) (*conn, bool, error) {
	now := time.Now()
	t.mu.Lock()
	for cs := t.idle[addr]; len(cs) > 0 && !fresh; cs = t.idle[addr] {
		c := cs[len(cs)-1]
		t.idle[addr] = cs[:len(cs)-1]
		t.mu.Unlock()
		if now.Sub(c.used) < t.idleFor && c.probe.Reusable() {
			return c, true, nil
		}
		c.nc.Close()
		t.mu.Lock()
	}
	t.mu.Unlock()
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c := &conn{nc: nc, head: headLimit{r: nc, left: -1}, bw: bufio.NewWriterSize(nc, 4<<10), probe: idleconn.NewProbe(nc)}
	c.br = bufio.NewReaderSize(&c.head, 4<<10)
	return c, false, nil
}

// dropIdle closes the idle connections to addr. It runs when one of them
// turned out closed by the handler: nothing tells an idle connection the
// handler closed from a live one until a request fails on it, and when a
// handler restarts (a deploy) or closes connections idle for a few seconds
// (Node.js does after five), the others were opened before and are closed
// too. Sending the request again on the next of them would fail the same
// way and spend one of the event's attempts on a handler that is up; the
// retry goes on a new connection instead (get's fresh), and the following
// deliveries open new ones as they need.
func (t *transport) dropIdle(addr string) {
	t.mu.Lock()
	cs := t.idle[addr]
	delete(t.idle, addr)
	t.mu.Unlock()
	for _, c := range cs {
		c.nc.Close()
	}
}

// put keeps c idle for the next request to addr, or closes it when enough
// are kept. Idle connections are reused last in, first out, so those at the
// bottom are the ones a pool that has shrunk no longer reaches: put closes
// up to two of them once they have been idle for idleFor, so that the
// connections a burst opened do not stay open for good (closeStale does it
// for a handler that gets no more deliveries).
func (t *transport) put(addr string, c *conn) {
	c.used = time.Now()
	var stale [2]*conn
	n := 0
	t.mu.Lock()
	cs := t.idle[addr]
	for n < len(stale) && len(cs) > 0 && c.used.Sub(cs[0].used) >= t.idleFor {
		stale[n] = cs[0]
		cs[0] = nil
		cs = cs[1:]
		n++
	}
	keep := len(cs) < t.maxIdle
	if keep {
		cs = append(cs, c)
	}
	t.idle[addr] = cs
	t.mu.Unlock()
	for _, s := range stale[:n] {
		s.nc.Close()
	}
	if !keep {
		c.nc.Close()
	}
}

// closeStale closes the connections idle for idleFor, to every handler:
// put does so for a handler still receiving deliveries, this (on the
// sweeper's tick) for one that went quiet after a burst, which would
// otherwise keep up to maxIdle descriptors open for as long as the node
// leads. A stack's bottom is its oldest: put appends, get takes the top.
func (t *transport) closeStale(now time.Time) {
	var stale []*conn
	t.mu.Lock()
	for addr, cs := range t.idle {
		i := 0
		for i < len(cs) && now.Sub(cs[i].used) >= t.idleFor {
			i++
		}
		if i == 0 {
			continue
		}
		stale = append(stale, cs[:i]...)
		clear(cs[:i])
		if i == len(cs) {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = cs[i:]
		}
	}
	t.mu.Unlock()
	for _, c := range stale {
		c.nc.Close()
	}
}

// CloseIdleConnections closes every idle connection (http.Client calls it).
func (t *transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*conn)
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.nc.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}
