package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
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
//	dialer   -> "OHK2" kind nonceD(32) len(1) address   (the address it dialed)
//	listener -> nonceL(32) mac("listener")
//	dialer   -> mac("dialer")
//
// where mac(role) is HMAC-SHA256 keyed by the token over the role, the kind,
// both nonces and the address. The listener answers only an address that is
// its own, so a stranger at a member's address cannot pass one node's
// challenge on to another and relay the answer back; the roles keep one
// side's answer from serving as the other's. With TLS the handshake already
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

// tokenMAC is the proof of one role for one connection.
func tokenMAC(token []byte, role string, kind byte, nonceD, nonceL []byte, addr string) []byte {
	h := hmac.New(sha256.New, token)
	h.Write([]byte(role))
	h.Write([]byte{0, kind})
	h.Write(nonceD)
	h.Write(nonceL)
	h.Write([]byte(addr))
	return h.Sum(nil)
}

// challengePeer runs the dialer's side of the handshake on c, a connection
// to addr, for a stream of kind.
func (m *mux) challengePeer(ctx context.Context, c net.Conn, addr string, kind byte) error {
	if len(addr) > maxDialedAddr {
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
	if _, err := c.Write(hello); err != nil {
		return err
	}
	var answer [nonceLen + macLen]byte
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			return fmt.Errorf("%w: it closed the connection at the handshake", ErrPeerUnproven)
		}
		return err
	}
	nonceL := answer[:nonceLen]
	if !hmac.Equal(answer[nonceLen:], tokenMAC(m.token, roleListener, kind, nonceD, nonceL, addr)) {
		return ErrPeerUnproven
	}
	if _, err := c.Write(tokenMAC(m.token, roleDialer, kind, nonceD, nonceL, addr)); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

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
	addr := string(dialed)
	if len(m.token) < MinTokenLen {
		return 0, fmt.Errorf("%w: a token handshake, and this node has no cluster token", ErrUnauthorized)
	}
	if !m.dialedAsSelf(addr, c.LocalAddr()) {
		// Answering would let a stranger at another address pass this
		// challenge on to a member dialing it.
		return 0, fmt.Errorf("%w: dialed as %q, not this node's address %q", ErrUnauthorized, addr, m.advertise)
	}
	answer := make([]byte, nonceLen, nonceLen+macLen)
	rand.Read(answer)
	nonceL := answer[:nonceLen:nonceLen]
	answer = append(answer, tokenMAC(m.token, roleListener, kind, nonceD, nonceL, addr)...)
	if _, err := c.Write(answer); err != nil {
		return 0, err
	}
	var proof [macLen]byte
	if _, err := io.ReadFull(c, proof[:]); err != nil {
		return 0, err
	}
	if !hmac.Equal(proof[:], tokenMAC(m.token, roleDialer, kind, nonceD, nonceL, addr)) {
		return 0, ErrUnauthorized
	}
	return kind, nil
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
