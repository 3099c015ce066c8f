package admin

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"oncehook/cluster"
	"oncehook/config"
	"oncehook/engine"
)

// The admin listener's http.Server: timeouts, optional TLS, and the
// per-stream deadlines of /v1/backup and /v1/restore.

// Timeouts bound how long one admin connection may hold the server.
type Timeouts struct {
	// ReadHeader and Read bound the request line and headers, and the
	// whole request with its body. Every body but a restore's is small
	// (JSON, forms; 1 MiB at most); a restore extends its own deadline
	// while the upload moves (see Stream).
	ReadHeader, Read time.Duration
	// Write bounds each answer from the end of its request's headers. It
	// must cover the slowest ordinary handler: a pprof profile or trace
	// (30 s by default; pprof itself refuses a longer one than this), a
	// replay or join (15 s commit timeouts). A backup can stream for far
	// longer, so instead of one generous WriteTimeout for every route it
	// extends its own deadline while it moves; a restore sets one covering
	// its commit.
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration
	// Stream is how long a backup or restore may stall (no byte moved)
	// before its connection is cut.
	Stream time.Duration
	// MaxHeader bounds the request headers: a bearer token and a session
	// cookie need little.
	MaxHeader int
}

// DefaultTimeouts are the admin listener's production timeouts.
var DefaultTimeouts = Timeouts{
	ReadHeader: 10 * time.Second,
	Read:       30 * time.Second,
	Write:      2 * time.Minute,
	Idle:       2 * time.Minute,
	Stream:     time.Minute,
	MaxHeader:  64 << 10,
}

// Store is what the admin API needs from the replicated store. The cluster
// node satisfies it (package main checks that at compile time).
type Store interface {
	// Ready reports whether the node has a leader and has applied the
	// commit index, and why not.
	Ready() (bool, string)
	// ClusterStatus is this node's view of the cluster, for /v1/status.
	ClusterStatus(ctx context.Context) cluster.Status
	// Counts reads event counts by state and by source from applied state.
	Counts() (map[engine.State]int, map[string]int, error)
	// List and Get read events from applied state.
	List(f engine.ListFilter) ([]engine.Event, error)
	Get(key string, withPayload bool) (engine.Event, error)
	// Replay commits an OpReplay on a majority.
	Replay(ctx context.Context, c engine.Command) (engine.Result, error)
	// Pause and Resume commit a source's pause state; changed is false when
	// it was already so.
	Pause(ctx context.Context, source, who, reason string) (bool, error)
	Resume(ctx context.Context, source, who, reason string) (bool, error)
	// Sources and Backlog read the sources' pause state and pending events.
	Sources() (map[string]engine.SourceState, error)
	Backlog() (map[string]engine.Backlog, error)
	// PurgePreview and Purge list and delete finished events updated
	// before a time (docs/architecture.md, Event states).
	PurgePreview(st engine.State, source string, before time.Time, max int) ([]string, int, error)
	Purge(ctx context.Context, st engine.State, source string, before time.Time, who, reason string) ([]string, error)
	// PurgeRetained counts the events of such a purge whose retention
	// has not ended at now: a provider may still send them again.
	PurgeRetained(st engine.State, source string, before, now time.Time) (int, error)
	// Join and RemovePeer change the membership (leader only); Join's
	// added is false when id was a voter at addr already.
	Join(ctx context.Context, id, addr string) (added bool, err error)
	RemovePeer(ctx context.Context, id string) error
	// TransferLeadership hands leadership to another voter (to, or any
	// when ""), after the deliveries in flight finished, and returns the
	// new leader's id (leader only).
	TransferLeadership(ctx context.Context, to string) (string, error)
	// Backup writes a consistent copy of the store; Restore replaces the
	// cluster's state with the one in a file (leader only).
	Backup(w io.Writer) (int64, error)
	Restore(ctx context.Context, path string) error
	// LeaderOnly is nil on the leader, else the error a leader-only
	// operation op gets here (cluster.ErrNotLeader, naming the leader).
	LeaderOnly(ctx context.Context, op string) error
}

// Options configures New.
type Options struct {
	// Config returns the running configuration ([admin] tokens, sources,
	// data_dir, max_restore): read on every request, so a reload applies at
	// once. Required.
	Config func() *config.Config
	// Store is the replicated store. It may be given later, before Serve,
	// with UseStore: a node builds its admin server (and loads its
	// certificate) before it opens the store.
	Store Store
	// Metrics serves GET /metrics, without a token.
	Metrics http.Handler
	// Logger; nil: discard.
	Logger *slog.Logger
	// Version is reported by /v1/status and the dead-letter page.
	Version string
	// Timeouts; the zero value: DefaultTimeouts.
	Timeouts Timeouts
	// Now is the clock of the authentication backoff and of the /ui/
	// sessions' lifetime; nil: time.Now.
	Now func() time.Time
}

// Server is the admin listener: the /v1 API, /metrics, the health routes,
// pprof and the dead-letter page (docs/reference.md).
type Server struct {
	cfg       func() *config.Config
	store     Store
	metrics   http.Handler
	log       *slog.Logger
	version   string
	timeouts  Timeouts
	authLimit *authLimiter
	now       func() time.Time                // Options.Now
	cert      atomic.Pointer[tls.Certificate] // nil without TLS
	srv       *http.Server
}

// New builds the admin server for cfg; with [admin] tls_cert and tls_key it
// also loads the certificate, which a reload may replace (ReloadCert,
// UseCert).
func New(o Options, cfg *config.Config) (*Server, error) {
	s := &Server{cfg: o.Config, store: o.Store, metrics: o.Metrics, log: o.Logger, version: o.Version, timeouts: o.Timeouts}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.metrics == nil {
		s.metrics = http.NotFoundHandler()
	}
	if s.timeouts == (Timeouts{}) {
		s.timeouts = DefaultTimeouts
	}
	s.now = o.Now
	if s.now == nil {
		s.now = time.Now
	}
	s.authLimit = newAuthLimiter(s.now)
	t := s.timeouts
	s.srv = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    t.MaxHeader,
		// net/http's own lines (a failed TLS handshake, a panic in a
		// handler) go to the node's log in its format, not to stderr.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// HTTP/1.1 only, over TLS too: an HTTP/2 connection stays open between
	// streams on frames (a PING now and then) that are no request, which
	// the listener could not tell from use when it closes an idle
	// connection for room (connlimit.Listener.ConnState).
	var http1 http.Protocols
	http1.SetHTTP1(true)
	s.srv.Protocols = &http1
	if !cfg.Admin.TLS() {
		return s, nil
	}
	cert, err := loadCert(cfg)
	if err != nil {
		return nil, err
	}
	s.cert.Store(cert)
	s.srv.TLSConfig = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.Load(), nil
		},
	}
	return s, nil
}

// UseStore sets the store the API serves; before Serve only.
func (s *Server) UseStore(st Store) { s.store = st }

// Serve serves the admin API on ln, over TLS when New set it up. It returns
// http.ErrServerClosed after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if t, ok := ln.(idleTracker); ok {
		s.srv.ConnState = func(c net.Conn, st http.ConnState) {
			switch st {
			case http.StateIdle:
				t.ConnState(c, true)
			case http.StateActive, http.StateHijacked:
				t.ConnState(c, false)
			}
		}
	}
	if s.srv.TLSConfig != nil {
		return s.srv.ServeTLS(ln, "", "")
	}
	return s.srv.Serve(ln)
}

// idleTracker is a listener that wants to know which of its connections
// wait between requests, to close the one idle longest when it is full
// (connlimit.Listener).
type idleTracker interface {
	ConnState(c net.Conn, idle bool)
}

// Shutdown stops the listener and waits for the requests in flight, until
// ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

func loadCert(cfg *config.Config) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(cfg.Admin.TLSCert, cfg.Admin.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("admin tls: %w", err)
	}
	return &cert, nil
}

// ReloadCert re-reads the admin certificate for a new config, for a reload
// to swap in (UseCert) once the whole config is accepted. It returns nil
// when the listener does not serve TLS or the new config turns it off (a
// restart applies that).
func (s *Server) ReloadCert(cfg *config.Config) (*tls.Certificate, error) {
	if s.cert.Load() == nil || !cfg.Admin.TLS() {
		return nil, nil
	}
	return loadCert(cfg)
}

// UseCert serves cert from the next handshake on.
func (s *Server) UseCert(cert *tls.Certificate) { s.cert.Store(cert) }

// TLS reports whether the listener serves TLS.
func (s *Server) TLS() bool { return s.cert.Load() != nil }

// Scheme is how clients reach the admin listener: "https" or "http".
func (s *Server) Scheme() string {
	if s.TLS() {
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
