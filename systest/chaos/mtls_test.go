package chaos

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"oncehook/internal/testcluster"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// Mutual TLS on the cluster port, for both the Raft transport and the internal
// forwarding channel (RELIABILITY.md, "Mutual TLS on the cluster port"):
// three real nodes on loopback with mutual TLS 1.3, a CA and a cluster token.
// Peers that must be refused try two ways in:
//
//   - a probe: one Raft RPC (RequestVote) sent with hashicorp/raft's own
//     NetworkTransport over a hand-made connection. It is refused when no
//     answer comes back, the node logs the rejection at the expected stage,
//     and raft never logs the request. The same probe with the right
//     certificate and token gets the node's answer (the positive control).
//   - a rogue node: a fourth oncehook process with the bad material,
//     configured to join the cluster (its peers list names the three). It
//     must never join: the cluster's configuration stays at three voters, its
//     leader and term do not move, and the rogue holds none of the cluster's
//     events. The same node with good material joins (the positive control).

// testCA is a CA that issues node certificates in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	path string // CA certificate PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-24 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, path: filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".pem")}
	writePEM(t, ca.path, "CERTIFICATE", der)
	return ca
}

var serial int64 = 100

// issue writes a node certificate and key valid from nb to na; it returns the
// file paths and the loaded pair.
func (ca *testCA) issue(t *testing.T, dir, name string, nb, na time.Time) (string, string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: nb, NotAfter: na,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cp, kp := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, cp, "CERTIFICATE", der)
	writePEM(t, kp, "EC PRIVATE KEY", kb)
	pair, err := tls.LoadX509KeyPair(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	return cp, kp, pair
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// lnode is one oncehook process of the loopback TLS cluster.
type lnode struct {
	id, intake, admin, raft string
	cfg, data, logPath      string
	proc                    *proc
}

// tlsMaterial is what a node's [cluster] section names.
type tlsMaterial struct {
	cert, key, ca string // all "" for no TLS
	token         string // "" for no token file
}

// newLoopNode is a node named id on three free loopback ports.
func newLoopNode(t *testing.T, id string) *lnode {
	ports := testcluster.FreePorts(t, 3)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	return &lnode{id: id, intake: addr(0), admin: addr(1), raft: addr(2)}
}

func writeLoopNode(t *testing.T, dir string, n *lnode, peers []string, m tlsMaterial, handler string) {
	t.Helper()
	n.cfg = filepath.Join(dir, n.id+".toml")
	n.data = filepath.Join(dir, n.id+"-data")
	n.logPath = filepath.Join(dir, n.id+".log")
	cfg := testcluster.NodeConfig{ID: n.id, DataDir: n.data, Listen: n.intake,
		RaftListen: n.raft, Advertise: n.raft, Peers: peers,
		AdminListen: n.admin, AdminTokenName: "chaos", AdminTokenFile: filepath.Join(dir, "admin.token"),
		Sources: []testcluster.SourceConfig{{Name: "orders", Provider: "standard",
			SecretFile: filepath.Join(dir, "orders.secret"), Forward: "http://" + handler + "/orders"}},
	}
	if m.token != "" {
		cfg.ClusterTokenFile = filepath.Join(dir, n.id+".cluster.token")
		writeSecret(t, cfg.ClusterTokenFile, m.token)
	}
	if m.cert != "" {
		cfg.ClusterExtra = fmt.Sprintf("tls_cert = %q\ntls_key = %q\ntls_ca = %q\n", m.cert, m.key, m.ca)
	}
	if err := cfg.Write(n.cfg); err != nil {
		t.Fatal(err)
	}
}

// waitLoopLeader waits up to 60 s for a node that leads and is ready, and
// returns it with its term; on timeout it logs every node's last lines.
func waitLoopLeader(t *testing.T, cluster string, nodes []*lnode) (*lnode, uint64) {
	t.Helper()
	var leader *lnode
	var term uint64
	err := testcluster.Await(context.Background(), "a ready leader of the "+cluster, 60*time.Second, func() (bool, error) {
		for _, n := range nodes {
			if st, _ := n.status(t); st.State == "leader" && st.Ready {
				leader, term = n, st.Term
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		for _, n := range nodes {
			t.Logf("%s:\n%s", n.id, n.proc.Tail(15))
		}
		t.Fatal(err)
	}
	return leader, term
}

func (n *lnode) start(t *testing.T) {
	n.proc = startProc(t, n.id, n.logPath, oncehookBin, "serve", "-config", n.cfg)
}

func (n *lnode) status(t *testing.T) (nodeStatus, []struct{ ID string }) {
	var st struct {
		nodeStatus
		Nodes []struct{ ID string } `json:"nodes"`
	}
	code, b := getAuth("http://" + n.admin + "/v1/status")
	if code == 200 {
		json.Unmarshal(b, &st)
	}
	return st.nodeStatus, st.Nodes
}

func getAuth(url string) (int, []byte) {
	return (&single{}).get(url, true)
}

// stageField is how the node's text log writes the rejection stage.
func stageField(stage string) string {
	if strings.Contains(stage, " ") {
		return "stage=" + strconv.Quote(stage)
	}
	return "stage=" + stage
}

// TestClusterMutualTLS: see the comment at the top of the file.
func TestClusterMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns four nodes")
	}
	dir := t.TempDir()
	writeSecret(t, filepath.Join(dir, "admin.token"), adminToken)
	writeSecret(t, filepath.Join(dir, "orders.secret"), canarySecret)
	rec := newRecorder(t)
	ca := newTestCA(t, dir, "oncehook cluster CA")
	foreign := newTestCA(t, dir, "foreign CA")
	now := time.Now()
	const token = "mtls-cluster-token-0123456789abcdef"

	nodes := make([]*lnode, 3)
	var peers []string
	for i := range nodes {
		nodes[i] = newLoopNode(t, fmt.Sprintf("node%d", i+1))
		peers = append(peers, nodes[i].id+"="+nodes[i].raft)
	}
	for _, n := range nodes {
		cp, kp, _ := ca.issue(t, dir, n.id, now.Add(-time.Hour), now.Add(time.Hour))
		writeLoopNode(t, dir, n, peers, tlsMaterial{cert: cp, key: kp, ca: ca.path, token: token}, rec.addr)
		n.start(t)
	}
	leader, term := waitLoopLeader(t, "mutual-TLS cluster", nodes)
	// Some state for a rogue to (not) receive, claimed through every node
	// (followers forward over the TLS channel).
	for i, n := range nodes {
		s := &single{t: t, intake: n.intake}
		id := fmt.Sprintf("mtls-%d", i)
		body := []byte(fmt.Sprintf(`{"id":%q}`, id))
		if a := s.post("POST", "/in/orders", body, sign(t, canarySecret, body, id, time.Now()), nil); a.status != 202 {
			t.Fatalf("claim through %s over the TLS cluster: %d %s", n.id, a.status, a.body)
		}
	}

	// The probe's certificates.
	_, _, goodPair := ca.issue(t, dir, "probe", now.Add(-time.Hour), now.Add(time.Hour))
	_, _, foreignPair := foreign.issue(t, dir, "probe-foreign", now.Add(-time.Hour), now.Add(time.Hour))
	_, _, expiredPair := ca.issue(t, dir, "probe-expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	tlsc := func(pair *tls.Certificate, maxVersion uint16) *tls.Config {
		c := &tls.Config{InsecureSkipVerify: true, MaxVersion: maxVersion} // the probe does not care who the server is
		if pair != nil {
			c.Certificates = []tls.Certificate{*pair}
		}
		return c
	}
	probes := []struct {
		name   string
		tls    *tls.Config // nil: plain TCP
		token  string
		accept bool
		stage  string // the node's rejection stage
	}{
		{"right certificate and token", tlsc(&goodPair, 0), token, true, ""},
		{"no client certificate", tlsc(nil, 0), token, false, "tls handshake"},
		{"certificate from another CA", tlsc(&foreignPair, 0), token, false, "tls handshake"},
		{"expired certificate", tlsc(&expiredPair, 0), token, false, "tls handshake"},
		{"TLS 1.2 only", tlsc(&goodPair, tls.VersionTLS12), token, false, "tls handshake"},
		{"right certificate, wrong token", tlsc(&goodPair, 0), "not-the-cluster-token-0123456789abcdef", false, "preamble"},
		{"right certificate, no token", tlsc(&goodPair, 0), "", false, "preamble"},
		{"plain TCP with the right token", nil, token, false, "tls handshake"},
	}
	for _, p := range probes {
		t.Run("probe/"+p.name, func(t *testing.T) {
			rejected := countInFile(leader.logPath, "cluster connection rejected")
			atStage := countInFile(leader.logPath, stageField(p.stage))
			seen := countInFile(leader.logPath, "rejecting vote request since node is not in configuration")
			resp, err := probeRequestVote(leader.raft, p.tls, p.token)
			time.Sleep(300 * time.Millisecond) // the node's log line
			processed := countInFile(leader.logPath, "rejecting vote request since node is not in configuration") - seen
			if p.accept {
				if err != nil {
					t.Fatalf("the control probe got no answer: %v\n%s", err, leader.proc.Tail(5))
				}
				if resp.Term < term || processed != 1 {
					t.Errorf("the control probe: answer term %d (cluster term %d), raft logged it %d times (want 1)", resp.Term, term, processed)
				}
				return
			}
			if err == nil {
				t.Errorf("answered (term %d): a peer with %s reached raft", resp.Term, p.name)
			}
			if processed != 0 {
				t.Errorf("raft processed the RPC of a peer with %s", p.name)
			}
			if countInFile(leader.logPath, "cluster connection rejected") <= rejected {
				t.Errorf("the node logged no rejection for %s", p.name)
			}
			if countInFile(leader.logPath, stageField(p.stage)) <= atStage {
				t.Errorf("the rejection of %s was not at the %s stage:\n%s", p.name, p.stage, leader.proc.Tail(3))
			}
			t.Logf("refused: %v", err)
		})
	}

	// Rogue nodes: a fourth oncehook that tries to join.
	cp, kp, _ := ca.issue(t, dir, "node4", now.Add(-time.Hour), now.Add(time.Hour))
	fcp, fkp, _ := foreign.issue(t, dir, "node4-foreign", now.Add(-time.Hour), now.Add(time.Hour))
	ecp, ekp, _ := ca.issue(t, dir, "node4-expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	rogues := []struct {
		name  string
		m     tlsMaterial
		joins bool
	}{
		{"certificate from another CA", tlsMaterial{cert: fcp, key: fkp, ca: foreign.path, token: token}, false},
		{"expired certificate", tlsMaterial{cert: ecp, key: ekp, ca: ca.path, token: token}, false},
		{"right certificate, wrong token", tlsMaterial{cert: cp, key: kp, ca: ca.path, token: "not-the-cluster-token-0123456789abcdef"}, false},
		{"no TLS, right token", tlsMaterial{token: token}, false},
		{"right certificate and token", tlsMaterial{cert: cp, key: kp, ca: ca.path, token: token}, true}, // last: it changes the cluster
	}
	for i, rg := range rogues {
		t.Run("node/"+rg.name, func(t *testing.T) {
			r := newLoopNode(t, "node4")
			rdir := filepath.Join(dir, fmt.Sprintf("rogue%d", i))
			if err := os.MkdirAll(rdir, 0o700); err != nil {
				t.Fatal(err)
			}
			writeSecret(t, filepath.Join(rdir, "admin.token"), adminToken)
			writeSecret(t, filepath.Join(rdir, "orders.secret"), canarySecret)
			writeLoopNode(t, rdir, r, append(append([]string{}, peers...), "node4="+r.raft), rg.m, rec.addr)
			before := countInFile(leader.logPath, "cluster connection rejected")
			r.start(t)
			defer r.proc.Stop(10 * time.Second)
			joined := func() bool {
				_, servers := leader.status(t)
				for _, s := range servers {
					if s.ID == "node4" {
						return true
					}
				}
				return false
			}
			holds := func() bool { code, _ := getAuth("http://" + r.admin + "/v1/events/orders:mtls-0"); return code == 200 }
			if rg.joins {
				if err := testcluster.Await(context.Background(), "node4 to join and catch up", 30*time.Second, func() (bool, error) {
					return joined() && holds(), nil
				}); err != nil {
					t.Fatalf("a node with the right certificate and token did not join and catch up: %v\n%s", err, r.proc.Tail(10))
				}
				return
			}
			// Every peer refuses it: a new node then does not bootstrap a
			// cluster of its own (alone in a four-voter configuration the
			// others do not share, it would ask for votes forever). It
			// exits, naming the refusal.
			if err := testcluster.Await(context.Background(), "the refused node to exit", 30*time.Second, func() (bool, error) {
				return !r.proc.Running(), nil
			}); err != nil {
				t.Fatalf("a node with %s kept running: %v\n%s", rg.name, err, r.proc.Tail(10))
			}
			if out := r.proc.Tail(5); !strings.Contains(out, "refused this node's token or TLS handshake") {
				t.Errorf("the refused node's exit does not say why:\n%s", out)
			}
			st, servers := leader.status(t)
			if joined() || len(servers) != 3 {
				t.Errorf("a node with %s joined: the configuration is %v", rg.name, servers)
			}
			if st.State != "leader" || st.Term != term {
				t.Errorf("the cluster was disturbed: %s is %s at term %d (was leader at term %d)", leader.id, st.State, st.Term, term)
			}
			if holds() {
				t.Errorf("a node with %s received the cluster's events", rg.name)
			}
			if countInFile(leader.logPath, "cluster connection rejected") <= before {
				t.Errorf("the leader logged no rejected connection from the rogue")
			}
		})
	}
	for _, n := range nodes {
		n.proc.Stop(10 * time.Second)
	}
}

// probeLayer is a raft.StreamLayer that dials like a peer would: TLS (or
// not), then the cluster preamble (magic, stream kind, token), as
// cluster/transport.go expects.
type probeLayer struct {
	tls   *tls.Config
	token string
	done  chan struct{}
}

func (p probeLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	if p.tls != nil {
		tc := tls.Client(c, p.tls)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	w := bufio.NewWriter(c)
	w.WriteString("OHK1R")
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(p.token)))
	w.Write(n[:])
	w.WriteString(p.token)
	if err := w.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (p probeLayer) Accept() (net.Conn, error) { <-p.done; return nil, net.ErrClosed }
func (p probeLayer) Close() error              { return nil }
func (p probeLayer) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// probeRequestVote sends one RequestVote from a server the cluster does not
// know (term 0: harmless if processed, the node answers with its term).
func probeRequestVote(addr string, tc *tls.Config, token string) (*raft.RequestVoteResponse, error) {
	done := make(chan struct{})
	defer close(done)
	trans := raft.NewNetworkTransport(probeLayer{tls: tc, token: token, done: done}, 1, 3*time.Second, io.Discard)
	defer trans.Close()
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte("127.0.0.1:1")},
		Term:      0,
	}
	var resp raft.RequestVoteResponse
	if err := trans.RequestVote("node-probe", raft.ServerAddress(addr), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
