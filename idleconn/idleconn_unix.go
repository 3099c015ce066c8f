//go:build unix

package idleconn

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// Reusable reports whether c, idle since its last answer was read to its
// end, may take another request: its peer has not closed it (its process
// stopped or restarted, or it closes idle connections) and no byte arrived
// that nobody asked for. One peek that does not wait tells: end of stream,
// an error or any byte make it unusable. The caller must also have nothing
// left in its own read buffer. A connection that cannot be peeked at is
// taken as reusable. A connection looked at before every reuse is better
// served by a Probe, made once.
func Reusable(c net.Conn) bool { return NewProbe(c).Reusable() }

// Probe is Reusable for one connection, set up once: looking costs one
// system call and no allocation.
type Probe struct {
	rc     syscall.RawConn // nil: the connection cannot be peeked at
	usable bool
	b      [1]byte
	peek   func(fd uintptr) bool
}

// NewProbe sets up a Probe for c.
func NewProbe(c net.Conn) *Probe {
	p := &Probe{}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return p
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return p
	}
	p.rc = rc
	p.peek = func(fd uintptr) bool {
		// Go's sockets are non-blocking: an empty one answers EAGAIN.
		n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK):
		case err != nil, n >= 0:
			p.usable = false
		}
		return true // never wait for readiness
	}
	return p
}

// Reusable is the package's Reusable for the probe's connection. A Probe
// is for one goroutine at a time, as the connection it looks at is.
func (p *Probe) Reusable() bool {
	if p.rc == nil {
		return true
	}
	p.usable = true
	if err := p.rc.Read(p.peek); err != nil {
		return false
	}
	return p.usable
}
