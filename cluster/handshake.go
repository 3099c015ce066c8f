package cluster

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// A connection between nodes that have no TLS is authenticated by a
// challenge on the cluster token, both ways, and the token never crosses the
// wire (docs/security.md, "Who can reach what"). The first versions of the
// preamble (preambleMagic) sent the token itself to whoever answered at a
// member's address: a local user who bound the port of a member that was
// down, or an address an operator named in a join, got it and could join as
// a voter. Now:
//
//	dialer   -> "OHK2" kind nonceD(32) len(1) address len(1) endpoint
//	listener -> nonceL(32) mac("listener")
//	dialer   -> mac("dialer")
//
// address is what the dialer dialed (a peer's address as configured, a name
// or an IP and port); endpoint is the IP and port its connection reached.
// mac(role) is HMAC-SHA256 over the role, the kind, both nonces, the address
// and the endpoint, keyed by a key derived from the token (handshakeKey: slow
// to compute, so that the answers a stranger collects do not let it test
// guesses of a weak token quickly). The listener answers only when the
// address names it and the endpoint is its own socket (or an address of no
// interface of this host: one a NAT forwards to it), so a stranger who holds
// another endpoint of a member's name (the port of a member that is down, or
// the other IP family of a name that resolves to both) cannot pass a
// member's challenge on to it and relay the answer back, nor sit between
// the two once the handshake passed. The roles keep one side's answer from
// serving as the other's. With TLS the handshake already
// proved the peer's certificate, and the older preamble, token inside TLS,
// is still what a node sends (older releases understand it). A listener
// takes both, so nodes of an older release keep reaching upgraded ones.
var challengeMagic = [4]byte{'O', 'H', 'K', '2'}

const (
	nonceLen       = 32
	macLen         = sha256.Size
	maxDialedAddr  = 255
	roleListener   = "oncehook cluster listener"
	roleDialer     = "oncehook cluster dialer"
	resolveTimeout = 2 * time.Second
)

// ErrPeerUnproven: the node at a dialed address did not prove that it holds
// the cluster token: not a member (a stranger bound the port of one that is
// down), or a member of an older release that knows only the token preamble
// (docs/operations.md, "Upgrades").
var ErrPeerUnproven = errors.New("cluster: the peer did not prove the cluster token")

// ErrPeerBusy: the node at a dialed address takes no more connections from
// this node's address that have not proved the token yet (its cluster port's
// cap, connlimit): something on this host, or behind the same address,
// holds them. It comes wrapped with ErrPeerUnproven, since the peer proved
// nothing either.
var ErrPeerBusy = errors.New("cluster: the peer takes no more connections from this address (its cap of connections not yet proved is full: something on this host holds connections to its cluster port)")

// busyAnswer is what a listener over its cap answers a hello with, in place
// of its nonce and proof (refuseBusy): a fixed text no proof matches.
var busyAnswer = func() (b [nonceLen + macLen]byte) {
	copy(b[:], "OHK2 busy: over the cap of connections from your address")
	return b
}()

// busyRecord reports whether a TLS handshake failed on busyAnswer: a peer
// over its cap answers the ClientHello with it in the clear, and crypto/tls
// reads its first bytes as a record header that is not one.
func busyRecord(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) && bytes.Equal(rh.RecordHeader[:], busyAnswer[:len(rh.RecordHeader)])
}

// handshakeIterations is the PBKDF2 cost of the handshake's key: about
// 20 ms of one core at a node's start, and as much for each guess of the
// token tested against a collected answer.
const handshakeIterations = 100_000

// handshakeKey derives the handshake's HMAC key from the cluster token.
func handshakeKey(token []byte) []byte {
	k, err := pbkdf2.Key(sha256.New, string(token), []byte("oncehook cluster handshake"), handshakeIterations, sha256.Size)
	if err != nil { // only for lengths FIPS mode refuses; never for these
		panic(fmt.Sprintf("cluster: derive the handshake key: %v", err))
	}
	return k
}

// tokenMAC is the proof of one role for one connection.
func tokenMAC(key []byte, role string, kind byte, nonceD, nonceL []byte, addr, endpoint string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(role))
	h.Write([]byte{0, kind})
	h.Write(nonceD)
	h.Write(nonceL)
	h.Write([]byte{byte(len(addr))})
	h.Write([]byte(addr))
	h.Write([]byte(endpoint))
	return h.Sum(nil)
}

// challengePeer runs the dialer's side of the handshake on c, a connection
// to addr, for a stream of kind.
func (m *mux) challengePeer(ctx context.Context, c net.Conn, addr string, kind byte) error {
	endpoint := c.RemoteAddr().String()
	if len(addr) > maxDialedAddr || len(endpoint) > maxDialedAddr {
		return fmt.Errorf("address %q is over %d bytes", addr, maxDialedAddr)
	}
	deadline := time.Now().Add(preambleDeadline)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	hello := make([]byte, 0, 4+1+nonceLen+1+len(addr))
	hello = append(hello, challengeMagic[:]...)
	hello = append(hello, kind)
	nonceD := make([]byte, nonceLen)
	rand.Read(nonceD)
	hello = append(hello, nonceD...)
	hello = append(hello, byte(len(addr)))
	hello = append(hello, addr...)
	hello = append(hello, byte(len(endpoint)))
	hello = append(hello, endpoint...)
	if _, err := c.Write(hello); err != nil {
		return err
	}
	var answer [nonceLen + macLen]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if closedAtHandshake(err) {
			if derr := m.peerGone(ctx, endpoint); derr != nil {
				return fmt.Errorf("it closed the connection at the handshake and takes no new one (it went down): %w", derr)
			}
			return fmt.Errorf("%w: it closed the connection at the handshake (another token, an older release, or an address it does not take as its own: its log says which)", ErrPeerUnproven)
		}
		return err
	}
	if answer == busyAnswer {
		return fmt.Errorf("%w: %w", ErrPeerUnproven, ErrPeerBusy)
	}
	nonceL := answer[:nonceLen]
	if !hmac.Equal(answer[nonceLen:], tokenMAC(m.hsKey, roleListener, kind, nonceD, nonceL, addr, endpoint)) {
		return ErrPeerUnproven
	}
	if _, err := c.Write(tokenMAC(m.hsKey, roleDialer, kind, nonceD, nonceL, addr, endpoint)); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

// peerGone tells a peer that closed a connection at the handshake because
// it refused it from one that went down meanwhile (a killed process resets
// the connections it had not accepted yet): it dials endpoint once more, as
// dial does, and returns the dial's error when the peer's host refuses the
// connection or cannot be reached, nil otherwise. A dial that times out, or
// any answer, leaves it a refusal: a peer that refused this node's
// credentials must not pass for one that is down, or a node whose peers all
// refused it would take itself for the first of a new cluster
// (rejoinExisting). Without it, the followers of a killed leader reported
// for a moment that it refused their credentials, which sends an operator
// after tokens.
func (m *mux) peerGone(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, peerGoneProbe)
	defer cancel()
	c, err := m.dialTCP(ctx, endpoint, peerGoneProbe)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
			return err
		}
		return nil
	}
	c.Close()
	return nil
}

// closedAtHandshake: the peer closed the connection before it answered the
// handshake (no TLS alert, no wrong proof), as a refusal does and as a
// process killed meanwhile does; peerGone tells them apart.
func closedAtHandshake(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// peerGoneProbe bounds peerGone's dial.
const peerGoneProbe = 500 * time.Millisecond

// answerChallenge runs the listener's side of the handshake on c, after the
// magic, and returns the stream's kind.
func (m *mux) answerChallenge(c net.Conn) (byte, error) {
	var hdr [1 + nonceLen + 1]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, err
	}
	kind := hdr[0]
	if kind != kindRaft && kind != kindRelay {
		return 0, fmt.Errorf("unknown stream kind %q", kind)
	}
	nonceD := hdr[1 : 1+nonceLen]
	dialed := make([]byte, hdr[1+nonceLen])
	if _, err := io.ReadFull(c, dialed); err != nil {
		return 0, err
	}
	var n [1]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return 0, err
	}
	reached := make([]byte, n[0])
	if _, err := io.ReadFull(c, reached); err != nil {
		return 0, err
	}
	addr, endpoint := string(dialed), string(reached)
	if len(m.token) < MinTokenLen {
		return 0, fmt.Errorf("%w: a token handshake, and this node has no cluster token", ErrUnauthorized)
	}
	// Answering either would let a stranger pass this challenge on from a
	// member that dialed it, and relay the answer back.
	if !reachedSelf(endpoint, c.LocalAddr()) {
		return 0, fmt.Errorf("%w: the dialer reached %q, not this node's socket %s", ErrUnauthorized, endpoint, c.LocalAddr())
	}
	if !m.dialedAsSelf(addr, c.LocalAddr()) {
		return 0, fmt.Errorf("%w: dialed as %q, not this node's address %q", ErrUnauthorized, addr, m.advertise)
	}
	answer := make([]byte, nonceLen, nonceLen+macLen)
	rand.Read(answer)
	nonceL := answer[:nonceLen:nonceLen]
	answer = append(answer, tokenMAC(m.hsKey, roleListener, kind, nonceD, nonceL, addr, endpoint)...)
	if _, err := c.Write(answer); err != nil {
		return 0, err
	}
	var proof [macLen]byte
	if _, err := io.ReadFull(c, proof[:]); err != nil {
		return 0, err
	}
	if !hmac.Equal(proof[:], tokenMAC(m.hsKey, roleDialer, kind, nonceD, nonceL, addr, endpoint)) {
		return 0, ErrUnauthorized
	}
	return kind, nil
}

// reachedSelf reports whether endpoint, the IP and port a dialer says its
// connection reached, is local, this end of the connection, or else an
// address of no interface of this host (a NAT in front of it forwarded the
// connection): an endpoint on this host other than this node's socket is
// someone else's, who took a member's port or another address of its name.
func reachedSelf(endpoint string, local net.Addr) bool {
	ep, err := netip.ParseAddrPort(endpoint)
	la, ok := local.(*net.TCPAddr)
	if err != nil || !ok {
		return false
	}
	mine := la.AddrPort()
	if ep.Addr().Unmap().WithZone("") == mine.Addr().Unmap().WithZone("") && ep.Port() == mine.Port() {
		return true
	}
	return !hostAddress(ep.Addr())
}

// hostAddress reports whether ip is one of this host's: loopback, or an
// address of one of its interfaces (an interface list that cannot be read
// counts every address as the host's).
func hostAddress(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok {
			if mine, ok := netip.AddrFromSlice(p.IP); ok && mine.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// dialedAsSelf reports whether addr, the address a peer says it dialed,
// names this node: its advertised address as configured, or a name or IP
// and port that lead to local, the end of the connection the peer reached.
func (m *mux) dialedAsSelf(addr string, local net.Addr) bool {
	if addr == string(m.advertise) {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	la, ok := local.(*net.TCPAddr)
	if err != nil || !ok || port != strconv.Itoa(la.Port) {
		return false
	}
	mine, ok := netip.AddrFromSlice(la.IP)
	if !ok {
		return false
	}
	mine = mine.Unmap().WithZone("")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("") == mine
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.Unmap().WithZone("") == mine {
			return true
		}
	}
	return false
}
