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
// taken as reusable.
func Reusable(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	usable := true
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK):
		case err != nil, n >= 0:
			usable = false
		}
		return true // never wait for readiness
	})
	return usable && err == nil
}
