//go:build unix

package cluster

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// closedByPeer reports whether an idle stream's other end has gone: its
// process stopped (the kernel then closes its sockets) or restarted, which
// is the same to this stream. A peek that does not wait sees it: end of
// stream, an error, or bytes where an idle stream has none. A stream that
// cannot be peeked at is taken as alive.
func closedByPeer(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK):
		case err != nil, n >= 0:
			gone = true
		}
		return true // never wait for readiness
	})
	return gone || err != nil
}
