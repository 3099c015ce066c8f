package intake

// Fuzz targets for the whole intake request path (fasthttp's
// parsing, expect, readBody, verify, screen, order, key, forward headers,
// publicURL) and for the X-Forwarded-* helpers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/engine"
	"oncehook/providers"
)

const (
	fzStripeSecret = "stripe-secret-SECRET-1234"
	fzGithubSecret = "github-secret-SECRET-5678"
	fzTwilioSecret = "twilio-token-SECRET-9999"
	fzHMACSecret   = "hmac-secret-SECRET-0000"
)

const fzSources = `
[[source]]
name = "st"
provider = "stripe"
secrets = ["` + fzStripeSecret + `"]
forward = "http://127.0.0.1:1/st"

[[source]]
name = "gh"
provider = "github"
secrets = ["` + fzGithubSecret + `"]
forward = "http://127.0.0.1:1/gh"
allow_ips = ["127.0.0.0/8"]

[[source]]
name = "tw"
provider = "twilio"
secrets = ["` + fzTwilioSecret + `"]
forward = "http://127.0.0.1:1/tw"
trusted_proxies = ["127.0.0.0/8"]

[[source]]
name = "open"
provider = "standard"
secret_files = ["std.secret"]
forward = "http://127.0.0.1:1/open"
key = ["json:id", "header:X-Part"]
max_body = "1KiB"
order = { object = "json:data.id", time = "json:created" }
type = "json:type"
drop_types = ["noise"]
schema_file = "s.json"
forward_headers = ["X-Fwd", "X-Part"]
replay_guard = "body"

[[source]]
name = "hm"
provider = "hmac"
secrets = ["` + fzHMACSecret + `"]
key = ["header:X-Request-Id|json:id|body:sha256"]
hmac = { header = "X-Signature" }
forward = "http://127.0.0.1:1/hm"
order = { object = "header:X-Obj", time = "header:X-Time", missing = "unordered" }
accept_types = ["a", "b"]
type = "header:X-Type|json:type"

[[source]]
name = "closed"
provider = "github"
secrets = ["` + fzGithubSecret + `"]
forward = "http://127.0.0.1:1/closed"
allow_ips = ["192.0.2.0/24"]
`

var fzNames = []string{"st", "gh", "tw", "open", "hm", "closed", "nope"}

// fzOpen: sources whose verifier the harness replaces by one that accepts
// everything, so that what follows verification is reached.
var fzOpen = map[string]bool{"open": true, "hm": true}

type acceptAll struct{}

func (acceptAll) Verify(*providers.Request) error { return nil }

// urlCheck wraps twilio's verifier and checks the URL publicURL built.
type urlCheck struct {
	inner providers.Verifier
	mu    sync.Mutex
	urls  []string
}

func (u *urlCheck) Verify(r *providers.Request) error {
	u.mu.Lock()
	u.urls = append(u.urls, r.URL)
	u.mu.Unlock()
	return u.inner.Verify(r)
}

// recStore records the claims and answers every one as new.
type recStore struct {
	nullStore
	mu   sync.Mutex
	cmds []engine.Command
}

func (s *recStore) Claim(_ context.Context, c engine.Command) (engine.Result, error) {
	s.mu.Lock()
	s.cmds = append(s.cmds, c)
	s.mu.Unlock()
	return engine.Result{Created: true, State: engine.StatePending}, nil
}

// fuzzConn is one client connection: it reads in, then EOF.
type fuzzConn struct {
	in     *bytes.Reader
	out    bytes.Buffer
	remote net.Addr
}

func (c *fuzzConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return c.remote }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

type intakeHarness struct {
	srv    *fasthttp.Server
	store  *recStore
	tw     *urlCheck
	log    *syncBuffer
	set    *Set
	stdKey string
}

func newIntakeHarness(tb testing.TB) *intakeHarness {
	dir := tb.TempDir()
	stdKey, err := providers.GenerateSecret("standard")
	if err != nil {
		tb.Fatal(err)
	}
	mustWrite(tb, filepath.Join(dir, "std.secret"), stdKey+"\n")
	mustWrite(tb, filepath.Join(dir, "s.json"), `{"type":"object","properties":{"id":{"type":"string","maxLength":40},"type":{"enum":["noise","x","y"]}},"required":["id"]}`)
	set := loadSources(tb, dir, fzSources)
	for n := range fzOpen {
		set.UseVerifier(n, acceptAll{}, nil)
	}
	tw := &urlCheck{inner: set.Source("tw").verifier}
	set.UseVerifier("tw", tw, set.Source("tw").handshaker)
	store := &recStore{}
	var logBuf syncBuffer
	in := New(Options{Store: store, Sources: set, Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Timeout: time.Second})
	return &intakeHarness{srv: in.HTTPServer(), store: store, tw: tw, log: &logBuf, set: set, stdKey: stdKey}
}

var fzSecrets = []string{fzStripeSecret, fzGithubSecret, fzTwilioSecret, fzHMACSecret}

// run serves raw as one connection from peer and checks every answer and
// every claim.
func (h *intakeHarness) run(t *testing.T, raw []byte, peer net.IP) {
	h.store.mu.Lock()
	h.store.cmds = nil
	h.store.mu.Unlock()
	h.tw.mu.Lock()
	h.tw.urls = nil
	h.tw.mu.Unlock()
	h.log.mu.Lock()
	h.log.b.Reset()
	h.log.mu.Unlock()

	c := &fuzzConn{in: bytes.NewReader(raw), remote: &net.TCPAddr{IP: peer, Port: 40000}}
	_ = h.srv.ServeConn(c)

	secrets := append([]string{h.stdKey}, fzSecrets...)
	for _, s := range secrets {
		if bytes.Contains(raw, []byte(s)) {
			continue
		}
		if bytes.Contains(c.out.Bytes(), []byte(s)) {
			t.Fatalf("an answer holds secret %q:\n%q", s, c.out.Bytes())
		}
		h.log.mu.Lock()
		logged := h.log.b.String()
		h.log.mu.Unlock()
		if strings.Contains(logged, s) {
			t.Fatalf("the log holds secret %q:\n%s", s, logged)
		}
	}

	// Every answer is HTTP/1.1 a client can read; a JSON one is JSON.
	br := bufio.NewReader(bytes.NewReader(c.out.Bytes()))
	for n := 0; ; n++ {
		if _, err := br.Peek(1); err == io.EOF {
			break
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d unreadable: %v\n%q", n, err, c.out.Bytes())
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("answer %d body: %v", n, err)
		}
		if resp.StatusCode >= 500 && resp.StatusCode != 503 {
			t.Fatalf("answer %d: status %d\n%q", n, resp.StatusCode, c.out.Bytes())
		}
		if resp.StatusCode >= 400 && resp.StatusCode != 100 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && !json.Valid(body) {
			t.Fatalf("answer %d: JSON error that is not JSON: %q", n, body)
		}
	}

	// What publicURL built keeps the forwarded host a host.
	h.tw.mu.Lock()
	for _, u := range h.tw.urls {
		rest, ok := strings.CutPrefix(u, "https://")
		if !ok {
			rest, ok = strings.CutPrefix(u, "http://")
		}
		if !ok {
			t.Fatalf("twilio URL %q has another scheme", u)
		}
		_ = rest // the Host header is the client's own: FuzzForwardedHost checks the forwarded one
	}
	h.tw.mu.Unlock()

	h.store.mu.Lock()
	defer h.store.mu.Unlock()
	for _, cmd := range h.store.cmds {
		src := h.set.Source(cmd.Source)
		switch {
		case src == nil:
			t.Fatalf("claim for unknown source %q", cmd.Source)
		case !fzOpen[cmd.Source]:
			t.Fatalf("claim for %q, whose verifier holds a secret the input lacks: forged (%q)", cmd.Source, raw)
		case !strings.HasPrefix(cmd.Key, cmd.Source+":") || len(cmd.Key) > engine.MaxKeyLen:
			t.Fatalf("claim key %q", cmd.Key)
		case len(cmd.Payload) == 0 || len(cmd.Payload) > src.maxBody:
			t.Fatalf("claim payload of %d bytes (max %d)", len(cmd.Payload), src.maxBody)
		case cmd.OrderObject != "" && (!strings.HasPrefix(cmd.OrderObject, cmd.Source+":") || len(cmd.OrderObject) > engine.MaxKeyLen):
			t.Fatalf("order object %q", cmd.OrderObject)
		}
		for _, hd := range cmd.Headers {
			if strings.ContainsAny(hd.Value, "\r\n\x00") || strings.ContainsAny(hd.Name, "\r\n\x00: ") {
				t.Fatalf("forwarded header %q: %q would break the handler's request", hd.Name, hd.Value)
			}
			found := strings.EqualFold(hd.Name, "Content-Type") // always kept
			for _, n := range src.fwdHeaders {
				if strings.EqualFold(n, hd.Name) {
					found = true
				}
			}
			if !found {
				t.Fatalf("forwarded header %q not in forward_headers", hd.Name)
			}
		}
		if cmd.Source == "open" {
			// The schema passed: the body is an object whose id is a
			// string of at most 40 characters.
			var v map[string]any
			if err := json.Unmarshal(cmd.Payload, &v); err != nil {
				t.Fatalf("open claimed a body that is not a JSON object: %q", cmd.Payload)
			}
			if id, ok := v["id"].(string); !ok || len([]rune(id)) > 40 {
				t.Fatalf("open claimed id %#v, against its schema (body %q)", v["id"], cmd.Payload)
			}
			// The key's json:id part is the id the schema checked (and
			// that a handler decoding the body with encoding/json reads).
			part, _, _ := strings.Cut(strings.TrimPrefix(cmd.Key, "open:"), ":")
			part = strings.NewReplacer("%3A", ":", "%25", "%").Replace(part)
			if id, _ := v["id"].(string); part != id {
				t.Fatalf("open keyed %q by json:id; encoding/json and the schema read id %q (body %q)", part, id, cmd.Payload)
			}
		}
	}
}

// FuzzIntakeRequest: one request built from its parts (source, method,
// header lines, body, chunked or not) through fasthttp and the intake.
func FuzzIntakeRequest(f *testing.F) {
	h := newIntakeHarness(f)
	f.Add(uint8(3), "POST", "Content-Type: application/json\r\nX-Part: p1\r\nX-Fwd: f", []byte(`{"id":"evt_1","type":"x","created":1700000000,"data":{"id":"o1"}}`), false, uint8(1))
	f.Add(uint8(3), "POST", "X-Part: a:b%c", []byte(`{"id":"evt_1","type":"noise","created":"2023-11-14T22:13:20Z","data":{"id":7}}`), true, uint8(1))
	f.Add(uint8(4), "POST", "X-Request-Id: r1\r\nX-Obj: o\r\nX-Time: 1700000000123\r\nX-Type: a", []byte(`{"id":1}`), false, uint8(1))
	f.Add(uint8(4), "POST", "X-Type: c", []byte(`not json`), false, uint8(1))
	f.Add(uint8(0), "POST", "Stripe-Signature: t=1700000000,v1=00", []byte(`{"id":"x"}`), false, uint8(1))
	f.Add(uint8(1), "POST", "X-Hub-Signature-256: sha256=00\r\nContent-Encoding: identity\r\nContent-Encoding: gzip", []byte(`{}`), false, uint8(1))
	f.Add(uint8(2), "POST", "X-Forwarded-Proto: https\r\nX-Forwarded-Host: a.example:443, evil/x?\r\nX-Twilio-Signature: AAAA", []byte("A=1&B=%2"), false, uint8(1))
	f.Add(uint8(5), "GET", "Expect: 100-continue", []byte(`{}`), false, uint8(2))
	f.Add(uint8(6), "POST", "Content-Length: 5", []byte(`{}`), false, uint8(1))
	f.Fuzz(func(t *testing.T, src uint8, method, headers string, body []byte, chunked bool, peer uint8) {
		name := fzNames[int(src)%len(fzNames)]
		var b bytes.Buffer
		b.WriteString(method + " /in/" + name + "?q=1 HTTP/1.1\r\nHost: oncehook.test:8080\r\n")
		if headers != "" {
			b.WriteString(headers + "\r\n")
		}
		if chunked {
			b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			for i := 0; i < len(body); i += 7 {
				end := min(len(body), i+7)
				b.WriteString(strconv.FormatInt(int64(end-i), 16) + "\r\n")
				b.Write(body[i:end])
				b.WriteString("\r\n")
			}
			b.WriteString("0\r\n\r\n")
		} else {
			b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
			b.Write(body)
		}
		ip := net.IPv4(127, 0, 0, 1)
		if peer%2 == 0 {
			ip = net.IPv4(192, 0, 2, peer)
		}
		h.run(t, b.Bytes(), ip)
	})
}

// FuzzIntakeRaw: any bytes on a connection to the intake.
func FuzzIntakeRaw(f *testing.F) {
	h := newIntakeHarness(f)
	f.Add([]byte("POST /in/open HTTP/1.1\r\nHost: x\r\nX-Part: p\r\nContent-Length: 60\r\n\r\n{\"id\":\"evt_1\",\"type\":\"x\",\"created\":1700000000,\"data\":{\"id\":1}}"))
	f.Add([]byte("POST /in/hm HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Request-Id: 1\r\n\r\n2\r\n{}\r\n0\r\n\r\nPOST /in/hm HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}"))
	f.Add([]byte("POST /in/tw HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: a\r\nX-Forwarded-Host: b, c\r\nContent-Length: 3\r\n\r\na=b"))
	f.Add([]byte("POST /in/st HTTP/1.0\r\nContent-Length: -1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h.run(t, raw, net.IPv4(127, 0, 0, 1))
	})
}

// FuzzForwardedHost: the X-Forwarded-* helpers. What publicURL uses as a
// host never holds a byte that ends the authority ("/", "?", "#", "@",
// "\\") or a space, and the last list value is a suffix of the header.
func FuzzForwardedHost(f *testing.F) {
	for _, s := range []string{"a.example", "evil.example, hooks.example.com", "[::1]:8443", "x/y", " , ", "a@b", "%2F"} {
		f.Add(s, "https")
	}
	f.Fuzz(func(t *testing.T, host, proto string) {
		v := lastListValue([]byte(host))
		if !strings.HasSuffix(strings.TrimRight(host, " \t\r\n\v\f"), string(v)) && len(v) > 0 {
			t.Fatalf("lastListValue(%q) = %q: not its last element", host, v)
		}
		if bytes.IndexByte(v, ',') >= 0 {
			t.Fatalf("lastListValue(%q) = %q holds a comma", host, v)
		}
		if validForwardedHost(v) && bytes.ContainsAny(v, "/?#@\\ \t%") {
			t.Fatalf("validForwardedHost accepted %q", v)
		}
		var req fasthttp.Request
		req.Header.SetMethod("POST")
		req.SetRequestURI("/in/tw?a=1")
		req.Header.SetHost("oncehook.test:8080")
		req.Header.Add("X-Forwarded-Host", host)
		req.Header.Add("X-Forwarded-Proto", proto)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 1}, nil)
		trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		u := publicURL(&ctx, trusted)
		rest, ok := strings.CutPrefix(u, "https://")
		if !ok {
			rest, ok = strings.CutPrefix(u, "http://")
		}
		if !ok {
			t.Fatalf("publicURL = %q", u)
		}
		if !strings.HasSuffix(rest, "/in/tw?a=1") {
			t.Fatalf("publicURL = %q: the request URI is not its end", u)
		}
		hostPart := strings.TrimSuffix(rest, "/in/tw?a=1")
		if strings.ContainsAny(hostPart, "/?#@\\ \t") {
			t.Fatalf("publicURL = %q: the host part %q could change the URL", u, hostPart)
		}
		// From an untrusted peer the headers are ignored.
		ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1}, nil)
		if u := publicURL(&ctx, trusted); u != "http://oncehook.test:8080/in/tw?a=1" {
			t.Fatalf("untrusted peer: publicURL = %q", u)
		}
	})
}

// TestIntakeHarnessReaches: the harness's open sources claim a valid
// delivery, so the fuzz targets reach the code after verification.
func TestIntakeHarnessReaches(t *testing.T) {
	h := newIntakeHarness(t)
	body := `{"id":"evt_1","type":"x","created":1700000000,"data":{"id":"o1"}}`
	raw := "POST /in/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Part: p\r\nX-Fwd: f\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	h.run(t, []byte(raw), net.IPv4(127, 0, 0, 1))
	if len(h.store.cmds) != 1 {
		t.Fatalf("%d claims; log:\n%s", len(h.store.cmds), h.log.String())
	}
	c := h.store.cmds[0]
	if c.OrderObject != "open:o1" || len(c.Headers) != 3 || c.BodyKey == "" {
		t.Fatalf("claim %+v", c)
	}
}

// TestSchemaSeesTheKeyedValue: a body that gives a member twice is read
// by the key, the order guard and the type filter (gjson: the first) and
// by the schema (encoding/json: the last). The schema must check the value
// that is keyed, or refuse the body.
func TestSchemaSeesTheKeyedValue(t *testing.T) {
	h := newIntakeHarness(t)
	long := strings.Repeat("A", 60) // over the schema's maxLength 40
	body := `{"id":"` + long + `","id":"ok","type":"x","created":1700000000,"data":{"id":"o1"}}`
	raw := "POST /in/open HTTP/1.1\r\nHost: x\r\nX-Part: p\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	c := &fuzzConn{in: bytes.NewReader([]byte(raw)), remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
	_ = h.srv.ServeConn(c)
	for _, cmd := range h.store.cmds {
		if strings.Contains(cmd.Key, long) {
			t.Errorf("claimed under key %q: its id was never checked by the schema (maxLength 40); answer %q", cmd.Key, c.out.String())
		}
	}
}
