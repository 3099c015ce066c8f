package main

// The admin package's wiring: its store is the cluster node, its /metrics
// this process's registry, its settings the node's options.

import (
	"crypto/tls"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"oncehook/admin"
	"oncehook/cluster"
	"oncehook/config"
)

var _ admin.Store = (*cluster.Node)(nil)

// nodeOption adjusts a node before it starts serving (tests: short
// timeouts, a hand-moved clock).
type nodeOption func(*node)

func withAdminTimeouts(t admin.Timeouts) nodeOption { return func(n *node) { n.adminTimeouts = t } }

func withAuthClock(now func() time.Time) nodeOption {
	return func(n *node) { n.authClock = now }
}

// newAdminServer builds the admin server; with [admin] tls_cert and tls_key
// it also loads the certificate, which reload may replace. Its store is set
// when it starts serving (serveAdmin), once the cluster node is open.
func (n *node) newAdminServer(cfg *config.Config) (*admin.Server, error) {
	return admin.New(admin.Options{
		Config:   n.cfg.Load,
		Metrics:  promhttp.HandlerFor(n.metrics.Registry(), promhttp.HandlerOpts{}),
		Logger:   n.log,
		Version:  version,
		Timeouts: n.adminTimeouts,
		Now:      n.authClock,
	}, cfg)
}

// serveAdmin serves the admin API over the cluster node on the node's admin
// listener.
func (n *node) serveAdmin() error {
	n.admin.UseStore(n.cluster)
	return n.admin.Serve(n.adminLn)
}

// reloadAdminCert re-reads the admin certificate for a new config (nil when
// the listener does not serve TLS, or the new config turns it off).
func (n *node) reloadAdminCert(cfg *config.Config) (*tls.Certificate, error) {
	return n.admin.ReloadCert(cfg)
}

// adminScheme is how clients reach the admin listener.
func (n *node) adminScheme() string { return n.admin.Scheme() }

// configuredSourceNames returns the running config's source names.
func (n *node) configuredSourceNames() []string {
	cfg := n.cfg.Load()
	names := make([]string, 0, len(cfg.Sources))
	for i := range cfg.Sources {
		names = append(names, cfg.Sources[i].Name)
	}
	return names
}

// adminURL is this node's admin API as an operator elsewhere would reach it,
// for the hint a follower gives when asked for a leader-only operation: the
// listener's own address, with the cluster's advertised host in place of an
// address that binds every interface (and loopback kept as is: a
// single-machine cluster).
func adminURL(cfg *config.Config, ln net.Addr) string {
	ap, err := netip.ParseAddrPort(ln.String())
	if err != nil {
		return ""
	}
	host := ap.Addr().Unmap().String()
	if ap.Addr().IsUnspecified() {
		host = ""
		if c := cfg.Cluster; c != nil {
			adv := c.Advertise
			if adv == "" {
				adv = c.RaftListen
			}
			if h, _, err := net.SplitHostPort(adv); err == nil && h != "" {
				if a, err := netip.ParseAddr(h); err != nil || !a.IsUnspecified() {
					host = h
				}
			}
		}
		if host == "" {
			return ""
		}
	}
	scheme := "http"
	if cfg.Admin.TLS() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(int(ap.Port())))
}
