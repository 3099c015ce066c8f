package admin

import "testing"

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
