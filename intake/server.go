package intake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"oncehook/config"
	"oncehook/connlimit"
	"oncehook/engine"
	"oncehook/providers"
)

// Store is what the intake needs from the replicated store. The cluster
// node satisfies it (package main checks that at compile time); the intake
// never knows whether Raft is underneath, and tests put a bare engine behind
// it.
type Store interface {
	// Lookup reads this node's applied state: a key found is committed.
	Lookup(key string) (engine.State, bool, error)
	// Claim commits a claim on a majority; Created is false for a duplicate.
	// An error means the claim is not known to be committed; one wrapping
	// engine.ErrBadCommand is the request's fault (400), the others are
	// answered 503 (Options.NotCommitted tells which of them to log as an
	// expected loss of quorum).
	Claim(ctx context.Context, c engine.Command) (engine.Result, error)
	// Get reads one event from this node's applied state.
	Get(key string, withPayload bool) (engine.Event, error)
	// Wait blocks until final(event) holds on this node's applied state, or
	// ctx ends.
	Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error)
	// Ready reports whether the node has a leader and has applied the commit index.
	Ready() (bool, string)
	// Replay commits an OpReplay (Keys, Who, Reason) on a majority: done,
	// dead or stale events back to pending with an audit entry. With one key,
	// a key in another state is reported as an error wrapping
	// engine.ErrWrongState, an unknown one engine.ErrNotFound.
	Replay(ctx context.Context, c engine.Command) (engine.Result, error)
}

// Metrics counts what the intake decides. Package metrics implements it over
// its Prometheus collectors; the metric names are docs/reference.md's.
type Metrics interface {
	// Request counts one answered POST /in/{source} ("" for an unknown source).
	Request(source string, code int)
	// Claim counts a verified delivery, new or duplicate.
	Claim(source string, created bool)
	// SignatureFailure counts a 401 by reason.
	SignatureFailure(source, reason string)
	// ClaimDuration observes one request's latency.
	ClaimDuration(d time.Duration)
	// ReplaySuspected counts a body the replay guard found under another key.
	ReplaySuspected(source string)
	// SyncConflict counts a sync duplicate whose body differs (409).
	SyncConflict(source string)
	// DuplicateBodyChanged counts a duplicate whose body differs.
	DuplicateBodyChanged(source string)
	// Filtered counts a delivery the type filter dropped; typ is a
	// configured type or "other".
	Filtered(source, typ string)
	// SchemaFailure counts a body refused by the source's schema.
	SchemaFailure(source string)
}

// Source is one configured source compiled for the hot path (CompileSource).
type Source struct {
	name       string
	provider   string
	verifier   providers.Verifier
	handshaker providers.Handshaker
	keyer      *providers.Keyer
	// escapedKey: the key has several parts, whose ':' and '%' are escaped
	// (providers.Keyer.Key); binaries before that joined them as they were.
	escapedKey  bool
	schema      *payloadSchema // nil: no schema_file
	orderObject *providers.Field
	orderTime   *providers.Field
	// orderUnordered: a delivery without the order fields is claimed
	// without the guard (order.missing = "unordered"); else it is 400.
	orderUnordered bool
	// checkJSON: a key part, order field, type filter or schema reads the
	// JSON body, so a body that is not valid JSON is 400.
	checkJSON bool
	// typeField reads the event type when the source filters by it
	// (accept_types or drop_types); nil: no filter. types holds the listed
	// types: the accepted ones when acceptTypes, else the dropped ones.
	typeField   *providers.Field
	types       map[string]struct{}
	acceptTypes bool
	fwdHeaders  []string
	allow       []netip.Prefix
	trusted     []netip.Prefix // proxies whose X-Forwarded-Proto/Host are believed (twilio URL)
	ack         int
	sync        bool
	maxBody     int
	retention   int64
	leaseFor    int64
	waitFor     time.Duration // sync mode: how long the intake waits for the handler
	// guardBody: the replay guard is on (docs/security.md); each claim carries
	// the source-scoped hash of its verified body. guardType: the hash also
	// covers the event type, one of accept_types (providers.Defaults'
	// GuardByType).
	guardBody, guardType bool
}

// UseVerifier replaces the source's verifier and handshaker (nil: none);
// the keys_url key sets do, before the set is served.
func (s *Source) UseVerifier(v providers.Verifier, h providers.Handshaker) {
	s.verifier, s.handshaker = v, h
}

// Set is the compiled sources, swapped whole on reload (SetSources).
type Set struct {
	byName  map[string]*Source
	maxBody int
}

// Source returns the compiled source called name, or nil.
func (s *Set) Source(name string) *Source { return s.byName[name] }

// Has reports whether the set holds a source called name.
func (s *Set) Has(name string) bool { return s.byName[name] != nil }

// UseVerifier gives the source called name another verifier and handshaker
// (Source.UseVerifier); nothing when there is no such source. The keys_url
// key sets call it on a set before it is served.
func (s *Set) UseVerifier(name string, v providers.Verifier, h providers.Handshaker) {
	if src := s.byName[name]; src != nil {
		src.UseVerifier(v, h)
	}
}

// Options configures New.
type Options struct {
	// Store is the replicated store; required.
	Store Store
	// Sources is the first set served; nil: none until SetSources.
	Sources *Set
	// Logger; nil: discard.
	Logger *slog.Logger
	// Metrics; nil: nothing is counted.
	Metrics Metrics
	// Now is the clock signatures' timestamps are checked against; nil:
	// time.Now.
	Now func() time.Time
	// Timeout bounds how long a claim waits for its commit; 0: 10 seconds.
	Timeout time.Duration
	// MaxConnsPerIP caps one client address's open connections ([node]
	// max_conns_per_ip); 0: config.DefaultMaxConnsPerIP.
	MaxConnsPerIP int
	// NotCommitted tells whether a Claim error is one of the store's "not
	// committed" kinds (no leader, not the leader, shutting down, outcome
	// unknown) by returning what the sender is told, such as "no leader:
	// not committed, retry"; "" for any other error. Those kinds are logged
	// at warn as "claim not committed", any other error at error as "claim
	// failed". All are 503 with Retry-After. nil: none is.
	NotCommitted func(error) string
	// BodyMemory caps the bytes of request bodies read or held at once, all
	// connections together; 0: DefaultBodyMemory, or twice the largest
	// max_body when that is more. One client network (connlimit.Network)
	// holds at most an eighth of it, or one largest body when that is more;
	// bodies past 64 KiB hold at most three quarters of it, or one largest
	// body (reserveBody).
	BodyMemory int64
}

// DefaultBodyMemory is the default cap on the bytes of request bodies in
// flight. A body must be read whole before its signature can be checked,
// so without a cap an unauthenticated sender holding many connections
// (each under max_body) could make the node hold their product in memory.
const DefaultBodyMemory = 256 << 20

// Server is the public webhook listener's handler (docs/architecture.md,
// Request flow).
type Server struct {
	store        Store
	sources      atomic.Pointer[Set]
	log          *slog.Logger
	now          func() time.Time
	metrics      Metrics
	timeout      time.Duration // how long a claim may wait for a commit
	deadlines    *claimDeadlines
	notCommitted func(error) string
	// maxConnsPerIP caps one client address's open connections ([node]
	// max_conns_per_ip); 0: DefaultMaxConnsPerIP.
	maxConnsPerIP int
	// bodyMemory is Options.BodyMemory; bodies the bytes reserved by the
	// bodies being read or held now, bodyNets the same by client network.
	bodyMemory int64
	bodies     atomic.Int64
	bodyMu     sync.Mutex
	bodyNets   map[netip.Prefix]int64
	replayLog  connlimit.Sampler // the replay guard's WARN lines
	// unsettled samples the "claim not committed" lines: an election turns
	// every claim in flight into one, hundreds a second.
	unsettled connlimit.Sampler
	// changedLog samples the "duplicate with a different body" lines: a
	// signature that covers no timestamp lets one captured delivery be
	// sent under another stored event's id, as often as its sender likes.
	changedLog connlimit.Sampler

	keyBufs  sync.Pool
	bodyBufs sync.Pool // bodies read by readBody, returned when the request ends

	rearmMu  sync.Mutex
	rearming map[string]chan struct{} // sync keys being re-armed, closed when done (sync.go)
}

// New returns the intake over o.Store.
func New(o Options) *Server {
	in := &Server{store: o.Store, log: o.Logger, now: o.Now, metrics: o.Metrics, timeout: o.Timeout,
		maxConnsPerIP: o.MaxConnsPerIP, notCommitted: o.NotCommitted, bodyMemory: o.BodyMemory}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	if in.now == nil {
		in.now = time.Now
	}
	if in.metrics == nil {
		in.metrics = noMetrics{}
	}
	if in.timeout <= 0 {
		in.timeout = 10 * time.Second
	}
	in.deadlines = newClaimDeadlines(in.timeout)
	if in.notCommitted == nil {
		in.notCommitted = func(error) string { return "" }
	}
	set := o.Sources
	if set == nil {
		set = &Set{byName: map[string]*Source{}}
	}
	in.sources.Store(set)
	in.keyBufs.New = func() any { b := make([]byte, 0, 600); return &b }
	in.bodyBufs.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	return in
}

// reserveBody takes n bytes of the body memory cap for a body from client
// network from that will then hold total, or reports that they would pass
// the cap or from's share of it: an eighth, or one largest body when that
// is more. Without a share, a few clients opening connections that declare
// bodies and send them slowly (or not at all) could hold the whole cap, and
// every source would answer 503 to everyone else. A body past smallBody
// may take only three quarters of the cap (or one largest body): the rest
// stays for the small bodies most webhooks are, so that a flood of large
// ones, from however many networks, leaves them room.
func (in *Server) reserveBody(from netip.Prefix, n, total int64) bool {
	limit, largest := in.bodyMemory, int64(0)
	if set := in.sources.Load(); set != nil {
		largest = int64(set.maxBody)
	}
	if limit <= 0 {
		limit = max(DefaultBodyMemory, 2*largest)
	}
	// largest+1: a chunked body is read one byte past max_body, to tell
	// one over it (413) from one of exactly max_body.
	room := limit
	if total > smallBody {
		room = min(limit, max(limit-limit/4, largest+1))
	}
	if in.bodies.Add(n) > room {
		in.bodies.Add(-n)
		return false
	}
	share := max(limit/8, largest+1)
	in.bodyMu.Lock()
	held := in.bodyNets[from] + n
	ok := held <= share
	if ok {
		if in.bodyNets == nil {
			in.bodyNets = make(map[netip.Prefix]int64)
		}
		in.bodyNets[from] = held
	}
	in.bodyMu.Unlock()
	if !ok {
		in.bodies.Add(-n)
	}
	return ok
}

// releaseBody gives back n bytes reserveBody took for from.
func (in *Server) releaseBody(from netip.Prefix, n int64) {
	if n == 0 {
		return
	}
	in.bodyMu.Lock()
	if held := in.bodyNets[from] - n; held > 0 {
		in.bodyNets[from] = held
	} else {
		delete(in.bodyNets, from)
	}
	in.bodyMu.Unlock()
	in.bodies.Add(-n)
}

// bodyHold is the body memory one request holds, taken as its bytes
// arrive (first bodyStep, then doubling up to the declared or largest
// length), so that a client that declares a large body must send it to
// hold the memory.
type bodyHold struct {
	in   *Server
	from netip.Prefix
	held int64
}

// bodyStep is the first hold of a body: most webhooks fit in it.
const bodyStep = 16 << 10

// smallBody is the largest hold of a small body (reserveBody): 16 KiB, then
// 32 KiB, then 64 KiB.
const smallBody = 64 << 10

// grow holds at least n bytes, or reports that the cap or the client's
// share is reached.
func (h *bodyHold) grow(n int64) bool {
	if n <= h.held {
		return true
	}
	if !h.in.reserveBody(h.from, n-h.held, n) {
		return false
	}
	h.held = n
	return true
}

func (h *bodyHold) release() { h.in.releaseBody(h.from, h.held) }

// SetSources swaps the served sources (a reload); requests in flight finish
// with the set they started with.
func (in *Server) SetSources(set *Set) { in.sources.Store(set) }

// HTTPServer builds the fasthttp server with limits that bound hostile clients:
// read/write/idle timeouts against slowloris, a header size limit (431), a
// per-IP connection cap, and bodies streamed: fasthttp hands the handler the
// headers and at most 8 KiB already read, so the route, the client address
// and the source's max_body are decided before the rest of a body is read
// (readBody). Nothing a client sends to an unknown source, from a refused
// address or over max_body is buffered.
func (in *Server) HTTPServer() *fasthttp.Server {
	conns := in.maxConnsPerIP
	if conns <= 0 {
		conns = config.DefaultMaxConnsPerIP
	}
	return &fasthttp.Server{
		Handler:                       in.handle,
		Name:                          "oncehook",
		ReadTimeout:                   10 * time.Second,
		WriteTimeout:                  15 * time.Second,
		IdleTimeout:                   60 * time.Second,
		ReadBufferSize:                16 << 10,
		StreamRequestBody:             true,
		MaxRequestBodySize:            config.MaxMaxBody, // the pre-read is what it bounds; readBody applies max_body
		MaxConnsPerIP:                 conns,
		DisablePreParseMultipartForm:  true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		Logger:                        fasthttpLogger{in.log},
		ErrorHandler:                  in.requestError,
		ExpectHandler:                 in.expect,
	}
}

// expect answers a request that sends its body only once welcome (Expect:
// 100-continue) from its head alone, as serveSource would: told 100
// Continue, a sender would send a body of up to max_body only to be
// refused for its head. A refusal is the status alone, and the connection
// is closed.
func (in *Server) expect(ctx *fasthttp.RequestCtx) int {
	path := ctx.Path()
	if !bytes.HasPrefix(path, strIn) {
		return fasthttp.StatusContinue // /livez and the like answer whatever the body
	}
	src := in.sources.Load().byName[string(path[len(strIn):])]
	status, msg := fasthttp.StatusContinue, ""
	switch {
	case !ctx.IsPost():
		status, msg = fasthttp.StatusMethodNotAllowed, "method not allowed: use POST"
		src = nil // counted as handleIn counts it: before the source is looked up
	case src == nil:
		status, msg = fasthttp.StatusNotFound, "unknown source"
	case len(src.allow) > 0 && !allowed(src.allow, ctx.RemoteIP()):
		status, msg = fasthttp.StatusForbidden, "client address not allowed"
	case encodedBody(&ctx.Request.Header):
		status, msg = fasthttp.StatusUnsupportedMediaType, "content-encoding not supported: signatures cover the raw body"
	case ctx.Request.Header.ContentLength() > src.maxBody:
		status, msg = fasthttp.StatusRequestEntityTooLarge, "body larger than max_body"
	}
	if status != fasthttp.StatusContinue {
		name := ""
		if src != nil {
			name = src.name
		}
		in.metrics.Request(name, status)
		if src != nil { // a configured source's refusal is a request it answered, as in handleIn
			in.metrics.ClaimDuration(time.Since(ctx.Time()))
		}
		// fasthttp sends the refusal itself, with the response as set here:
		// the same JSON error serveSource would answer.
		ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
		if status == fasthttp.StatusMethodNotAllowed {
			ctx.Response.Header.Set("Allow", "POST")
		}
		writeError(ctx, status, msg)
	}
	return status
}

// maxPooledBody is the largest body buffer kept for reuse; a rare big body
// does not pin its memory in the pool.
const maxPooledBody = 256 << 10

// readBody reads the request body into dst, refusing more than limit bytes:
// a declared Content-Length over the limit is refused before anything more
// is read, a chunked body as soon as it passes the limit. status is 0 when the
// body was read, else the answer to send. After a 413 fasthttp sends the
// answer first, then reads and drops a rest of at most 256 KiB (so a sender
// still writing reads a clean 413, not a reset) or closes the connection
// unread; after a broken body the connection is closed.
func readBody(ctx *fasthttp.RequestCtx, dst []byte, limit int, hold *bodyHold) (body []byte, status int, msg string) {
	tooLarge := func() ([]byte, int, string) {
		return dst, fasthttp.StatusRequestEntityTooLarge, "body larger than max_body"
	}
	refuse := func(status int, msg string) ([]byte, int, string) {
		ctx.SetConnectionClose()
		return dst, status, msg
	}
	n := ctx.Request.Header.ContentLength()
	if n > limit {
		return tooLarge()
	}
	want := limit + 1 // chunked: one byte past the limit tells it is over
	if n >= 0 {
		want = n
	}
	busy := func() ([]byte, int, string) {
		ctx.Response.Header.Set("Retry-After", "1")
		return refuse(fasthttp.StatusServiceUnavailable, "too many request bodies in flight, retry")
	}
	r := ctx.RequestBodyStream()
	if r == nil {
		// Not streamed: the body is in memory already (a request built in
		// process, as the benchmarks do). Copied: dst goes back to a pool.
		b := ctx.Request.Body()
		if len(b) > limit {
			return tooLarge()
		}
		if !hold.grow(int64(len(b))) {
			return busy()
		}
		return append(dst[:0], b...), 0, ""
	}
	if !hold.grow(int64(min(want, bodyStep))) {
		return busy()
	}
	for len(dst) < want {
		if int64(len(dst)) == hold.held {
			// The next step is held before it is read: twice the bytes
			// so far, at most what is wanted.
			if !hold.grow(int64(min(want, 2*len(dst)))) {
				return busy()
			}
		}
		end := min(want, int(hold.held))
		if cap(dst) < end {
			dst = slices.Grow(dst, end-len(dst))
		}
		m, err := r.Read(dst[len(dst):end])
		dst = dst[:len(dst)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			switch {
			case readTimedOut(err):
				return refuse(fasthttp.StatusRequestTimeout, "request body not received in time")
			case trailerRefused(err):
				return refuse(fasthttp.StatusBadRequest, errTrailers)
			}
			return refuse(fasthttp.StatusBadRequest, "malformed or truncated request body")
		}
	}
	if len(dst) > limit {
		return tooLarge()
	}
	if n >= 0 && len(dst) < n {
		return refuse(fasthttp.StatusBadRequest, "truncated request body")
	}
	return dst, 0, ""
}

// errTrailers is the answer to a chunked body followed by trailer fields.
const errTrailers = "trailer fields after a chunked body are not accepted: send every header before the body"

// readTimedOut reports whether a body read failed on the read deadline.
// fasthttp wraps a timeout met inside a chunk's framing (its CRLF, its size
// line) in ErrBrokenChunk, which does not unwrap; its text still says so.
func readTimedOut(err error) bool {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return true
	}
	var broken fasthttp.ErrBrokenChunk
	return errors.As(err, &broken) && strings.Contains(broken.Error(), os.ErrDeadlineExceeded.Error())
}

// trailerRefused reports whether fasthttp refused a trailer field while it
// read a chunked body (a name it forbids there, such as Authorization or
// Host, or a value it cannot take): trailers are refused anyway, and the
// sender gets the same answer for every one.
func trailerRefused(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "forbidden trailer key") || strings.Contains(msg, "invalid trailer value")
}

// requestError answers requests fasthttp rejects before our handler runs.
// The default handler calls an oversized body a parse error (400); a sender
// deserves to know the body was too large, and every answer stays JSON.
// They are counted under no source: header floods and slow senders show in
// oncehook_requests_total.
func (in *Server) requestError(ctx *fasthttp.RequestCtx, err error) {
	ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	var status int
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status = writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "body larger than the server limit")
	case errors.As(err, &small):
		status = writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "request headers too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		status = writeError(ctx, fasthttp.StatusRequestTimeout, "request not received in time")
	default:
		status = writeError(ctx, fasthttp.StatusBadRequest, "malformed HTTP request")
	}
	in.metrics.Request("", status)
}

type fasthttpLogger struct{ l *slog.Logger }

// Printf logs fasthttp's own messages at debug, without the request bytes
// its errors quote: a parse error carries "buffer size=N, contents: ..."
// (every header, a gitlab or asaas token among them, and the body's
// start), an invalid header its value. An error is cut at its first quote.
func (f fasthttpLogger) Printf(format string, args ...any) {
	if !f.l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	clean := make([]any, len(args))
	for i, a := range args {
		if err, ok := a.(error); ok {
			a = errorWithoutRequestBytes(err.Error())
		}
		clean[i] = a
	}
	msg := fmt.Sprintf(format, clean...)
	if i := strings.Index(msg, "buffer size="); i >= 0 {
		msg = msg[:i] + "(request bytes not logged)"
	}
	f.l.Debug("http server", "detail", msg) // "msg" is the record's own key
}

// errorWithoutRequestBytes cuts a fasthttp error before the first request
// bytes it quotes.
func errorWithoutRequestBytes(msg string) string {
	for _, mark := range []string{"buffer size=", `"`} {
		if i := strings.Index(msg, mark); i >= 0 {
			msg = msg[:i] + "(request bytes not logged)"
		}
	}
	return msg
}

var (
	strIn     = []byte("/in/")
	strLivez  = []byte("/livez")
	strReadyz = []byte("/readyz")
	strJSON   = "application/json"

	hdrNosniff = []byte("X-Content-Type-Options")
	valNosniff = []byte("nosniff")
)

func (in *Server) handle(ctx *fasthttp.RequestCtx) {
	// Answers echo the sender's bytes (a key, a type, a sync handler's
	// body): no browser may read them as anything but their declared type.
	ctx.Response.Header.SetCanonical(hdrNosniff, valNosniff)
	path := ctx.Path()
	switch {
	case bytes.HasPrefix(path, strIn):
		in.handleIn(ctx, path[len(strIn):])
	case bytes.Equal(path, strLivez):
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.WriteString("ok\n")
	case bytes.Equal(path, strReadyz):
		// The status is for a load balancer; why, which names the
		// cluster's members, is the admin listener's /readyz, behind a
		// token: this listener faces the internet.
		ctx.SetContentType("text/plain; charset=utf-8")
		if ok, _ := in.store.Ready(); ok {
			ctx.WriteString("ok\n")
		} else {
			ctx.Response.Header.Set("Retry-After", "1")
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.WriteString("not ready\n")
		}
	default:
		writeError(ctx, fasthttp.StatusNotFound, "not found")
	}
}

func (in *Server) handleIn(ctx *fasthttp.RequestCtx, name []byte) {
	start := time.Now()
	if !ctx.IsPost() {
		// The method first, as the contract orders the checks: any other
		// method is refused on every /in/ path alike.
		in.metrics.Request("", fasthttp.StatusMethodNotAllowed)
		ctx.Response.Header.Set("Allow", "POST")
		writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed: use POST")
		return
	}
	set := in.sources.Load()
	src := set.byName[string(name)]
	if src == nil {
		in.metrics.Request("", fasthttp.StatusNotFound)
		writeError(ctx, fasthttp.StatusNotFound, "unknown source")
		return
	}
	code := in.serveSource(ctx, src, start)
	in.metrics.Request(src.name, code)
	in.metrics.ClaimDuration(time.Since(start))
}

// encodedBody reports whether any Content-Encoding header names an
// encoding other than identity. Every header counts, not the first: a
// second one would otherwise slip a gzip body past the check, to be
// stored and delivered as if it were the JSON it is labelled.
func encodedBody(h *fasthttp.RequestHeader) bool {
	for _, v := range h.PeekAll("Content-Encoding") {
		if v = bytes.TrimSpace(v); len(v) > 0 && !bytes.EqualFold(v, []byte("identity")) {
			return true
		}
	}
	return false
}

// serveSource runs the hot path (docs/architecture.md, Request flow) and
// returns the status sent.
func (in *Server) serveSource(ctx *fasthttp.RequestCtx, src *Source, start time.Time) int {
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "POST")
		return writeError(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed: use POST")
	}
	if len(src.allow) > 0 && !allowed(src.allow, ctx.RemoteIP()) {
		return writeError(ctx, fasthttp.StatusForbidden, "client address not allowed")
	}
	if encodedBody(&ctx.Request.Header) {
		return writeError(ctx, fasthttp.StatusUnsupportedMediaType, "content-encoding not supported: signatures cover the raw body")
	}
	// The body's bytes are reserved as they arrive (bodyHold); one over
	// max_body is refused unread.
	hold := bodyHold{in: in, from: connlimit.Network(ctx.RemoteAddr())}
	defer hold.release()
	bp := in.bodyBufs.Get().(*[]byte)
	defer in.bodyBufs.Put(bp)
	body, status, msg := readBody(ctx, (*bp)[:0], src.maxBody, &hold)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
	}
	if status != 0 {
		return writeError(ctx, status, msg)
	}
	if ctx.Request.Header.ContentLength() < 0 && len(ctx.Request.Header.TrailerHeader()) > len("\r\n") {
		// fasthttp lets trailer fields answer as headers: a signature, an
		// id or a forwarded header sent after the body would reach the
		// verifier, the key and the handler unseen by a proxy in front
		// that checks or strips headers (RFC 9110, 6.5.1).
		return writeError(ctx, fasthttp.StatusBadRequest, errTrailers)
	}
	if len(body) == 0 {
		return writeError(ctx, fasthttp.StatusBadRequest, "empty body")
	}

	req := providers.Request{Body: body, Header: &ctx.Request.Header, Now: in.now()}
	if src.provider == "twilio" {
		if !pathAsRouted(ctx) {
			// The signature is checked over the URL as sent, the source
			// found by its normal form: "/in/tw/../tw2" would check one
			// URL's signature for another source.
			in.metrics.SignatureFailure(src.name, "bad_signature")
			return writeError(ctx, fasthttp.StatusUnauthorized, errPathNotNormal)
		}
		req.URL = publicURL(ctx, src.trusted)
	}
	if err := src.verifier.Verify(&req); err != nil {
		in.metrics.SignatureFailure(src.name, verifyReason(err))
		// The providers' errors start with their package's name: a
		// sender is told what failed, not where in oncehook.
		return writeError(ctx, fasthttp.StatusUnauthorized, strings.TrimPrefix(err.Error(), "providers: "))
	}
	if src.handshaker != nil {
		if status, answer, ct, ok := src.handshaker.Handshake(&req); ok {
			if n, isNoticer := src.handshaker.(providers.Noticer); isNoticer && in.log != nil {
				if msg, attrs := n.Notice(&req); msg != "" {
					in.log.Warn(msg, append([]any{"source", src.name}, attrs...)...)
				}
			}
			ctx.SetStatusCode(status)
			ctx.SetContentType(ct)
			ctx.SetBody(answer)
			return status
		}
	}
	if status, refused := in.screen(ctx, src, body); refused {
		return status
	}

	var orderObj string
	var orderTime int64
	if src.orderObject != nil {
		var msg string
		var always bool
		if orderObj, orderTime, msg, always = src.order(&ctx.Request.Header, body); msg != "" && (always || !src.orderUnordered) {
			return writeError(ctx, fasthttp.StatusBadRequest, msg)
		}
	}

	kp := in.keyBufs.Get().(*[]byte)
	defer in.keyBufs.Put(kp)
	key, err := src.keyer.Key((*kp)[:0], &ctx.Request.Header, body)
	*kp = key[:0]
	if err != nil {
		// The providers' errors start with their package's name, and two of
		// them say what is wrong with the key already.
		msg := strings.TrimPrefix(err.Error(), "providers: ")
		if !errors.Is(err, providers.ErrNoKey) && !errors.Is(err, providers.ErrKeyTooLong) {
			msg = "no idempotency key: " + msg
		}
		return writeError(ctx, fasthttp.StatusBadRequest, msg)
	}

	// A key in this node's applied state is committed: answer the duplicate
	// without a Raft round. Absence proves nothing; the claim decides.
	skey := string(key) // one copy for the lookup and the command
	if st, ok, err := in.store.Lookup(skey); err == nil && ok {
		in.metrics.Claim(src.name, false)
		return in.answerDuplicate(ctx, src, key, st, body, true)
	}
	if src.escapedKey && bytes.IndexByte(key, '%') >= 0 {
		if legacy, found := in.legacyEvent(key, body); found {
			in.metrics.Claim(src.name, false)
			return in.answerDuplicate(ctx, src, []byte(legacy.Key), legacy.State, body, true)
		}
	}

	cmd := engine.Command{
		Op:        engine.OpClaim,
		Key:       skey,
		Source:    src.name,
		Payload:   append([]byte(nil), body...), // the request buffer is reused once we return
		Retention: src.retention,
		LeaseFor:  src.leaseFor,
		Headers:   forwardHeaders(ctx, src.fwdHeaders),
	}
	if src.guardBody {
		cmd.BodyKey = bodyKey(src, &req, body)
	}
	if orderObj != "" {
		cmd.OrderObject, cmd.OrderTime = orderObj, orderTime
	}
	res, err := in.store.Claim(in.deadlines.get(time.Now()), cmd)
	if err != nil {
		return in.claimFailed(ctx, src, err)
	}
	return in.answerClaim(ctx, src, key, body, res, start)
}

// legacyEvent finds the event a binary before the escaping of composite
// keys claimed for this delivery: its key joined the parts as they were
// (docs/sources.md). Two deliveries could share that form, so it counts only
// when the stored body is this one: a resend of an event claimed before an
// upgrade is then its duplicate, not a second delivery, and another event
// whose parts joined the same way is claimed under its own key.
func (in *Server) legacyEvent(key, body []byte) (engine.Event, bool) {
	legacy := make([]byte, 0, len(key))
	for i := 0; i < len(key); i++ {
		switch {
		case key[i] == '%' && i+2 < len(key) && key[i+1] == '3' && key[i+2] == 'A':
			legacy = append(legacy, ':')
			i += 2
		case key[i] == '%' && i+2 < len(key) && key[i+1] == '2' && key[i+2] == '5':
			legacy = append(legacy, '%')
			i += 2
		default:
			legacy = append(legacy, key[i])
		}
	}
	if bytes.Equal(legacy, key) {
		return engine.Event{}, false
	}
	// Lookup first: it finds nothing on a node whose state may be stale
	// (not current after a start, or restoring), where Get would read it.
	if _, ok, err := in.store.Lookup(string(legacy)); err != nil || !ok {
		return engine.Event{}, false
	}
	ev, err := in.store.Get(string(legacy), true)
	if err != nil || ev.Payload == nil || !bytes.Equal(ev.Payload, body) {
		return engine.Event{}, false
	}
	return ev, true
}

// answerClaim answers a committed claim: accepted (or, for a sync source,
// the handler's answer), or a duplicate's answer, which for a body the
// replay guard matched is the original key's.
func (in *Server) answerClaim(ctx *fasthttp.RequestCtx, src *Source, key, body []byte, res engine.Result, start time.Time) int {
	in.metrics.Claim(src.name, res.Created)
	// One line per committed claim, at debug: at tens of thousands of claims a
	// second an info line per event would cost more than the claim itself.
	if in.log.Enabled(context.Background(), slog.LevelDebug) {
		result := "new"
		if !res.Created {
			result = "duplicate"
		}
		in.log.Debug("claim", "source", src.name, "key", string(key), "result", result, "state", res.State.String(), "latency", time.Since(start))
	}
	if !res.Created && len(res.Keys) == 1 {
		// The replay guard matched: this verified body is another key's
		// event, resent under an id the signature does not cover.
		in.metrics.ReplaySuspected(src.name)
		// Anyone holding one captured delivery can send it again as fast
		// as they like: a few lines a second, the counter for the rest.
		if held, ok := in.replayLog.Allow(in.now()); ok {
			in.log.Warn("replayed body under a new key", "source", src.name, "key", string(key), "original", res.Keys[0],
				"not_logged_since_last", held)
		}
		return in.answerDuplicate(ctx, src, []byte(res.Keys[0]), res.State, body, false)
	}
	if !res.Created {
		return in.answerDuplicate(ctx, src, key, res.State, body, true)
	}
	if src.sync && (res.State == engine.StatePending || res.State == engine.StateProcessing) {
		return in.answerSync(ctx, src, key, nil)
	}
	return writeClaim(ctx, src.ack, "accepted", key, res.State, res.State == engine.StateStale)
}

// screen applies the source's content rules to a verified body: valid JSON,
// the type filter and the schema. It reports the status sent when the body
// is refused or filtered out (refused true); nothing is keyed or stored then.
func (in *Server) screen(ctx *fasthttp.RequestCtx, src *Source, body []byte) (status int, refused bool) {
	// What reads JSON reads valid JSON only: a truncated or broken body is
	// refused before anything is filtered, keyed or stored.
	if src.checkJSON && !validJSON(body) {
		if src.schema != nil {
			in.metrics.SchemaFailure(src.name) // the schema would have refused it
		}
		return writeError(ctx, fasthttp.StatusBadRequest, invalidJSONMessage(body)), true
	}
	// The type filter sees verified bodies only (serveSource answers a
	// forged delivery 401 first, whatever its type) and answers before
	// anything is keyed or stored.
	if src.typeField != nil {
		typ, drop, dup := src.filter(&ctx.Request.Header, body)
		if dup {
			return writeError(ctx, fasthttp.StatusBadRequest, "type "+src.typeField.String()+": "+duplicateMember), true
		}
		if drop {
			label := "other"
			if _, listed := src.types[string(typ)]; listed {
				label = string(typ)
			}
			in.metrics.Filtered(src.name, label)
			if in.log.Enabled(context.Background(), slog.LevelDebug) {
				in.log.Debug("filtered", "source", src.name, "type", string(typ))
			}
			return writeFiltered(ctx, typ), true
		}
	}
	// The schema sees verified bodies only, and refuses before anything is
	// keyed or stored.
	if src.schema != nil {
		if msg := src.schema.validate(body); msg != "" {
			in.metrics.SchemaFailure(src.name)
			return writeError(ctx, fasthttp.StatusBadRequest, msg), true
		}
	}
	return 0, false
}

// claimFailed answers a claim that did not commit: 400 for a command the
// engine refuses, else 503 with Retry-After, saying why when the store's
// error is a known "not committed" kind (another failure is logged as an
// error).
func (in *Server) claimFailed(ctx *fasthttp.RequestCtx, src *Source, err error) int {
	if errors.Is(err, engine.ErrBadCommand) {
		return writeError(ctx, fasthttp.StatusBadRequest, err.Error())
	}
	if reason := in.notCommitted(err); reason != "" {
		if held, ok := in.unsettled.Allow(in.now()); ok {
			in.log.Warn("claim not committed", "source", src.name, "err", err, "not_logged_since_last", held)
		}
		ctx.Response.Header.Set("Retry-After", "1")
		return writeError(ctx, fasthttp.StatusServiceUnavailable, reason)
	}
	in.log.Error("claim failed", "source", src.name, "err", err)
	ctx.Response.Header.Set("Retry-After", "1")
	return writeError(ctx, fasthttp.StatusServiceUnavailable, "claim failed, retry")
}

// filter reads the event type and reports whether the source's filter drops
// the delivery. A missing type is never in a list: not accepted, not dropped.
// typ may alias body or the header's memory, and is nil when missing. dup
// reports a type whose path names a member twice: neither kept nor dropped,
// refused.
func (s *Source) filter(h providers.Headers, body []byte) (typ []byte, drop, dup bool) {
	typ, err := s.typeField.Value(h, body)
	if errors.Is(err, providers.ErrDuplicateMember) {
		return nil, false, true
	}
	if err != nil || len(typ) == 0 {
		return nil, s.acceptTypes, false
	}
	_, listed := s.types[string(typ)] // no allocation: the compiler looks up the bytes
	return typ, listed != s.acceptTypes, false
}

// answerDuplicate answers a delivery whose event exists. own is false when
// the replay guard matched the body under another key.
func (in *Server) answerDuplicate(ctx *fasthttp.RequestCtx, src *Source, key []byte, st engine.State, body []byte, own bool) int {
	// A different body under the same key is still a duplicate (the key is the
	// event's identity), but it is counted: a sender reusing ids, or a forged
	// body under a valid signature for another event, shows up here.
	stored, err := in.store.Get(string(key), true)
	if src.sync {
		// A sync duplicate is answered from the stored event, never with a
		// bare 2xx it cannot back (the handler may have failed): on a
		// follower that has not applied the event its duplicate found on
		// the leader, wait for it. The answer then follows this node's copy
		// throughout, its state included, which may be older than the
		// leader's (in progress rather than done: the retry gets the rest).
		if errors.Is(err, engine.ErrNotFound) {
			stored, err = in.awaitApplied(key)
		}
		if err != nil {
			ctx.Response.Header.Set("Retry-After", "1")
			return writeError(ctx, fasthttp.StatusServiceUnavailable, "duplicate of an event this node has not applied yet, retry")
		}
		st = stored.State
	} else if own && errors.Is(err, engine.ErrNotFound) {
		// A follower that relayed the claim may not have applied the
		// event the leader found yet (a few milliseconds): give it that,
		// so that a different body is counted and logged wherever the
		// duplicate arrives. The answer does not depend on it.
		if ev, werr := in.awaitAppliedWithin(key, mismatchWait); werr == nil {
			stored, err = ev, nil
		}
	}
	sameBody := err == nil && stored.Payload != nil && bytes.Equal(stored.Payload, body)
	if own && err == nil && stored.Payload != nil && !sameBody {
		// (A body the replay guard matched under another key is counted
		// as a replay instead: its bytes differ by design, re-encoded.)
		in.metrics.DuplicateBodyChanged(src.name)
		if held, ok := in.changedLog.Allow(in.now()); ok {
			in.log.Warn("duplicate with a different body", "source", src.name, "key", string(key), "not_logged_since_last", held)
		}
	}
	if src.sync && !sameBody {
		// A sync answer is the handler's answer to one body. Whoever holds
		// another validly signed body must not read it, nor learn the state
		// of the event behind the key (docs/security.md). A body that can no
		// longer be compared (payload dropped) gets no answer either.
		if err == nil && stored.Payload != nil {
			in.metrics.SyncConflict(src.name)
			return writeClaim(ctx, fasthttp.StatusConflict, "conflict", key, st, false)
		}
		return writeClaim(ctx, fasthttp.StatusOK, "duplicate", key, st, false)
	}
	if src.sync {
		switch st {
		case engine.StateDone:
			if stored.Response != nil {
				return writeCached(ctx, stored.Response)
			}
		case engine.StatePending, engine.StateProcessing:
			return writeClaim(ctx, fasthttp.StatusConflict, "in_progress", key, st, true)
		case engine.StateDead:
			// A sync answer never acknowledges a failure: the provider's
			// retry re-arms the event and waits for the handler.
			if own {
				return in.rearm(ctx, src, key)
			}
			return writeClaim(ctx, fasthttp.StatusBadGateway, "handler_failed", key, st, true)
		}
	}
	return writeClaim(ctx, fasthttp.StatusOK, "duplicate", key, st, true)
}

// awaitApplied reads an event that a committed claim found but this node
// has not applied yet: a follower relays its claims to the leader, which
// answers "duplicate" as soon as its own state has the key, and the entry
// that created it may still be on its way here. A duplicate's answer reads
// the stored event (the body to compare; a sync source's cached answer or
// state), so it waits for it, a claim's timeout at most.
func (in *Server) awaitApplied(key []byte) (engine.Event, error) {
	return in.awaitAppliedWithin(key, in.timeout)
}

// mismatchWait bounds how long a duplicate's answer waits for this node to
// apply the event, only to compare the bodies (answerDuplicate).
const mismatchWait = 100 * time.Millisecond

// awaitAppliedWithin is awaitApplied with its own bound.
func (in *Server) awaitAppliedWithin(key []byte, d time.Duration) (engine.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if _, err := in.store.Wait(ctx, string(key), func(engine.Event) bool { return true }); err != nil {
		return engine.Event{}, fmt.Errorf("await %s: %w", key, err)
	}
	return in.store.Get(string(key), true)
}

// answerSync waits for the handler's answer and relays it. fresh, when
// set, must also hold of the event first: the node's own copy may not show
// yet what was committed through the leader (a re-arm seen on a follower).
func (in *Server) answerSync(ctx *fasthttp.RequestCtx, src *Source, key []byte, fresh func(engine.Event) bool) int {
	wctx, cancel := context.WithTimeout(context.Background(), src.waitFor)
	defer cancel()
	answered := func(ev engine.Event) bool {
		if fresh != nil && !fresh(ev) {
			return false
		}
		return ev.State == engine.StateDone || ev.State == engine.StateDead || ev.Attempts > 0 && ev.State == engine.StatePending
	}
	ev, err := in.store.Wait(wctx, string(key), answered)
	if err != nil {
		// The answer may have been applied as the wait ended: relay it
		// rather than call it late.
		if cur, gerr := in.store.Get(string(key), false); gerr == nil && answered(cur) {
			ev, err = cur, nil
		}
	}
	switch {
	case err != nil:
		// Not answered in time (the handler is slow or the source paused):
		// the event is committed and still to be delivered. Say where it is.
		st := engine.StateProcessing
		if cur, gerr := in.store.Get(string(key), false); gerr == nil {
			st = cur.State
		}
		return writeClaim(ctx, fasthttp.StatusGatewayTimeout, "accepted_handler_timeout", key, st, true)
	case ev.State == engine.StateDone && ev.Response != nil:
		return writeCached(ctx, ev.Response)
	case ev.State == engine.StateDone:
		return writeClaim(ctx, src.ack, "accepted", key, ev.State, true)
	}
	return writeClaim(ctx, fasthttp.StatusBadGateway, "handler_failed", key, ev.State, true)
}

// bodyKey is the replay guard's key for a verified body: the source, a NUL
// (source names cannot hold one) and the body's SHA-256. When the source's
// signature covers something other than the raw bytes (a
// providers.ReplayBodier: twilio signs the URL and the decoded, sorted form
// parameters), the hash is of that signed content instead, so a captured
// body re-ordered or re-encoded under a new delivery id is still found.
func bodyKey(src *Source, req *providers.Request, body []byte) string {
	source := src.name
	var sum [sha256.Size]byte
	signed := false
	if rb, ok := src.verifier.(providers.ReplayBodier); ok {
		h := sha256.New()
		if signed = rb.WriteReplayBody(h, req) == nil; signed {
			h.Sum(sum[:0])
		}
	}
	if !signed && src.guardType {
		// The filter let it through: its type is one of accept_types.
		typ, _ := src.typeField.Value(req.Header, body)
		h := sha256.New()
		var n [binary.MaxVarintLen64]byte
		h.Write(binary.AppendUvarint(n[:0], uint64(len(typ))))
		h.Write(typ)
		h.Write(body)
		h.Sum(sum[:0])
		signed = true
	}
	if !signed { // not a ReplayBodier, or (never after Verify) it failed
		sum = sha256.Sum256(body)
	}
	b := make([]byte, 0, len(source)+1+len(sum))
	b = append(append(append(b, source...), 0), sum[:]...)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// writeCached answers with the handler's cached answer: its status, its
// Content-Type (answers cached before it was kept have none, and go
// without one: the server sets no default) and its body.
func writeCached(ctx *fasthttp.RequestCtx, r *engine.Response) int {
	ctx.SetStatusCode(r.Status)
	if r.ContentType != "" {
		ctx.SetContentType(r.ContentType)
	}
	ctx.SetBody(r.Body)
	return r.Status
}

func forwardHeaders(ctx *fasthttp.RequestCtx, names []string) []engine.Header {
	ct := ctx.Request.Header.ContentType()
	n := len(names)
	if len(ct) > 0 {
		n++
	}
	if n == 0 {
		return nil
	}
	hs := make([]engine.Header, 0, n)
	if len(ct) > 0 {
		hs = append(hs, engine.Header{Name: "Content-Type", Value: string(ct)})
	}
	for _, name := range names {
		if strings.EqualFold(name, "Content-Type") {
			continue // stored above, once: listing it must not send it twice
		}
		if v := ctx.Request.Header.Peek(name); len(v) > 0 {
			hs = append(hs, engine.Header{Name: name, Value: string(v)})
		}
	}
	return hs
}

func allowed(prefixes []netip.Prefix, ip net.IP) bool {
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	addr = addr.Unmap()
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// errPathNotNormal answers a URL-signing source's request whose path is not
// the one it was routed by.
const errPathNotNormal = "bad signature: the request path is not in normal form (dot segments, repeated slashes or escapes), and the signature covers the URL as sent"

// pathAsRouted reports whether the path of the request line, as sent, is
// the path the source was found by (fasthttp's decoded, normalised Path).
func pathAsRouted(ctx *fasthttp.RequestCtx) bool {
	raw := ctx.RequestURI()
	if i := bytes.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	return bytes.Equal(raw, ctx.Path())
}

// publicURL rebuilds the URL the sender signed (twilio): the listener's
// scheme, the Host header and the request URI as received. A peer in trusted
// (the source's trusted_proxies) may override scheme and host with
// X-Forwarded-Proto ("http" or "https") and X-Forwarded-Host; from any other
// peer those headers are ignored, so that a client cannot choose the URL the
// signature is checked against. When a proxy appends to a list, in the
// client's line or a line of its own, the last value (the one the connected
// proxy added) is used. A value that is not a
// plain scheme or host is ignored.
func publicURL(ctx *fasthttp.RequestCtx, trusted []netip.Prefix) string {
	scheme := "http"
	if ctx.IsTLS() {
		scheme = "https"
	}
	host := ctx.Host()
	if len(trusted) > 0 && allowed(trusted, ctx.RemoteIP()) {
		switch p := lastForwarded(&ctx.Request.Header, "X-Forwarded-Proto"); {
		case bytes.EqualFold(p, strHTTPS):
			scheme = "https"
		case bytes.EqualFold(p, strHTTP):
			scheme = "http"
		}
		if h := lastForwarded(&ctx.Request.Header, "X-Forwarded-Host"); validForwardedHost(h) {
			host = h
		}
	}
	return scheme + "://" + string(host) + string(ctx.RequestURI())
}

var (
	strHTTP  = []byte("http")
	strHTTPS = []byte("https")
)

// lastForwarded is the last value of header name: the last element of its
// last line. A proxy may append its value to the line the client sent, or
// add a line of its own after it; either way the last is the proxy's.
func lastForwarded(h *fasthttp.RequestHeader, name string) []byte {
	lines := h.PeekAll(name)
	if len(lines) == 0 {
		return nil
	}
	return lastListValue(lines[len(lines)-1])
}

// lastListValue returns the last element of a comma-separated header value,
// trimmed of ASCII white space only: bytes.TrimSpace also drops Unicode
// spaces (U+00A0, U+0085), and took "host\u00a0" from a trusted proxy for
// "host" where the value should be ignored.
func lastListValue(v []byte) []byte {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.Trim(v, " \t\r\n\v\f")
}

// validForwardedHost accepts a host[:port] made of letters, digits, '.', '-',
// '_', ':' and brackets (an IPv6 literal): nothing that could change the
// URL's path or query.
func validForwardedHost(h []byte) bool {
	if len(h) == 0 || len(h) > 255 {
		return false
	}
	for _, c := range h {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']':
		default:
			return false
		}
	}
	return true
}

func verifyReason(err error) string {
	switch {
	case errors.Is(err, providers.ErrMissingHeader):
		return "missing_header"
	case errors.Is(err, providers.ErrMalformedHeader):
		return "malformed_header"
	case errors.Is(err, providers.ErrTimestamp):
		return "timestamp"
	}
	return "bad_signature"
}

// RefuseConn answers a connection the listener refuses before any request
// is read (connlimit: over the intake's caps): 503 when the node holds as
// many connections as it allows in all, 429 when the client's network
// holds its share (node.max_conns_per_ip). Either asks the sender to
// retry, as providers do, and the connection is closed.
func RefuseConn(c net.Conn, over string) {
	status, msg := "503 Service Unavailable", `{"status":"error","error":"too many connections, retry"}`
	if over == "network" {
		status, msg = "429 Too Many Requests", `{"status":"error","error":"too many connections from your network (max_conns_per_ip), retry"}`
	}
	_, _ = io.WriteString(c, "HTTP/1.1 "+status+"\r\nConnection: close\r\nRetry-After: 1\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: "+
		strconv.Itoa(len(msg)+1)+"\r\n\r\n"+msg+"\n")
}

// The answers are written by hand: the hot path allocates no encoder.

func writeError(ctx *fasthttp.RequestCtx, status int, msg string) int {
	ctx.SetStatusCode(status)
	ctx.SetContentType(strJSON)
	b := ctx.Response.BodyWriter()
	var buf [256]byte
	out := append(buf[:0], `{"status":"error","error":`...)
	out = appendJSONString(out, msg)
	out = append(out, "}\n"...)
	b.Write(out)
	return status
}

func writeClaim(ctx *fasthttp.RequestCtx, status int, word string, key []byte, st engine.State, withState bool) int {
	ctx.SetStatusCode(status)
	ctx.SetContentType(strJSON)
	var buf [700]byte
	out := append(buf[:0], `{"status":"`...)
	out = append(out, word...)
	out = append(out, `","key":`...)
	out = appendJSONString(out, string(key))
	if withState {
		out = append(out, `,"state":"`...)
		out = append(out, st.String()...)
		out = append(out, '"')
	}
	out = append(out, "}\n"...)
	ctx.Response.AppendBody(out)
	return status
}

// writeFiltered answers a delivery the source's type filter drops:
// 200 {"status":"filtered","type":"..."}, without "type" when the delivery
// carries none.
func writeFiltered(ctx *fasthttp.RequestCtx, typ []byte) int {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(strJSON)
	var buf [256]byte
	out := append(buf[:0], `{"status":"filtered"`...)
	if typ != nil {
		out = append(out, `,"type":`...)
		// The type is the sender's bytes: keep the answer valid JSON.
		out = appendJSONString(out, strings.ToValidUTF8(string(typ), "\uFFFD"))
	}
	out = append(out, "}\n"...)
	ctx.Response.AppendBody(out)
	return fasthttp.StatusOK
}

func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
