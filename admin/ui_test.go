package admin

import (
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/cluster"
	"oncehook/engine"
)

// TestSafeNext: an open redirect is refused; the page a sign-in returns to
// stays on /ui/.
func TestSafeNext(t *testing.T) {
	for _, c := range []struct{ next, want string }{
		{"https://example.invalid/", "/ui/"},
		{"//example.invalid/ui/", "/ui/"},
		{"/v1/status", "/ui/"},
		{"", "/ui/"},
		{"/ui/event/orders:x", "/ui/event/orders:x"},
		{"/ui/?state=dead&source=a&after=k&after_time=5", "/ui/?state=dead&source=a&after=k&after_time=5"},
		{"/ui/event/a%2Fb", "/ui/event/a%2Fb"},
		// Dot segments that a browser resolves out of /ui/, plain or escaped.
		{"/ui/../../evil", "/ui/"},
		{"/ui/../v1/status", "/ui/"},
		{"/ui/%2e%2e/%2e%2e/evil", "/ui/"},
		{"/ui/./event/x", "/ui/./event/x"},
		// Control bytes and backslashes, plain or escaped.
		{"/ui/%00", "/ui/"},
		{"/ui/\x00", "/ui/"},
		{"/ui/%5cevil", "/ui/"},
		{"/ui/\\evil", "/ui/"},
		{"/ui/?state=%0d%0aSet-Cookie:x", "/ui/"},
		{"/ui/\tx", "/ui/"},
		{"/ui/%zz", "/ui/"},
	} {
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.next, got, c.want)
		}
	}
}

// TestUIReplayOutcomeUnknown: a replay from the dead-letter page whose
// outcome is unknown (the leader changed while it committed) says it may
// have been replayed, never "Not replayed": a second click would run the
// handler twice.
func TestUIReplayOutcomeUnknown(t *testing.T) {
	store, base := newTestAPI(t)
	const key = "orders:k1"
	doneEvents(t, store, time.Hour, key)
	store.replayErr = func(string) error {
		return fmt.Errorf("replay: wait for commit: context deadline exceeded: %w", cluster.ErrIndeterminate)
	}
	u := signIn(t, base)
	m := u.formToken(EventURL(key))
	after := u.get(u.post("/ui/replay", url.Values{"csrf": {m}, "key": {key}, "reason": {"retry"}}).Header.Get("Location"))
	if strings.Contains(after, "Not replayed") || !strings.Contains(after, "may have been replayed") {
		t.Fatalf("page after a replay of unknown outcome:\n%s", after)
	}
}

// uiClient is a browser signed in to the admin UI of a test server.
type uiClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func signIn(t *testing.T, base string) *uiClient {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u := &uiClient{t: t, base: base, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if resp := u.post("/ui/login", url.Values{"csrf": {u.formToken("/ui/login")}, "token": {testToken}, "next": {"/ui/"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d, want 303", resp.StatusCode)
	}
	return u
}

func (u *uiClient) get(p string) string {
	u.t.Helper()
	resp, err := u.c.Get(u.base + p)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (u *uiClient) post(p string, f url.Values) *http.Response {
	u.t.Helper()
	resp, err := u.c.PostForm(u.base+p, f)
	if err != nil {
		u.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

// formToken is the form token on page p.
func (u *uiClient) formToken(p string) string {
	u.t.Helper()
	page := u.get(p)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no form on %s:\n%s", p, page)
	}
	return m[1]
}

// TestUIFormTooLarge: a form over the size limit is refused as too large
// (413, saying so), not as an expired form, and changes nothing; a body that
// is not a form is refused as such.
func TestUIFormTooLarge(t *testing.T) {
	store, base := newTestAPI(t)
	const key = "orders:k1"
	doneEvents(t, store, time.Hour, key)
	u := signIn(t, base)
	csrf := u.formToken(EventURL(key))
	big := strings.Repeat("r", uiFormLimit)

	resp := u.post("/ui/replay", url.Values{"csrf": {csrf}, "key": {key}, "reason": {big}})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "larger than this page accepts") {
		t.Fatalf("replay form over the limit: %d\n%s", resp.StatusCode, body)
	}
	if ev, err := store.Get(key, false); err != nil || ev.State != engine.StateDone {
		t.Fatalf("after the refused form: %+v, %v; want still done", ev, err)
	}

	resp = u.post("/ui/login", url.Values{"csrf": {"x"}, "token": {big}})
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "larger than this page accepts") {
		t.Fatalf("sign-in form over the limit: %d\n%s", resp.StatusCode, body)
	}

	req, _ := http.NewRequest(http.MethodPost, base+"/ui/replay", strings.NewReader("csrf="+csrf+"&key=%zz"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r, err := u.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "could not be read") {
		t.Fatalf("a body that is not a form: %d\n%s", r.StatusCode, body)
	}
}

// TestUIEventKeyWithSlashes: the event pages are linked as
// /ui/event/<the key, path-escaped>, "/" as %2F. A key holding "//", "/./"
// or "/../" (a URL as the idempotency key) opens for a signed-in operator:
// the check that sends an unclean path to the token check reads the escaped
// path, as the mux cleans it, not the decoded one.
func TestUIEventKeyWithSlashes(t *testing.T) {
	store, base := newTestAPI(t)
	keys := []string{"orders:https://shop.example/o/1", "orders:a/../b", "orders:a/./b"}
	doneEvents(t, store, time.Hour, keys...)
	u := signIn(t, base)
	for _, key := range keys {
		resp, err := u.c.Get(base + EventURL(key))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="key"`) {
			t.Errorf("signed in, GET %s (the list's own link for %q): %d\n%s", EventURL(key), key, resp.StatusCode, body)
		}
	}
}

// TestUIFormOfAnotherTypeIs400: a /ui/ form posted as another type
// (multipart, text/plain, JSON), which ParseForm reads nothing from without
// an error, is 400 and changes nothing, not read as an expired form (403).
func TestUIFormOfAnotherTypeIs400(t *testing.T) {
	store, base := newTestAPI(t)
	const key = "orders:k1"
	doneEvents(t, store, time.Hour, key)
	u := signIn(t, base)
	csrf := u.formToken(EventURL(key))

	var mp strings.Builder
	mw := multipart.NewWriter(&mp)
	for k, v := range map[string]string{"csrf": csrf, "key": key, "reason": "r"} {
		mw.WriteField(k, v)
	}
	mw.Close()
	form := url.Values{"csrf": {csrf}, "key": {key}, "reason": {"r"}}.Encode()
	for _, c := range []struct{ ctype, body string }{
		{mw.FormDataContentType(), mp.String()},
		{"text/plain", form},
		{"application/json", `{"csrf":"` + csrf + `"}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+"/ui/replay", strings.NewReader(c.body))
		req.Header.Set("Content-Type", c.ctype)
		resp, err := u.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("replay form as %s: %d, want 400 (docs: a form that is not URL-encoded is 400)\n%s", c.ctype, resp.StatusCode, body)
		}
	}
	if ev, err := store.Get(key, false); err != nil || ev.State != engine.StateDone {
		t.Fatalf("after the refused forms: %+v, %v; want still done", ev, err)
	}
}

// TestUISessionExpires: a /ui/ session ends uiSessionTTL after its sign-in
// (a copied cookie is not good for ever): the page then asks to sign in
// again, and the session is forgotten.
func TestUISessionExpires(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	_, base := newTestAPI(t, func(o *Options) { o.Now = func() time.Time { return time.Unix(0, clock.Load()) } })
	u := signIn(t, base)
	page := func() int {
		resp, err := u.c.Get(base + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := page(); got != http.StatusOK {
		t.Fatalf("signed in: GET /ui/ %d, want 200", got)
	}
	clock.Add(int64(uiSessionTTL - time.Second))
	if got := page(); got != http.StatusOK {
		t.Fatalf("a second before the session's end: GET /ui/ %d, want 200", got)
	}
	clock.Add(int64(2 * time.Second))
	if got := page(); got != http.StatusSeeOther {
		t.Fatalf("after the session's end: GET /ui/ %d, want 303 to the sign-in", got)
	}
	clock.Add(-int64(2 * time.Second)) // the session was forgotten, not only held back
	if got := page(); got != http.StatusSeeOther {
		t.Fatalf("the clock set back: GET /ui/ %d, want 303 (the session is gone)", got)
	}
}
