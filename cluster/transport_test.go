package cluster

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// testToken is the cluster token of tcpCluster's nodes.
const testToken = "cluster-token-for-tests-0123456789abcdef"

// tcpNodeConfig is a node of a test cluster over TCP: the cluster token,
// short raft timeouts, no sync.
func tcpNodeConfig(id, dir, bind string, peers []Peer) Config {
	return Config{
		ID: id, Dir: dir, Bind: bind, Peers: peers,
		Token: []byte(testToken), Logger: quietLogger(), RaftLogLevel: "off",
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond, NoSync: true,
	}
}

// tcpCluster starts n nodes on real loopback TCP ports.
func tcpCluster(t *testing.T, n int, tune func(i int, cfg *Config)) []*Node {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		nodes, err := openTCPCluster(filepath.Join(dir, strconv.Itoa(attempt)), n, tune)
		// A port freed for a node may be taken before the node binds it
		// (another test's outgoing connection draws from the same range):
		// then the whole cluster starts again on other ports.
		if err != nil && errors.Is(err, syscall.EADDRINUSE) && attempt < 5 {
			t.Logf("open a cluster: %v; again on other ports", err)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // tests set a node they closed themselves to nil
			for _, nd := range nodes {
				if nd != nil && nd.IsLeader() {
					nd.Close()
				}
			}
			for _, nd := range nodes {
				if nd != nil {
					nd.Close()
				}
			}
		})
		return nodes
	}
}

// openTCPCluster opens n nodes on free loopback ports, or none.
func openTCPCluster(dir string, n int, tune func(i int, cfg *Config)) ([]*Node, error) {
	var peers []Peer
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		peers = append(peers, Peer{ID: fmt.Sprintf("t%d", i+1), Addr: ln.Addr().String()})
	}
	for _, ln := range lns {
		ln.Close() // free the port for the node
	}
	nodes := make([]*Node, 0, n)
	for i := range n {
		cfg := tcpNodeConfig(peers[i].ID, filepath.Join(dir, peers[i].ID), peers[i].Addr, peers)
		if tune != nil {
			tune(i, &cfg)
		}
		node, err := Open(cfg)
		if err != nil {
			for _, nd := range nodes {
				nd.Close()
			}
			return nil, fmt.Errorf("open %s: %w", cfg.ID, err)
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

func leaderOf(t *testing.T, nodes []*Node) int {
	t.Helper()
	var at int
	waitFor(t, "a leader", func() bool {
		for i, n := range nodes {
			if n != nil && n.IsLeader() {
				at = i
				return true
			}
		}
		return false
	})
	return at
}

func TestTCPFollowerRelaysClaimsToTheLeader(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	f := (leader + 1) % 3
	waitFor(t, "follower knows the leader", func() bool { ok, _ := nodes[f].Ready(); return ok })
	res, err := nodes[f].Claim(ctxT(t, 5*time.Second), claimCmd("src:tcp"))
	if err != nil || !res.Created {
		t.Fatalf("claim through a follower: %+v %v", res, err)
	}
	res, err = nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:tcp"))
	if err != nil || res.Created {
		t.Fatalf("duplicate on the leader: %+v %v", res, err)
	}
	waitFor(t, "all replicas hold the claim", func() bool {
		for _, n := range nodes {
			if _, ok, _ := n.Lookup("src:tcp"); !ok {
				return false
			}
		}
		return true
	})
}

// reopen closes node i and opens it again on its data dir with its
// configuration changed by tune; the node then has raft state and does not
// bootstrap.
func reopen(t *testing.T, nodes []*Node, i int, tune func(cfg *Config)) {
	t.Helper()
	cfg := nodes[i].cfg
	if err := nodes[i].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[i] = nil
	tune(&cfg)
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopen %s: %v", cfg.ID, err)
	}
	nodes[i] = n
}

// A member restarted with a wrong token (or a foreign certificate) gets no
// replicated state and cannot commit.
func TestTCPWrongTokenCannotJoin(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	reopen(t, nodes, 2, func(cfg *Config) { cfg.Token = []byte("not-the-cluster-token-0123456789abcdef") })
	leader := leaderOf(t, nodes[:2])
	if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if _, ok, _ := nodes[2].Lookup("src:x"); ok {
		t.Fatal("a node with the wrong cluster token received replicated state")
	}
	if _, err := nodes[2].Claim(ctxT(t, 2*time.Second), engine.Command{Key: "src:y", Source: "src", Payload: []byte("{}")}); err == nil {
		t.Fatal("a node with the wrong cluster token got a claim committed")
	}
}

func TestTCPMutualTLSRejectsForeignCA(t *testing.T) {
	dir := t.TempDir()
	good := writeCA(t, filepath.Join(dir, "good"), 3)
	bad := writeCA(t, filepath.Join(dir, "bad"), 1)
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		cfg.Token = nil
		cfg.TLS = &TLSConfig{CertFile: good[i].cert, KeyFile: good[i].key, CAFile: good[i].ca}
	})
	reopen(t, nodes, 2, func(cfg *Config) {
		cfg.TLS = &TLSConfig{CertFile: bad[0].cert, KeyFile: bad[0].key, CAFile: bad[0].ca}
	})
	leader := leaderOf(t, nodes[:2])
	if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:tls")); err != nil {
		t.Fatalf("claim with two TLS nodes: %v", err)
	}
	f := 1 - leader
	waitFor(t, "the TLS follower replicates", func() bool { _, ok, _ := nodes[f].Lookup("src:tls"); return ok })
	time.Sleep(time.Second)
	if _, ok, _ := nodes[2].Lookup("src:tls"); ok {
		t.Fatal("a node with a certificate from another CA received replicated state")
	}
	if nodes[2].IsLeader() {
		t.Fatal("the foreign node leads")
	}
}

// TestNewNodeWithWrongCredentialsDoesNotBootstrap: a node started for the
// first time whose every reachable peer refuses its token or certificate
// fails to open, naming the cause, and writes no history of its own; once
// its credentials are fixed it joins the running cluster on the same data
// dir and receives its state. Had it bootstrapped, it would campaign alone
// forever with a configuration the cluster does not share.
func TestNewNodeWithWrongCredentialsDoesNotBootstrap(t *testing.T) {
	dir := t.TempDir()
	good := writeCA(t, filepath.Join(dir, "good"), 4)
	bad := writeCA(t, filepath.Join(dir, "bad"), 1)
	useTLS := func(f tlsFiles) func(cfg *Config) {
		return func(cfg *Config) {
			cfg.Token = nil
			cfg.TLS = &TLSConfig{CertFile: f.cert, KeyFile: f.key, CAFile: f.ca}
		}
	}
	for _, c := range []struct {
		name         string
		member       func(i int, cfg *Config)
		wrong, right func(cfg *Config)
	}{
		{
			name:   "token",
			member: func(int, *Config) {},
			wrong:  func(cfg *Config) { cfg.Token = []byte("not-the-cluster-token-0123456789abcdef") },
			right:  func(*Config) {},
		},
		{
			name:   "certificate from another authority",
			member: func(i int, cfg *Config) { useTLS(good[i])(cfg) },
			wrong:  useTLS(bad[0]),
			right:  useTLS(good[3]),
		},
		{
			// The peers' TLS alert ("remote error: tls: expired
			// certificate") is a refusal too.
			name:   "expired certificate",
			member: func(i int, cfg *Config) { useTLS(good[i])(cfg) },
			wrong:  useTLS(issueExpired(t, good[0])),
			right:  useTLS(good[3]),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes := tcpCluster(t, 3, c.member)
			leader := leaderOf(t, nodes)
			if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:before")); err != nil {
				t.Fatal(err)
			}
			peers := append([]Peer(nil), nodes[0].cfg.Peers...)
			bind := freePort(t)
			peers = append(peers, Peer{ID: "t4", Addr: bind})
			cfg := tcpNodeConfig("t4", filepath.Join(t.TempDir(), "t4"), bind, peers)
			wrong := cfg
			c.wrong(&wrong)
			n, err := Open(wrong)
			if err == nil {
				n.Close()
				t.Fatal("a new node refused by every peer opened (and bootstrapped a cluster of its own)")
			}
			if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "t1, t2, t3") {
				t.Fatalf("open with wrong credentials: %v; want ErrUnauthorized naming t1, t2, t3", err)
			}
			for _, nd := range nodes {
				if st := nd.Status(); len(st.Nodes) != 3 {
					t.Fatalf("%s's membership changed: %+v", nd.cfg.ID, st.Nodes)
				}
			}

			right := cfg
			c.right(&right)
			n, err = Open(right)
			if err != nil {
				t.Fatalf("open with the credentials fixed: %v", err)
			}
			defer n.Close()
			waitFor(t, "the fixed node joins and receives the cluster's state", func() bool {
				_, ok, _ := n.Lookup("src:before")
				return ok
			})
			if st := nodes[leaderOf(t, nodes)].Status(); len(st.Nodes) != 4 {
				t.Fatalf("membership after the join: %+v, want 4 voters", st.Nodes)
			}
		})
	}
}

// TestUseTLSRenewsCertificates: certificates renewed on a running cluster
// (UseTLS, as on SIGHUP) are what each node presents from its next
// connection on, and the renewed nodes still connect to one another.
func TestUseTLSRenewsCertificates(t *testing.T) {
	files := writeCA(t, filepath.Join(t.TempDir(), "ca"), 6) // 0-2 first, 3-5 renewed, same CA
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		cfg.Token = nil
		cfg.TLS = &TLSConfig{CertFile: files[i].cert, KeyFile: files[i].key, CAFile: files[i].ca}
	})
	leader := leaderOf(t, nodes)
	if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:before")); err != nil {
		t.Fatal(err)
	}
	probe, err := tls.LoadX509KeyPair(files[5].cert, files[5].key)
	if err != nil {
		t.Fatal(err)
	}
	served := func(i int) int64 {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", nodes[i].cfg.Bind,
			&tls.Config{Certificates: []tls.Certificate{probe}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatalf("tls dial node %d: %v", i, err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	for i := range nodes {
		if got, want := served(i), int64(i+2); got != want {
			t.Fatalf("node %d serves certificate %d, want %d", i, got, want)
		}
	}

	if _, err := (&TLSConfig{CertFile: files[3].cert, KeyFile: files[4].key, CAFile: files[3].ca}).Load(); err == nil {
		t.Fatal("a certificate with another certificate's key loaded")
	}
	for i, n := range nodes {
		l, err := (&TLSConfig{CertFile: files[i+3].cert, KeyFile: files[i+3].key, CAFile: files[i+3].ca}).Load()
		if err != nil {
			t.Fatal(err)
		}
		if err := n.UseTLS(l); err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	for i := range nodes {
		if got, want := served(i), int64(i+5); got != want {
			t.Fatalf("after the renewal node %d serves certificate %d, want %d", i, got, want)
		}
	}
	// A follower's next relay stream is a new connection under the renewed
	// certificates on both ends.
	f := (leader + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[f].Ready(); return ok })
	nodes[f].relay.closeAll()
	if res, err := nodes[f].Claim(ctxT(t, 10*time.Second), claimCmd("src:after")); err != nil || !res.Created {
		t.Fatalf("claim through a follower after the renewal: %+v %v", res, err)
	}

	// A node started with a token only cannot switch TLS on live.
	plain := tcpCluster(t, 1, nil)
	l, _ := (&TLSConfig{CertFile: files[0].cert, KeyFile: files[0].key, CAFile: files[0].ca}).Load()
	if err := plain[0].UseTLS(l); err == nil {
		t.Fatal("TLS was turned on on a running node")
	}
}

type tlsFiles struct{ cert, key, ca string }

// writeCA makes a CA and n node certificates signed by it, as PEM files.
func writeCA(t *testing.T, dir string, n int) []tlsFiles {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oncehook test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(dir, "ca.pem")
	writePEM(t, caPath, "CERTIFICATE", caDER)
	caKB, _ := x509.MarshalECPrivateKey(caKey)
	writePEM(t, filepath.Join(dir, "ca.key"), "EC PRIVATE KEY", caKB) // for issueLeaf
	var out []tlsFiles
	for i := 0; i < n; i++ {
		out = append(out, issueLeaf(t, caPath, int64(i+2), fmt.Sprintf("node%d", i+1), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)))
	}
	return out
}

// issueExpired writes a node certificate from ca's authority (writeCA's
// files) that expired an hour ago.
func issueExpired(t *testing.T, ca tlsFiles) tlsFiles {
	return issueLeaf(t, ca.ca, 99, "expired", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
}

// issueLeaf writes name.pem and name.key beside caPath: a node certificate
// for 127.0.0.1, valid from notBefore to notAfter, signed by writeCA's CA.
func issueLeaf(t *testing.T, caPath string, serial int64, name string, notBefore, notAfter time.Time) tlsFiles {
	t.Helper()
	dir := filepath.Dir(caPath)
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		return blk.Bytes
	}
	caCert, err := x509.ParseCertificate(read(caPath))
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParseECPrivateKey(read(filepath.Join(dir, "ca.key")))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	f := tlsFiles{cert: filepath.Join(dir, name+".pem"), key: filepath.Join(dir, name+".key"), ca: caPath}
	writePEM(t, f.cert, "CERTIFICATE", der)
	writePEM(t, f.key, "EC PRIVATE KEY", kb)
	return f
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRelayDropsIdleStreamsAfterAFailure: when a relay stream turns out
// broken (the leader restarted at the same address and closed every stream
// a follower kept), the other kept streams are closed too, so that only one
// batch fails with an unknown outcome, not one per kept stream.
func TestRelayDropsIdleStreamsAfterAFailure(t *testing.T) {
	f := &relayer{n: &Node{relayTimeout: 5 * time.Second}, addr: "leader"}
	for range maxIdleRelay {
		ours, theirs := net.Pipe()
		theirs.Close() // the leader's end is gone
		f.idle = append(f.idle, &relayConn{c: ours, r: bufio.NewReader(ours), w: bufio.NewWriter(ours)})
	}
	if _, err := f.call(ctxT(t, 5*time.Second), "leader", rpcApply, []byte("x")); !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("call on a broken stream: %v, want ErrIndeterminate", err)
	}
	f.mu.Lock()
	left := len(f.idle)
	f.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d broken streams still kept for the next batches", left)
	}
}

// TestTrackedConnEndsCleanlyOnShutdown: a raft stream closed by the node's
// own shutdown reads as its end, which raft's transport does not log as an
// error; closed otherwise, the error stays.
func TestTrackedConnEndsCleanlyOnShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, closing := range []bool{true, false} {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		m := &mux{closing: make(chan struct{})}
		if closing {
			close(m.closing)
		}
		tc := &trackedConn{Conn: server, m: m}
		server.Close()
		_, err = tc.Read(make([]byte, 1))
		if closing && err != io.EOF {
			t.Errorf("read after the shutdown closed the stream: %v, want io.EOF", err)
		}
		if !closing && !errors.Is(err, net.ErrClosed) {
			t.Errorf("read after a close without a shutdown: %v, want net.ErrClosed", err)
		}
		client.Close()
	}
}

// TestRelayAfterTheLeaderRestarts: a follower keeps its streams to the
// leader; the leader's process restarts (its streams end with it) and
// leads again, and the follower's next claim must not be sent down a
// stream of the old process (an outcome unknown, 503, for a claim the new
// process never received): it is committed on the first try.
func TestRelayAfterTheLeaderRestarts(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	li := leaderOf(t, nodes)
	fi := (li + 1) % 3
	for i := range 4 { // several streams pooled
		if _, err := nodes[fi].Claim(ctx, claimCmd(fmt.Sprintf("src:before%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	cfg := nodes[li].cfg
	if err := nodes[li].Close(); err != nil {
		t.Fatal(err)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("reopen %s: %v", cfg.ID, err)
	}
	nodes[li] = n
	// It leads again (as after any later election), without the follower
	// relaying anything meanwhile.
	waitFor(t, "the restarted node to lead again", func() bool {
		if n.IsLeader() {
			return true
		}
		for _, m := range nodes {
			if m.IsLeader() && m != n {
				_, _ = m.TransferLeadership(ctx, cfg.ID)
			}
		}
		return n.IsLeader()
	})
	waitFor(t, "the follower to know the leader", func() bool {
		_, id := nodes[fi].raft.LeaderWithID()
		return string(id) == cfg.ID
	})
	if _, err := nodes[fi].Claim(ctx, claimCmd("src:after")); err != nil {
		t.Fatalf("the first claim relayed after the leader restarted: %v", err)
	}
}

// TestAdvertisedNamesAreRecorded: members named by host name are recorded
// by that name in every node's raft configuration, each node's own entry
// included, and followers know the leader by its name: a member whose
// address changes behind its name stays reachable.
func TestAdvertisedNamesAreRecorded(t *testing.T) {
	named := func(addr string) string {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return net.JoinHostPort("localhost", port)
	}
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		peers := make([]Peer, len(cfg.Peers))
		for j, p := range cfg.Peers {
			peers[j] = Peer{ID: p.ID, Addr: named(p.Addr)}
		}
		cfg.Peers = peers
		cfg.Advertise = named(cfg.Bind)
	})
	leader := leaderOf(t, nodes)
	want := map[string]string{}
	for _, n := range nodes {
		want[n.cfg.ID] = n.cfg.Advertise
	}
	for _, n := range nodes {
		waitFor(t, n.cfg.ID+" knows the leader and three members", func() bool {
			st := n.Status()
			return st.LeaderID != "" && len(st.Nodes) == 3
		})
		st := n.Status()
		for _, s := range st.Nodes {
			if s.Address != want[s.ID] {
				t.Errorf("%s records %s as %q, want %q", n.cfg.ID, s.ID, s.Address, want[s.ID])
			}
		}
		if got := st.LeaderAddress; got != nodes[leader].cfg.Advertise {
			t.Errorf("%s knows the leader as %q, want %q", n.cfg.ID, got, nodes[leader].cfg.Advertise)
		}
	}
	res, err := nodes[(leader+1)%3].Claim(ctxT(t, 5*time.Second), claimCmd("src:named"))
	if err != nil || !res.Created {
		t.Fatalf("claim through a follower: %+v %v", res, err)
	}
}

// raftEnd is one node's raft transport over a mux, as Open builds it.
func raftEnd(t *testing.T, ln net.Listener) (*mux, *raft.NetworkTransport) {
	t.Helper()
	m, err := newMux(ln, ln.Addr().String(), []byte(testToken), nil, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	m.serve()
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: raftLayer{m}, MaxPool: 1, Timeout: 10 * time.Second, Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() {
		tr.Close()
		m.close()
	})
	return m, tr
}

// TestReplicationWaitsForARefusingPeer: an append or a snapshot to a peer
// whose port refuses connections (its process is down or restarting) is sent
// again while the request still matters, so that raft counts few failures
// however long the outage and its back-off stays short for a node that
// comes back: what was refused is answered once the peer listens, the
// snapshot's bytes whole. stop (node shutdown, before raft waits for its
// goroutines) ends a waiting call at once, and so does the end of its
// patience when the node no longer leads with that peer.
func TestReplicationWaitsForARefusingPeer(t *testing.T) {
	leader := func(t *testing.T, wait time.Duration) (*patientTransport, chan struct{}) {
		t.Helper()
		own, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, tr := raftEnd(t, own)
		p := newPatientTransport(tr, wait, wait)
		t.Cleanup(p.stop) // a subtest that ends early leaves no call waiting
		refused := make(chan struct{}, 1)
		p.onRefused = func() {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
		return p, refused
	}
	send := func(p *patientTransport, addr string) chan error {
		done := make(chan error, 1)
		go func() {
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("node1"), Addr: []byte("127.0.0.1:1")}, Term: 1}
			var resp raft.AppendEntriesResponse
			err := p.AppendEntries("node2", raft.ServerAddress(addr), req, &resp)
			if err == nil && !resp.Success {
				err = errors.New("the peer did not accept the append")
			}
			done <- err
		}()
		return done
	}

	// comeBack listens at addr as the peer, accepts the append waiting to be
	// sent there, and checks that the sender's call then succeeds.
	comeBack := func(t *testing.T, addr string, done chan error) {
		t.Helper()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the port was taken meanwhile: %v", err)
		}
		_, peer := raftEnd(t, ln)
		go func() {
			rpc := <-peer.Consumer()
			rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
		}()
		if err := <-done; err != nil {
			t.Fatalf("append after the peer listened again: %v", err)
		}
	}

	t.Run("the peer comes back", func(t *testing.T) {
		p, refused := leader(t, time.Minute)
		addr := freePort(t)
		done := send(p, addr)
		select {
		case err := <-done:
			t.Fatalf("append to a refusing peer returned at once (%v): raft's back-off grows with every refusal", err)
		case <-refused:
		}
		comeBack(t, addr, done)
	})

	// A follower whose disk is full refuses the append (no NoRetryBackoff:
	// its log matched); the append goes again, and once it can store the
	// call succeeds, raft having counted no failure. A refusal for a log
	// that does not match is raft's to handle, at once.
	t.Run("a follower that cannot store is sent the append again", func(t *testing.T) {
		p, retried := leader(t, time.Minute)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, peer := raftEnd(t, ln)
		var full atomic.Bool
		full.Store(true)
		p.stillWanted = func(raft.ServerID, uint64) bool { return true } // it leads with the peer
		var tries atomic.Int32
		var sizes sync.Map // try number -> entries in it
		stop := make(chan struct{})
		served := make(chan struct{})
		t.Cleanup(func() { close(stop); <-served })
		go func() {
			defer close(served)
			for {
				var rpc raft.RPC
				select {
				case rpc = <-peer.Consumer():
				case <-stop:
					return
				}
				req := rpc.Command.(*raft.AppendEntriesRequest)
				sizes.Store(tries.Add(1), len(req.Entries))
				switch {
				case req.PrevLogEntry == 9: // a log that does not match
					rpc.Respond(&raft.AppendEntriesResponse{Term: 1, LastLog: 3, NoRetryBackoff: true}, nil)
				case req.PrevLogEntry == 7: // a follower of a newer term
					rpc.Respond(&raft.AppendEntriesResponse{Term: 2, LastLog: 7}, nil)
				case full.Load():
					rpc.Respond(&raft.AppendEntriesResponse{Term: 1, LastLog: req.PrevLogEntry}, nil)
				default:
					rpc.Respond(&raft.AppendEntriesResponse{Term: 1, LastLog: req.PrevLogEntry + 1, Success: true}, nil)
				}
			}
		}()
		appendAt := func(prev uint64) chan error {
			done := make(chan error, 1)
			go func() {
				req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("node1"), Addr: []byte("127.0.0.1:1")},
					Term: 1, PrevLogEntry: prev, PrevLogTerm: 1, Entries: []*raft.Log{
						{Index: prev + 1, Term: 1, Type: raft.LogCommand, Data: []byte("x")},
						{Index: prev + 2, Term: 1, Type: raft.LogCommand, Data: []byte("y")},
						{Index: prev + 3, Term: 1, Type: raft.LogCommand, Data: []byte("z")},
					}}
				var resp raft.AppendEntriesResponse
				err := p.AppendEntries("node2", raft.ServerAddress(ln.Addr().String()), req, &resp)
				if err == nil && !resp.Success {
					err = errors.New("the peer did not accept the append")
				}
				done <- err
			}()
			return done
		}
		if err := <-appendAt(9); err == nil || tries.Load() != 1 {
			t.Fatalf("an append to a log that does not match: %v after %d tries; want its refusal after one", err, tries.Load())
		}
		if err := <-appendAt(7); err == nil || tries.Load() != 2 {
			t.Fatalf("an append refused in a newer term: %v after %d tries; want its refusal after one", err, tries.Load())
		}
		var heard []string // what the node's log is told
		var heardMu sync.Mutex
		p.onStore = func(id raft.ServerID, since time.Time, err error) {
			heardMu.Lock()
			defer heardMu.Unlock()
			heard = append(heard, fmt.Sprintf("%s start=%v err=%v", id, since.IsZero(), err))
		}
		if got := p.peersNotStoring(); len(got) != 0 {
			t.Fatalf("refusals for a mismatch or a newer term named %v as not storing", got)
		}
		done := appendAt(5)
		for range 2 {
			select {
			case err := <-done:
				t.Fatalf("an append the follower could not store returned (%v): raft's back-off grows with every refusal", err)
			case <-retried:
			}
		}
		if got := p.peersNotStoring(); !slices.Equal(got, []string{"node2"}) {
			t.Errorf("while the follower cannot store, the leader names %v; want [node2]", got)
		}
		full.Store(false)
		if err := <-done; err != nil {
			t.Fatalf("append once the follower can store: %v", err)
		}
		if got := p.peersNotStoring(); len(got) != 0 {
			t.Errorf("once the follower stores again, the leader still names %v", got)
		}
		heardMu.Lock()
		if want := []string{"node2 start=true err=the peer cannot store the entries", "node2 start=false err=<nil>"}; !slices.Equal(heard, want) {
			t.Errorf("the log heard %q; want %q", heard, want)
		}
		heardMu.Unlock()
		// The refused batch, then its first entry alone until it is
		// stored, then the whole batch.
		n := tries.Load()
		for i := int32(3); i <= n; i++ {
			got, _ := sizes.Load(i)
			want := 1
			if i == 3 || i == n {
				want = 3
			}
			if got != want {
				t.Errorf("try %d of %d carried %v entries, want %d", i, n, got, want)
			}
		}
	})

	t.Run("a snapshot waits too", func(t *testing.T) {
		p, refused := leader(t, time.Minute)
		addr := freePort(t)
		snapshot := []byte("the engine file, compressed")
		done := make(chan error, 1)
		go func() {
			req := &raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ID: []byte("node1"), Addr: []byte("127.0.0.1:1")},
				SnapshotVersion: raft.SnapshotVersionMax, Term: 1, Size: int64(len(snapshot))}
			var resp raft.InstallSnapshotResponse
			err := p.InstallSnapshot("node2", raft.ServerAddress(addr), req, &resp, bytes.NewReader(snapshot))
			if err == nil && !resp.Success {
				err = errors.New("the peer did not take the snapshot")
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("snapshot to a refusing peer returned at once (%v)", err)
		case <-refused:
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the port was taken meanwhile: %v", err)
		}
		_, peer := raftEnd(t, ln)
		got := make(chan []byte, 1)
		go func() {
			rpc := <-peer.Consumer()
			b, _ := io.ReadAll(io.LimitReader(rpc.Reader, int64(len(snapshot))))
			got <- b
			rpc.Respond(&raft.InstallSnapshotResponse{Term: 1, Success: true}, nil)
		}()
		if err := <-done; err != nil {
			t.Fatalf("snapshot after the peer listened again: %v", err)
		}
		if b := <-got; !bytes.Equal(b, snapshot) {
			t.Fatalf("the peer read %q, want the whole snapshot %q", b, snapshot)
		}
	})

	t.Run("the node shuts down", func(t *testing.T) {
		p, refused := leader(t, time.Hour)
		done := send(p, freePort(t))
		select {
		case err := <-done:
			t.Fatalf("append to a refusing peer returned at once: %v", err)
		case <-refused:
		}
		p.stop()
		if err := <-done; !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("append after stop = %v; want the refusal", err)
		}
	})

	t.Run("patience ends", func(t *testing.T) {
		p, _ := leader(t, 3*redialEvery)
		if err := <-send(p, freePort(t)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("append = %v; want the refusal once the wait is over", err)
		}
	})

	// Past its patience a call goes on while the node still leads in the
	// request's term with the peer a member, so failures do not add up
	// again over a long outage.
	t.Run("a leader keeps trying past its patience", func(t *testing.T) {
		p, _ := leader(t, 2*redialEvery)
		p.longWait = time.Hour
		asked := make(chan [2]string, 16)
		p.stillWanted = func(id raft.ServerID, term uint64) bool {
			select {
			case asked <- [2]string{string(id), fmt.Sprint(term)}:
			default:
			}
			return true
		}
		addr := freePort(t)
		done := send(p, addr)
		for range 3 {
			select {
			case err := <-done:
				t.Fatalf("append returned (%v) though the node still leads with the peer", err)
			case q := <-asked:
				if q != [2]string{"node2", "1"} {
					t.Fatalf("asked about %v; want the request's peer and term [node2 1]", q)
				}
			}
		}
		comeBack(t, addr, done)
	})

	t.Run("a request that no longer matters ends", func(t *testing.T) {
		p, _ := leader(t, 2*redialEvery)
		p.longWait = time.Hour
		var asked atomic.Int32
		p.stillWanted = func(raft.ServerID, uint64) bool { return asked.Add(1) < 3 }
		if err := <-send(p, freePort(t)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("append = %v; want the refusal once the node no longer leads", err)
		}
		if n := asked.Load(); n != 3 {
			t.Fatalf("asked %d times whether to go on; want 3 (the last said no)", n)
		}
	})
}

// TestLeadsWith checks the question the patient transport asks raft past
// its patience, on a real single-node raft: yes only while it leads, for
// the term it leads in and a member of its configuration.
func TestLeadsWith(t *testing.T) {
	if leadsWith(nil, "node1", 1) {
		t.Fatal("no raft yet: want no")
	}
	_, trans := raft.NewInmemTransport("node1")
	conf := raft.DefaultConfig()
	conf.LocalID = "node1"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	self := raft.Configuration{Servers: []raft.Server{{ID: "node1", Address: trans.LocalAddr()}}}
	if err := raft.BootstrapCluster(conf, store, store, snaps, trans, self); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, nopFSM{}, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	shut := false
	defer func() {
		if !shut {
			r.Shutdown()
		}
	}()
	select {
	case <-r.LeaderCh():
	case <-time.After(10 * time.Second):
		t.Fatal("the single node did not become leader")
	}
	term := r.CurrentTerm()
	// A non-voter: a member the leader replicates to, which the commit of
	// its own addition does not wait for.
	if err := r.AddNonvoter("node2", "node2", 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   raft.ServerID
		term uint64
		want bool
	}{
		{"node2", term, true},
		{"node1", term, true},
		{"node2", term - 1, false}, // a request of an earlier term
		{"node3", term, false},     // not a member
	} {
		if got := leadsWith(r, c.id, c.term); got != c.want {
			t.Errorf("leadsWith(%s, term %d) = %v; want %v (leader in term %d)", c.id, c.term, got, c.want, term)
		}
	}
	if err := r.RemoveServer("node2", 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	if leadsWith(r, "node2", term) {
		t.Error("a removed peer: want no")
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	shut = true
	if leadsWith(r, "node1", term) {
		t.Error("after shutdown: want no")
	}
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, errors.New("no snapshots") }
func (nopFSM) Restore(io.ReadCloser) error         { return errors.New("no snapshots") }

// TestStoppedMemberCountsAsUnreachable: the usual way a member is down is
// its process stopped: its port refuses. The transport tries again in
// place of failing to raft (patient.go), so raft observes no failed
// heartbeat; the leader must count the member as unreachable all the same,
// for as long as it is down, not only after its first failure.
func TestStoppedMemberCountsAsUnreachable(t *testing.T) {
	const window = 300 * time.Millisecond
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) { cfg.reachWindow = window })
	claimThrough(t, nodes[leaderOf(t, nodes)], "src:a")
	li := leaderOf(t, nodes) // the leader after the claim: an election may have moved it
	fi := (li + 1) % 3
	if err := nodes[fi].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[fi] = nil
	leaderSays := func() int {
		for _, n := range nodes {
			if n != nil && n.IsLeader() {
				return n.Status().Unreachable
			}
		}
		return -1
	}
	waitFor(t, "the leader to count the stopped member", func() bool { return leaderSays() == 1 })
	// Many windows later it still counts it: each refused try renews it.
	for deadline := time.Now().Add(8 * window); time.Now().Before(deadline); time.Sleep(window / 4) {
		if got := leaderSays(); got != 1 && got != -1 {
			t.Fatalf("the leader counts %d unreachable while a member is stopped", got)
		}
	}
}

// TestTCPFollowersBecomeCurrent: over the real cluster port, a follower
// learns the leader's commit index after its start and then answers a
// committed key from its own state (current.go).
func TestTCPFollowersBecomeCurrent(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	li := leaderOf(t, nodes)
	if _, err := nodes[li].Claim(ctxT(t, 10*time.Second), claimCmd("src:seen")); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		waitFor(t, fmt.Sprintf("node %d to answer the key from its state", i), func() bool {
			_, ok, _ := n.Lookup("src:seen")
			return ok
		})
	}
}

// TestStoreRunOfAnEarlierTermEndsAlone: a run of resends of an earlier term
// (or before the peer was removed and added back) that ends after a later
// run began for the same peer leaves the later one listed.
func TestStoreRunOfAnEarlierTermEndsAlone(t *testing.T) {
	p := &patientTransport{}
	first := p.storing("node2", time.Time{}, errCannotStore)
	for !time.Now().After(first) {
		// the next run starts at a later instant
	}
	second := p.storing("node2", time.Time{}, errCannotStore)
	p.storing("node2", first, errCannotStore)
	if got := p.peersNotStoring(); !slices.Equal(got, []string{"node2"}) {
		t.Fatalf("the earlier run's end took the later run's record: %v, want [node2]", got)
	}
	p.storing("node2", second, nil)
	if got := p.peersNotStoring(); len(got) != 0 {
		t.Fatalf("after the later run ended: %v, want none", got)
	}
}
