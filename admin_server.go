package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	"oncehook/config"
)

// The admin listener's http.Server: timeouts, optional TLS, and the
// per-stream deadlines of /v1/backup and /v1/restore.

// adminTimeouts bound how long one admin connection may hold the server.
type adminTimeouts struct {
	// readHeader and read bound the request line and headers, and the
	// whole request with its body. Every body but a restore's is small
	// (JSON, forms; 1 MiB at most); a restore extends its own deadline
	// while the upload moves (see stream).
	readHeader, read time.Duration
	// write bounds each answer from the end of its request's headers. It
	// must cover the slowest ordinary handler: a pprof profile or trace
	// (30 s by default; pprof itself refuses a longer one than this), a
	// replay or join (15 s commit timeouts). A backup can stream for far
	// longer, so instead of one generous WriteTimeout for every route it
	// extends its own deadline while it moves; a restore sets one covering
	// its commit.
	write time.Duration
	// idle is how long a keep-alive connection may wait for its next request.
	idle time.Duration
	// stream is how long a backup or restore may stall (no byte moved)
	// before its connection is cut.
	stream time.Duration
	// maxHeader bounds the request headers: a bearer token and a session
	// cookie need little.
	maxHeader int
}

var defaultAdminTimeouts = adminTimeouts{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      2 * time.Minute,
	idle:       2 * time.Minute,
	stream:     time.Minute,
	maxHeader:  64 << 10,
}

// nodeOption adjusts a node before it starts serving (tests: short
// timeouts, a hand-moved clock).
type nodeOption func(*node)

func withAdminTimeouts(t adminTimeouts) nodeOption { return func(n *node) { n.adminTimeouts = t } }

func withAuthClock(now func() time.Time) nodeOption {
	return func(n *node) { n.authLimit = newAuthLimiter(now) }
}

// newAdminServer builds the admin http.Server; with [admin] tls_cert and
// tls_key it also loads the certificate, which reload may replace.
func (n *node) newAdminServer(cfg *config.Config) (*http.Server, error) {
	t := n.adminTimeouts
	srv := &http.Server{
		Handler:           n.adminHandler(),
		ReadHeaderTimeout: t.readHeader,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		MaxHeaderBytes:    t.maxHeader,
	}
	if !cfg.Admin.TLS() {
		return srv, nil
	}
	cert, err := loadAdminCert(cfg)
	if err != nil {
		return nil, err
	}
	n.adminCert.Store(cert)
	srv.TLSConfig = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return n.adminCert.Load(), nil
		},
	}
	return srv, nil
}

// serveAdmin serves the admin API on the node's admin listener, over TLS
// when newAdminServer set it up.
func (n *node) serveAdmin() error {
	if n.admin.TLSConfig != nil {
		return n.admin.ServeTLS(n.adminLn, "", "")
	}
	return n.admin.Serve(n.adminLn)
}

func loadAdminCert(cfg *config.Config) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(cfg.Admin.TLSCert, cfg.Admin.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("admin tls: %w", err)
	}
	return &cert, nil
}

// reloadAdminCert re-reads the admin certificate for a new config, for
// reload to swap in once the whole config is accepted. It returns nil when
// the listener does not serve TLS or the new config turns it off (a restart
// applies that).
func (n *node) reloadAdminCert(cfg *config.Config) (*tls.Certificate, error) {
	if n.adminCert.Load() == nil || !cfg.Admin.TLS() {
		return nil, nil
	}
	return loadAdminCert(cfg)
}

// adminScheme is how clients reach the admin listener.
func (n *node) adminScheme() string {
	if n.adminCert.Load() != nil {
		return "https"
	}
	return "http"
}

// streamWriter extends the connection's deadlines before each write, so a
// backup may run as long as it keeps moving, while a reader that stops
// reading is cut off after timeout. (The read deadline keeps the request's
// context alive: see requireToken.)
type streamWriter struct {
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
}

func (s streamWriter) Write(p []byte) (int, error) {
	end := time.Now().Add(s.timeout)
	_ = s.rc.SetWriteDeadline(end)
	_ = s.rc.SetReadDeadline(end)
	return s.w.Write(p)
}

// streamReader is streamWriter's counterpart for an upload: the read
// deadline moves on with every read.
type streamReader struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
}

func (s streamReader) Read(p []byte) (int, error) {
	_ = s.rc.SetReadDeadline(time.Now().Add(s.timeout))
	return s.r.Read(p)
}
