package connlimit

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits are a listener's caps; zero means no cap.
type Limits struct {
	Total      int // connections open at once
	PerNetwork int // open at once from one client network (Network)
}

// Options configure a Listener beyond its Limits.
type Options struct {
	// Name is the listener's name in log lines ("intake", "admin").
	Name   string
	Logger *slog.Logger // default slog.Default()
	// Refuse, when set, writes a refusal to a connection over a cap before
	// it is closed; it is given a write deadline of a second. Over is
	// "total" or "network".
	Refuse func(c net.Conn, over string)
	// MinIdle is how long a connection must have waited between requests
	// before a new one over the total cap may take its place (ConnState);
	// less, and its client may be sending its next request already.
	// Default DefaultMinIdle.
	MinIdle time.Duration
}

// Listener wraps a net.Listener with the caps and the accept backoff.
type Listener struct {
	net.Listener
	opts    Options
	log     *slog.Logger
	count   *Counter
	refused atomic.Uint64
	reaped  atomic.Uint64
	quiet   Sampler

	// The connections waiting for a request head (ConnState), longest
	// waiting first: a connection over the total cap takes the place of
	// the first (reapIdle).
	idleMu             sync.Mutex
	idleHead, idleTail *conn
}

// DefaultMinIdle is Options.MinIdle's default.
const DefaultMinIdle = time.Second

// Wrap returns ln with the caps of l.
func Wrap(ln net.Listener, l Limits, opts Options) *Listener {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.MinIdle <= 0 {
		opts.MinIdle = DefaultMinIdle
	}
	return &Listener{Listener: ln, opts: opts, log: log, count: NewCounter(l)}
}

// Refused is the number of connections closed for being over a cap.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Open is the number of connections accepted and not yet closed.
func (l *Listener) Open() int { return l.count.Open() }

// Accept returns the next connection within the caps. Transient errors are
// waited out (5 ms, doubling to 1 s); any other error, the listener's
// closing included, is returned.
func (l *Listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !Transient(err) {
				return nil, err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if n, ok := l.quiet.Allow(time.Now()); ok {
				l.log.Warn("accept failed; retrying", "listener", l.opts.Name, "err", err, "retry_in", backoff, "since_last_line", n)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		key := Network(c.RemoteAddr())
		over := l.count.Acquire(key)
		if over == "total" && l.reapIdle(time.Now()) {
			over = l.count.Acquire(key)
		}
		if over != "" {
			l.refuse(c, over)
			continue
		}
		wc := &conn{Conn: c, l: l}
		wc.release = func() { l.unidle(wc); l.count.Release(key) }
		// Waiting for its first request's head until its server says
		// it serves one (ConnState).
		l.ConnState(wc, true)
		return wc, nil
	}
}

// Reaped is the number of idle connections closed to make room for new ones.
func (l *Listener) Reaped() uint64 { return l.reaped.Load() }

// ConnState tells the listener that c, a connection it accepted (or a TLS
// connection over one), waits for its next request (idle true) or serves one;
// the HTTP server calls it when a request's head is whole (net/http's
// StateActive; the intake's handler, fasthttp's StateActive coming at the
// first byte) and when the answer is sent (StateIdle). A connection waits
// from its accept until then, bytes arriving or not: one whose head has
// not come whole within MinIdle, trickled a byte at a time or never sent,
// is closed for room like one held open between requests. Without the
// hook such connections, thousands of them from a few client networks,
// would fill the total cap, and every other client be refused until the
// server's timeouts closed them.
func (l *Listener) ConnState(c net.Conn, idle bool) {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = nc.NetConn()
	}
	wc, ok := c.(*conn)
	if !ok || wc.l != l {
		return
	}
	if !idle {
		// Only the connection's own serving goroutine (or Accept, before)
		// puts it on the list: off it already is off it still.
		if wc.onIdle.Load() {
			l.unidle(wc)
		}
		return
	}
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	if wc.closed || wc.idle {
		return
	}
	l.link(wc, time.Now())
}

// link puts c at the idle list's end, idle since at; idleMu is held.
func (l *Listener) link(c *conn, at time.Time) {
	c.idle, c.idleAt = true, at
	c.onIdle.Store(true)
	c.prev, c.next = l.idleTail, nil
	if l.idleTail != nil {
		l.idleTail.next = c
	} else {
		l.idleHead = c
	}
	l.idleTail = c
}

// unidle takes c off the idle list.
func (l *Listener) unidle(c *conn) {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	l.unlink(c)
}

// unlink takes c off the idle list; idleMu is held.
func (l *Listener) unlink(c *conn) {
	if !c.idle {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.idleHead = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.idleTail = c.prev
	}
	c.prev, c.next, c.idle = nil, nil, false
	c.onIdle.Store(false)
}

// reapIdle closes the connection idle longest, when it has been for
// Options.MinIdle, and reports whether it did: its place under the caps is free
// when it returns. The server reading it sees a keep-alive connection
// closed between requests, as at its idle timeout.
func (l *Listener) reapIdle(now time.Time) bool {
	l.idleMu.Lock()
	c := l.idleHead
	for c != nil && c.closed { // its Close is taking it off
		l.unlink(c)
		c = l.idleHead
	}
	if c == nil || now.Sub(c.idleAt) < l.opts.MinIdle {
		l.idleMu.Unlock()
		return false
	}
	l.unlink(c)
	c.closed = true // no ConnState puts it back
	l.idleMu.Unlock()
	c.Close()
	l.reaped.Add(1)
	if n, ok := l.quiet.Allow(now); ok {
		l.log.Warn("idle connection closed: the listener is at its cap", "listener", l.opts.Name,
			"remote", c.RemoteAddr().String(), "reaped_in_all", l.reaped.Load(), "since_last_line", n)
	}
	return true
}

func (l *Listener) refuse(c net.Conn, over string) {
	l.refused.Add(1)
	if l.opts.Refuse != nil {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		l.opts.Refuse(c, over)
	}
	c.Close()
	if n, ok := l.quiet.Allow(time.Now()); ok {
		l.log.Warn("connection refused: over the listener's cap", "listener", l.opts.Name, "cap", over,
			"remote", c.RemoteAddr().String(), "refused_in_all", l.refused.Load(), "since_last_line", n)
	}
}

// conn releases its place under the caps when closed, once.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
	l       *Listener

	// onIdle mirrors idle for ConnState's fast path.
	onIdle atomic.Bool
	// On the listener's idle list; guarded by its idleMu.
	idle       bool
	closed     bool
	idleAt     time.Time
	prev, next *conn
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.idleMu.Lock()
		c.closed = true
		c.l.idleMu.Unlock()
		c.release()
	})
	return c.Conn.Close()
}

// Transient reports whether an accept error passes by itself: out of file
// descriptors (per process or system), of socket buffers or of memory, a
// connection reset or aborted before it was accepted, or a timeout.
func Transient(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Network is the client network a connection counts against: its IPv4
// address, or the /64 of its IPv6 address. An address it cannot read counts
// as one network of its own (the zero prefix).
func Network(a net.Addr) netip.Prefix {
	var ip netip.Addr
	switch t := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(t.IP)
	default:
		if a != nil {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				ip = ap.Addr()
			}
		}
	}
	ip = ip.Unmap()
	switch {
	case ip.Is4():
		return netip.PrefixFrom(ip, 32)
	case ip.Is6():
		p, _ := ip.WithZone("").Prefix(64)
		return p
	}
	return netip.Prefix{}
}

// Counter counts connections per client network and in total against
// Limits. It is safe for concurrent use.
type Counter struct {
	limits Limits
	mu     sync.Mutex
	total  int
	per    map[netip.Prefix]int
}

// NewCounter returns a Counter with the caps of l.
func NewCounter(l Limits) *Counter {
	return &Counter{limits: l, per: make(map[netip.Prefix]int)}
}

// Acquire takes a place for a connection from network key: "" when it got
// one, else the cap it is over ("total" or "network").
func (c *Counter) Acquire(key netip.Prefix) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The network's cap first: "total" then means the network has room,
	// and a full listener closes an idle connection only for a new one it
	// will take.
	if c.limits.PerNetwork > 0 && c.per[key] >= c.limits.PerNetwork {
		return "network"
	}
	if c.limits.Total > 0 && c.total >= c.limits.Total {
		return "total"
	}
	c.total++
	c.per[key]++
	return ""
}

// Release gives back a place Acquire took.
func (c *Counter) Release(key netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.per[key]--; c.per[key] <= 0 {
		delete(c.per, key)
	}
}

// Open is the number of places taken.
func (c *Counter) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Sampler lets a repeating log line through at a bounded rate: up to
// sampleBurst lines at once, then sampleRate a second, and counts the ones
// it held back. An operator probing a port sees each refusal; a flood
// writes a few lines a second, each saying how many it stands for. The
// zero value is ready.
type Sampler struct {
	mu     sync.Mutex
	last   time.Time
	tokens float64
	held   int
}

const (
	sampleBurst = 10
	sampleRate  = 10 // lines a second once the burst is spent
)

// Allow reports whether a line may be written now, with the number held
// back since the last one written. A clock that steps back refills nothing.
func (q *Sampler) Allow(now time.Time) (int, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last.IsZero() {
		q.tokens = sampleBurst
	} else if d := now.Sub(q.last); d > 0 {
		q.tokens = min(sampleBurst, q.tokens+d.Seconds()*sampleRate)
	}
	q.last = now
	if q.tokens < 1 {
		q.held++
		return 0, false
	}
	q.tokens--
	n := q.held
	q.held = 0
	return n, true
}
