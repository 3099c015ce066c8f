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
	} {
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.next, got, c.want)
		}
	}
}
