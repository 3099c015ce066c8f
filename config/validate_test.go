package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"oncehook/providers"
)

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Node.ID != "node1" || c.Node.DataDir != "./data" || c.Node.Listen != "127.0.0.1:8080" ||
		c.Node.LogLevel != "info" || c.Node.LogFormat != "text" || c.Admin.Listen != "127.0.0.1:7071" ||
		c.Cluster != nil || len(c.Sources) != 0 || c.Path != "" {
		t.Errorf("Default() = %+v", c)
	}
	c.Node.ID = "changed"
	if Default().Node.ID != "node1" {
		t.Error("Default shares state between calls")
	}
}

func TestDemo(t *testing.T) {
	dir := t.TempDir()
	c := Demo(dir, standardSecret, "http://127.0.0.1:9000/demo")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Node.DataDir != dir || len(c.Sources) != 1 || c.Cluster != nil {
		t.Fatalf("Demo = %+v", c)
	}
	s := c.Sources[0]
	if s.Name != "demo" || s.Provider != "standard" || string(s.Secrets[0]) != standardSecret ||
		s.Forward != "http://127.0.0.1:9000/demo" || s.Retention != Duration(96*time.Hour) ||
		s.AckStatus != 202 || s.Key[0] != "header:webhook-id" {
		t.Errorf("demo source = %+v", s)
	}
	mustBuildVerifier(t, &s)
	if Demo("", standardSecret, "http://x").Node.DataDir != "./data" {
		t.Error("Demo(\"\") data dir is not the default")
	}

	// A bad secret: Validate says why, without a file prefix.
	c = Demo(dir, "whsec_***", "http://127.0.0.1:9000/demo")
	err := c.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "source[0].secrets[0]: unusable secret: ") || strings.Contains(err.Error(), "***") {
		t.Errorf("Validate = %v", err)
	}
}

// TestValidateBuilt: a Config assembled in code gets `key: message` errors,
// or `file: key: message` when it has a Path but no lines.
func TestValidateBuilt(t *testing.T) {
	c := Default()
	c.Node.LogLevel = "loud"
	s := newSource()
	s.Name, s.Provider, s.Secrets, s.Forward = "x", "github", []Secret{Secret("k")}, "http://127.0.0.1:1/x"
	applyProviderDefaults(&s, false, false, false, false)
	s.Mode = "later"
	c.Sources = append(c.Sources, s)
	err := c.Validate()
	want := `node.log_level: invalid log level "loud": want debug, info, warn or error` + "\n" +
		`source[0].mode: invalid mode "later": want async or sync`
	if err == nil || err.Error() != want {
		t.Errorf("Validate =\n%v\nwant\n%s", err, want)
	}
	c.Path = "x.toml"
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "x.toml: node.log_level: ") {
		t.Errorf("Validate with Path = %v", err)
	}
}

func TestAdvertise(t *testing.T) {
	for _, tt := range []struct {
		listen, advertise, want, err string
	}{
		{"10.0.0.1:7070", "", "10.0.0.1:7070", ""},
		{"127.0.0.1:7070", "", "", `differs from this node's peers entry "node1=10.0.0.1:7070"`},
		{"0.0.0.0:7070", "", "", "cluster.advertise: required: raft_listen"},
		{"[::]:7070", "", "", "cluster.advertise: required: raft_listen"},
		{":7070", "", "", "cluster.advertise: required: raft_listen"},
		{"0.0.0.0:7070", "10.0.0.1:7070", "10.0.0.1:7070", ""},
		{"0.0.0.0:7070", "0.0.0.0:7070", "", `cluster.advertise: "0.0.0.0:7070" cannot be dialled`},
		{"7070", "", "", `cluster.raft_listen: invalid address "7070"`},
	} {
		c := Default()
		c.Cluster = &Cluster{RaftListen: tt.listen, Advertise: tt.advertise, Peers: []Peer{{"node1", "10.0.0.1:7070"}}, Token: Secret(clusterToken)}
		err := c.Validate()
		if tt.err == "" {
			if err != nil || c.Cluster.Advertise != tt.want {
				t.Errorf("%s/%s: advertise %q, %v", tt.listen, tt.advertise, c.Cluster.Advertise, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s/%s: err %v, want %q", tt.listen, tt.advertise, err, tt.err)
		}
	}
}

// writeTLS writes a self-signed CA and a node certificate signed by it.
func writeTLS(t *testing.T, dir string) (cert, key, ca string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	nodeKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	nodeTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, nodeTmpl, caTmpl, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(nodeKey)
	pemOf := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return writeFile(t, dir, "node.crt", pemOf("CERTIFICATE", nodeDER), 0o644),
		writeFile(t, dir, "node.key", pemOf("EC PRIVATE KEY", keyDER), 0o600),
		writeFile(t, dir, "ca.crt", pemOf("CERTIFICATE", caDER), 0o644)
}

func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := writeTLS(t, dir)
	otherDir := filepath.Join(dir, "other")
	if err := os.Mkdir(otherDir, 0o700); err != nil {
		t.Fatal(err)
	}
	otherCert, otherKey, _ := writeTLS(t, otherDir) // signed by another CA
	notPEM := writeFile(t, dir, "junk.pem", "not a certificate", 0o644)
	openKey := writeFile(t, dir, "open.key", "x", 0o644)
	missing := filepath.Join(dir, "missing.crt")
	for _, tt := range []struct {
		name          string
		cert, key, ca string
		err           string
		sentinel      error
	}{
		{"ok", cert, key, ca, "", nil},
		{"cert only", cert, "", "", "cluster.tls_cert: tls_cert, tls_key and tls_ca go together", nil},
		{"no ca", cert, key, "", "cluster.tls_cert: tls_cert, tls_key and tls_ca go together", nil},
		{"missing cert", missing, key, ca, "cluster.tls_cert: cannot read: open " + missing, nil},
		{"junk cert", notPEM, key, ca, "cluster.tls_cert: unusable certificate and key: ", nil},
		{"junk ca", cert, key, notPEM, "cluster.tls_ca: " + notPEM + " holds no PEM certificate", nil},
		{"certificate of another ca", otherCert, otherKey, ca, "cluster.tls_cert: " + otherCert + " is not signed by tls_ca " + ca + " (the peers would refuse this node)", nil},
		{"key readable by others", cert, openKey, ca, "cluster.tls_key: key file " + openKey + " has mode 0644", ErrSecretFileMode},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Node.ID = "node1"
			c.Cluster = &Cluster{
				RaftListen: "10.0.0.1:7070",
				Peers:      []Peer{{"node1", "10.0.0.1:7070"}, {"node2", "10.0.0.2:7070"}, {"node3", "10.0.0.3:7070"}},
				TLSCert:    tt.cert, TLSKey: tt.key, TLSCA: tt.ca,
			}
			err := c.Validate()
			if tt.err == "" {
				if err != nil {
					t.Fatal(err) // with TLS, no token is needed
				}
				if !c.Cluster.TLS() {
					t.Error("TLS() = false")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("err does not wrap %v", tt.sentinel)
			}
		})
	}
}

func TestCheckKeyPart(t *testing.T) {
	for part, ok := range map[string]bool{
		"header:X-Id": true, "json:data.id": true, "json:items.0.id": true, "body:sha256": true,
		"header:A|header:B": true, "id": false, "header:": false, "json:": false, "query:x": false,
		"header:Bad Name": false, "body:md5": false, "": false,
	} {
		if err := checkKeyPart(part); (err == nil) != ok {
			t.Errorf("checkKeyPart(%q) = %v", part, err)
		}
	}
}

// TestValidateLeavesSources: Validate reads the sources and changes none of
// them; the hmac table's defaults are filled in a copy for its checks and
// in VerifierOptions, not in the source.
func TestValidateLeavesSources(t *testing.T) {
	c := Default()
	s := newSource()
	s.Name, s.Provider, s.Secrets, s.Forward = "generic", "hmac", []Secret{Secret("k")}, "http://127.0.0.1:1/x"
	s.Key = []string{"header:X-Request-Id"}
	s.HMAC = &providers.HMACSpec{Header: "X-Signature", Algorithm: "SHA512", Encoding: "BASE64"}
	applyProviderDefaults(&s, true, false, false, false)
	c.Sources = append(c.Sources, s, Demo("", standardSecret, "http://127.0.0.1:1/demo").Sources[0])
	before := slices.Clone(c.Sources)
	spec := *s.HMAC
	for range 2 {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(c.Sources, before) || *c.Sources[0].HMAC != spec {
		t.Errorf("Validate changed the sources:\n%+v\nwas\n%+v (hmac %+v)", c.Sources, before, spec)
	}
	if o := c.Sources[0].VerifierOptions(); o.HMAC == c.Sources[0].HMAC ||
		o.HMAC.Algorithm != "sha512" || o.HMAC.Encoding != "base64" || o.HMAC.Template != "{body}" {
		t.Errorf("VerifierOptions hmac = %+v, want a normalised copy", o.HMAC)
	}
	mustBuildVerifier(t, &c.Sources[0])
}
