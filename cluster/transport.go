package cluster

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/connlimit"
)

// Every connection between nodes starts with a preamble: magic, the kind of
// stream, and the cluster token, sent inside TLS; without TLS, a challenge on
// the token instead (handshake.go). One TCP port carries both Raft's RPCs and the
// internal channel a follower uses to hand commands to the leader, so an
// operator opens one port per node and authenticates both with one secret.
var preambleMagic = [4]byte{'O', 'H', 'K', '1'}

const (
	kindRaft  byte = 'R'
	kindRelay byte = 'F'

	maxTokenLen      = 1024
	preambleDeadline = 10 * time.Second
)

// MinTokenLen is the shortest cluster token accepted, in bytes: from the
// configuration (Open refuses to start) and from a peer (the connection is
// refused). The config package requires the same.
const MinTokenLen = 32

// ErrWeakAuth: the cluster port would be open, or guarded by a guessable
// token. Open refuses to start with it.
var ErrWeakAuth = errors.New("cluster: the cluster port needs mutual TLS or a token of at least 32 bytes")

// checkAuth refuses a TCP cluster port that nobody would need to
// authenticate to: without TLS the token is all that stands between the
// network and a join or an apply, so it must be set and long; a token that is
// set must be long even beside TLS.
func checkAuth(token []byte, tlsc *TLSConfig) error {
	switch {
	case len(token) == 0 && tlsc == nil:
		return fmt.Errorf("%w: no token and no TLS", ErrWeakAuth)
	case len(token) > 0 && len(token) < MinTokenLen:
		return fmt.Errorf("%w: the token is %d bytes", ErrWeakAuth, len(token))
	case len(token) > maxTokenLen:
		return fmt.Errorf("%w: the token is over %d bytes", ErrWeakAuth, maxTokenLen)
	}
	return nil
}

// mux accepts connections on the cluster port, authenticates them and routes
// them by kind: Raft streams to the raft.StreamLayer side, relay streams to
// the node's command handler.
type mux struct {
	ln net.Listener
	// advertise is the address as configured: a name stays a name in the
	// raft configuration, as the peers list it, so the members' entries
	// follow their names when an address changes (docs/operations.md,
	// "Names and addresses", under "Three nodes").
	advertise advertisedAddr
	// source is the address the node's own connections to its peers leave
	// from: the advertised IP when it is this host's (nil: the kernel's
	// choice). The peers recognise members by that IP (memberAddrs); left
	// to the kernel, a connection to 10.0.0.2 from a host advertising
	// 10.0.0.1 may leave from another of its addresses.
	source  *net.TCPAddr
	token   []byte
	hsKey   []byte                  // handshakeKey(token); nil without a token
	tls     atomic.Pointer[tlsPair] // nil: no TLS; replaced by reloadTLS
	log     *slog.Logger
	onRelay func(net.Conn)
	wrap    func(net.Conn) net.Conn // tests: see Config.wrapConn
	// dropDial, in tests, makes a dial to addr fail with its error, as a
	// connection attempt a firewall drops does (Config.dropDial).
	dropDial func(addr string) error

	raftConns chan net.Conn
	// raftRefusals: raft address -> when its handshake last refused this
	// node's raft dial (a peer with another token or certificate); a dial
	// that passes deletes it. Readiness names them (Node.Ready).
	raftRefusals sync.Map
	closing      chan struct{}
	busy         chan struct{} // busyAnswers slots (refuseBusy)
	closeOnce    sync.Once
	wg           sync.WaitGroup

	// preAuth counts the connections still proving membership (TLS
	// handshake, preamble): a flood of them is capped before it takes
	// every file descriptor, while members' streams are not. Connections
	// from the addresses of the cluster's members count against memberAuth
	// instead, so that strangers holding every slot of preAuth do not keep
	// the members from reaching each other (members holds those addresses,
	// kept by the node).
	preAuth    *connlimit.Counter
	memberAuth *connlimit.Counter
	members    atomic.Pointer[memberAddrs]
	accepted   atomic.Int64 // connections accepted and not yet closed
	quiet      connlimit.Sampler

	mu       sync.Mutex
	open     map[net.Conn]struct{} // relay conns, closed on shutdown
	rejected uint64
}

func newMux(ln net.Listener, advertise string, token []byte, tlsc *TLSConfig, log *slog.Logger) (*mux, error) {
	if err := checkAuth(token, tlsc); err != nil {
		return nil, err
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("advertise address %q: must be a routable address, not a wildcard", advertise)
	}
	m := &mux{
		ln:         connlimit.Wrap(ln, connlimit.Limits{}, connlimit.Options{Name: "cluster", Logger: log}),
		preAuth:    connlimit.NewCounter(connlimit.Limits{}),
		memberAuth: connlimit.NewCounter(connlimit.Limits{}),
		advertise:  advertisedAddr(advertise),
		source:     localSource(adv.IP),
		token:      token,
		log:        log,
		raftConns:  make(chan net.Conn, 16),
		closing:    make(chan struct{}),
		busy:       make(chan struct{}, busyAnswers),
		open:       make(map[net.Conn]struct{}),
	}
	if len(token) > 0 {
		m.hsKey = handshakeKey(token)
	}
	if tlsc != nil {
		pair, err := tlsc.configs()
		if err != nil {
			return nil, err
		}
		m.tls.Store(pair)
	}
	return m, nil
}

// tlsPair is the TLS configuration of both ends of a cluster connection.
type tlsPair struct{ server, client *tls.Config }

// useTLS makes the connections opened from then on use pair; those open
// keep theirs (a certificate is checked at the handshake only). TLS cannot be
// turned on or off on a running node: every peer would have to change at the
// same moment.
func (m *mux) useTLS(pair *tlsPair) error {
	if m.tls.Load() == nil {
		return errors.New("cluster tls: the node started without TLS; turning it on needs a restart")
	}
	m.tls.Store(pair)
	return nil
}

func (m *mux) serve() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			// The wrapped listener waits out a shortage of descriptors
			// itself; what it returns is the listener closing.
			c, err := m.ln.Accept()
			if err != nil {
				select {
				case <-m.closing:
				default:
					m.log.Error("cluster port stopped accepting", "err", err)
				}
				return
			}
			key := connlimit.Network(c.RemoteAddr())
			counter := m.preAuth
			if m.members.Load().holds(c.RemoteAddr()) {
				counter = m.memberAuth
			}
			if over := counter.Acquire(key); over != "" {
				m.refuseBusy(c, fmt.Errorf("over the cap of unauthenticated connections (%s)", over))
				continue
			}
			m.accepted.Add(1)
			c = &countedConn{Conn: c, n: &m.accepted}
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.handshake(c, func() { counter.Release(key) })
			}()
		}
	}()
}

// isTimeout reports whether err is a network timeout (a dial that would
// only time out again).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// localSource is the address to dial peers from when ip is one of this
// host's (a socket can be bound to it), else nil.
func localSource(ip net.IP) *net.TCPAddr {
	a := &net.TCPAddr{IP: ip}
	ln, err := net.ListenTCP("tcp", a)
	if err != nil {
		return nil
	}
	ln.Close()
	return a
}

// memberAddrs are the IP addresses of the cluster's members, as the node
// last resolved them (nil: none known).
type memberAddrs map[netip.Addr]struct{}

// holds reports whether a's IP address is a member's.
func (s *memberAddrs) holds(a net.Addr) bool {
	if s == nil {
		return false
	}
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(t.IP)
	if !ok {
		return false
	}
	_, ok = (*s)[ip.Unmap().WithZone("")]
	return ok
}

// handshake authenticates c and routes it; authenticated is called once c
// no longer counts as unauthenticated (proved or refused).
func (m *mux) handshake(c net.Conn, authenticated func()) {
	var once sync.Once
	done := func() { once.Do(authenticated) }
	defer done()
	// Tracked until it has proved itself, so that the node's close ends a
	// connection that sends nothing instead of waiting out its deadline.
	raw := c
	if !m.track(raw) {
		raw.Close()
		return
	}
	proved := false
	defer func() {
		if !proved {
			m.untrack(raw)
		}
	}()
	if m.wrap != nil {
		c = m.wrap(c)
	}
	_ = c.SetDeadline(time.Now().Add(preambleDeadline))
	pair := m.tls.Load()
	if pair != nil {
		tc := tls.Server(c, pair.server)
		if err := tc.Handshake(); err != nil {
			if !m.isClosing() {
				m.reject(c, "tls handshake", err)
			}
			return
		}
		c = tc
	}
	kind, err := m.readPreamble(c)
	if err != nil {
		if m.isClosing() {
			return // the node's close ended it: no stranger to report
		}
		m.reject(c, "preamble", err)
		return
	}
	m.forget(raw) // tracked again below as what it serves
	proved = true
	_ = c.SetDeadline(time.Time{})
	done()
	switch kind {
	case kindRaft:
		// Raft's transport does not close the streams it accepted when it
		// shuts down; tracking them lets close end their reader goroutines.
		if !m.track(c) {
			c.Close()
			return
		}
		select {
		case m.raftConns <- &trackedConn{Conn: c, m: m}:
		case <-m.closing:
			m.untrack(c)
		}
	case kindRelay:
		if !m.track(c) {
			c.Close()
			return
		}
		defer m.untrack(c)
		m.onRelay(c)
	}
}

// errClosedEmpty: a connection closed before its first byte.
var errClosedEmpty = errors.New("closed before its first byte")

// readPreamble authenticates a stream by the preamble its dialer sends: a
// challenge on the token (handshake.go) or, from TLS peers and from nodes of
// an older release, the token itself.
func (m *mux) readPreamble(c net.Conn) (byte, error) {
	var magic [4]byte
	if _, err := io.ReadFull(c, magic[:]); err != nil {
		if err == io.EOF {
			return 0, errClosedEmpty
		}
		return 0, err
	}
	switch magic {
	case challengeMagic:
		return m.answerChallenge(c)
	case preambleMagic:
	default:
		return 0, errors.New("bad magic")
	}
	var hdr [3]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, err
	}
	kind := hdr[0]
	if kind != kindRaft && kind != kindRelay {
		return 0, fmt.Errorf("unknown stream kind %q", kind)
	}
	n := int(binary.BigEndian.Uint16(hdr[1:3]))
	if n > maxTokenLen {
		return 0, errors.New("token too long")
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	// With mutual TLS the certificate already proved membership; a token, when
	// configured, must match as well. Without TLS there is always a token
	// (newMux refuses otherwise); an empty or short one never passes, even
	// if the node's own were somehow short. ConstantTimeCompare keeps the
	// token's bytes from leaking through timing.
	switch {
	case len(m.token) == 0 && m.tls.Load() != nil:
		return kind, nil
	case len(m.token) < MinTokenLen || len(got) < MinTokenLen:
		return 0, fmt.Errorf("%w: token of %d bytes", ErrUnauthorized, len(got))
	case subtle.ConstantTimeCompare(got, m.token) != 1:
		return 0, ErrUnauthorized
	}
	return kind, nil
}

// rejections counts the connections refused so far.
func (m *mux) rejections() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rejected
}

// reject closes a connection that did not prove membership. The WARN is
// sampled (connlimit.Sampler: a flood of them would bury the log), with
// the count of those not written.
func (m *mux) reject(c net.Conn, what string, err error) {
	m.mu.Lock()
	m.rejected++
	total := m.rejected
	m.mu.Unlock()
	if errors.Is(err, errClosedEmpty) {
		// Closed before its first byte: a port check (a load balancer's, a
		// dialer's check that this node is up after a refused handshake),
		// no intruder's attempt.
		m.log.Debug("cluster connection closed before its first byte", "remote", c.RemoteAddr().String(), "stage", what)
		c.Close()
		return
	}
	if held, ok := m.quiet.Allow(time.Now()); ok {
		m.log.Warn("cluster connection rejected", "remote", c.RemoteAddr().String(), "stage", what, "err", err,
			"rejected_in_all", total, "not_logged_since_last", held)
	}
	c.Close()
}

// busyAnswers bounds the connections over a cap that are told so at once;
// past it they are closed unanswered.
const busyAnswers = 16

// refuseBusy refuses a connection over a cap of unauthenticated connections.
// It first answers the dialer's hello with busyAnswer, so that a member
// whose slots something on its host holds learns why (ErrPeerBusy) instead
// of reading the close as a refused token or a failed TLS handshake (with
// TLS the answer goes in the clear, in place of the server's first record:
// a fixed text, nothing secret). The answer's goroutine reads what the
// dialer sent until it closes (a close with unread bytes would reset the
// connection and lose the answer), a second at most.
func (m *mux) refuseBusy(c net.Conn, err error) {
	select {
	case m.busy <- struct{}{}:
	default:
		m.reject(c, "accept", err)
		return
	}
	if !m.track(c) { // closing: its close ends the answer's wait too
		m.reject(c, "accept", err)
		<-m.busy
		return
	}
	m.wg.Go(func() {
		defer func() { <-m.busy }()
		defer m.untrack(c)
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, werr := c.Write(busyAnswer[:]); werr == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		}
		m.reject(c, "accept", err)
	})
}

// openConns is the number of connections accepted and still open.
func (m *mux) openConns() int { return int(m.accepted.Load()) }

// countedConn is an accepted connection, counted until it is closed.
type countedConn struct {
	net.Conn
	once sync.Once
	n    *atomic.Int64
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.Add(-1) })
	return c.Conn.Close()
}

func (m *mux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.closing:
		return false
	default:
	}
	m.open[c] = struct{}{}
	return true
}

// isClosing reports whether the node is closing the mux.
func (m *mux) isClosing() bool {
	select {
	case <-m.closing:
		return true
	default:
		return false
	}
}

// forget takes c out of the open streams without closing it.
func (m *mux) forget(c net.Conn) {
	m.mu.Lock()
	delete(m.open, c)
	m.mu.Unlock()
}

func (m *mux) untrack(c net.Conn) {
	m.mu.Lock()
	delete(m.open, c)
	m.mu.Unlock()
	c.Close()
}

// trackedConn leaves the mux's set of open streams when closed.
type trackedConn struct {
	net.Conn
	m    *mux
	once sync.Once
}

// Read reports a stream that the node's own shutdown closed as its end
// (io.EOF): raft's transport logs any other read error at ERROR, and every
// clean stop of a follower logged a few ("failed to decode incoming
// command ... use of closed network connection").
func (t *trackedConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if err != nil && errors.Is(err, net.ErrClosed) {
		select {
		case <-t.m.closing:
			err = io.EOF
		default:
		}
	}
	return n, err
}

func (t *trackedConn) Close() error {
	t.once.Do(func() { t.m.untrack(t.Conn) })
	return nil
}

// dial opens an authenticated stream of the given kind to a peer. ctx ends
// the dial and the TLS handshake early (a relay whose leader changed).
// dialTCP opens the connection under a dial: from the advertised address
// when it is this host's (m.source), which the peers recognise members by.
func (m *mux) dialTCP(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	if m.dropDial != nil {
		if err := m.dropDial(addr); err != nil {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
		}
	}
	d := net.Dialer{Timeout: timeout}
	if m.source != nil {
		d.LocalAddr = m.source
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil && m.source != nil && ctx.Err() == nil && !isTimeout(err) {
		// The source may be what failed: the address left this host since
		// start (EADDRNOTAVAIL), or the peer is in the other IP family (no
		// suitable address). The kernel's choice then.
		d.LocalAddr = nil
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	return c, err
}

func (m *mux) dial(ctx context.Context, addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	c, err := m.dialTCP(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	endpoint := c.RemoteAddr().String()
	if m.wrap != nil {
		c = m.wrap(c)
	}
	if pair := m.tls.Load(); pair != nil {
		tc := tls.Client(c, pair.client)
		_ = tc.SetDeadline(time.Now().Add(preambleDeadline))
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			if busyRecord(err) {
				return nil, fmt.Errorf("tls handshake with %s: %w: %w", addr, ErrPeerUnproven, ErrPeerBusy)
			}
			// A peer killed during the handshake closes it the way a refusal
			// without an alert does; only the refusal may stop a bootstrap.
			if ctx.Err() == nil && closedAtHandshake(err) {
				if derr := m.peerGone(ctx, endpoint); derr != nil {
					return nil, fmt.Errorf("tls handshake with %s: it closed the connection and takes no new one (it went down): %w", addr, derr)
				}
			}
			return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
		}
		_ = tc.SetDeadline(time.Time{})
		c = tc
	} else {
		// No TLS: the token must not go to whoever answers at addr.
		if err := m.challengePeer(ctx, c, addr, kind); err != nil {
			c.Close()
			return nil, fmt.Errorf("handshake with %s: %w", addr, err)
		}
		return c, nil
	}
	// TLS proved the peer: the token goes inside it, as older releases expect.
	w := bufio.NewWriterSize(c, 64)
	w.Write(preambleMagic[:])
	w.WriteByte(kind)
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(m.token)))
	w.Write(n[:])
	w.Write(m.token)
	if err := w.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (m *mux) close() {
	m.closeOnce.Do(func() {
		close(m.closing)
		m.ln.Close()
		m.mu.Lock()
		for c := range m.open {
			c.Close()
		}
		m.mu.Unlock()
	})
	m.wg.Wait()
	// Drain Raft streams that were authenticated but never taken.
	for {
		select {
		case c := <-m.raftConns:
			c.Close()
		default:
			return
		}
	}
}

// raftLayer is the raft.StreamLayer view of the mux.
type raftLayer struct{ m *mux }

var _ raft.StreamLayer = raftLayer{}

func (l raftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.raftConns:
		return c, nil
	case <-l.m.closing:
		return nil, net.ErrClosed
	}
}

func (l raftLayer) Close() error { return nil } // the node closes the mux itself, after raft

func (l raftLayer) Addr() net.Addr { return l.m.advertise }

// advertisedAddr is the advertise address as written in the configuration
// (host or IP, and port), which raft records for this node.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

func (l raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.m.dial(context.Background(), string(addr), kindRaft, timeout)
	switch {
	case err == nil:
		l.m.raftRefusals.Delete(string(addr))
	case errors.Is(err, ErrPeerBusy):
		// Its cap of connections not yet proved is full: no verdict on
		// this node's credentials (readiness.go says busy on its own).
	case errors.Is(err, ErrPeerUnproven):
		l.m.raftRefusals.Store(string(addr), time.Now())
	}
	return c, err
}

// refusedRaft lists the addresses whose raft handshake refused this node
// within the last d (and has not passed since).
func (m *mux) refusedRaft(d time.Duration) []string {
	var addrs []string
	m.raftRefusals.Range(func(k, v any) bool {
		if time.Since(v.(time.Time)) <= d {
			addrs = append(addrs, k.(string))
		}
		return true
	})
	slices.Sort(addrs)
	return addrs
}

// TLSConfig names the PEM files for mutual TLS between nodes. Every node
// presents its certificate and accepts only peers whose certificate chains to CA.
type TLSConfig struct {
	CertFile, KeyFile, CAFile string
}

// LoadedTLS is a cluster TLS configuration read from its files, for
// Node.UseTLS.
type LoadedTLS struct{ pair *tlsPair }

// Load reads and checks the certificate, key and CA files.
func (t *TLSConfig) Load() (*LoadedTLS, error) {
	pair, err := t.configs()
	if err != nil {
		return nil, err
	}
	return &LoadedTLS{pair}, nil
}

func (t *TLSConfig) configs() (*tlsPair, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster tls key pair: %w", err)
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("cluster tls ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster tls ca %s: no certificates found", t.CAFile)
	}
	server := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	// Peers are addressed by IP and host names vary between deployments, so the
	// client checks that the server's chain ends at our CA instead of matching a
	// host name: membership in the cluster is proved by the CA's signature.
	client := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("peer sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots:         pool,
				Intermediates: inter,
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
			})
			return err
		},
	}
	return &tlsPair{server, client}, nil
}
