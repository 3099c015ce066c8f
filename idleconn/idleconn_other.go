//go:build !unix

package idleconn

import "net"

// Reusable cannot peek here: an idle connection is taken as reusable.
func Reusable(net.Conn) bool { return true }
