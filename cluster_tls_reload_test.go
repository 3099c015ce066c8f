package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA signs node certificates for mutual TLS between nodes.
type testCA struct {
	t    *testing.T
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, caFile string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oncehook cluster test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	mustWrite(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return &testCA{t: t, cert: cert, key: key}
}

// issue writes a node certificate with the given serial and its key
// (replacing the files' content, as a renewal does).
func (ca *testCA) issue(certFile, keyFile string, serial int64) {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "node1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	mustWrite(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReloadRenewsClusterCertificate: certificates renewed in place are what
// the cluster port presents after SIGHUP, without a restart (a certificate
// that expires would otherwise take the node out of its cluster on the day
// it does); a renewal whose files do not load rejects the reload and keeps
// the running certificate.
func TestReloadRenewsClusterCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "cluster.crt"), filepath.Join(dir, "cluster.key"), filepath.Join(dir, "ca.crt")
	ca := newTestCA(t, caFile)
	ca.issue(certFile, keyFile, 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := ln.Addr().String()
	ln.Close()
	clusterTOML := fmt.Sprintf("\n[cluster]\nraft_listen = %q\npeers = [\"node1=%s\"]\ntls_cert = %q\ntls_key = %q\ntls_ca = %q\n",
		raftAddr, raftAddr, certFile, keyFile, caFile)
	tn := startNodeWithSources(t, dir, "http://127.0.0.1:1", clusterTOML)

	probe, err := tls.LoadX509KeyPair(certFile, keyFile) // any certificate of the CA
	if err != nil {
		t.Fatal(err)
	}
	served := func() int64 {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr,
			&tls.Config{Certificates: []tls.Certificate{probe}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatalf("tls dial the cluster port: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if got := served(); got != 2 {
		t.Fatalf("the cluster port serves certificate %d, want 2", got)
	}

	ca.issue(certFile, keyFile, 3)
	tn.n.reload(tn.cfgPath)
	if got := served(); got != 3 {
		t.Fatalf("after the reload the cluster port serves certificate %d, want the renewed 3\n%s", got, tn.logs())
	}
	if !strings.Contains(tn.logs(), "cluster tls files (re-read)") {
		t.Fatalf("the reload's log does not say the cluster TLS files were re-read:\n%s", tn.logs())
	}
	// Reloaded again with the same files: nothing of them to name.
	before := strings.Count(tn.logs(), "cluster tls files (re-read)")
	tn.n.reload(tn.cfgPath)
	if after := strings.Count(tn.logs(), "cluster tls files (re-read)"); after != before {
		t.Fatalf("a reload with unchanged TLS files names them as re-read:\n%s", tn.logs())
	}

	// A certificate written without its new key: the reload is refused.
	saved, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ca.issue(certFile, keyFile, 4)
	if err := os.WriteFile(keyFile, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	tn.n.reload(tn.cfgPath)
	if !strings.Contains(tn.metricsText(), "oncehook_config_last_reload_successful 0") {
		t.Fatalf("a renewal with a mismatched key was not refused\n%s", tn.logs())
	}
	if got := served(); got != 3 {
		t.Fatalf("after a refused reload the cluster port serves certificate %d, want 3", got)
	}
}
