package admin

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// authLimiter slows down guessing at admin tokens. Each client (an IPv4
// address, or an IPv6 /64, which one host usually holds whole) that failed
// authentication authFreeFailures times must wait authBackoffBase before its
// next try is even looked at (answered 429 with Retry-After meanwhile); each
// further failure doubles the wait, up to authBackoffMax. A success forgets
// the client, and so does authForget without a failure.
//
// The table holds at most authTableSize clients; a new one evicts the one
// that failed least recently. An attacker with that many addresses could
// flush its own entries, but already guesses that many times in parallel.
type authLimiter struct {
	mu      sync.Mutex
	now     func() time.Time
	size    int
	clients map[netip.Prefix]*list.Element // of *authClient
	order   *list.List                     // most recent failure first
}

type authClient struct {
	key   netip.Prefix
	fails int
	last  time.Time // the latest failure
	until time.Time // no try looked at before this
}

const (
	authFreeFailures = 5
	authBackoffBase  = time.Second
	authBackoffMax   = 5 * time.Minute
	authForget       = 15 * time.Minute // longer than authBackoffMax: a waiting client stays known
	authTableSize    = 4096
)

// AuthFreeFailures is how many wrong tokens in a row a client address may
// present before it is backed off.
const AuthFreeFailures = authFreeFailures

func newAuthLimiter(now func() time.Time) *authLimiter {
	return &authLimiter{now: now, size: authTableSize, clients: map[netip.Prefix]*list.Element{}, order: list.New()}
}

// authKey is the client a request's remote address counts against. An
// address that does not parse (not TCP) counts as one shared client.
func authKey(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		host, _, _ := net.SplitHostPort(remoteAddr)
		a, err := netip.ParseAddr(host)
		if err != nil {
			return netip.Prefix{}
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	a := ap.Addr().Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// lookup returns the client's entry, dropping it when it is forgotten.
// Called with mu held.
func (l *authLimiter) lookup(key netip.Prefix, now time.Time) *list.Element {
	e := l.clients[key]
	if e != nil && now.Sub(e.Value.(*authClient).last) >= authForget {
		l.order.Remove(e)
		delete(l.clients, key)
		return nil
	}
	return e
}

// wait is how long the client must still wait before a try is looked at; 0
// when it may try now.
func (l *authLimiter) wait(key netip.Prefix) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.lookup(key, now)
	if e == nil {
		return 0
	}
	if until := e.Value.(*authClient).until; now.Before(until) {
		return until.Sub(now)
	}
	return 0
}

// fail records a failed try and returns the wait it imposes (0 while the
// client is within its free failures).
func (l *authLimiter) fail(key netip.Prefix) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.lookup(key, now)
	if e == nil {
		if l.order.Len() >= l.size {
			old := l.order.Back()
			l.order.Remove(old)
			delete(l.clients, old.Value.(*authClient).key)
		}
		e = l.order.PushFront(&authClient{key: key})
		l.clients[key] = e
	} else {
		l.order.MoveToFront(e)
	}
	c := e.Value.(*authClient)
	c.fails++
	c.last = now
	over := c.fails - authFreeFailures
	if over < 0 {
		return 0
	}
	d := authBackoffMax
	if over < 20 && authBackoffBase<<over < authBackoffMax {
		d = authBackoffBase << over
	}
	c.until = now.Add(d)
	return d
}

// success forgets the client's failures.
func (l *authLimiter) success(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.clients[key]; e != nil {
		l.order.Remove(e)
		delete(l.clients, key)
	}
}

// len is the number of clients remembered.
func (l *authLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// retryAfter is d as a Retry-After value: whole seconds, rounded up.
func retryAfter(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}
