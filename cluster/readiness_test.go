package cluster

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// olderListener makes a node's cluster port refuse the token handshake
// while set, as a node of an older release does (it knows only the token
// preamble, and closes a stream that opens with another magic).
type olderListener struct{ on atomic.Bool }

func (o *olderListener) wrap(c net.Conn) net.Conn { return &olderConn{Conn: c, o: o} }

type olderConn struct {
	net.Conn
	o    *olderListener
	read bool
}

func (c *olderConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read {
		c.read = true
		// A dialed stream's first bytes are the peer's random nonce: four
		// of them spell the magic once in 2^32 streams.
		if c.o.on.Load() && bytes.HasPrefix(p[:n], challengeMagic[:]) {
			c.Conn.Close()
			return 0, io.EOF
		}
	}
	return n, err
}

// TestFollowerRefusedByTheLeaderIsNotReady: a follower whose claims cannot
// reach the leader, because the leader's cluster port refuses its handshake
// (an older leader during a rolling upgrade), reports itself not ready,
// saying why, instead of answering every claim 503 while it looks healthy;
// once the leader accepts it again it is ready by itself, without a claim
// to show it.
func TestFollowerRefusedByTheLeaderIsNotReady(t *testing.T) {
	older := []*olderListener{{}, {}, {}}
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) { cfg.wrapConn = older[i].wrap })
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	f := nodes[fi]
	waitFor(t, "the follower is ready", func() bool { ok, _ := f.Ready(); return ok })
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:before")); err != nil {
		t.Fatalf("claim through the follower: %v", err)
	}

	older[li].on.Store(true)
	f.relay.closeAll() // the next claim opens a stream
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:refused")); !errors.Is(err, ErrNoLeader) || !errors.Is(err, ErrPeerUnproven) {
		t.Fatalf("claim through the follower while the leader refuses it: %v, want ErrNoLeader naming the refused handshake", err)
	}
	if ok, why := f.Ready(); ok || !strings.Contains(why, "refuses this node's cluster handshake") {
		t.Fatalf("ready %v (%q), want not ready naming the refused handshake", ok, why)
	}
	if ok, why := nodes[li].Ready(); !ok {
		t.Fatalf("the leader is not ready: %s", why)
	}

	older[li].on.Store(false)
	waitFor(t, "the follower ready again once the leader accepts it", func() bool { ok, _ := f.Ready(); return ok })
	if _, err := f.Claim(ctxT(t, 10*time.Second), claimCmd("src:after")); err != nil {
		t.Fatalf("claim through the follower afterwards: %v", err)
	}
}
