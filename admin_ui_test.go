package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"oncehook/admin"
	"oncehook/engine"
)

// uiClient is a browser stand-in for the /ui/ pages: it keeps cookies and
// does not follow redirects, so tests see each 303.
// The dead-letter page's cookies, as a browser sees them.
const (
	uiSessionCookie = "oncehook_session"
	uiLoginCookie   = "oncehook_login"
)

type uiClient struct {
	t    *testing.T
	tn   *testNode
	c    *http.Client
	csrf string // the session's form token, once signed in
}

func newUIClient(t *testing.T, tn *testNode) *uiClient {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	return &uiClient{t: t, tn: tn, c: c}
}

type uiAnswer struct {
	status int
	body   string
	header http.Header
}

func (u *uiClient) do(req *http.Request) uiAnswer {
	u.t.Helper()
	resp, err := u.c.Do(req)
	if err != nil {
		u.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return uiAnswer{resp.StatusCode, string(b), resp.Header}
}

func (u *uiClient) get(path string) uiAnswer {
	u.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u.tn.admin+path, nil)
	return u.do(req)
}

func (u *uiClient) post(path string, form url.Values) uiAnswer {
	u.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u.tn.admin+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return u.do(req)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func formToken(t *testing.T, html string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no form token in page:\n%s", html)
	}
	return m[1]
}

// login signs in through the form and returns the answer to the POST.
func (u *uiClient) login(token string) uiAnswer {
	u.t.Helper()
	form := u.get("/ui/login")
	if form.status != http.StatusOK {
		u.t.Fatalf("login form: %d", form.status)
	}
	a := u.post("/ui/login", url.Values{"csrf": {formToken(u.t, form.body)}, "token": {token}, "next": {"/ui/"}})
	if a.status == http.StatusSeeOther {
		page := u.get("/ui/")
		u.csrf = formToken(u.t, page.body)
	}
	return a
}

// deadEvent makes the orders handler fail until the event with id is dead.
func deadEvent(t *testing.T, tn *testNode, h *handler, id string, body []byte) string {
	t.Helper()
	h.setAnswer(func(delivery) (int, string) { return 500, "handler down" })
	if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	key := "orders:" + id
	tn.waitState(key, engine.StateDead)
	return key
}

func TestUIPagesNeedASession(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	key := deadEvent(t, tn, h, "msg_ui_auth", orderBody("evt_ui_auth", "obj_ui_auth", 1))
	u := newUIClient(t, tn)
	for _, p := range []string{"/ui/", "/ui/?state=done", "/ui/event/" + key, "/ui/nope"} {
		a := u.get(p)
		if a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "/ui/login?next=") {
			t.Fatalf("GET %s without a session: %d %q, want 303 to the login form", p, a.status, a.header.Get("Location"))
		}
	}
	// The login form remembers the page and its filters, never a token
	// pasted into the address.
	for p, want := range map[string]string{
		"/ui/?state=done&source=orders&token=" + tn.token:      "/ui/?source=orders&state=done",
		"/ui/event/" + url.PathEscape(key) + "?access_token=x": "/ui/event/" + url.PathEscape(key),
	} {
		loc := u.get(p).header.Get("Location")
		if strings.Contains(loc, tn.token) || loc != "/ui/login?next="+url.QueryEscape(want) {
			t.Errorf("GET %s without a session: Location %q, want next=%s", p, loc, want)
		}
	}
	// A bearer token is for the JSON API; the pages want a session.
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/ui/", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	if a := u.do(req); a.status != http.StatusSeeOther {
		t.Fatalf("GET /ui/ with a bearer token: %d, want 303", a.status)
	}
	// A forged session cookie is no session.
	req, _ = http.NewRequest(http.MethodGet, tn.admin+"/ui/", nil)
	req.AddCookie(&http.Cookie{Name: uiSessionCookie, Value: "forged"})
	if a := u.do(req); a.status != http.StatusSeeOther {
		t.Fatalf("GET /ui/ with a forged cookie: %d, want 303", a.status)
	}
	for _, p := range []string{"/ui/replay", "/ui/logout"} {
		a := u.post(p, url.Values{"key": {key}, "reason": {"x"}, "csrf": {"x"}})
		if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/login" {
			t.Fatalf("POST %s without a session: %d %q", p, a.status, a.header.Get("Location"))
		}
	}
	if ev, _ := tn.event(key); ev.State != engine.StateDead {
		t.Fatalf("a POST without a session moved the event to %s", ev.State.String())
	}
	// The login form and the stylesheet are open.
	for _, p := range []string{"/ui/login", "/ui/static/style.css"} {
		if a := u.get(p); a.status != http.StatusOK {
			t.Fatalf("GET %s: %d", p, a.status)
		}
	}
}

func TestUILoginSetsASafeSessionCookie(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	u := newUIClient(t, tn)

	form := u.get("/ui/login?next=" + url.QueryEscape("/ui/?state=done"))
	if form.status != http.StatusOK || !strings.Contains(form.body, `id="token"`) {
		t.Fatalf("login form: %d", form.status)
	}
	if csp := form.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	csrf := formToken(t, form.body)

	// Without the login form's token: refused even with the right admin token.
	other := newUIClient(t, tn)
	if a := other.post("/ui/login", url.Values{"csrf": {csrf}, "token": {tn.token}}); a.status != http.StatusForbidden {
		t.Fatalf("login without the form cookie: %d, want 403", a.status)
	}
	// An empty form cookie matches no form token, an empty one included.
	empty, _ := http.NewRequest(http.MethodPost, tn.admin+"/ui/login", strings.NewReader(url.Values{"csrf": {""}, "token": {tn.token}}.Encode()))
	empty.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	empty.AddCookie(&http.Cookie{Name: uiLoginCookie, Value: ""})
	if a := newUIClient(t, tn).do(empty); a.status != http.StatusForbidden || hasCookie(a, uiSessionCookie) {
		t.Fatalf("login with an empty form cookie and field: %d, want 403", a.status)
	}
	// A wrong token.
	if a := u.post("/ui/login", url.Values{"csrf": {csrf}, "token": {tn.token + "x"}}); a.status != http.StatusUnauthorized || hasCookie(a, uiSessionCookie) {
		t.Fatalf("login with a wrong token: %d, session cookie %v", a.status, hasCookie(a, uiSessionCookie))
	}
	form = u.get("/ui/login")
	a := u.post("/ui/login", url.Values{"csrf": {formToken(t, form.body)}, "token": {tn.token}, "next": {"/ui/?state=done"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/?state=done" {
		t.Fatalf("login: %d to %q", a.status, a.header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == uiSessionCookie {
			session = c
		}
	}
	if session == nil {
		t.Fatal("no session cookie")
	}
	if !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/ui/" {
		t.Fatalf("session cookie attributes: HttpOnly %v SameSite %v Path %q", session.HttpOnly, session.SameSite, session.Path)
	}
	if strings.Contains(session.Value, tn.token) || len(session.Value) < 40 {
		t.Fatalf("session cookie %q: want a long random id, never the token", session.Value)
	}
	for _, set := range a.header.Values("Set-Cookie") {
		if strings.Contains(set, tn.token) {
			t.Fatal("a cookie carries the admin token")
		}
	}
	page := u.get("/ui/?state=done")
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="who">ops<`) {
		t.Fatalf("list after login: %d", page.status)
	}
	if strings.Contains(page.body, tn.token) {
		t.Fatal("the page shows the admin token")
	}
	// A source neither configured nor holding events is 404, as in the API.
	if p := u.get("/ui/?state=done&source=nosuch"); p.status != http.StatusNotFound || !strings.Contains(p.body, "Unknown source") {
		t.Fatalf("list of an unknown source: %d", p.status)
	}
	// An open redirect is refused: admin TestSafeNext.

	// Signing out ends the session on the server, not only in the browser.
	cookie := &http.Cookie{Name: uiSessionCookie, Value: session.Value}
	if a := u.post("/ui/logout", url.Values{"csrf": {formToken(t, page.body)}}); a.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", a.status)
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/ui/", nil)
	req.AddCookie(cookie)
	if a := newUIClient(t, tn).do(req); a.status != http.StatusSeeOther {
		t.Fatalf("old session id after logout: %d, want 303", a.status)
	}
}

func hasCookie(a uiAnswer, name string) bool {
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == name && c.Value != "" {
			return true
		}
	}
	return false
}

func TestUIReplayNeedsTheFormTokenAndAReason(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	key := deadEvent(t, tn, h, "msg_ui_csrf", orderBody("evt_ui_csrf", "obj_ui_csrf", 1))
	u := newUIClient(t, tn)
	if a := u.login(tn.token); a.status != http.StatusSeeOther {
		t.Fatalf("login: %d", a.status)
	}
	list := u.get("/ui/")
	if !strings.Contains(list.body, `data-key="`+key+`"`) {
		t.Fatalf("the dead event is not listed:\n%s", list.body)
	}
	for _, bad := range []string{"", "wrong", u.csrf + "x"} {
		a := u.post("/ui/replay", url.Values{"csrf": {bad}, "key": {key}, "reason": {"forged"}})
		if a.status != http.StatusForbidden {
			t.Fatalf("replay with form token %q: %d, want 403", bad, a.status)
		}
	}
	a := u.post("/ui/replay", url.Values{"csrf": {u.csrf}, "key": {key}, "reason": {"   "}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("replay without a reason: %d", a.status)
	}
	if page := u.get(a.header.Get("Location")); !strings.Contains(page.body, "a reason is required") {
		t.Fatalf("no message about the missing reason:\n%s", page.body)
	}
	if ev, _ := tn.event(key); ev.State != engine.StateDead {
		t.Fatalf("a refused replay moved the event to %s", ev.State.String())
	}
	// 300 characters of four bytes each pass the count of characters but
	// not what the audit keeps: refused, not cut.
	long := strings.Repeat("\U0001D11E", 300) + "END"
	a = u.post("/ui/replay", url.Values{"csrf": {u.csrf}, "key": {key}, "reason": {long}})
	if page := u.get(a.header.Get("Location")); !strings.Contains(page.body, "the reason is 1203 bytes; at most 1024 are kept") {
		t.Fatalf("no message about the reason's length:\n%s", page.body)
	}
	if ev, _ := tn.event(key); ev.State != engine.StateDead {
		t.Fatalf("a refused replay moved the event to %s", ev.State.String())
	}

	h.setAnswer(func(delivery) (int, string) { return 200, "ok" })
	a = u.post("/ui/replay", url.Values{"csrf": {u.csrf}, "key": {key}, "reason": {"handler fixed"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != admin.EventURL(key) {
		t.Fatalf("replay: %d to %q", a.status, a.header.Get("Location"))
	}
	ev := tn.waitState(key, engine.StateDone)
	if len(ev.Audit) != 1 || ev.Audit[0].Who != "ops" || ev.Audit[0].Reason != "handler fixed" || ev.Audit[0].From != engine.StateDead {
		t.Fatalf("audit %+v", ev.Audit)
	}
	page := u.get(admin.EventURL(key))
	if !strings.Contains(page.body, `id="state">done<`) || !strings.Contains(page.body, "handler fixed") {
		t.Fatalf("event page after the replay:\n%s", page.body)
	}
	// Replaying a pending event (or a key that does not exist) says why not.
	a = u.post("/ui/replay", url.Values{"csrf": {u.csrf}, "key": {"orders:nope"}, "reason": {"r"}})
	if page := u.get(a.header.Get("Location")); page.status != http.StatusNotFound {
		t.Fatalf("event page of an unknown key: %d", page.status)
	}
}

func TestUIEscapesWhatItShows(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	id := `msg_<script>alert(1)</script>`
	body := []byte(`{"id":"evt_x","created":1,"data":{"object":{"id":"o"}},"note":"<img src=x onerror=alert(2)>"}`)
	h.setAnswer(func(delivery) (int, string) { return 500, `<b onmouseover=alert(3)>down</b>` })
	if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	key := "orders:" + id
	tn.waitState(key, engine.StateDead)
	u := newUIClient(t, tn)
	u.login(tn.token)
	for _, p := range []string{"/ui/", admin.EventURL(key)} {
		page := u.get(p)
		if page.status != http.StatusOK {
			t.Fatalf("GET %s: %d", p, page.status)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "<b onmouseover"} {
			if strings.Contains(page.body, raw) {
				t.Fatalf("GET %s prints %q unescaped", p, raw)
			}
		}
		if !strings.Contains(page.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Fatalf("GET %s does not show the escaped key", p)
		}
	}
}

func TestUISessionEndsWhenItsTokenIsRotated(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	u := newUIClient(t, tn)
	u.login(tn.token)
	if a := u.get("/ui/"); a.status != http.StatusOK {
		t.Fatalf("list: %d", a.status)
	}
	mustWrite(t, filepath.Join(tn.dir, "admin.token"), "a-new-admin-token-0123456789abcdef\n")
	tn.n.reload(tn.cfgPath)
	if a := u.get("/ui/"); a.status != http.StatusSeeOther {
		t.Fatalf("list after the token was rotated: %d, want 303 to the login form", a.status)
	}
	if a := u.login("a-new-admin-token-0123456789abcdef"); a.status != http.StatusSeeOther {
		t.Fatalf("login with the new token: %d", a.status)
	}
}

// findChromium returns a Chromium or Chrome binary, or "" when there is none.
// CI installs Debian's chromium (.ci/run); CHROMIUM names another binary.
func findChromium() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestUIBrowserReplaysADeadEvent drives a real headless Chromium: sign in,
// find the dead event, replay it with a reason, and watch it become done.
func TestUIBrowserReplaysADeadEvent(t *testing.T) {
	bin := findChromium()
	if bin == "" {
		t.Skip("no chromium binary found (apt-get install chromium, or set CHROMIUM); skipping the browser test")
	}
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	key := deadEvent(t, tn, h, "msg_browser", orderBody("evt_browser", "obj_browser", 1))

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("text of #%s: %v", id, err)
		}
		return strings.TrimSpace(v)
	}

	// Opening the event without a session lands on the login form.
	do("open the event page", chromedp.Navigate(tn.admin+admin.EventURL(key)), chromedp.WaitVisible(chromedp.ID("token")))
	if location, err := chromedp.Run(ctx, chromedp.Location()); err != nil || !strings.Contains(location, "/ui/login") {
		t.Fatalf("without a session the browser is at %s (%v), want the login form", location, err)
	}
	// Sign in: back to the event, which is dead after three attempts.
	do("sign in",
		chromedp.SendKeys(chromedp.ID("token"), tn.token),
		chromedp.Click(chromedp.ID("login-button")),
		chromedp.WaitVisible(chromedp.ID("state")))
	if st, attempts, lastError, who := text("state"), text("attempts"), text("last-error"), text("who"); st != "dead" || attempts != "3" || !strings.Contains(lastError, "500") || who != "ops" {
		t.Fatalf("event page: state %q, attempts %q, last error %q, who %q", st, attempts, lastError, who)
	}
	// The list of dead events shows it; its link leads back to the event.
	do("list", chromedp.Navigate(tn.admin+"/ui/"), chromedp.WaitVisible(chromedp.ID("events")))
	if listed := text("events"); !strings.Contains(listed, key) {
		t.Fatalf("the dead event is not in the list: %q", listed)
	}
	do("open the event from the list",
		chromedp.Click(chromedp.CSS(`tr[data-key="`+key+`"] a`)),
		chromedp.WaitVisible(chromedp.ID("replay-form")))

	// The operator fixes the handler, then replays with a reason.
	h.setAnswer(func(delivery) (int, string) { return 200, "ok" })
	do("replay",
		chromedp.SendKeys(chromedp.ID("reason"), "handler fixed in the browser test"),
		chromedp.Click(chromedp.ID("replay-button")),
		chromedp.WaitVisible(chromedp.ID("flash")))
	if flash := text("flash"); !strings.Contains(flash, "Replayed") {
		t.Fatalf("flash after the replay: %q", flash)
	}
	// The page refreshes itself while the event is in flight; reload until done.
	deadline := time.Now().Add(20 * time.Second)
	for {
		do("reload", chromedp.Navigate(tn.admin+admin.EventURL(key)), chromedp.WaitVisible(chromedp.ID("state")))
		st := text("state")
		if st == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page still says %q", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if audit := text("audit"); !strings.Contains(audit, "ops") || !strings.Contains(audit, "handler fixed in the browser test") || !strings.Contains(audit, "dead") {
		t.Fatalf("audit trail on the page: %q", audit)
	}
	if n := len(h.deliveries(key)); n != 4 {
		t.Fatalf("handler saw %d deliveries, want 3 failures and 1 success", n)
	}
	// A screenshot helps when this test fails somewhere else.
	if dir := os.Getenv("ONCEHOOK_UI_SCREENSHOTS"); dir != "" {
		for name, page := range map[string]string{"event-done.png": admin.EventURL(key), "list-done.png": "/ui/?state=done"} {
			if err := chromedp.Do(ctx, chromedp.Navigate(tn.admin+page)); err != nil {
				continue
			}
			if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
				os.WriteFile(filepath.Join(dir, name), png, 0o644)
			}
		}
	}
}
