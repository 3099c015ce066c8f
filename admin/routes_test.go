package admin

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// openRoutes are the only routes served without a token or a session:
// Prometheus scrapes, and what a browser needs to sign in.
var openRoutes = map[string]bool{
	"GET /metrics":             true,
	"GET /ui":                  true, // a redirect to /ui/
	"GET /ui/static/style.css": true,
	"GET /ui/login":            true,
	"POST /ui/login":           true,
}

// registeredRoutes reads, from this package's source, the pattern of every
// route registered on the admin mux (mux.Handle, mux.HandleFunc and the
// API's auth helper), so that a route added or rewired in any file is in
// the test without anyone listing it.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := fn.X.(*ast.Ident); !ok || x.Name != "mux" || fn.Sel.Name != "Handle" && fn.Sel.Name != "HandleFunc" {
					return true
				}
			case *ast.Ident:
				if fn.Name != "auth" {
					return true
				}
			default:
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok && wrapsRequireToken(call.Args[1]) {
				return true // the auth helper itself: its callers are read
			}
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: a route registered with a pattern that is not a literal", fset.Position(call.Pos()))
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			routes = append(routes, p)
			return true
		})
	}
	return routes
}

// wrapsRequireToken reports whether e is a call of s.requireToken.
func wrapsRequireToken(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "requireToken"
}

// TestEveryRouteNeedsAToken: every route the admin mux serves, but the open
// ones, refuses a request without credentials: the API with 401, the
// dead-letter pages by sending the browser to sign in. The routes come from
// the source, so a route registered without auth fails here. The API also
// refuses a token that is empty, a prefix of a real one, a real one with a
// byte more, or one byte changed: each route is asked from an address of
// its own (127.0.x.y), so that the refusals of one do not put the next
// behind the address's backoff.
func TestEveryRouteNeedsAToken(t *testing.T) {
	routes := registeredRoutes(t)
	seen := map[string]bool{}
	for _, r := range routes {
		seen[r] = true
	}
	for _, must := range []string{"POST /v1/sources/{name}/resume", "POST /v1/restore", "GET /debug/pprof/trace", "POST /ui/replay"} {
		if !seen[must] {
			t.Fatalf("route %q not found in the source: the reader is broken (found %q)", must, routes)
		}
	}
	for r := range openRoutes {
		if !seen[r] {
			t.Errorf("open route %q is no longer registered: drop it from openRoutes", r)
		}
	}
	_, base := newTestAPI(t)
	fill := strings.NewReplacer("{key...}", "orders:x", "{name}", "orders", "{id}", "node2", "{$}", "")
	changed := []byte(testToken)
	changed[len(changed)-1] ^= 1
	wrong := []string{"Bearer ", "Bearer " + testToken[:len(testToken)-1], "Bearer " + testToken + "x", "Bearer " + string(changed)}
	for i, r := range routes {
		client := clientFrom(t, net.IPv4(127, 0, byte(1+i/250), byte(1+i%250)))
		if openRoutes[r] {
			continue
		}
		method, path, ok := strings.Cut(r, " ")
		if !ok {
			method, path = http.MethodGet, r
		}
		if strings.HasSuffix(path, "/") && path != "/ui/" && !strings.HasPrefix(path, "/debug/") {
			path += "x"
		}
		if r == "/ui/" {
			path = "/ui/no-such-page"
		}
		req, _ := http.NewRequest(method, base+fill.Replace(path), strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		resp.Body.Close()
		switch {
		case strings.HasPrefix(path, "/ui/"):
			if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/login") {
				t.Errorf("%s without a session: %d to %q, want 303 to /ui/login", r, resp.StatusCode, loc)
			}
		default:
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s without a token: %d, want 401", r, resp.StatusCode)
			}
			for _, auth := range wrong {
				req, _ := http.NewRequest(method, base+fill.Replace(path), strings.NewReader("{}"))
				req.Header.Set("Authorization", auth)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", r, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s with %d bytes of token not one of the tokens: %d, want 401", r, len(auth)-len("Bearer "), resp.StatusCode)
				}
			}
		}
	}
}

// clientFrom is an HTTP client whose connections leave from ip (an address
// of the loopback net), following no redirect.
func clientFrom(t *testing.T, ip net.IP) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestUnmatchedRequestsNeedAToken: a path no route serves, a route asked
// with another method, or a path the mux would redirect is answered 401
// without a token (a stranger cannot map the routes), on a connection
// closed after it, and, with one, as JSON: 404, or 405 naming the methods.
func TestUnmatchedRequestsNeedAToken(t *testing.T) {
	_, base := newTestAPI(t)
	noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	cases := []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "/no/such/route", http.StatusNotFound, ""},
		{"POST", "/v1/status", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"DELETE", "/v1/replay", http.StatusMethodNotAllowed, "POST"},
		{"POST", "/metrics", http.StatusMethodNotAllowed, "GET, HEAD"},
		// A subtree's redirect says the route exists, as a 405 does.
		{"GET", "/debug/pprof", http.StatusTemporaryRedirect, ""},
		// So does the redirect of a path to its cleaned form.
		{"GET", "//v1/status", http.StatusTemporaryRedirect, ""},
		{"POST", "//v1/replay", http.StatusTemporaryRedirect, ""},
		{"GET", "/x/../debug/pprof/profile", http.StatusTemporaryRedirect, ""},
	}
	for _, c := range cases {
		for _, token := range []string{"", testToken} {
			req, _ := http.NewRequest(c.method, base+c.path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]string
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			want := c.want
			if token == "" {
				want = http.StatusUnauthorized
			}
			if token == "" && !resp.Close {
				t.Errorf("%s %s without a token: the connection is kept open after the 401", c.method, c.path)
			}
			if want == http.StatusTemporaryRedirect {
				if resp.StatusCode/100 != 3 {
					t.Errorf("%s %s with a token: %d, want %d", c.method, c.path, resp.StatusCode, want)
				}
				continue
			}
			if resp.StatusCode != want || err != nil || body["error"] == "" || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s %s token=%v: %d %q %v %v, want %d with a JSON error", c.method, c.path, token != "", resp.StatusCode, resp.Header.Get("Content-Type"), body, err, want)
			}
			if token != "" && resp.Header.Get("Allow") != c.allow {
				t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, resp.Header.Get("Allow"), c.allow)
			}
		}
	}
}

// TestPauseAndResumeAreLogged: the state keeps who paused a source and why
// only while it is paused; the log keeps both, and the resume's.
func TestPauseAndResumeAreLogged(t *testing.T) {
	var out syncLog
	_, base := newTestAPI(t, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&out, nil)) })
	for _, step := range []struct{ path, reason string }{{"pause", "deploy v42"}, {"resume", "v42 healthy"}} {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/sources/orders/"+step.path, strings.NewReader(`{"reason":"`+step.reason+`"}`))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", step.path, resp.StatusCode)
		}
		if line := out.String(); !strings.Contains(line, "source "+step.path) || !strings.Contains(line, `reason="`+step.reason+`"`) || !strings.Contains(line, "who=ops") {
			t.Fatalf("after %s the log holds:\n%s", step.path, line)
		}
	}
}

// syncLog is a log destination the server's goroutines may write to.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
