package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAdminTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := writeTLS(t, dir)
	notPEM := writeFile(t, dir, "junk.pem", "not a certificate", 0o644)
	openKey := writeFile(t, dir, "open.key", "x", 0o644)
	missing := filepath.Join(dir, "missing.key")
	certPEM, _ := os.ReadFile(cert)
	keyPEM, _ := os.ReadFile(key)
	groupKey := writeFile(t, dir, "group.key", string(keyPEM), 0o660)
	openCert := writeFile(t, dir, "open.pem", string(certPEM), 0o666)
	for _, tt := range []struct {
		name      string
		cert, key string
		err       string
		sentinel  error
	}{
		{"none", "", "", "", nil},
		{"ok", cert, key, "", nil},
		{"cert only", cert, "", "admin.tls_cert: tls_cert and tls_key go together", nil},
		{"key only", "", key, "admin.tls_cert: tls_cert and tls_key go together", nil},
		{"missing key", cert, missing, "admin.tls_key: cannot read: open " + missing, nil},
		{"junk cert", notPEM, key, "admin.tls_cert: unusable certificate and key: ", nil},
		{"key of another certificate", ca, key, "admin.tls_cert: unusable certificate and key: ", nil},
		{"key readable by others", cert, openKey, "admin.tls_key: key file " + openKey + " has mode 0644", ErrSecretFileMode},
		{"key writable by its group", cert, groupKey, "admin.tls_key: key file " + groupKey + " has mode 0660: it must not be writable by its group (chmod g-w", ErrSecretFileMode},
		{"cert writable by others", openCert, key, "admin.tls_cert: certificate file " + openCert + " has mode 0666: it must not be writable by others, who would choose whom the node trusts (chmod o-w", ErrSecretFileMode},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Admin.TLSCert, c.Admin.TLSKey = tt.cert, tt.key
			err := c.Validate()
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Admin.TLS() != (tt.cert != "") {
					t.Errorf("TLS() = %v", c.Admin.TLS())
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

// TestAdminKeysLoad: the [admin] TLS and restore keys are read from the file,
// relative paths against its directory, with their line in errors.
func TestAdminKeysLoad(t *testing.T) {
	dir := t.TempDir()
	writeTLS(t, dir)
	load := func(admin string) (*Config, error) {
		t.Helper()
		return Load(writeFile(t, dir, "oncehook.toml", "[admin]\nlisten = \"127.0.0.1:7071\"\n"+admin, 0o644))
	}
	c, err := load("tls_cert = \"node.crt\"\ntls_key = \"node.key\"\nmax_restore = \"512MiB\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.TLSCert != filepath.Join(dir, "node.crt") || c.Admin.TLSKey != filepath.Join(dir, "node.key") || c.Admin.MaxRestore != 512*MiB {
		t.Errorf("admin = %+v", c.Admin)
	}
	if c, err = load(""); err != nil || c.Admin.MaxRestore != DefaultMaxRestore || c.Admin.TLS() {
		t.Errorf("defaults: %+v, %v", c.Admin, err)
	}
	for _, tt := range []struct{ admin, err string }{
		{"max_restore = \"0\"\n", ":3: admin.max_restore: must be positive"},
		{"max_restore = \"lots\"\n", ":3: admin.max_restore: "},
		{"\ntls_key = \"node.key\"\n", ":4: admin.tls_cert: tls_cert and tls_key go together"},
	} {
		if _, err := load(tt.admin); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: err = %v, want %q", tt.admin, err, tt.err)
		}
	}
}

func TestAdminPlaintextWarning(t *testing.T) {
	dir := t.TempDir()
	cert, key, _ := writeTLS(t, dir)
	for _, tt := range []struct {
		listen string
		tls    bool
		warn   bool
	}{
		{"127.0.0.1:7071", false, false},
		{"127.0.0.2:7071", false, false},
		{"[::1]:7071", false, false},
		{"localhost:7071", false, false},
		{"0.0.0.0:7071", false, true},
		{":7071", false, true},
		{"[::]:7071", false, true},
		{"10.0.0.1:7071", false, true},
		{"admin.example.com:7071", false, true},
		{"0.0.0.0:7071", true, false},
		{"10.0.0.1:7071", true, false},
	} {
		c := Default()
		c.Admin.Listen = tt.listen
		if tt.tls {
			c.Admin.TLSCert, c.Admin.TLSKey = cert, key
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.listen, err)
		}
		var got []string
		for _, w := range c.Warnings() {
			if strings.Contains(w, "admin.listen") {
				got = append(got, w)
			}
		}
		if tt.warn != (len(got) == 1) || len(got) > 1 {
			t.Errorf("listen %s, tls %v: warnings %q, want one: %v", tt.listen, tt.tls, got, tt.warn)
		}
		if tt.warn && !strings.Contains(got[0], "tls_cert") {
			t.Errorf("listen %s: warning %q does not say how to fix it", tt.listen, got[0])
		}
	}
}
