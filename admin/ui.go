package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"net/url"
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

// The dead-letter page: server-rendered HTML on the admin listener, no
// JavaScript. It lists events by state and source, shows one event (attempts,
// last error, audit trail, headers, body) and replays it with a reason.
//
// Authentication: /ui/login takes an admin token once and opens a server-side
// session; the browser keeps only a random session id in an HttpOnly,
// SameSite=Strict cookie scoped to /ui/. A session remembers the token's name
// and a SHA-256 of the token, so removing or rotating that token on SIGHUP
// ends its sessions. Every /ui route but the login form and the stylesheet
// needs a session. CSRF: SameSite=Strict, plus a per-session form token on
// every POST (a double-submit cookie on the login form, before a session
// exists). html/template escapes everything it prints; a strict
// Content-Security-Policy forbids scripts altogether.

//go:embed web/templates/*.html web/static/*.css
var webFS embed.FS

const (
	uiSessionCookie = "oncehook_session"
	uiLoginCookie   = "oncehook_login"
	uiSessionTTL    = 12 * time.Hour
	uiMaxSessions   = 1024
	uiPageSize      = 50
	uiMaxReason     = 500
	uiMaxBodyShown  = 256 << 10
)

type adminUI struct {
	s     *Server
	pages map[string]*template.Template
	css   []byte

	mu       sync.Mutex
	sessions map[string]*uiSession // by session id
}

type uiSession struct {
	who      string
	tokenSum [32]byte // SHA-256 of the token that opened the session
	csrf     string
	expires  time.Time
	flash    string // shown once on the next page
	flashErr bool
}

func newAdminUI(s *Server) *adminUI {
	funcs := template.FuncMap{"eventURL": EventURL}
	u := &adminUI{s: s, pages: map[string]*template.Template{}, sessions: map[string]*uiSession{}}
	for _, p := range []string{"login", "list", "event", "error"} {
		u.pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", "web/templates/"+p+".html"))
	}
	css, err := fs.ReadFile(webFS, "web/static/style.css")
	if err != nil {
		panic(err) // embedded at build time
	}
	u.css = css
	return u
}

// registerUI adds the /ui/ routes to the admin mux.
func (s *Server) registerUI(mux *http.ServeMux) {
	u := newAdminUI(s)
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /ui/static/style.css", u.style)
	mux.HandleFunc("GET /ui/login", u.loginForm)
	mux.HandleFunc("POST /ui/login", u.login)
	mux.Handle("POST /ui/logout", u.auth(u.logout))
	mux.Handle("GET /ui/{$}", u.auth(u.list))
	mux.Handle("GET /ui/event/{key...}", u.auth(u.event))
	mux.Handle("POST /ui/replay", u.auth(u.replay))
	mux.Handle("POST /ui/sources/pause", u.auth(u.pauseSource))
	mux.Handle("POST /ui/sources/resume", u.auth(u.pauseSource))
	mux.Handle("/ui/", u.auth(func(w http.ResponseWriter, r *http.Request, _ *uiSession) {
		u.fail(w, r, nil, http.StatusNotFound, "Not found", "No page at "+r.URL.Path+".")
	}))
}

// EventURL is the dead-letter page of the event with key.
func EventURL(key string) string { return "/ui/event/" + url.PathEscape(key) }

// securityHeaders go on every /ui answer: no scripts, no framing, no caching,
// no referrer carrying keys to other sites.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (u *adminUI) style(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Write(u.css)
}

// pageData is what every template sees; each page fills its own part.
type pageData struct {
	Title     string
	NodeID    string
	Version   string
	Who       string
	CSRF      string
	Flash     string
	FlashErr  bool
	Refresh   int // seconds; 0: no auto refresh
	MaxReason int
	Message   string
	Login     *loginView
	List      *listView
	Event     *eventView
}

func (u *adminUI) render(w http.ResponseWriter, status int, page string, d *pageData, s *uiSession) {
	d.NodeID = u.s.cfg().Node.ID
	d.Version = u.s.version
	d.MaxReason = uiMaxReason
	if s != nil {
		d.Who, d.CSRF = s.who, s.csrf
		u.mu.Lock()
		d.Flash, d.FlashErr = s.flash, s.flashErr
		s.flash, s.flashErr = "", false
		u.mu.Unlock()
	}
	var buf bytes.Buffer
	if err := u.pages[page].ExecuteTemplate(&buf, "layout", d); err != nil {
		u.s.log.Error("admin ui: render", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	securityHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (u *adminUI) fail(w http.ResponseWriter, r *http.Request, s *uiSession, status int, title, msg string) {
	u.render(w, status, "error", &pageData{Title: title, Message: msg}, s)
}

// --- sessions ---------------------------------------------------------------

func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// session returns the live session the request's cookie names, or nil.
func (u *adminUI) session(r *http.Request) *uiSession {
	c, err := r.Cookie(uiSessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	u.mu.Lock()
	s := u.sessions[c.Value]
	if s != nil && u.s.now().After(s.expires) {
		delete(u.sessions, c.Value)
		s = nil
	}
	u.mu.Unlock()
	if s == nil {
		return nil
	}
	// The token that opened the session must still be configured, unchanged.
	for _, t := range u.s.cfg().Admin.Tokens {
		if t.Name == s.who {
			sum := sha256.Sum256(t.Token)
			if subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1 {
				return s
			}
		}
	}
	u.mu.Lock()
	delete(u.sessions, c.Value)
	u.mu.Unlock()
	return nil
}

type uiHandler func(w http.ResponseWriter, r *http.Request, s *uiSession)

// uiQuery are the query parameters a /ui page reads (the events list's).
var uiQuery = []string{"state", "source", "after", "after_time"}

// loginNext is where the login form sends a GET without a session after
// sign-in: its path and the query parameters a page reads, nothing else, so
// that a token pasted into the address (?token=...) is not carried into the
// redirect, the browser's history or a proxy's log.
func loginNext(u *url.URL) string {
	q := u.Query()
	kept := url.Values{}
	for _, name := range uiQuery {
		if v, ok := q[name]; ok {
			kept[name] = v
		}
	}
	next := u.EscapedPath()
	if len(kept) > 0 {
		next += "?" + kept.Encode()
	}
	return next
}

// auth sends a request without a session to the login form (remembering
// where it was going, for a GET), and checks the form token on every POST.
func (u *adminUI) auth(h uiHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := u.session(r)
		if s == nil {
			target := "/ui/login"
			if r.Method == http.MethodGet {
				target += "?next=" + url.QueryEscape(loginNext(r.URL))
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			if problem, status := readUIForm(w, r, uiFormLimit); problem != "" {
				closeAfter(w)
				u.fail(w, r, s, status, "Form refused", problem)
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				u.fail(w, r, s, http.StatusForbidden, "Form expired", "The form's token does not match this session. Reload the page and try again.")
				return
			}
		}
		h(w, r, s)
	})
}

// The forms' own fields are short (a token, a key, a reason of at most
// uiMaxReason); the limits only keep a stranger's body out of memory.
const (
	uiFormLimit      = 64 << 10
	uiLoginFormLimit = 16 << 10
)

// readUIForm parses a POSTed form within limit bytes. It says what is wrong
// (and the status to answer) when the body is too large or not a form, so
// that such a post is not mistaken for an expired form.
func readUIForm(w http.ResponseWriter, r *http.Request, limit int64) (problem string, status int) {
	// ParseForm reads nothing from a body of another type and says
	// nothing of it: the missing fields would read as an expired form.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return "The form was not sent URL-encoded (Content-Type application/x-www-form-urlencoded); nothing was changed.", http.StatusBadRequest
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	err := r.ParseForm()
	if err == nil {
		return "", 0
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return fmt.Sprintf("The form is larger than this page accepts (%d KiB); nothing was changed.", limit>>10), http.StatusRequestEntityTooLarge
	}
	return "The form could not be read as a URL-encoded form; nothing was changed.", http.StatusBadRequest
}

// safeNext keeps a post-login redirect on this site's /ui/ pages: a path
// only (no scheme, host or "//"), under /ui/ also once its dot segments are
// resolved as a browser resolves them (the escaped ones too:
// /ui/%2e%2e/x), and without a control byte, a backslash, or one of either
// escaped.
func safeNext(next string) string {
	const home = "/ui/"
	if !strings.HasPrefix(next, home) || strings.HasPrefix(next, "//") {
		return home
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return home
	}
	for _, s := range []string{next, u.Path, u.RawQuery} {
		if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
			return home
		}
	}
	if q, err := url.QueryUnescape(u.RawQuery); err != nil || strings.ContainsFunc(q, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return home
	}
	if clean := path.Clean(u.Path); clean != "/ui" && !strings.HasPrefix(clean, home) {
		return home
	}
	return next
}

type loginView struct{ CSRF, Next string }

func (u *adminUI) loginForm(w http.ResponseWriter, r *http.Request) {
	if u.session(r) != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	u.showLogin(w, r, http.StatusOK, safeNext(r.URL.Query().Get("next")), "")
}

func (u *adminUI) showLogin(w http.ResponseWriter, r *http.Request, status int, next, problem string) {
	csrf := randomToken()
	http.SetCookie(w, &http.Cookie{Name: uiLoginCookie, Value: csrf, Path: "/ui/login", MaxAge: 600,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	d := &pageData{Title: "Sign in", Login: &loginView{CSRF: csrf, Next: next}, Flash: problem, FlashErr: problem != ""}
	u.render(w, status, "login", d, nil)
}

// login opens a session for a configured admin token. Wrong tokens count
// against the client like wrong bearer tokens do (authlimit.go): while it
// must wait, the form is answered 429 with Retry-After and no token is
// looked at.
func (u *adminUI) login(w http.ResponseWriter, r *http.Request) {
	if problem, status := readUIForm(w, r, uiLoginFormLimit); problem != "" {
		closeAfter(w)
		u.showLogin(w, r, status, "/ui/", problem)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	client := authKey(r.RemoteAddr)
	if d := u.s.authLimit.wait(client); d > 0 {
		secs := retryAfter(d)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		closeAfter(w)
		u.showLogin(w, r, http.StatusTooManyRequests, next,
			fmt.Sprintf("Too many failed sign-ins from your address; try again in %d seconds.", secs))
		return
	}
	c, err := r.Cookie(uiLoginCookie)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf"))) != 1 {
		u.showLogin(w, r, http.StatusForbidden, next, "The sign-in form expired; please try again.")
		return
	}
	tokens := u.s.cfg().Admin.Tokens
	i := matchToken(tokens, []byte(strings.TrimSpace(r.PostFormValue("token"))))
	if i < 0 {
		u.s.log.Warn("admin ui: sign-in refused", "remote", r.RemoteAddr)
		u.s.authFailed(r, client, "admin ui")
		msg := "That token is not one of [admin] tokens."
		if len(tokens) == 0 {
			msg = "No admin tokens are configured ([admin] tokens)."
		}
		closeAfter(w)
		u.showLogin(w, r, http.StatusUnauthorized, next, msg)
		return
	}
	u.s.authLimit.success(client)
	who, sum := tokens[i].Name, sha256.Sum256(tokens[i].Token)
	id := randomToken()
	now := u.s.now()
	u.mu.Lock()
	if len(u.sessions) >= uiMaxSessions {
		for k, s := range u.sessions {
			if now.After(s.expires) {
				delete(u.sessions, k)
			}
		}
		for k := range u.sessions { // still full: drop an arbitrary one
			if len(u.sessions) < uiMaxSessions {
				break
			}
			delete(u.sessions, k)
		}
	}
	u.sessions[id] = &uiSession{who: who, tokenSum: sum, csrf: randomToken(), expires: now.Add(uiSessionTTL)}
	u.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: uiLoginCookie, Value: "", Path: "/ui/login", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.SetCookie(w, &http.Cookie{Name: uiSessionCookie, Value: id, Path: "/ui/", MaxAge: int(uiSessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	u.s.log.Info("admin ui: signed in", "who", who, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *adminUI) logout(w http.ResponseWriter, r *http.Request, s *uiSession) {
	u.mu.Lock()
	for k, v := range u.sessions {
		if v == s {
			delete(u.sessions, k)
		}
	}
	u.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: uiSessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// --- the list ---------------------------------------------------------------

type listView struct {
	State, Source string
	States        []tabView
	Sources       []tabView
	Paused        []sourceRow // every configured source, paused or not
	Back          string      // this page, where the pause forms return
	Events        []eventRow
	Next          string
}

type tabView struct {
	Name    string
	Count   int
	Current bool
	URL     string
}

// sourceRow is one configured source in the list page's pause table.
type sourceRow struct {
	Name, Since, SinceAgo, By, Reason string
	Paused                            bool
	Backlog                           int
}

type eventRow struct {
	Key, Source, State, UpdatedAt, UpdatedAgo, LastError string
	Attempts                                             uint32
}

func (u *adminUI) list(w http.ResponseWriter, r *http.Request, s *uiSession) {
	q := r.URL.Query()
	want := q.Get("state")
	if want == "" {
		want = "dead"
	}
	st, ok := engine.ParseState(want)
	if !ok {
		u.fail(w, r, s, http.StatusBadRequest, "Unknown state", fmt.Sprintf("Unknown state %q: pending, processing, done, dead or stale.", want))
		return
	}
	source := q.Get("source")
	f := engine.ListFilter{State: st, Source: source, After: q.Get("after"), Limit: uiPageSize}
	if at := q.Get("after_time"); at != "" {
		f.AfterTime, _ = strconv.ParseInt(at, 10, 64)
	}
	byState, bySource, err := u.s.store.Counts()
	if err != nil {
		u.fail(w, r, s, http.StatusInternalServerError, "Storage error", err.Error())
		return
	}
	if source != "" && !u.s.configuredSource(source) && bySource[source] == 0 {
		// As the API answers: a typo must not read as a source with no events.
		u.fail(w, r, s, http.StatusNotFound, "Unknown source", fmt.Sprintf("Unknown source %q: not configured and no events stored.", source))
		return
	}
	evs, err := u.s.store.List(f)
	if err != nil {
		u.fail(w, r, s, http.StatusInternalServerError, "Storage error", err.Error())
		return
	}
	v := &listView{State: st.String(), Source: source}
	for _, es := range engine.States {
		name := es.String()
		v.States = append(v.States, tabView{Name: name, Count: byState[es], Current: es == st, URL: listURL(name, source, "", 0)})
	}
	// Sources: the configured ones plus any that still have events stored.
	names := map[string]bool{}
	for _, src := range u.s.cfg().Sources {
		names[src.Name] = true
	}
	for name := range bySource {
		names[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		v.Sources = append(v.Sources, tabView{Name: name, Count: bySource[name], Current: name == source})
	}
	now := time.Now()
	ss, err := u.s.sourceStatus()
	if err != nil {
		u.fail(w, r, s, http.StatusInternalServerError, "Storage error", err.Error())
		return
	}
	for _, src := range u.s.cfg().Sources {
		p := ss.paused[src.Name]
		v.Paused = append(v.Paused, sourceRow{Name: src.Name, Paused: p.Paused, Since: ts(p.Since), SinceAgo: ago(now, p.Since),
			By: p.Who, Reason: p.Reason, Backlog: ss.backlog[src.Name].Pending})
	}
	v.Back = r.URL.RequestURI()
	for _, ev := range evs {
		v.Events = append(v.Events, eventRow{Key: ev.Key, Source: ev.Source, State: ev.State.String(), Attempts: ev.Attempts,
			UpdatedAt: ts(ev.UpdatedAt), UpdatedAgo: ago(now, ev.UpdatedAt), LastError: shorten(ev.LastError, 160)})
	}
	if len(evs) == uiPageSize {
		last := evs[len(evs)-1]
		v.Next = listURL(v.State, source, last.Key, last.UpdatedAt)
	}
	u.render(w, http.StatusOK, "list", &pageData{Title: v.State + " events", List: v}, s)
}

func listURL(state, source, after string, afterTime int64) string {
	q := url.Values{"state": {state}}
	if source != "" {
		q.Set("source", source)
	}
	if after != "" {
		q.Set("after", after)
		q.Set("after_time", strconv.FormatInt(afterTime, 10))
	}
	return "/ui/?" + q.Encode()
}

func ago(now time.Time, ns int64) string {
	if ns == 0 {
		return ""
	}
	d := now.Sub(time.Unix(0, ns))
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return d.Truncate(time.Second).String() + " ago"
	case d < 48*time.Hour:
		return d.Truncate(time.Minute).String() + " ago"
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// --- one event --------------------------------------------------------------

type eventView struct {
	Event
	UpdatedAgo string
	Replayable bool
	HasPayload bool
	Body       string
	BodyNote   string
	Headers    []engine.Header
}

func (u *adminUI) event(w http.ResponseWriter, r *http.Request, s *uiSession) {
	key := r.PathValue("key")
	ev, err := u.s.store.Get(key, true)
	if errors.Is(err, engine.ErrNotFound) {
		u.fail(w, r, s, http.StatusNotFound, "No such event", "No event with key "+strconv.Quote(key)+" (it may have expired).")
		return
	}
	if err != nil {
		u.fail(w, r, s, http.StatusInternalServerError, "Storage error", err.Error())
		return
	}
	v := &eventView{Event: toEventJSON(ev, false), UpdatedAgo: ago(time.Now(), ev.UpdatedAt),
		Replayable: ev.State == engine.StateDead || ev.State == engine.StateDone || ev.State == engine.StateStale,
		HasPayload: ev.Payload != nil, Headers: ev.Headers}
	if ev.Response != nil {
		v.Response = &responseJSON{Status: ev.Response.Status, Body: showBody(ev.Response.Body)}
	}
	if v.HasPayload {
		v.Body = showBody(ev.Payload)
		v.BodyNote = fmt.Sprintf("%d bytes as received", len(ev.Payload))
		if len(ev.Payload) > uiMaxBodyShown {
			v.BodyNote += fmt.Sprintf("; the first %d shown (oncehook events show -body prints it whole: as text, or as payload_base64 when it is not UTF-8)", uiMaxBodyShown)
		} else if json.Valid(ev.Payload) {
			v.BodyNote += "; JSON, indented here"
		}
	}
	d := &pageData{Title: ev.Key, Event: v}
	if ev.State == engine.StatePending || ev.State == engine.StateProcessing {
		d.Refresh = 2
	}
	u.render(w, http.StatusOK, "event", d, s)
}

// showBody makes a stored body readable: JSON indented, other UTF-8 text as
// is, anything else Go-quoted. html/template escapes the result.
func showBody(b []byte) string {
	if len(b) > uiMaxBodyShown {
		b = b[:uiMaxBodyShown]
	}
	if json.Valid(b) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return out.String()
		}
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return strconv.QuoteToGraphic(string(b))
}

// replay moves one event back to pending through the same Raft command as
// POST /v1/replay, with the session's token name as who.
func (u *adminUI) replay(w http.ResponseWriter, r *http.Request, s *uiSession) {
	key := r.PostFormValue("key")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	back := EventURL(key)
	flash := func(msg string, isErr bool) {
		u.mu.Lock()
		s.flash, s.flashErr = msg, isErr
		u.mu.Unlock()
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
	switch {
	case key == "":
		u.fail(w, r, s, http.StatusBadRequest, "No event", "The replay form named no event.")
		return
	case reason == "":
		flash("Not replayed: a reason is required.", true)
		return
	case utf8.RuneCountInString(reason) > uiMaxReason:
		flash(fmt.Sprintf("Not replayed: the reason is longer than %d characters.", uiMaxReason), true)
		return
	case len(reason) > engine.MaxTextLen:
		// Characters outside ASCII take up to 4 bytes: 500 of them can pass
		// the count above and still be cut by the audit.
		flash(fmt.Sprintf("Not replayed: the reason is %d bytes; at most %d are kept.", len(reason), engine.MaxTextLen), true)
		return
	}
	cmd := engine.Command{Op: engine.OpReplay, Who: s.who, Reason: reason, Keys: []string{key}}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	res, err := u.s.store.Replay(ctx, cmd)
	switch {
	case errors.Is(err, engine.ErrWrongState):
		flash("Not replayed: only dead, done or stale events can be replayed.", true)
	case errors.Is(err, engine.ErrNotFound):
		flash("Not replayed: the event no longer exists.", true)
	case errors.Is(err, cluster.ErrIndeterminate):
		// It may have committed: a second click would run the handler again.
		flash("Outcome unknown: the event may have been replayed; look at its history below before replaying it again ("+err.Error()+").", true)
	case err != nil:
		flash("Not replayed: "+err.Error(), true)
	case res.N == 0:
		flash("Not replayed: the event was not in a replayable state.", true)
	default:
		u.s.log.Info("admin ui: replay", "who", s.who, "key", key)
		flash("Replayed: the event is pending and will be delivered again.", false)
	}
}

// pauseSource pauses or resumes one configured source (the path says
// which) through the same Raft command as POST /v1/sources/{name}/pause,
// with the session's token name as who, and returns to the list.
func (u *adminUI) pauseSource(w http.ResponseWriter, r *http.Request, s *uiSession) {
	pause := strings.HasSuffix(r.URL.Path, "/pause")
	verb := "resumed"
	if pause {
		verb = "paused"
	}
	name := r.PostFormValue("source")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	back := safeNext(r.PostFormValue("back"))
	flash := func(msg string, isErr bool) {
		u.mu.Lock()
		s.flash, s.flashErr = msg, isErr
		u.mu.Unlock()
		http.Redirect(w, r, back, http.StatusSeeOther)
	}
	switch {
	case !u.s.configuredSource(name):
		u.fail(w, r, s, http.StatusNotFound, "Unknown source", fmt.Sprintf("No source %q in the running configuration.", name))
		return
	case reason == "":
		flash("Not "+verb+": a reason is required.", true)
		return
	case utf8.RuneCountInString(reason) > uiMaxReason:
		flash(fmt.Sprintf("Not %s: the reason is longer than %d characters.", verb, uiMaxReason), true)
		return
	case len(reason) > engine.MaxTextLen:
		flash(fmt.Sprintf("Not %s: the reason is %d bytes; at most %d are kept.", verb, len(reason), engine.MaxTextLen), true)
		return
	}
	changed, err := u.s.setPaused(r.Context(), name, s.who, reason, pause)
	switch {
	case errors.Is(err, cluster.ErrIndeterminate):
		flash(fmt.Sprintf("Outcome unknown: %s may have been %s; the sources table shows which (%s).", name, verb, err), true)
	case err != nil:
		flash("Not "+verb+": "+err.Error(), true)
	case !changed:
		flash(fmt.Sprintf("%s was already %s.", name, verb), false)
	default:
		u.s.log.Info("admin ui: "+strings.TrimSuffix(verb, "d"), "who", s.who, "source", name)
		if pause {
			flash(name+" is paused: its events are accepted and held, not delivered, until it is resumed.", false)
		} else {
			flash(name+" is resumed: its held events go out, oldest first.", false)
		}
	}
}
