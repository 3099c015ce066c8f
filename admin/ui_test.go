package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"oncehook/cluster"
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
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(p string) string {
		resp, err := c.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	post := func(p string, f url.Values) *http.Response {
		resp, err := c.PostForm(base+p, f)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	login := get("/ui/login")
	post("/ui/login", url.Values{"csrf": {csrf.FindStringSubmatch(login)[1]}, "token": {testToken}, "next": {"/ui/"}})
	page := get(EventURL(key))
	m := csrf.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no form on the event page:\n%s", page)
	}
	after := get(post("/ui/replay", url.Values{"csrf": {m[1]}, "key": {key}, "reason": {"retry"}}).Header.Get("Location"))
	if strings.Contains(after, "Not replayed") || !strings.Contains(after, "may have been replayed") {
		t.Fatalf("page after a replay of unknown outcome:\n%s", after)
	}
}
