package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// certExpiryNotice is how long before a certificate's end validate starts
// to warn: long enough for a renewal by hand.
const certExpiryNotice = 30 * 24 * time.Hour

// certificatesExpiring warns about a TLS certificate (admin or cluster, and
// every CA certificate in tls_ca) that has expired, expires within 30 days
// or is not valid yet. An expired cluster certificate takes the node out of
// its cluster at its next connection, with nothing in its own config wrong;
// the warning is the operator's notice. Files that cannot be read are
// Validate's to refuse, not a warning here.
func certificatesExpiring(c *Config) []string {
	var out []string
	check := func(key, path string, leafOnly bool) {
		if path == "" {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		now := time.Now()
		for {
			var block *pem.Block
			block, b = pem.Decode(b)
			if block == nil {
				return
			}
			if block.Type != "CERTIFICATE" {
				continue
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				continue
			}
			what := fmt.Sprintf("the certificate %q", cert.Subject.CommonName)
			switch {
			case now.After(cert.NotAfter):
				out = append(out, fmt.Sprintf("%s: %s in %s expired on %s; renew it and reload (SIGHUP)",
					key, what, path, cert.NotAfter.UTC().Format(time.DateOnly)))
			case cert.NotAfter.Sub(now) < certExpiryNotice:
				out = append(out, fmt.Sprintf("%s: %s in %s expires in %s, on %s; renew it and reload (SIGHUP)",
					key, what, path, days(cert.NotAfter.Sub(now)), cert.NotAfter.UTC().Format(time.DateOnly)))
			case now.Before(cert.NotBefore):
				out = append(out, fmt.Sprintf("%s: %s in %s is not valid before %s",
					key, what, path, cert.NotBefore.UTC().Format(time.RFC3339)))
			}
			if leafOnly {
				return
			}
		}
	}
	check("admin.tls_cert", c.Admin.TLSCert, true)
	if cl := c.Cluster; cl != nil {
		check("cluster.tls_cert", cl.TLSCert, true)
		check("cluster.tls_ca", cl.TLSCA, false)
	}
	return out
}

// days says d in whole days, "less than a day" under one.
func days(d time.Duration) string {
	switch n := int(d.Hours() / 24); n {
	case 0:
		return "less than a day"
	case 1:
		return "1 day"
	default:
		return fmt.Sprintf("%d days", n)
	}
}
