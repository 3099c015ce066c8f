package admin

// Fuzz targets for the admin API's and UI's query parsing.

import (
	"net/url"
	"path"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// FuzzSafeNext: the post-login redirect stays on this site's /ui/ pages.
// What safeNext returns is "/ui/" or its input; resolved against the login
// page as a browser resolves it, it keeps the scheme and host and lands
// under /ui/, and it holds no byte a browser drops or reads as "/".
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/ui/", "/ui/event/a%2Fb?x=1", "//evil.example/", "/ui/../x", "/ui/%2e%2e/x",
		"/ui/\\evil", "/ui/x?next=%0d%0a", "https://evil/ui/", "/ui/;/../../x", "/ui/%252e%252e/x", "/ui/#//evil"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://admin.example:7071/ui/login?next=x")
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got != "/ui/" && got != next {
			t.Fatalf("safeNext(%q) = %q: neither home nor its input", next, got)
		}
		if strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
			t.Fatalf("safeNext(%q) = %q: a byte a browser drops or reads as /", next, got)
		}
		ref, err := url.Parse(got)
		if err != nil {
			t.Fatalf("safeNext(%q) = %q: unparsable", next, got)
		}
		u := base.ResolveReference(ref)
		if u.Scheme != "https" || u.Host != "admin.example:7071" || u.User != nil {
			t.Fatalf("safeNext(%q) = %q leads to %s", next, got, u)
		}
		for _, p := range []string{u.Path, u.EscapedPath()} {
			if c := path.Clean(p); c != "/ui" && !strings.HasPrefix(c, "/ui/") {
				t.Fatalf("safeNext(%q) = %q leads to path %q", next, got, p)
			}
		}
		// A server that unescapes once more (a proxy in front) still sees /ui/.
		if un, err := url.PathUnescape(u.EscapedPath()); err == nil {
			if c := path.Clean(un); c != "/ui" && !strings.HasPrefix(c, "/ui/") {
				t.Fatalf("safeNext(%q) = %q: unescaped, the path %q leaves /ui/", next, got, un)
			}
		}
	})
}

// FuzzCursor: parseCursor reads back exactly what cursorAfter wrote, and
// anything it accepts with a state is a time and a non-empty key.
func FuzzCursor(f *testing.F) {
	f.Add(int64(1700000000000000000), "src:a:b", "1:x")
	f.Add(int64(-1), ":", "")
	f.Add(int64(0), "k", "+1:k")
	f.Fuzz(func(t *testing.T, at int64, key, raw string) {
		if key != "" {
			for _, st := range []engine.State{0, engine.StateDead} {
				c := cursorAfter(st, engine.Event{Key: key, UpdatedAt: at})
				fl := engine.ListFilter{State: st}
				if err := parseCursor(c, &fl); err != nil {
					t.Fatalf("cursor %q written for state %d refused: %v", c, st, err)
				}
				if fl.After != key || st != 0 && fl.AfterTime != at {
					t.Fatalf("cursor %q read as %q@%d, want %q@%d", c, fl.After, fl.AfterTime, key, at)
				}
			}
		}
		fl := engine.ListFilter{State: engine.StateDone}
		if err := parseCursor(raw, &fl); err == nil && raw != "" && fl.After == "" {
			t.Fatalf("cursor %q accepted with an empty key", raw)
		}
	})
}

// FuzzParseBound: a purge's before or a replay's since is refused or is a
// time between 1970 and 2262 that unix nanoseconds hold exactly.
func FuzzParseBound(f *testing.F) {
	for _, s := range []string{"720h", "2023-11-14T22:13:20Z", "-1h", "9999999999h", "1969-12-31T23:59:59Z", "2262-04-11T23:47:16.854775807Z", "2262-04-11T23:47:16.854775808Z", "0", "1e3h"} {
		f.Add(s)
	}
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, v string) {
		got, err := parseBound("before", v, now)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "before") {
				t.Fatalf("error does not name the field: %v", err)
			}
			return
		}
		if got.Before(minBound) || got.After(maxBound) {
			t.Fatalf("parseBound(%q) = %v: out of range", v, got)
		}
		if back := time.Unix(0, got.UnixNano()); !back.Equal(got) {
			t.Fatalf("parseBound(%q) = %v: unix nanoseconds give %v", v, got, back)
		}
	})
}
