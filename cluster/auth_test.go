package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/connlimit"
	"oncehook/engine"
)

// TestOpenRefusesWeakClusterAuth: a node never serves a cluster port that an
// unauthenticated peer could use: without TLS it needs a token of at least
// MinTokenLen bytes, and a token that is set must be that long even with TLS.
// A refused Open leaves nothing listening.
func TestOpenRefusesWeakClusterAuth(t *testing.T) {
	ca := writeCA(t, filepath.Join(t.TempDir(), "ca"), 1)[0]
	tlsc := &TLSConfig{CertFile: ca.cert, KeyFile: ca.key, CAFile: ca.ca}
	for _, tt := range []struct {
		name  string
		token string
		tls   *TLSConfig
		ok    bool
	}{
		{"no token, no TLS", "", nil, false},
		{"short token, no TLS", strings.Repeat("t", MinTokenLen-1), nil, false},
		{"short token with TLS", strings.Repeat("t", MinTokenLen-1), tlsc, false},
		{"32-byte token", strings.Repeat("t", MinTokenLen), nil, true},
		{"TLS, no token", "", tlsc, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := freePort(t)
			cfg := Config{
				ID: "a1", Dir: t.TempDir(), Bind: addr, Peers: []Peer{{ID: "a1", Addr: addr}},
				Token: []byte(tt.token), TLS: tt.tls, Logger: quietLogger(), RaftLogLevel: "off", NoSync: true,
			}
			n, err := Open(cfg)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				n.Close()
				return
			}
			if err == nil {
				n.Close()
				t.Fatal("Open served a cluster port without usable authentication")
			}
			if !errors.Is(err, ErrWeakAuth) || (tt.token != "" && strings.Contains(err.Error(), tt.token)) {
				t.Fatalf("err = %v, want ErrWeakAuth without the token", err)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatal("a refused Open left the cluster port listening")
			}
		})
	}
	// The in-memory transport has no port: nothing to authenticate.
	if n, err := Open(Config{ID: "m1", Dir: t.TempDir(), Logger: quietLogger(), RaftLogLevel: "off", NoSync: true}); err != nil {
		t.Fatalf("in-memory node without a token: %v", err)
	} else {
		n.Close()
	}
}

// TestIntruderOnClusterPort: a raw TCP client that knows the wire format but
// not the token sends the preamble of a relay stream with an empty, short
// or wrong token, then an rpcJoin for itself and an rpcApply of a claim. The
// node refuses the connection at the preamble: no answer, membership
// unchanged, nothing applied. The control row, with the right token, gets
// its apply committed, so the frames the intruder sends are the real thing.
func TestIntruderOnClusterPort(t *testing.T) {
	nodes := tcpCluster(t, 1, nil)
	node := nodes[leaderOf(t, nodes)]
	waitFor(t, "the node is ready", func() bool { ok, _ := node.Ready(); return ok })
	// The bootstrap configuration (log 1) is committed with the leader's
	// first entry; wait for it, or it would count as appended meanwhile.
	waitFor(t, "the bootstrap configuration committed", func() bool { return node.Status().CommitIndex >= 2 })
	// And the command that names the cluster (identity.go), its own entry.
	waitFor(t, "the cluster named", func() bool {
		st := node.Status()
		return node.clusterID() != "" && st.AppliedIndex >= st.CommitIndex
	})
	addr := node.cfg.Bind

	for i, tt := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"empty token", "", false},
		{"short prefix of the token", testToken[:MinTokenLen-1], false},
		{"one byte of the token", testToken[:1], false},
		{"wrong token of the right length", strings.Repeat("x", len(testToken)), false},
		{"token with a byte more", testToken + "x", false},
		{"right token (control)", testToken, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "src:intruder-" + string(rune('a'+i))
			before := node.Status()
			rejected := node.mux.rejections()

			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			w := bufio.NewWriter(c)
			w.Write(preambleMagic[:])
			w.WriteByte(kindRelay)
			var n [2]byte
			binary.BigEndian.PutUint16(n[:], uint16(len(tt.token)))
			w.Write(n[:])
			w.WriteString(tt.token)
			w.Flush()
			r := bufio.NewReader(c)

			if tt.ok {
				// A join would make a cluster of one wait for a voter that
				// does not exist; the control applies only.
				if err := writeFrame(w, rpcApply, engine.EncodeEntry(nil, []engine.Command{claimCmd(key)})); err != nil {
					t.Fatal(err)
				}
				status, body, err := readFrame(r, nil)
				if err != nil || status != rpcOK {
					t.Fatalf("control apply: status %d %q %v", status, body, err)
				}
				if _, ok, _ := node.Lookup(key); !ok {
					t.Fatal("control: the applied claim is not there")
				}
				return
			}

			// Write errors are expected: the node may have closed already.
			_ = writeFrame(w, rpcJoin, encodeJoin("intruder", "127.0.0.1:1"))
			_ = writeFrame(w, rpcApply, engine.EncodeEntry(nil, []engine.Command{claimCmd(key)}))
			status, body, err := readFrame(r, nil)
			if err == nil {
				t.Fatalf("the node answered the intruder: status %d %q", status, body)
			}
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the node kept the intruder's connection open: %v", err)
			}
			waitFor(t, "the rejection is counted", func() bool { return node.mux.rejections() > rejected })

			after := node.Status()
			if len(after.Nodes) != 1 || after.Nodes[0].ID != "t1" {
				t.Fatalf("membership changed: %+v", after.Nodes)
			}
			// The leader appends entries of its own (its term's no-op and
			// barrier): whatever was committed meanwhile carries no command.
			for i := before.CommitIndex + 1; i <= after.CommitIndex; i++ {
				var l raft.Log
				if err := node.logStore.GetLog(i, &l); err != nil {
					t.Fatalf("log %d: %v", i, err)
				}
				if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
					t.Fatalf("log %d (%v) was appended while the intruder was connected", i, l.Type)
				}
			}
			if _, ok, _ := node.Lookup(key); ok {
				t.Fatal("the intruder's claim was applied")
			}
		})
	}
}

// freePort returns a loopback address nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestClusterPortCapsUnauthenticated: connections that have not proved
// membership are capped per client network and in all (here 2 and 3), so a
// flood of them cannot take every file descriptor: the one over a cap is
// closed at once and counted, while a connection from another network still
// gets through, and an authenticated connection no longer counts against
// the caps. A member's address (127.0.0.1, this node's peer address) counts
// apart: strangers holding every slot do not keep members out.
func TestClusterPortCapsUnauthenticated(t *testing.T) {
	nodes := tcpCluster(t, 1, func(_ int, cfg *Config) { cfg.PreAuth = connlimit.Limits{Total: 3, PerNetwork: 2} })
	node := nodes[leaderOf(t, nodes)]
	waitFor(t, "the node is ready", func() bool { ok, _ := node.Ready(); return ok })
	addr := node.cfg.Bind
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closedAtOnce reports whether the node closed c within wait (well
	// under the 10 s a silent connection is given for its preamble).
	// (A connection over a cap is told so before the close: busyAnswer.)
	closedAtOnce := func(c net.Conn, wait time.Duration) bool {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err := io.Copy(io.Discard, c)
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		return true
	}
	// authenticate sends a relay preamble with the token and applies a
	// claim over it: a member's work.
	authenticate := func(c net.Conn, key string) {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		w := bufio.NewWriter(c)
		w.Write(preambleMagic[:])
		w.WriteByte(kindRelay)
		var n [2]byte
		binary.BigEndian.PutUint16(n[:], uint16(len(testToken)))
		w.Write(n[:])
		w.WriteString(testToken)
		if err := writeFrame(w, rpcApply, engine.EncodeEntry(nil, []engine.Command{claimCmd(key)})); err != nil {
			t.Fatal(err)
		}
		if status, body, err := readFrame(bufio.NewReader(c), nil); err != nil || status != rpcOK {
			t.Fatalf("apply over an authenticated connection: status %d %q %v", status, body, err)
		}
	}

	waitFor(t, "the node to know its members' addresses", func() bool {
		return node.mux.members.Load().holds(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")})
	})
	rejected := node.RefusedConns()
	dial("127.0.0.2")
	dial("127.0.0.2")
	waitFor(t, "two connections open", func() bool { return node.OpenConns() >= 2 })
	if c := dial("127.0.0.2"); !closedAtOnce(c, 5*time.Second) {
		t.Fatal("a third unauthenticated connection from one network was kept")
	}
	// Another network gets through, and once authenticated no longer
	// counts: a silent one from a fourth network fits beside the two (3 in
	// all), and the next is over the total.
	authenticate(dial("127.0.0.3"), "src:other")
	if c := dial("127.0.0.4"); closedAtOnce(c, 300*time.Millisecond) {
		t.Fatal("an unauthenticated connection under both caps was closed (an authenticated one still counts?)")
	}
	if c := dial("127.0.0.5"); !closedAtOnce(c, 5*time.Second) {
		t.Fatal("a fourth unauthenticated connection in all was kept")
	}
	if got := node.RefusedConns(); got < rejected+2 {
		t.Errorf("refused connections %d, want at least %d", got, rejected+2)
	}
	// Every strangers' slot is taken; a member still reaches the node, and
	// is capped on its own.
	authenticate(dial("127.0.0.1"), "src:member")
	dial("127.0.0.1")
	dial("127.0.0.1")
	waitFor(t, "two member connections open", func() bool { return node.OpenConns() >= 5 })
	if c := dial("127.0.0.1"); !closedAtOnce(c, 5*time.Second) {
		t.Fatal("a third unauthenticated connection from a member's network was kept")
	}
	// A member's handshake over the cap learns why it was refused, not that
	// the peer failed to prove the token.
	ctx := ctxT(t, 10*time.Second)
	err := node.mux.challengePeer(ctx, dial("127.0.0.1"), addr, kindRelay)
	if !errors.Is(err, ErrPeerBusy) || !errors.Is(err, ErrPeerUnproven) {
		t.Fatalf("handshake over the cap: %v, want ErrPeerBusy", err)
	}
}

// TestPeersDialFromTheAdvertisedAddress: a node's connections to its peers
// leave from its advertised IP when that IP is this host's, since the peers
// recognise members by it (their own caps on the cluster port); left to the
// kernel, a connection to 127.0.0.1 from a node advertising 127.0.0.11
// leaves from 127.0.0.1, and counts as a stranger's. An advertised address
// that is not this host's (NAT) leaves the choice to the kernel.
func TestPeersDialFromTheAdvertisedAddress(t *testing.T) {
	for _, tc := range []struct {
		advertise string
		want      string // the source IP the target sees
	}{
		{"127.0.0.11", "127.0.0.11"},
		{"192.0.2.1", "127.0.0.1"}, // TEST-NET-1: not this host's
	} {
		t.Run(tc.advertise, func(t *testing.T) {
			target, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer target.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			m, err := newMux(ln, net.JoinHostPort(tc.advertise, "7000"), []byte(testToken), nil, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			// Two connections: the handshake's, and the dialer's check that
			// the target, which closed at the handshake, still takes one
			// (peerGone); both leave from the same address.
			seen := make(chan string, 2)
			go func() {
				for range 2 {
					c, err := target.Accept()
					if err != nil {
						seen <- err.Error()
						return
					}
					seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
					c.Close()
				}
			}()
			// The target is no member: the handshake fails (ErrPeerUnproven)
			// once it closes; the address it saw is the subject.
			if c, err := m.dial(t.Context(), target.Addr().String(), kindRelay, 5*time.Second); err == nil {
				c.Close()
				t.Fatal("a stranger passed the token handshake")
			} else if !errors.Is(err, ErrPeerUnproven) {
				t.Fatalf("dial: %v, want ErrPeerUnproven", err)
			}
			for _, what := range []string{"the handshake", "the check that it is up"} {
				if got := <-seen; got != tc.want {
					t.Fatalf("%s: the peer saw a connection from %s, want %s", what, got, tc.want)
				}
			}
		})
	}
	// A peer in the other IP family cannot be dialled from the advertised
	// IPv4 address: the dial falls back to the kernel's choice, and reaches
	// the network (here refused: nothing listens on [::1]:1), instead of
	// failing for want of a source address.
	t.Run("a peer on IPv6", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		m, err := newMux(ln, "127.0.0.11:7000", []byte(testToken), nil, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.dial(t.Context(), "[::1]:1", kindRelay, 5*time.Second)
		if err == nil {
			c.Close()
			return
		}
		if ae := (*net.AddrError)(nil); errors.As(err, &ae) {
			t.Fatalf("dial a peer on IPv6 from a node advertising IPv4: %v (the advertised source was kept)", err)
		}
	})
}

// TestCloseEndsASilentHandshake: a node that stops closes the connections
// still proving themselves (one that sends nothing is given 10 s), rather
// than waiting for them: its close, and the process's exit, took that long.
func TestCloseEndsASilentHandshake(t *testing.T) {
	var logs lockedBuffer
	nodes := tcpCluster(t, 1, func(_ int, cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	node := nodes[0]
	c, err := net.DialTimeout("tcp", node.cfg.Bind, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection accepted", func() bool { return node.OpenConns() >= 1 })
	closed := make(chan error, 1)
	go func() { closed <- node.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second)) // half the handshake's own deadline
	_, rerr := io.Copy(io.Discard, c)
	if ne := net.Error(nil); errors.As(rerr, &ne) && ne.Timeout() {
		t.Fatal("the node's close left a silent connection open until its handshake deadline")
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	// Ended by the node's own close, it is no stranger's refused attempt.
	if strings.Contains(logs.String(), "cluster connection rejected") {
		t.Fatalf("the close logged its own handshake as rejected:\n%s", logs.String())
	}
}
