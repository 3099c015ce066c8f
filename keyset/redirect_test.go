package keyset

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// The address rule, with the configured URL's class as input: a redirect may
// reach a public address, or one of the configured URL's own class.
func TestKeysRedirectTargetRule(t *testing.T) {
	for _, c := range []struct {
		configured addrClass
		target     string
		ok         bool
	}{
		{classPublic, "198.51.100.7", true},
		{classPublic, "2001:db8::1", true},
		{classPublic, "127.0.0.1", false},
		{classPublic, "::1", false},
		{classPublic, "0.0.0.0", false},
		{classPublic, "10.1.2.3", false},
		{classPublic, "172.16.0.1", false},
		{classPublic, "192.168.1.1", false},
		{classPublic, "100.64.0.1", false},
		{classPublic, "fd00::1", false},
		{classPublic, "169.254.169.254", false}, // cloud metadata
		{classPublic, "fe80::1", false},
		{classPublic, "::ffff:127.0.0.1", false},
		{classPublic, "::ffff:10.0.0.1", false},
		{classPublic, "224.0.0.1", false},
		{classLoopback, "127.0.0.1", true},
		{classLoopback, "::1", true},
		{classLoopback, "10.1.2.3", false},
		{classLoopback, "169.254.169.254", false},
		{classLoopback, "198.51.100.7", true},
		{classPrivate, "10.9.8.7", true},
		{classPrivate, "fd12::1", true},
		{classPrivate, "127.0.0.1", false},
		{classPrivate, "169.254.169.254", false},
		{classLinkLocal, "169.254.1.1", true},
		{classLinkLocal, "10.0.0.1", false},
	} {
		err := keysRedirectTargetOK(c.configured, netip.MustParseAddr(c.target))
		if (err == nil) != c.ok {
			t.Errorf("configured %s, target %s: %v, want ok=%v", c.configured, c.target, err, c.ok)
		}
	}
}

// CheckRedirect applies the scheme and address rules with the configured
// URL's class (IP literals here: no DNS).
func TestKeysCheckRedirect(t *testing.T) {
	for _, c := range []struct {
		configured, target string
		want               string // "" = allowed, else a substring of the error
	}{
		{"https://198.51.100.7/keys.json", "https://203.0.113.9/k.json", ""},
		{"https://198.51.100.7/keys.json", "http://127.0.0.1/k.json", "https to http"},
		{"https://198.51.100.7/keys.json", "http://203.0.113.9/k.json", "neither https nor loopback"},
		{"https://198.51.100.7/keys.json", "https://127.0.0.1/k.json", "loopback"},
		{"https://198.51.100.7/keys.json", "https://localhost/k.json", "loopback"},
		{"https://198.51.100.7/keys.json", "https://10.0.0.5/k.json", "private"},
		{"https://198.51.100.7/keys.json", "https://169.254.169.254/latest", "link-local"},
		{"https://10.0.0.2/keys.json", "https://10.0.0.5/k.json", ""},
		{"https://10.0.0.2/keys.json", "https://127.0.0.1/k.json", "loopback"},
		{"http://127.0.0.1:8000/keys.json", "http://127.0.0.1:9000/k.json", ""},
		{"http://127.0.0.1:8000/keys.json", "https://10.0.0.5/k.json", "private"},
	} {
		first, _ := http.NewRequest(http.MethodGet, c.configured, nil)
		next, _ := http.NewRequest(http.MethodGet, c.target, nil)
		err := keysCheckRedirect(next, []*http.Request{first})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s -> %s: %v, want allowed", c.configured, c.target, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s -> %s: %v, want an error containing %q", c.configured, c.target, err, c.want)
		}
	}
}

// After a redirect, the address actually connected is checked (DNS
// rebinding): the dialer's Control refuses an internal address of another
// class than the configured URL's.
func TestKeysDialControl(t *testing.T) {
	p := &keysDialPolicy{}
	p.class.Store(uint32(classPublic))
	for addr, ok := range map[string]bool{"198.51.100.7:443": true, "127.0.0.1:443": false, "10.0.0.1:443": false, "[fe80::1]:443": false} {
		if err := p.control("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("public configured, connect %s: %v, want ok=%v", addr, err, ok)
		}
	}
	p.class.Store(uint32(classLoopback))
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "[::1]:8080": true, "10.0.0.1:443": false} {
		if err := p.control("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("loopback configured, connect %s: %v, want ok=%v", addr, err, ok)
		}
	}
}

// An https keys_url that redirects to http is refused, and the http server
// is never asked; an https-to-https redirect on the same (loopback) class
// still works.
func TestKeysRedirectHTTPSToHTTPRefused(t *testing.T) {
	var plainHits atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		io.WriteString(w, `{"keys":[]}`)
	}))
	t.Cleanup(plain.Close)
	var tlsSrv *httptest.Server
	tlsSrv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-http":
			http.Redirect(w, r, plain.URL+"/keys.json", http.StatusFound)
		case "/to-https":
			http.Redirect(w, r, tlsSrv.URL+"/keys.json", http.StatusFound)
		default:
			io.WriteString(w, `{"keys":[]}`)
		}
	}))
	t.Cleanup(tlsSrv.Close)

	client := newKeysClient()
	client.Transport.(*http.Transport).TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	get := func(path string) error {
		ks := &sourceKeys{source: "pub", url: tlsSrv.URL + path, client: client}
		_, err := ks.get(context.Background())
		return err
	}
	if err := get("/to-https"); err != nil {
		t.Fatalf("https -> https (loopback to loopback): %v", err)
	}
	err := get("/to-http")
	if err == nil || !strings.Contains(err.Error(), "https to http") {
		t.Fatalf("https -> http: %v, want refused", err)
	}
	if n := plainHits.Load(); n != 0 {
		t.Fatalf("the http server was asked %d times", n)
	}
	if u, _ := url.Parse(plain.URL); !keysFetchURLOK(u) {
		t.Fatal("the http target is loopback: only the downgrade rule refuses it")
	}
}
