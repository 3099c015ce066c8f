package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
)

// The [admin] listener's transport: optional TLS, the restore bound, and the
// warning for a listener reachable beyond loopback in clear text.

// DefaultMaxRestore bounds a POST /v1/restore upload (admin.max_restore). A
// backup is the whole bbolt file, which every node memory-maps and raft copies
// into a snapshot, so state past a few GiB is already beyond what one node
// runs comfortably. The upload is spooled into data_dir before it is applied;
// the bound keeps a wrong or hostile upload from filling that disk.
const DefaultMaxRestore = 4 * GiB

// validateAdminServer checks admin.tls_cert, admin.tls_key and
// admin.max_restore. The TLS files must be readable and form a usable pair,
// the key must not be readable by others nor writable by group or others
// (like a secret file), the certificate not writable by group or others.
func (c *Config) validateAdminServer(p *problems) {
	a := &c.Admin
	if a.MaxRestore <= 0 {
		p.add("admin.max_restore", nil, fmt.Sprintf("must be positive, got %s", a.MaxRestore))
	}
	switch {
	case a.TLSCert == "" && a.TLSKey == "":
		return
	case a.TLSCert == "" || a.TLSKey == "":
		p.add("admin.tls_cert", nil, "tls_cert and tls_key go together: set both or neither", "admin.tls_key")
		return
	}
	checkTLSFileModes(p, "admin", a.TLSCert, a.TLSKey, "")
	for _, f := range []struct{ key, path string }{{"admin.tls_cert", a.TLSCert}, {"admin.tls_key", a.TLSKey}} {
		if fh, err := os.Open(f.path); err != nil {
			p.add(f.key, err, "cannot read: "+errText(err))
		} else {
			fh.Close()
		}
	}
	if p.has("admin.tls_cert") || p.has("admin.tls_key") {
		return
	}
	if _, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey); err != nil {
		p.add("admin.tls_cert", err, "unusable certificate and key: "+err.Error(), "admin.tls_key")
	}
}

// adminPlaintextWarning: bearer tokens and UI session cookies cross the
// network in clear text when the admin listener is reachable from other
// hosts without TLS.
func adminPlaintextWarning(c *Config) []string {
	if c.Admin.TLS() || LoopbackOnly(c.Admin.Listen) {
		return nil
	}
	return []string{fmt.Sprintf("admin.listen: %q is reachable beyond loopback without TLS: admin tokens and "+
		"session cookies cross the network in clear text; set [admin] tls_cert and tls_key, or listen on 127.0.0.1",
		c.Admin.Listen)}
}

// LoopbackOnly reports whether a listen address accepts connections from
// this host only: a loopback IP or "localhost". An empty or unspecified host
// (all interfaces) and any other name count as reachable from elsewhere.
func LoopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
