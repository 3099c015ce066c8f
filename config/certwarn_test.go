package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// certValid writes a self-signed certificate valid from notBefore to
// notAfter (relative to now) and returns its path.
func certValid(t *testing.T, dir, name string, notBefore, notAfter time.Duration) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(notBefore), NotAfter: now.Add(notAfter),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, dir, name+".pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), 0o644)
}

func TestCertificatesExpiringWarn(t *testing.T) {
	dir := t.TempDir()
	day := 24 * time.Hour
	fresh := certValid(t, dir, "fresh", -day, 365*day)
	expired := certValid(t, dir, "expired", -90*day, -2*day)
	soon := certValid(t, dir, "soon", -300*day, 10*day+time.Hour)
	future := certValid(t, dir, "future", 2*day, 365*day)
	bundle := writeFile(t, dir, "bundle.pem", readFile(t, fresh)+readFile(t, expired), 0o644)
	for _, tt := range []struct {
		name            string
		admin, cert, ca string
		want            []string // substrings, one per warning, in order
	}{
		{"all fresh", fresh, fresh, fresh, nil},
		{"admin expired", expired, fresh, fresh, []string{`admin.tls_cert: the certificate "expired" in ` + expired + ` expired on `}},
		{"cluster expires in 10 days", fresh, soon, fresh, []string{`cluster.tls_cert: the certificate "soon" in ` + soon + " expires in 10 days, on "}},
		{"cluster not valid yet", fresh, future, fresh, []string{`cluster.tls_cert: the certificate "future" in ` + future + " is not valid before "}},
		{"an expired CA in the bundle", fresh, fresh, bundle, []string{`cluster.tls_ca: the certificate "expired" in ` + bundle + " expired on "}},
		{"files that do not load are Validate's", filepath.Join(dir, "missing.pem"), fresh, fresh, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Admin.TLSCert = tt.admin
			c.Cluster = &Cluster{TLSCert: tt.cert, TLSCA: tt.ca}
			got := certificatesExpiring(c)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start %q", got[i], w)
				}
			}
		})
	}
	// Warnings runs the check.
	c := Default()
	c.Admin.TLSCert = expired
	if !strings.Contains(strings.Join(c.Warnings(), "\n"), "admin.tls_cert: the certificate \"expired\"") {
		t.Fatalf("Warnings() = %q", c.Warnings())
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDaysReadsAsEnglish: the expiry notice counts days the way a person
// would write them.
func TestDaysReadsAsEnglish(t *testing.T) {
	for d, want := range map[time.Duration]string{
		3 * time.Hour:  "less than a day",
		30 * time.Hour: "1 day",
		50 * time.Hour: "2 days",
	} {
		if got := days(d); got != want {
			t.Errorf("days(%s) = %q, want %q", d, got, want)
		}
	}
}
