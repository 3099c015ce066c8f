package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"oncehook/cluster"
	"oncehook/engine"
)

// The admin API lives on its own net/http listener. Every route but /metrics
// needs a bearer token from [admin] tokens; the token's name is recorded as
// "who" on replays.

type ctxKey int

const whoKey ctxKey = 0

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", notFromPageScripts(s.metrics))
	auth := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.requireToken(h)) }
	auth("GET /livez", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	auth("GET /readyz", s.adminReady)
	auth("GET /v1/status", s.adminStatus)
	auth("GET /v1/events", s.adminEvents)
	auth("GET /v1/events/{key...}", s.adminEvent)
	auth("POST /v1/replay", s.adminReplay)
	auth("POST /v1/purge", s.adminPurge) // purge.go
	auth("POST /v1/sources/{name}/pause", s.adminPause)
	auth("POST /v1/sources/{name}/resume", s.adminResume)
	auth("POST /v1/cluster/join", s.adminJoin)
	auth("DELETE /v1/cluster/peers/{id}", s.adminRemovePeer)
	auth("POST /v1/cluster/leader", s.adminTransferLeadership)
	auth("GET /v1/backup", s.adminBackup)
	auth("POST /v1/restore", s.adminRestore)
	auth("GET /debug/pprof/", pprof.Index)
	auth("GET /debug/pprof/cmdline", pprof.Cmdline)
	auth("GET /debug/pprof/profile", pprof.Profile)
	auth("GET /debug/pprof/symbol", pprof.Symbol)
	auth("GET /debug/pprof/trace", pprof.Trace)
	s.registerUI(mux) // the dead-letter page, /ui/ (ui.go)
	return nosniff(s.loopbackHosts(s.unmatched(mux)))
}

// loopbackHosts, on a plain-http listener on a loopback address (the
// default), answers only requests that name an address or localhost: a web
// page whose name an attacker points at 127.0.0.1 (DNS rebinding) sends its
// own name, and could otherwise read /metrics as its own origin (browsers
// send no Sec-Fetch-Site to a plain-http name) and spend the sign-in
// backoff that locks the operator out. Nothing else sends a name there:
// the operator's clients use the address or localhost. A listener on a
// network address, or with TLS (whose names the certificate checks), takes
// any name.
func (s *Server) loopbackHosts(h http.Handler) http.Handler {
	host, _, err := net.SplitHostPort(s.cfg().Admin.Listen)
	ip, perr := netip.ParseAddr(host)
	if err != nil || s.cfg().Admin.TLS() || !(host == "localhost" || perr == nil && ip.IsLoopback()) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.Host
		if hn, _, err := net.SplitHostPort(name); err == nil {
			name = hn
		}
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		_, ipErr := netip.ParseAddr(strings.Trim(name, "[]"))
		if ipErr != nil && name != "localhost" && !strings.HasSuffix(name, ".localhost") {
			closeAfter(w)
			jsonError(w, http.StatusMisdirectedRequest, "this admin listener is on loopback and answers requests for its address or localhost only, not for "+
				strconv.Quote(r.Host)+" (a web page pointing its name at this host would send its own)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// unmatched gives the requests no route takes the token check of every
// other route before the mux's own 404, 405 or path redirect: a stranger
// learns no more of which routes exist than a 401. Those answers are JSON
// like the rest of the API; a 405 keeps its Allow header.
func (s *Server) unmatched(mux *http.ServeMux) http.Handler {
	answer := s.requireToken(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(&jsonStatusWriter{ResponseWriter: w}, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" || subtreeRedirect(pattern, r.URL.Path) || uncleanPath(r.URL.EscapedPath()) {
			answer.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// uncleanPath reports whether the mux answers p with a redirect to its
// cleaned form (//v1/status to /v1/status), whose pattern it reports as the
// route's: that, too, says the route exists. p is the escaped path, as the
// mux cleans it: a key's escaped "/" (%2F%2F) is no double slash.
func uncleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return true
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c != p
}

// subtreeRedirect reports whether the mux answers path with a redirect to
// the subtree pattern names (/debug/pprof to /debug/pprof/): that says a
// route exists as much as a 405 does.
func subtreeRedirect(pattern, path string) bool {
	_, p, ok := strings.Cut(pattern, " ")
	if !ok {
		p = pattern
	}
	return strings.HasSuffix(p, "/") && path+"/" == p
}

// jsonStatusWriter turns the mux's plain-text 404 and 405 into the API's
// JSON error; other answers (a redirect) pass as they are.
type jsonStatusWriter struct {
	http.ResponseWriter
	replaced bool
}

func (w *jsonStatusWriter) WriteHeader(status int) {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
		w.ResponseWriter.WriteHeader(status)
		return
	}
	w.replaced = true
	msg := "no such route"
	if status == http.StatusMethodNotAllowed {
		msg = "method not allowed; allowed: " + w.Header().Get("Allow")
	}
	jsonError(w.ResponseWriter, status, msg)
}

func (w *jsonStatusWriter) Write(b []byte) (int, error) {
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// notFromPageScripts refuses a request a web page made: /metrics needs no
// token, so a page whose name an attacker points at this address (DNS
// rebinding) could otherwise read it as its own origin, by a script or
// through a frame or window it opens. Browsers say where a request comes
// from (Sec-Fetch-Site); a scraper sends nothing, and a URL an operator
// types or bookmarks is "none".
func notFromPageScripts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "none" {
			jsonError(w, http.StatusForbidden, "metrics are not served to web pages")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// nosniff marks every admin answer: the API's JSON quotes event data a
// sender chose (keys, payloads, handler answers), which a browser must
// never read as HTML or script.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// requireToken admits requests with a configured bearer token. A client that
// keeps presenting wrong tokens is backed off (authlimit.go): 429 with
// Retry-After, whatever it sends, until its wait is over.
func (s *Server) requireToken(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := authKey(r.RemoteAddr)
		if d := s.authLimit.wait(client); d > 0 {
			closeAfter(w)
			tooManyFailures(w, d)
			return
		}
		tokens := s.cfg().Admin.Tokens
		if len(tokens) == 0 {
			closeAfter(w)
			jsonError(w, http.StatusUnauthorized, "no admin tokens configured ([admin] tokens)")
			return
		}
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") { // schemes are case-insensitive (RFC 9110, 11.1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="oncehook"`)
			closeAfter(w)
			jsonError(w, http.StatusUnauthorized, "missing bearer token")
			return
		}
		// RFC 6750 allows more than one space after the scheme.
		got = strings.TrimLeft(got, " \t")
		i := matchToken(tokens, []byte(got))
		if i < 0 {
			s.authFailed(r, client, "admin api")
			closeAfter(w)
			jsonError(w, http.StatusUnauthorized, "invalid bearer token")
			return
		}
		who := tokens[i].Name
		s.authLimit.success(client)
		// The server's ReadTimeout guards against clients that never finish
		// a request. Past it, net/http's read for the next request fails and
		// cancels this one's context, so an authenticated request gets the
		// whole write timeout (a pprof profile, a replay's commit).
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.timeouts.Write))
		h(w, r.WithContext(context.WithValue(r.Context(), whoKey, who)))
	})
}

// authFailed counts a wrong token against the client and logs when that
// starts or lengthens its backoff.
func (s *Server) authFailed(r *http.Request, client netip.Prefix, where string) {
	if d := s.authLimit.fail(client); d > 0 {
		s.log.Warn(where+": repeated authentication failures; backing off", "remote", r.RemoteAddr, "retry_after", d.String())
	}
}

// closeAfter makes the server close the connection after this answer: a
// refused client keeps no connection, where one request would otherwise
// hold a slot of the listener's connection caps for its idle timeout.
func closeAfter(w http.ResponseWriter) { w.Header().Set("Connection", "close") }

func tooManyFailures(w http.ResponseWriter, d time.Duration) {
	secs := retryAfter(d)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	jsonError(w, http.StatusTooManyRequests, fmt.Sprintf("too many failed authentication attempts from this address; retry in %d s", secs))
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Keys and reasons as they were sent: "a&b", not "a\u0026b" (the
	// answers are JSON, never HTML; nosniff keeps browsers from reading
	// them as such).
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// refuseRequest answers a request whose body decodeRequest refused: 413
// when it was over the route's limit, else 400 with msg.
func refuseRequest(w http.ResponseWriter, msg string, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		jsonError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes, the limit of this route", tooLarge.Limit))
		return
	}
	jsonError(w, http.StatusBadRequest, msg)
}

func (s *Server) adminReady(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.store.Ready(); !ok {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

type statusJSON struct {
	cluster.Status
	Counts map[string]int `json:"counts"`
	// Sources: every configured source (and any other with events stored or
	// paused), its event count, pause state and backlog.
	Sources  map[string]sourceStatusJSON `json:"sources"`
	Version  string                      `json:"version"`
	Ready    bool                        `json:"ready"`
	ReadyWhy string                      `json:"ready_reason"`
}

func (s *Server) adminStatus(w http.ResponseWriter, r *http.Request) {
	st := statusJSON{Status: s.store.ClusterStatus(r.Context()), Version: s.version, Counts: map[string]int{}}
	st.Ready, st.ReadyWhy = s.store.Ready()
	byState, bySource, err := s.store.Counts()
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, s := range engine.States {
		st.Counts[s.String()] = byState[s]
	}
	if st.Sources, err = s.statusSources(bySource); err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Event is the admin API's event shape (docs/reference.md, "HTTP surface";
// scripts read it, so field names are fixed).
type Event struct {
	Key           string `json:"key"`
	Source        string `json:"source"`
	State         string `json:"state"`
	Attempts      uint32 `json:"attempts"`
	Token         uint64 `json:"token"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
	NextAttemptAt string `json:"next_attempt_at"` // "" unless pending: the contract names it always
	LeaseUntil    string `json:"lease_until,omitempty"`
	ExpiresAt     string `json:"expires_at"`
	LastError     string `json:"last_error"`
	Step          string `json:"step"` // the handler's last Oncehook-Step
	// OrderObject and OrderTime: on a source with order, the object the
	// event belongs to (source:id) and its order time. A stale event was
	// older than the newest event of its object at its claim.
	OrderObject string            `json:"order_object,omitempty"`
	OrderTime   string            `json:"order_time,omitempty"`
	Audit       []auditJSON       `json:"audit"`
	Headers     map[string]string `json:"headers,omitempty"`
	Response    *responseJSON     `json:"response,omitempty"`
	Payload     *string           `json:"payload,omitempty"`
	// PayloadBase64 holds a payload that is not UTF-8 (a binary body, a
	// Latin-1 text), in place of Payload: a JSON string would replace its
	// bytes with U+FFFD.
	PayloadBase64 *string `json:"payload_base64,omitempty"`
	// PayloadDropped: asked for the body, the event has none any more: it
	// was dropped (with its headers) after its source's payload_retention.
	PayloadDropped bool `json:"payload_dropped,omitempty"`

	// History is the last failed attempts, oldest first; GET /v1/events/{key}
	// only (a list leaves it out).
	History *[]attemptJSON `json:"attempts_history,omitempty"`
}

type auditJSON struct {
	At     string `json:"at"`
	Who    string `json:"who"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	From   string `json:"from"`
}

// attemptJSON is one failed attempt: the handler's status (0: no answer),
// the error, and the first bytes of its answer.
type attemptJSON struct {
	At         string  `json:"at"`
	DurationMS float64 `json:"duration_ms"`
	Status     int     `json:"status"`
	Error      string  `json:"error"`
	Body       string  `json:"body"`
}

type responseJSON struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

func ts(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

func toEventJSON(ev engine.Event, withBody bool) Event {
	j := Event{
		Key: ev.Key, Source: ev.Source, State: ev.State.String(), Attempts: ev.Attempts, Token: ev.Token,
		CreatedAt: ts(ev.CreatedAt), UpdatedAt: ts(ev.UpdatedAt), ExpiresAt: ts(ev.ExpiresAt),
		LastError: ev.LastError, Step: ev.Step, Audit: []auditJSON{},
	}
	if ev.OrderObject != "" {
		j.OrderObject, j.OrderTime = ev.OrderObject, ts(ev.OrderTime)
	}
	if len(ev.History) > 0 {
		h := make([]attemptJSON, 0, len(ev.History))
		for _, a := range ev.History {
			h = append(h, attemptJSON{At: ts(a.At), DurationMS: float64(a.Took) / 1e6,
				Status: a.Status, Error: a.Error, Body: string(a.Body)})
		}
		j.History = &h
	}
	if ev.State == engine.StatePending {
		j.NextAttemptAt = ts(ev.NextAttemptAt)
	}
	if ev.State == engine.StateProcessing {
		j.LeaseUntil = ts(ev.LeaseUntil)
	}
	for _, a := range ev.Audit {
		j.Audit = append(j.Audit, auditJSON{At: ts(a.At), Who: a.Who, Action: a.Action, Reason: a.Reason, From: a.From.String()})
	}
	if withBody {
		if len(ev.Headers) > 0 {
			j.Headers = make(map[string]string, len(ev.Headers))
			for _, h := range ev.Headers {
				j.Headers[h.Name] = h.Value
			}
		}
		if ev.Response != nil {
			j.Response = &responseJSON{Status: ev.Response.Status, Body: string(ev.Response.Body)}
		}
		j.PayloadDropped = ev.Payload == nil
		if ev.Payload != nil {
			if utf8.Valid(ev.Payload) {
				p := string(ev.Payload)
				j.Payload = &p
			} else {
				p := base64.StdEncoding.EncodeToString(ev.Payload)
				j.PayloadBase64 = &p
			}
		}
	}
	return j
}

func (s *Server) adminEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := engine.ListFilter{Source: q.Get("source"), Limit: engine.DefaultListLimit}
	if s := q.Get("state"); s != "" {
		st, ok := engine.ParseState(s)
		if !ok {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("unknown state %q (pending|processing|done|dead|stale)", s))
			return
		}
		f.State = st
	}
	if l := q.Get("limit"); l != "" {
		v, err := strconv.Atoi(l)
		if errors.Is(err, strconv.ErrRange) && l[0] != '-' {
			v, err = engine.MaxListLimit, nil // beyond int: served as the largest page, like any other
		}
		if err != nil || v < 1 {
			// Not "1..1000": a larger limit is not refused (below), and the
			// message must not say it is.
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("limit must be a whole number from 1 (a page holds at most %d events; a larger limit is served as %d, with \"next\")", engine.MaxListLimit, engine.MaxListLimit))
			return
		}
		// A larger page is served as the largest one, with "next" to go on:
		// not refused, so that a client asking for "everything" in one
		// large page (oncehook events -limit 5000, scripts) still walks it
		// all by "next" (docs/reference.md).
		f.Limit = min(v, engine.MaxListLimit)
	}
	if err := parseCursor(q.Get("after"), &f); err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.refuseUnknownSource(w, f.Source) {
		return
	}
	evs, err := s.store.List(f)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	out := struct {
		Events []Event `json:"events"`
		Next   string  `json:"next,omitempty"`
	}{Events: []Event{}}
	for _, ev := range evs {
		out.Events = append(out.Events, toEventJSON(ev, false))
	}
	if len(evs) == f.Limit {
		out.Next = cursorAfter(f.State, evs[len(evs)-1])
	}
	writeJSON(w, http.StatusOK, out)
}

// cursorAfter is the "next" value of a page ending with ev. Without a state
// filter events are listed by key, so the key is the cursor; with one they
// are listed by (updated_at, key), and the cursor carries both as
// "<unix nanoseconds>:<key>".
func cursorAfter(st engine.State, ev engine.Event) string {
	if st == 0 {
		return ev.Key
	}
	return strconv.FormatInt(ev.UpdatedAt, 10) + ":" + ev.Key
}

// parseCursor reads an "after" value written by cursorAfter into f.
func parseCursor(after string, f *engine.ListFilter) error {
	if after == "" || f.State == 0 {
		f.After = after
		return nil
	}
	ts, key, ok := strings.Cut(after, ":")
	t, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil || key == "" {
		return fmt.Errorf("after %q: with state, pass the \"next\" value of the previous page (<unix nanoseconds>:<key>)", after)
	}
	f.After, f.AfterTime = key, t
	return nil
}

// unscoped says, for a key not found that names no source, how keys are
// written: an operator copies the provider's event id first. The example
// names a source of the running config (the first), when it has one.
func (s *Server) unscoped(key string) string {
	if strings.Contains(key, ":") {
		return ""
	}
	if s.cfg == nil {
		return ": keys are scoped by their source, SOURCE:ID, as intake answers them"
	}
	src := "SOURCE"
	if c := s.cfg(); c != nil && len(c.Sources) > 0 {
		src = c.Sources[0].Name
	}
	return ": keys are scoped by their source, SOURCE:ID (e.g. " + strconv.Quote(src+":"+key) + "), as intake answers them"
}

func (s *Server) adminEvent(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	withBody := r.URL.Query().Get("body") == "1" || r.URL.Query().Get("body") == "true"
	ev, err := s.store.Get(key, withBody)
	if errors.Is(err, engine.ErrNotFound) {
		jsonError(w, http.StatusNotFound, "no event with key "+strconv.Quote(key)+s.unscoped(key))
		return
	}
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	j := toEventJSON(ev, withBody)
	if j.History == nil {
		j.History = &[]attemptJSON{} // one event: always there, empty when no attempt failed
	}
	writeJSON(w, http.StatusOK, j)
}

// ReplayRequest is the body of POST /v1/replay.
type ReplayRequest struct {
	Source string   `json:"source"`
	Keys   []string `json:"keys"`
	State  string   `json:"state"`
	Since  string   `json:"since"` // RFC3339 time, or a duration back from now ("24h")
	Reason string   `json:"reason"`
	DryRun bool     `json:"dry_run"`
}

func (s *Server) adminReplay(w http.ResponseWriter, r *http.Request) {
	var req ReplayRequest
	if err := decodeRequest(w, r, 1<<20, &req); err != nil {
		refuseRequest(w, "bad replay request: "+err.Error(), err)
		return
	}
	if msg := reasonProblem(req.Reason); msg != "" {
		jsonError(w, http.StatusBadRequest, msg)
		return
	}
	cmd := engine.Command{Op: engine.OpReplay, Who: r.Context().Value(whoKey).(string), Reason: req.Reason, Source: req.Source}
	switch {
	case len(req.Keys) > 0 && req.State != "":
		jsonError(w, http.StatusBadRequest, "give keys or state, not both")
		return
	case len(req.Keys) > 0 && (req.Source != "" || req.Since != ""):
		// They would be ignored: what the body says must be what runs.
		jsonError(w, http.StatusBadRequest, "source and since go with state; a replay of keys takes each key as given")
		return
	case len(req.Keys) > 0:
		cmd.Keys = req.Keys
	case req.State != "":
		st, ok := engine.ParseState(req.State)
		if !ok || !engine.Replayable(st) {
			jsonError(w, http.StatusBadRequest, "state must be dead, done or stale")
			return
		}
		cmd.State = st
		if req.Since != "" {
			since, err := ParseSince(req.Since)
			if err != nil {
				jsonError(w, http.StatusBadRequest, err.Error())
				return
			}
			cmd.Since = since
		}
	default:
		jsonError(w, http.StatusBadRequest, "scope required: keys, or state (+ source, since)")
		return
	}
	if s.refuseUnknownSource(w, req.Source) {
		return
	}
	if req.DryRun {
		plan, err := s.replayPlan(cmd)
		if err != nil {
			jsonError(w, http.StatusInternalServerError, err.Error())
			return
		}
		out := map[string]any{"dry_run": true, "would_replay": len(plan.keys), "keys": nonNil(plan.keys)}
		addSkipped(out, plan.skipped, len(cmd.Keys) == 0)
		writeJSON(w, http.StatusOK, out)
		return
	}
	if len(cmd.Keys) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
		defer cancel()
		s.replayKeys(ctx, w, cmd)
		return
	}
	// One command per replayBatch entries, the plan read first, all within
	// the CLI's 60 s wait for an answer, so that it reads a replay cut short
	// as such (and does not cancel it by hanging up).
	ctx, cancel := context.WithTimeout(r.Context(), 50*time.Second)
	defer cancel()
	s.replayState(ctx, w, cmd)
}

// ReplaySkip is a key that POST /v1/replay did not replay, and why.
type ReplaySkip struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// Why a key is not replayed, in "skipped" (the same words for a dry run).
const (
	skipNotFound  = "not found"
	skipBadKey    = "not a valid key"
	skipNoPayload = "its payload was dropped after its source's payload_retention; there is nothing to deliver again"
	skipUnknown   = "outcome unknown, it may have been replayed (see its history: oncehook events show KEY, before replaying it again): "
)

func skipWrongState(st engine.State) string {
	return fmt.Sprintf("event is %s: only dead, done and stale events are replayed", st)
}

// maxReplaySkipped bounds the events a replay by state names in "skipped"
// (the first by key); "skipped_count" counts them all. A replay of keys
// names every key it skipped: the request bounds them.
const maxReplaySkipped = engine.MaxListLimit

// addSkipped adds "skipped" and "skipped_count" to a replay's answer when
// any event was not (or would not be) replayed; bounded, the list is cut to
// maxReplaySkipped.
func addSkipped(out map[string]any, skipped []ReplaySkip, bounded bool) {
	if len(skipped) == 0 {
		return
	}
	out["skipped_count"] = len(skipped)
	if bounded && len(skipped) > maxReplaySkipped {
		skipped = skipped[:maxReplaySkipped]
	}
	out["skipped"] = skipped
}

// replayConcurrency bounds the keys of one request replayed at a time; the
// proposer packs those in flight into shared log entries.
const replayConcurrency = 64

// replayKeys replays each key with a command of its own: the engine says why
// a key was not replayed (not found, not in a replayable state, payload
// dropped) only for a command of one key, and an operator must learn it for
// every key. One key that cannot be replayed is an error status (404, 409);
// among several, the answer is 200 with the replayed keys and the skipped
// ones, each with its reason (the CLI exits 1 when any was skipped).
func (s *Server) replayKeys(ctx context.Context, w http.ResponseWriter, cmd engine.Command) {
	keys := make([]string, 0, len(cmd.Keys))
	seen := make(map[string]bool, len(cmd.Keys))
	for _, k := range cmd.Keys {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	type outcome struct {
		res engine.Result
		err error
	}
	outs := make([]outcome, len(keys))
	sem := make(chan struct{}, replayConcurrency)
	var wg sync.WaitGroup
	for i, k := range keys {
		c := cmd
		c.Keys = []string{k}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			res, err := s.store.Replay(ctx, c)
			outs[i] = outcome{res, err}
		})
	}
	wg.Wait()

	replayed := []string{}
	var skipped []ReplaySkip
	status, clusterErr := 0, error(nil)
	for i, o := range outs {
		k := keys[i]
		switch {
		case o.err == nil && o.res.N > 0:
			replayed = append(replayed, k)
			continue
		case errors.Is(o.err, engine.ErrNotFound):
			status = max(status, http.StatusNotFound)
			skipped = append(skipped, ReplaySkip{k, skipNotFound})
		case errors.Is(o.err, engine.ErrWrongState):
			status = max(status, http.StatusConflict)
			skipped = append(skipped, ReplaySkip{k, skipWrongState(o.res.State)})
		case errors.Is(o.err, engine.ErrNoPayload):
			status = max(status, http.StatusConflict)
			skipped = append(skipped, ReplaySkip{k, skipNoPayload})
		case errors.Is(o.err, engine.ErrBadCommand):
			status = max(status, http.StatusBadRequest)
			skipped = append(skipped, ReplaySkip{k, skipBadKey})
		case errors.Is(o.err, cluster.ErrIndeterminate):
			// The leader changed or the commit timed out while it ran: it
			// may have committed, and a second replay would run the
			// handler again. The answer's error names this one over a
			// plain "no leader", which would invite a retry of every key.
			if clusterErr == nil || !errors.Is(clusterErr, cluster.ErrIndeterminate) {
				clusterErr = o.err
			}
			skipped = append(skipped, ReplaySkip{k, skipUnknown + o.err.Error()})
		case o.err != nil:
			if clusterErr == nil {
				clusterErr = o.err
			}
			skipped = append(skipped, ReplaySkip{k, "not committed: " + o.err.Error()})
		default:
			skipped = append(skipped, ReplaySkip{k, "not replayed"})
		}
	}
	s.log.Info("replay", "keys", len(keys), "replayed", len(replayed), "skipped", len(skipped), "who", cmd.Who, "reason", cmd.Reason)
	switch {
	case len(replayed) == 0 && clusterErr != nil:
		// Nothing known to be committed, for want of a leader (retry), or
		// an outcome unknown (each such key says so).
		writeJSON(w, clusterWriteStatus(clusterErr), map[string]any{"error": clusterErr.Error(), "replayed": 0, "keys": replayed, "skipped": skipped})
	case len(keys) == 1 && len(skipped) == 1:
		if status == 0 {
			status = http.StatusConflict
		}
		msg := fmt.Sprintf("event %s: %s", keys[0], skipped[0].Error)
		if status == http.StatusNotFound {
			msg += s.unscoped(keys[0])
		}
		jsonError(w, status, msg)
	default:
		out := map[string]any{"replayed": len(replayed), "keys": replayed}
		addSkipped(out, skipped, false)
		writeJSON(w, http.StatusOK, out)
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// replayState replays by state with one command, and names in "skipped"
// the events it selected and did not replay: the engine skips, without a
// word, those whose payload was dropped after payload_retention. They are
// read from this node's applied state before the command, with the filter
// the engine applies (replayPlan, as a dry run lists them), and checked
// against the keys it moved: what the plan would replay and the engine did
// not (its payload dropped, or the event moved meanwhile) is named too, from
// a fresh read; what the plan would skip and the engine replayed is not.
// Any skipped event makes `oncehook replay` exit 1.
func (s *Server) replayState(ctx context.Context, w http.ResponseWriter, cmd engine.Command) {
	plan, err := s.replayPlan(cmd)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	// In commands of replayBatch entries of the state's index each, so that
	// a replay of millions does not hold every replica's apply loop (and
	// the claims behind it) for as long as it takes. The first command's
	// time, the leader's, bounds the events the next ones take (an event
	// this replay delivers that dies again is not this replay's). A leader
	// older than format 21 replays them all in the first.
	cmd.Max = replayBatch
	var res engine.Result
	for {
		r, err := s.store.Replay(ctx, cmd)
		if err != nil {
			msg := err.Error()
			if res.N > 0 {
				msg = fmt.Sprintf("replay cut short after %d events were replayed (they are pending now; the same request goes on with the rest): %s", res.N, msg)
			}
			s.log.Warn("replay cut short", "state", cmd.State.String(), "source", cmd.Source, "replayed", res.N, "who", cmd.Who, "err", err)
			status := clusterWriteStatus(err)
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusServiceUnavailable // the same request goes on
			}
			jsonError(w, status, msg)
			return
		}
		res.N += r.N
		res.Keys = append(res.Keys, r.Keys...)
		if !r.More {
			break
		}
		cmd.Since, cmd.Key, cmd.Before = r.AfterTime, r.After, r.Before
	}
	slices.Sort(res.Keys)
	moved := make(map[string]bool, len(res.Keys))
	for _, k := range res.Keys {
		moved[k] = true
	}
	var skipped []ReplaySkip
	for _, sk := range plan.skipped {
		if !moved[sk.Key] {
			skipped = append(skipped, sk)
		}
	}
	for _, k := range plan.keys {
		if !moved[k] {
			skipped = append(skipped, ReplaySkip{k, s.whyNotReplayed(k)})
		}
	}
	slices.SortFunc(skipped, func(a, b ReplaySkip) int { return strings.Compare(a.Key, b.Key) })
	s.log.Info("replay", "state", cmd.State.String(), "source", cmd.Source, "replayed", res.N, "skipped", len(skipped), "who", cmd.Who, "reason", cmd.Reason)
	out := map[string]any{"replayed": res.N, "keys": nonNil(res.Keys)}
	addSkipped(out, skipped, true)
	writeJSON(w, http.StatusOK, out)
}

// replayBatch is the entries of the state's index one command of a replay
// by state visits, as many as an expire's.
const replayBatch = 2000

// replayPlanned is what a replay would do, read from this node's applied
// state: the keys it would move and those it would not, with why.
type replayPlanned struct {
	keys    []string
	skipped []ReplaySkip // every one; the answer bounds them (addSkipped)
}

// replayPlan is what cmd would replay, without replaying it: a dry run's
// answer, and the events a replay by state is expected to skip. A replay of
// keys takes each key once, in the order given, and skips each as the
// engine would refuse it (replayKeys); a replay by state selects the events
// in the state, of the source when given, updated at Since or later, and
// skips those whose payload was dropped. Both lists of a replay by state are
// in key order, as the engine replays them.
func (s *Server) replayPlan(cmd engine.Command) (replayPlanned, error) {
	var p replayPlanned
	if len(cmd.Keys) > 0 {
		seen := make(map[string]bool, len(cmd.Keys))
		for _, k := range cmd.Keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			if k == "" || len(k) > engine.MaxKeyLen {
				p.skipped = append(p.skipped, ReplaySkip{k, skipBadKey})
				continue
			}
			ev, err := s.store.Get(k, false)
			switch {
			case errors.Is(err, engine.ErrNotFound):
				p.skipped = append(p.skipped, ReplaySkip{k, skipNotFound})
				continue
			case err != nil:
				return replayPlanned{}, err
			case !engine.Replayable(ev.State):
				p.skipped = append(p.skipped, ReplaySkip{k, skipWrongState(ev.State)})
				continue
			}
			if gone, err := s.payloadDropped(&ev); err != nil {
				return replayPlanned{}, err
			} else if gone {
				p.skipped = append(p.skipped, ReplaySkip{k, skipNoPayload})
				continue
			}
			p.keys = append(p.keys, k)
		}
		return p, nil
	}
	f := engine.ListFilter{State: cmd.State, Source: cmd.Source, Limit: engine.MaxListLimit}
	for {
		evs, err := s.store.List(f)
		if err != nil {
			return replayPlanned{}, err
		}
		for i := range evs {
			ev := &evs[i]
			if ev.UpdatedAt < cmd.Since {
				continue
			}
			gone, err := s.payloadDropped(ev)
			if err != nil {
				return replayPlanned{}, err
			}
			if gone {
				p.skipped = append(p.skipped, ReplaySkip{ev.Key, skipNoPayload})
			} else {
				p.keys = append(p.keys, ev.Key)
			}
		}
		if len(evs) < f.Limit {
			break
		}
		// With a state the order is (UpdatedAt, Key): the cursor needs both.
		last := evs[len(evs)-1]
		f.After, f.AfterTime = last.Key, last.UpdatedAt
	}
	slices.Sort(p.keys)
	slices.SortFunc(p.skipped, func(a, b ReplaySkip) int { return strings.Compare(a.Key, b.Key) })
	return p, nil
}

// payloadDropped reports whether a replay would skip ev (a replayable
// event) for want of its payload. Only a done event loses it, to
// DropPayloads, which also clears its PayloadDropAt: one with a drop time
// still has its payload, and only one without is read, with its payload.
// An event stored without payload or headers reads the same as one whose
// payload was dropped; such an event was completed without a payload
// retention (an older writer's), so it is due for the drop already.
func (s *Server) payloadDropped(ev *engine.Event) (bool, error) {
	if ev.State != engine.StateDone || ev.PayloadDropAt != 0 {
		return false, nil
	}
	full, err := s.store.Get(ev.Key, true)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return false, nil // deleted since the list: the engine will not see it either
	case err != nil:
		return false, err
	}
	return full.Payload == nil && full.Headers == nil, nil
}

// whyNotReplayed says, from a fresh read, why a replay by state did not
// move an event it was expected to move.
func (s *Server) whyNotReplayed(key string) string {
	ev, err := s.store.Get(key, false)
	switch {
	case errors.Is(err, engine.ErrNotFound):
		return skipNotFound
	case err != nil:
		return "not replayed: " + err.Error()
	case !engine.Replayable(ev.State):
		return skipWrongState(ev.State)
	}
	if gone, err := s.payloadDropped(&ev); err == nil && gone {
		return skipNoPayload
	}
	return "not replayed"
}

// ParseSince reads a replay's since: an RFC 3339 time between 1970 and
// 2262, or a positive duration meaning that long before now. A time ahead
// of now (more than the clock skew purges allow) is refused: it selects
// nothing, and is more likely a mistyped year than meant.
func ParseSince(s string) (int64, error) {
	now := time.Now()
	t, err := parseBound("since", s, now)
	if err != nil {
		return 0, err
	}
	if t.After(now.Add(maxAhead)) {
		return 0, fmt.Errorf("since %q is ahead of this node's clock (%s): it would select nothing; give a past time or a duration back from now",
			s, now.UTC().Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

func (s *Server) adminJoin(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID      string `json:"id"`
		Address string `json:"address"`
	}
	if err := decodeRequest(w, r, 1<<16, &req); err != nil || req.ID == "" || req.Address == "" {
		refuseRequest(w, "join needs JSON {\"id\":..., \"address\":...}", err)
		return
	}
	added, err := s.store.Join(r.Context(), req.ID, req.Address)
	if err != nil {
		status := clusterStatus(err)
		switch {
		case errors.Is(err, cluster.ErrBadMember):
			status = http.StatusBadRequest
		case errors.Is(err, cluster.ErrStandalone):
			status = http.StatusConflict
		}
		jsonError(w, status, err.Error())
		return
	}
	s.log.Info("join", "id", req.ID, "address", req.Address, "added", added, "who", r.Context().Value(whoKey))
	if !added {
		// An operator's retry, or a script run twice: nothing changed,
		// and the answer says so rather than reporting a new voter.
		writeJSON(w, http.StatusOK, map[string]any{"joined": req.ID, "already_member": true})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"joined": req.ID})
}

func (s *Server) adminRemovePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.store.RemovePeer(r.Context(), id); err != nil {
		status := clusterStatus(err)
		switch {
		case errors.Is(err, cluster.ErrNotMember):
			status = http.StatusNotFound
		case errors.Is(err, cluster.ErrNoQuorumLeft):
			status = http.StatusConflict
		}
		jsonError(w, status, err.Error())
		return
	}
	s.log.Info("voter removed", "id", id, "who", r.Context().Value(whoKey))
	writeJSON(w, http.StatusOK, map[string]string{"removed": id})
}

// adminTransferLeadership hands leadership over: JSON {"to": id}, or an
// empty body for whichever voter is most up to date.
func (s *Server) adminTransferLeadership(w http.ResponseWriter, r *http.Request) {
	var req struct {
		To string `json:"to"`
	}
	if err := decodeRequest(w, r, 1<<16, &req); err != nil && !errors.Is(err, errEmptyBody) {
		refuseRequest(w, "transfer needs an empty body or JSON {\"to\": id}", err)
		return
	}
	leader, err := s.store.TransferLeadership(r.Context(), req.To)
	switch {
	case errors.Is(err, cluster.ErrNotVoter):
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	case errors.Is(err, cluster.ErrSingleVoter), errors.Is(err, cluster.ErrBehind), errors.Is(err, cluster.ErrNewerFormat):
		jsonError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		jsonError(w, clusterStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"leader": leader})
}

func clusterStatus(err error) int {
	switch {
	case errors.Is(err, cluster.ErrNotLeader):
		return http.StatusMisdirectedRequest
	case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrIndeterminate), errors.Is(err, cluster.ErrRestoreUnconfirmed),
		errors.Is(err, cluster.ErrRestoreNotBegun), errors.Is(err, cluster.ErrMemberSlow):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// BackupTrailer is the trailer that ends a whole backup stream with its
// length in bytes. The length is not known before the copy starts, so the
// stream is chunked: without the trailer, a backup that failed part way
// would end like a whole one.
const BackupTrailer = "Oncehook-Backup-Bytes"

func (s *Server) adminBackup(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="oncehook-backup.db"`)
	w.Header().Set("Trailer", BackupTrailer)
	// The stream may outlast the server's WriteTimeout; it may not stall.
	sw := &countingWriter{w: streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.timeouts.Stream}}
	n, err := s.store.Backup(sw)
	if err == nil {
		w.Header().Set(BackupTrailer, strconv.FormatInt(n, 10))
		return
	}
	s.log.Error("backup failed", "err", err)
	if sw.n == 0 {
		// Nothing sent yet: the status can still say so.
		w.Header().Del("Content-Disposition")
		w.Header().Del("Trailer")
		jsonError(w, http.StatusInternalServerError, "backup failed: "+err.Error())
		return
	}
	// Part of it went out under a 200: break the stream, so that no client
	// reads a cut backup as a whole one (curl reports the transfer cut short;
	// oncehook snapshot save also wants the trailer).
	panic(http.ErrAbortHandler)
}

// countingWriter counts the bytes written through it. An empty write is
// not passed on: it would send a response's status, and a failure before the
// first byte could no longer be answered 500.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// adminRestore replaces the cluster's state with an uploaded backup (leader
// only). The upload is spooled into data_dir first, at most admin.max_restore
// bytes of it: a larger one is answered 413 and changes nothing.
func (s *Server) adminRestore(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg()
	limit := int64(cfg.Admin.MaxRestore)
	tooLarge := func() {
		jsonError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"backup is larger than admin.max_restore (%s); nothing restored", cfg.Admin.MaxRestore))
	}
	if r.ContentLength > limit {
		tooLarge() // before reading any of it (a client sending Expect: 100-continue sends none)
		return
	}
	// A follower refuses before it spools what would be refused anyway.
	if err := s.store.LeaderOnly(r.Context(), "restore"); err != nil {
		jsonError(w, clusterStatus(err), err.Error())
		return
	}
	rc := http.NewResponseController(w)
	// The upload may outlast the server's ReadTimeout; it may not stall.
	body := streamReader{r: http.MaxBytesReader(w, r.Body, limit), rc: rc, timeout: s.timeouts.Stream}
	f, err := os.CreateTemp(cfg.Node.DataDir, "restore-*.db")
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		tooLarge()
		return
	}
	if err != nil {
		jsonError(w, http.StatusBadRequest, "read backup: "+err.Error())
		return
	}
	if n == 0 {
		jsonError(w, http.StatusBadRequest, "the uploaded backup is empty (0 bytes): nothing restored; `oncehook snapshot save FILE` writes one")
		return
	}
	const restoreTimeout = 5 * time.Minute
	// The answer comes after the restore commits, which may take longer
	// than the server's WriteTimeout; the read deadline also keeps r's
	// context alive meanwhile (see requireToken).
	end := time.Now().Add(restoreTimeout + s.timeouts.Write)
	_ = rc.SetWriteDeadline(end)
	_ = rc.SetReadDeadline(end)
	ctx, cancel := context.WithTimeout(r.Context(), restoreTimeout)
	defer cancel()
	if err := s.store.Restore(ctx, f.Name()); err != nil {
		status := clusterStatus(err)
		if strings.Contains(err.Error(), "not a usable backup") {
			status = http.StatusBadRequest
		}
		// The spooled copy's path says nothing to the operator.
		jsonError(w, status, strings.ReplaceAll(err.Error(), f.Name(), "the uploaded backup"))
		return
	}
	s.log.Warn("cluster state restored from an uploaded backup", "who", r.Context().Value(whoKey))
	writeJSON(w, http.StatusOK, map[string]string{"restored": "ok"})
}
