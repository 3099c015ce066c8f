package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"oncehook/connlimit"
)

// trap listens on loopback and keeps every byte its connections send, as a
// stranger who bound a member's port would. It answers nothing.
type trap struct {
	ln   net.Listener
	mu   sync.Mutex
	got  []byte
	conn int
	wg   sync.WaitGroup
}

func newTrap(t *testing.T) *trap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &trap{ln: ln}
	tr.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tr.wg.Go(func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				b, _ := io.ReadAll(c)
				tr.mu.Lock()
				tr.got = append(tr.got, b...)
				tr.conn++
				tr.mu.Unlock()
			})
		}
	})
	t.Cleanup(func() { ln.Close(); tr.wg.Wait() })
	return tr
}

func (tr *trap) bytes() ([]byte, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return bytes.Clone(tr.got), tr.conn
}

// TestTokenNeverCrossesTheWire: without TLS a node proves the cluster token
// without sending it, and trusts a peer only once the peer proved it too. A
// stranger at a member's address (the member down, its port taken), or at
// an address an operator names in a join, learns nothing of the token: the
// dial fails with ErrPeerUnproven, and nothing joins.
func TestTokenNeverCrossesTheWire(t *testing.T) {
	m, _ := listeningMux(t, []byte(testToken), nil)
	tr := newTrap(t)
	for _, kind := range []byte{kindRaft, kindRelay} {
		c, err := m.dial(ctxT(t, 10*time.Second), tr.ln.Addr().String(), kind, 5*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("kind %q: a stranger passed for a member", kind)
		}
		if !errors.Is(err, ErrPeerUnproven) {
			t.Fatalf("kind %q: %v, want ErrPeerUnproven", kind, err)
		}
	}
	// Two, and the dialer's checks that the trap is still up after it
	// closed at the handshake (peerGone), which send nothing.
	waitFor(t, "the trap's two connections", func() bool { _, n := tr.bytes(); return n >= 2 })
	got, _ := tr.bytes()
	if len(got) == 0 || bytes.Contains(got, []byte(testToken)) || bytes.Contains(got, []byte(testToken[:16])) {
		t.Fatalf("the stranger received %q: the token or part of it, or nothing at all", got)
	}

	// The same through a join: the leader asks the named address who it
	// is before it adds it.
	nodes := tcpCluster(t, 1, nil)
	node := nodes[leaderOf(t, nodes)]
	waitFor(t, "the node is ready", func() bool { ok, _ := node.Ready(); return ok })
	jt := newTrap(t)
	if _, err := node.Join(ctxT(t, 20*time.Second), "intruder", jt.ln.Addr().String()); err == nil {
		t.Fatal("a join of a stranger's address succeeded")
	}
	waitFor(t, "the join's probe reached the trap", func() bool { _, n := jt.bytes(); return n >= 1 })
	if got, _ := jt.bytes(); bytes.Contains(got, []byte(testToken[:16])) {
		t.Fatalf("the join sent the token to the named address: %q", got)
	}
	if st := node.Status(); len(st.Nodes) != 1 {
		t.Fatalf("membership changed: %+v", st.Nodes)
	}
}

// TestHandshakeRefusesRelayedAndReflectedProofs: a listener answers a
// challenge only for its own address and its own socket, so a stranger who
// receives a member's challenge (at the port of a member that is down, or
// at another address of the member's name, as [::1] for a "localhost" that
// the member binds on 127.0.0.1) cannot have a member answer it; an address
// no interface of this host has is a NAT's in front of it, and is answered;
// and a listener's answer is no dialer's proof.
func TestHandshakeRefusesRelayedAndReflectedProofs(t *testing.T) {
	// What a member's relay stream gets: an echo of each frame.
	m, ln := listeningMux(t, []byte(testToken), func(c net.Conn) {
		r, w := bufio.NewReader(c), bufio.NewWriter(c)
		for {
			kind, body, err := readFrame(r, nil)
			if err != nil || writeFrame(w, kind, body) != nil {
				return
			}
		}
	})
	self := ln.Addr().String()
	hello := func(addr, endpoint string) []byte {
		b := append([]byte(nil), challengeMagic[:]...)
		b = append(b, kindRelay)
		b = append(b, bytes.Repeat([]byte{7}, nonceLen)...)
		b = append(b, byte(len(addr)))
		b = append(b, addr...)
		b = append(b, byte(len(endpoint)))
		return append(b, endpoint...)
	}
	exchange := func(t *testing.T, addr, endpoint string, proof func(answer []byte) []byte) (answer []byte, err error) {
		t.Helper()
		c, err := net.Dial("tcp", self)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(hello(addr, endpoint)); err != nil {
			t.Fatal(err)
		}
		answer = make([]byte, nonceLen+macLen)
		if _, err := io.ReadFull(c, answer); err != nil {
			return nil, err
		}
		if proof == nil {
			return answer, nil
		}
		if _, err := c.Write(proof(answer)); err != nil {
			return answer, err
		}
		// A node that took the proof waits for a frame; one that refused
		// it closes the connection.
		if err := writeFrame(bufio.NewWriter(c), rpcStats, nil); err != nil {
			return answer, err
		}
		_, _, err = readFrame(bufio.NewReader(c), nil)
		return answer, err
	}

	_, port, _ := net.SplitHostPort(self)
	t.Run("another address", func(t *testing.T) {
		rejected := m.rejections()
		for _, addr := range []string{"127.0.0.1:1", "127.0.0.2:" + port, "localhost:1"} {
			if answer, err := exchange(t, addr, self, nil); err == nil {
				t.Fatalf("dialed as %s: the node answered %x", addr, answer)
			}
		}
		waitFor(t, "the refusals are counted", func() bool { return m.rejections() >= rejected+3 })
	})
	t.Run("another endpoint of this host", func(t *testing.T) {
		rejected := m.rejections()
		for _, endpoint := range []string{"[::1]:" + port, "127.0.0.2:" + port, "127.0.0.1:1", "not an endpoint"} {
			if answer, err := exchange(t, "localhost:"+port, endpoint, nil); err == nil {
				t.Fatalf("reached %s: the node answered %x", endpoint, answer)
			}
		}
		waitFor(t, "the refusals are counted", func() bool { return m.rejections() >= rejected+4 })
	})
	t.Run("its listener answer reflected", func(t *testing.T) {
		rejected := m.rejections()
		_, err := exchange(t, self, self, func(answer []byte) []byte { return answer[nonceLen:] })
		if err == nil {
			t.Fatal("a listener's answer was taken as the dialer's proof")
		}
		waitFor(t, "the refusal is counted", func() bool { return m.rejections() > rejected })
	})
	for _, tc := range []struct{ name, addr, endpoint string }{
		{"control: the dialer's proof", self, self},
		{"control: a name", "localhost:" + port, self},
		{"control: through a NAT", self, "192.0.2.1:7000"}, // TEST-NET-1: no interface here has it
	} {
		t.Run(tc.name, func(t *testing.T) {
			nonceD := bytes.Repeat([]byte{7}, nonceLen)
			if _, err := exchange(t, tc.addr, tc.endpoint, func(answer []byte) []byte {
				return tokenMAC(handshakeKey([]byte(testToken)), roleDialer, kindRelay, nonceD, answer[:nonceLen], tc.addr, tc.endpoint)
			}); err != nil {
				t.Fatalf("a proof with the token was refused: %v", err)
			}
		})
	}
}

// TestHandshakeWithAWrongToken: two nodes whose tokens differ refuse each
// other at the handshake, both ways.
func TestHandshakeWithAWrongToken(t *testing.T) {
	m, ln := listeningMux(t, []byte(testToken), nil)
	other, _ := listeningMux(t, bytes.Repeat([]byte("y"), MinTokenLen), nil)
	rejected := m.rejections()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if c, err := other.dial(ctx, ln.Addr().String(), kindRelay, 5*time.Second); err == nil || !errors.Is(err, ErrPeerUnproven) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial with another token: %v, want ErrPeerUnproven", err)
	}
	waitFor(t, "the listener refused the stranger too", func() bool { return m.rejections() > rejected })
}

// listeningMux serves a mux with token on a loopback port of its own;
// onRelay takes its relay streams (nil: none expected).
func listeningMux(t *testing.T, token []byte, onRelay func(net.Conn)) (*mux, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMux(ln, ln.Addr().String(), token, nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	m.onRelay = onRelay
	m.serve()
	t.Cleanup(m.close)
	return m, ln
}

// scriptConn is a connection whose peer sent in and reads nothing back.
type scriptConn struct {
	net.Conn // nil: only what readPreamble uses is implemented
	in       *bytes.Reader
	local    net.Addr
}

func (c *scriptConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *scriptConn) LocalAddr() net.Addr         { return c.local }

// FuzzReadPreamble: whatever a stranger sends first, the listener's
// preamble reader neither panics nor lets it through without the token.
func FuzzReadPreamble(f *testing.F) {
	m := &mux{advertise: "127.0.0.1:7000", token: []byte(testToken), hsKey: handshakeKey([]byte(testToken)), log: quietLogger()}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7000}
	hello := append(append([]byte(nil), challengeMagic[:]...), kindRaft)
	hello = append(hello, bytes.Repeat([]byte{1}, nonceLen)...)
	for range 2 { // the address dialed, the endpoint reached
		hello = append(hello, byte(len("127.0.0.1:7000")))
		hello = append(hello, "127.0.0.1:7000"...)
	}
	f.Add(append(hello, bytes.Repeat([]byte{2}, macLen)...))
	f.Add(append(append(append([]byte(nil), preambleMagic[:]...), kindRelay, 0, 32), bytes.Repeat([]byte("x"), 32)...))
	f.Add([]byte("OHK2"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		kind, err := m.readPreamble(&scriptConn{in: bytes.NewReader(in), local: local})
		if err == nil {
			t.Fatalf("%q passed as a member's stream of kind %q", in, kind)
		}
	})
}

// TestHandshakeTellsARefusalFromAPeerGoneDown: a peer that closes the
// connection at the handshake refused it while it still takes connections
// (ErrPeerUnproven), and went down when it takes none (a dial error: the
// followers of a killed leader must not report that it refused them).
func TestHandshakeTellsARefusalFromAPeerGoneDown(t *testing.T) {
	m, _ := listeningMux(t, []byte(testToken), nil)
	checkPeerGone(t, m, func(err error) bool { return errors.Is(err, ErrPeerUnproven) })
}

// checkPeerGone dials, through m, a peer that reads the first bytes and
// closes the connection, still listening (a refusal) or gone (down), and
// checks that refused tells the first and a dial error the second.
func checkPeerGone(t *testing.T, m *mux, refused func(error) bool) {
	t.Helper()
	for _, down := range []bool{false, true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096)) // the hello, or the ClientHello
			if down {
				ln.Close()
			}
			c.Close()
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		c, err := m.dial(ctx, ln.Addr().String(), kindRelay, 5*time.Second)
		cancel()
		<-served
		ln.Close()
		if c != nil {
			c.Close()
		}
		if err == nil {
			t.Fatalf("down %v: the handshake passed", down)
		}
		if r := refused(err); r == down || isDialError(err) != down {
			t.Errorf("down %v: %v (refusal %v, dial error %v)", down, err, r, isDialError(err))
		}
	}
}

// TestTLSHandshakeTellsARefusalFromAPeerGoneDown: with TLS, a peer that
// closes the connection during the handshake and still listens refused it
// (its log says why); one that closed because it went down is a dial error,
// which lets a starting node go on as at a cluster's first start instead of
// refusing to start (rejoinExisting).
func TestTLSHandshakeTellsARefusalFromAPeerGoneDown(t *testing.T) {
	m, _ := tlsMux(t, nil)
	checkPeerGone(t, m, peerRefused)
}

// tlsMux serves a cluster port with TLS on a loopback address, tune's
// changes made before it serves, and returns it with its address.
func tlsMux(t *testing.T, tune func(*mux)) (*mux, string) {
	t.Helper()
	f := writeCA(t, filepath.Join(t.TempDir(), "ca"), 1)[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMux(ln, ln.Addr().String(), nil, &TLSConfig{CertFile: f.cert, KeyFile: f.key, CAFile: f.ca}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(m)
	}
	m.serve()
	t.Cleanup(m.close)
	return m, ln.Addr().String()
}

// TestTLSHandshakeOverTheCapSaysBusy: with TLS, a member whose connections
// are over the peer's cap of connections not yet proved learns that
// (ErrPeerBusy, which readiness and the intake's 503 name), as it does
// without TLS, not a TLS failure that reads like a certificate problem.
func TestTLSHandshakeOverTheCapSaysBusy(t *testing.T) {
	m, addr := tlsMux(t, func(m *mux) {
		m.preAuth = connlimit.NewCounter(connlimit.Limits{Total: 1, PerNetwork: 1})
		m.memberAuth = connlimit.NewCounter(connlimit.Limits{Total: 1, PerNetwork: 1})
		m.onRelay = func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
	})
	ctx := ctxT(t, 10*time.Second)

	c, err := m.dial(ctx, addr, kindRelay, 5*time.Second)
	if err != nil {
		t.Fatalf("dial under the cap: %v", err)
	}
	c.Close()
	waitFor(t, "the connection closed", func() bool { return m.openConns() == 0 })

	held, err := net.Dial("tcp", addr) // silent: holds the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitFor(t, "the silent connection counted", func() bool { return m.openConns() == 1 })
	_, err = m.dial(ctx, addr, kindRelay, 5*time.Second)
	if !errors.Is(err, ErrPeerBusy) || !errors.Is(err, ErrPeerUnproven) {
		t.Fatalf("TLS handshake over the cap: %v, want ErrPeerBusy", err)
	}
}
