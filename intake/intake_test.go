package intake

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/engine"
	"oncehook/providers"
)

// tableSources are the sources of TestIntakeAnswers; every one signs with
// the secret in orders.secret.
const tableSources = `
[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/orders"
max_body = "1KiB"

[[source]]
name = "jsonkey"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/jsonkey"
key = ["json:id"]

[[source]]
name = "ordered"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/ordered"
order = { object = "json:data.object.id", time = "json:created" }

[[source]]
name = "filtered"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/filtered"
drop_types = ["noise"]

[[source]]
name = "guarded"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/guarded"
replay_guard = "body"

[[source]]
name = "closed"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/closed"
allow_ips = ["192.0.2.0/24"]
`

// intakeFixture is an intake over a real engine (memStore), with the
// sources of tableSources.
type intakeFixture struct {
	t      *testing.T
	in     *Server
	store  *memStore
	secret string
}

func newIntakeFixture(t *testing.T) *intakeFixture {
	t.Helper()
	dir := t.TempDir()
	secret, err := providers.GenerateSecret("standard")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "orders.secret"), secret+"\n")
	store := newMemStore(t)
	in := New(Options{Store: store, Sources: loadSources(t, dir, tableSources),
		NotCommitted: func(err error) string {
			if errors.Is(err, errNoQuorum) {
				return "no quorum: not committed, retry"
			}
			return ""
		}})
	return &intakeFixture{t: t, in: in, store: store, secret: secret}
}

// errNoQuorum stands for the cluster's "not committed" errors.
var errNoQuorum = errors.New("no quorum")

// request is one request to the intake, signed unless unsigned.
type request struct {
	method   string // "": POST
	path     string
	body     string
	id       string // webhook-id; "": not signed
	unsigned bool   // no signature headers at all
	badSig   bool   // signed with another secret
	peer     string // client address; "": 127.0.0.1
	// encodings are Content-Encoding headers, one each, in this order.
	encodings []string
}

// answer is what the intake sent.
type answer struct {
	status int
	body   string
	header map[string]string
}

// do runs r through the intake's handler on an in-process RequestCtx.
func (f *intakeFixture) do(r request) answer {
	f.t.Helper()
	var req fasthttp.Request
	method := r.method
	if method == "" {
		method = fasthttp.MethodPost
	}
	req.Header.SetMethod(method)
	req.SetRequestURI(r.path)
	req.Header.SetContentType("application/json")
	if !r.unsigned && r.id != "" {
		secret := f.secret
		if r.badSig {
			other, err := providers.GenerateSecret("standard")
			if err != nil {
				f.t.Fatal(err)
			}
			secret = other
		}
		s, _ := providers.Lookup("standard")
		hs, err := s.Sign([]byte(r.body), []byte(secret), time.Now(), r.id, nil)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, h := range hs {
			req.Header.Set(h.Name, h.Value)
		}
	}
	for _, e := range r.encodings {
		req.Header.Add("Content-Encoding", e)
	}
	req.SetBodyString(r.body)
	peer := r.peer
	if peer == "" {
		peer = "127.0.0.1"
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 40000}, nil)
	f.in.handle(&ctx)
	a := answer{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body()), header: map[string]string{}}
	for k, v := range ctx.Response.Header.All() {
		a.header[string(k)] = string(v)
	}
	return a
}

// TestIntakeAnswers: the intake's answers, from the cheap refusals to the
// claim, against a real engine without Raft (docs/architecture.md, Request
// flow; docs/reference.md has every answer). Each row runs on a fresh
// store after its setup requests; stored says which key must exist after
// the row (and "" that nothing beyond the setup's was stored).
func TestIntakeAnswers(t *testing.T) {
	order := func(obj string, created int) string {
		return `{"id":"evt","created":` + strconv.Itoa(created) + `,"data":{"object":{"id":"` + obj + `"}}}`
	}
	cases := []struct {
		name     string
		setup    []request
		req      request
		status   int
		body     string // exact answer body; "" to check contains only
		contains string
		header   [2]string // a header the answer must carry
		stored   string
	}{
		{name: "new", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"},
			status: 202, body: `{"status":"accepted","key":"orders:msg_1"}` + "\n", stored: "orders:msg_1"},
		{name: "duplicate", setup: []request{{path: "/in/orders", body: `{"a":1}`, id: "msg_1"}},
			req:    request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"},
			status: 200, body: `{"status":"duplicate","key":"orders:msg_1","state":"pending"}` + "\n", stored: "orders:msg_1"},
		{name: "duplicate with another body is still a duplicate", setup: []request{{path: "/in/orders", body: `{"a":1}`, id: "msg_1"}},
			req:    request{path: "/in/orders", body: `{"a":2}`, id: "msg_1"},
			status: 200, body: `{"status":"duplicate","key":"orders:msg_1","state":"pending"}` + "\n"},
		{name: "bad signature", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", badSig: true},
			status: 401, contains: `{"status":"error","error":"bad signature: `},
		{name: "no signature", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", unsigned: true},
			status: 401, contains: `"status":"error"`},
		{name: "no key", req: request{path: "/in/jsonkey", body: `{"a":1}`, id: "msg_1"},
			status: 400, body: `{"status":"error","error":"no idempotency key: key part \"json:id\": missing or empty"}` + "\n"},
		{name: "key from the body", req: request{path: "/in/jsonkey", body: `{"id":"evt_9"}`, id: "msg_1"},
			status: 202, body: `{"status":"accepted","key":"jsonkey:evt_9"}` + "\n", stored: "jsonkey:evt_9"},
		{name: "not JSON", req: request{path: "/in/jsonkey", body: `{"id":"evt_1"`, id: "msg_1"},
			status: 400, body: `{"status":"error","error":"body is not valid JSON"}` + "\n"},
		{name: "nested too deep", req: request{path: "/in/jsonkey", body: strings.Repeat("[", 10001) + strings.Repeat("]", 10001), id: "msg_1"},
			status: 400, body: `{"status":"error","error":"body nests arrays and objects deeper than 10000 levels"}` + "\n"},
		{name: "key member twice", req: request{path: "/in/jsonkey", body: `{"id":"evt_1","id":"evt_2"}`, id: "msg_1"},
			status: 400, contains: `no idempotency key: key part \"json:id\": a member on its path appears twice in the body`},
		{name: "order member twice", req: request{path: "/in/ordered", body: `{"id":"evt","created":5,"data":{"object":{"id":"o1"}},"data":{"object":{"id":"o2"}}}`, id: "msg_1"},
			status: 400, contains: `appears twice in the body`},
		{name: "filter member twice", req: request{path: "/in/filtered", body: `{"type":"order","type":"noise"}`, id: "msg_1"},
			status: 400, contains: `appears twice in the body`},
		{name: "order object missing", req: request{path: "/in/ordered", body: `{"id":"evt","created":5}`, id: "msg_1"},
			status: 400, contains: `order: object json:data.object.id: missing`},
		{name: "ordered", req: request{path: "/in/ordered", body: order("obj_1", 5), id: "msg_1"},
			status: 202, stored: "ordered:msg_1"},
		{name: "older event of the object is stale", setup: []request{{path: "/in/ordered", body: order("obj_1", 10), id: "msg_new"}},
			req:    request{path: "/in/ordered", body: order("obj_1", 5), id: "msg_old"},
			status: 202, body: `{"status":"accepted","key":"ordered:msg_old","state":"stale"}` + "\n", stored: "ordered:msg_old"},
		{name: "filtered", req: request{path: "/in/filtered", body: `{"type":"noise"}`, id: "msg_1"},
			status: 200, body: `{"status":"filtered","type":"noise"}` + "\n"},
		{name: "not filtered", req: request{path: "/in/filtered", body: `{"type":"order"}`, id: "msg_1"},
			status: 202, stored: "filtered:msg_1"},
		{name: "replay guard: the body under a new id", setup: []request{{path: "/in/guarded", body: `{"a":1}`, id: "msg_1"}},
			req:    request{path: "/in/guarded", body: `{"a":1}`, id: "msg_2"},
			status: 200, body: `{"status":"duplicate","key":"guarded:msg_1","state":"pending"}` + "\n", stored: "guarded:msg_1"},
		{name: "413", req: request{path: "/in/orders", body: `{"a":"` + strings.Repeat("x", 1100) + `"}`, id: "msg_1"},
			status: 413, body: `{"status":"error","error":"body larger than max_body"}` + "\n"},
		{name: "405", req: request{method: "GET", path: "/in/orders"},
			status: 405, body: `{"status":"error","error":"method not allowed: use POST"}` + "\n", header: [2]string{"Allow", "POST"}},
		{name: "405 before the source is looked up", req: request{method: "GET", path: "/in/nosuch"},
			status: 405, body: `{"status":"error","error":"method not allowed: use POST"}` + "\n", header: [2]string{"Allow", "POST"}},
		{name: "404 unknown source", req: request{path: "/in/nosuch", body: `{"a":1}`, id: "msg_1"},
			status: 404, body: `{"status":"error","error":"unknown source"}` + "\n"},
		{name: "404 other path", req: request{method: "GET", path: "/v1/status"},
			status: 404, body: `{"status":"error","error":"not found"}` + "\n"},
		{name: "403", req: request{path: "/in/closed", body: `{"a":1}`, id: "msg_1"},
			status: 403, body: `{"status":"error","error":"client address not allowed"}` + "\n"},
		{name: "allowed address", req: request{path: "/in/closed", body: `{"a":1}`, id: "msg_1", peer: "192.0.2.7"},
			status: 202, stored: "closed:msg_1"},
		{name: "identity encoding", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", encodings: []string{"identity", "Identity"}},
			status: 202, stored: "orders:msg_1"},
		{name: "gzip encoding", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", encodings: []string{"gzip"}},
			status: 415, body: `{"status":"error","error":"content-encoding not supported: signatures cover the raw body"}` + "\n"},
		{name: "a second encoding header counts", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", encodings: []string{"identity", "gzip"}},
			status: 415, body: `{"status":"error","error":"content-encoding not supported: signatures cover the raw body"}` + "\n"},
		{name: "an empty encoding header hides none", req: request{path: "/in/orders", body: `{"a":1}`, id: "msg_1", encodings: []string{"", "br"}},
			status: 415, contains: "content-encoding not supported"},
		{name: "empty body", req: request{path: "/in/orders", body: ``, id: "msg_1"},
			status: 400, body: `{"status":"error","error":"empty body"}` + "\n"},
		{name: "livez", req: request{method: "GET", path: "/livez"}, status: 200, body: "ok\n"},
		{name: "readyz", req: request{method: "GET", path: "/readyz"}, status: 200, body: "ok\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newIntakeFixture(t)
			for _, r := range c.setup {
				if a := f.do(r); a.status != 202 {
					t.Fatalf("setup %s: %d %s", r.path, a.status, a.body)
				}
			}
			before := f.store.index
			a := f.do(c.req)
			if a.status != c.status {
				t.Fatalf("status %d, want %d: %s", a.status, c.status, a.body)
			}
			if c.body != "" && a.body != c.body {
				t.Errorf("body %q, want %q", a.body, c.body)
			}
			if !strings.Contains(a.body, c.contains) {
				t.Errorf("body %q, want it to contain %q", a.body, c.contains)
			}
			if c.header[0] != "" {
				if got := a.header[c.header[0]]; got != c.header[1] {
					t.Errorf("%s: %q, want %q", c.header[0], got, c.header[1])
				}
			}
			if got := a.header["X-Content-Type-Options"]; got != "nosniff" {
				t.Errorf("X-Content-Type-Options: %q, want nosniff on every answer", got)
			}
			if c.stored != "" {
				if _, err := f.store.Get(c.stored, false); err != nil {
					t.Errorf("%s not stored: %v", c.stored, err)
				}
			} else if f.store.index != before {
				t.Errorf("the request applied %d commands, want none", f.store.index-before)
			}
		})
	}
}

// TestIntakeClaimNotCommitted: a claim the store could not commit is 503
// with Retry-After, never a 2xx; the store's "no quorum" errors
// (Options.NotCommitted) are told apart from the others only in the log and
// the message.
// TestDuplicateOfAClaimInFlight: a second delivery of an event whose first
// claim is still being committed is no duplicate yet: it gets a 2xx only
// once a claim of the key is committed (its own, when the first is lost),
// never on the strength of a claim that may still fail.
func TestDuplicateOfAClaimInFlight(t *testing.T) {
	f := newIntakeFixture(t)
	h := &heldClaim{held: make(chan struct{}), release: make(chan struct{}), err: errNoQuorum}
	f.store.mu.Lock()
	f.store.holdClaim = h
	f.store.mu.Unlock()
	first := make(chan answer, 1)
	go func() { first <- f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"}) }()
	<-h.held
	second := f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"})
	_, stored, err := f.store.Lookup("orders:msg_1")
	if err != nil {
		t.Fatal(err)
	}
	if second.status/100 == 2 && !stored {
		t.Fatalf("the second delivery got %d %s while nothing is committed", second.status, second.body)
	}
	close(h.release)
	if a := <-first; a.status != 503 {
		t.Fatalf("the lost first claim: %d %s, want 503", a.status, a.body)
	}
	if second.status != 202 {
		t.Fatalf("the second delivery: %d %s, want 202 (its own claim committed)", second.status, second.body)
	}
}

// TestLateCommitKeepsItsBody: a claim whose commit outcome is unknown when
// the request ends (503) may still be encoded and committed afterwards (the
// proposer holds it): its payload must be the request's own bytes, not the
// pooled buffer the next request reads its body into.
func TestLateCommitKeepsItsBody(t *testing.T) {
	f := newIntakeFixture(t)
	h := &heldClaim{held: make(chan struct{}), release: make(chan struct{}), err: errNoQuorum}
	f.store.mu.Lock()
	f.store.holdClaim = h
	f.store.mu.Unlock()
	const body = `{"a":"the first request's body"}`
	first := make(chan answer, 1)
	go func() { first <- f.do(request{path: "/in/orders", body: body, id: "msg_1"}) }()
	<-h.held
	close(h.release)
	if a := <-first; a.status != 503 {
		t.Fatalf("the held claim: %d %s, want 503", a.status, a.body)
	}
	for i := range 4 { // the next requests take the pooled buffers
		if a := f.do(request{path: "/in/orders", body: `{"b":"another request's body, as long"}`, id: fmt.Sprintf("msg_%d", i+2)}); a.status != 202 {
			t.Fatalf("request %d: %d %s", i+2, a.status, a.body)
		}
	}
	if got := string(h.cmd.Payload); got != body {
		t.Fatalf("the held claim's payload now reads %q, want %q", got, body)
	}
}

func TestIntakeClaimNotCommitted(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		body string
	}{
		{"no quorum", fmt.Errorf("claim orders:msg_1: %w", errNoQuorum), `{"status":"error","error":"no quorum: not committed, retry"}` + "\n"},
		{"other", errors.New("disk on fire"), `{"status":"error","error":"claim failed, retry"}` + "\n"},
		{"bad command", fmt.Errorf("claim: %w", engine.ErrBadCommand), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newIntakeFixture(t)
			f.store.failClaim = c.err
			a := f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"})
			if errors.Is(c.err, engine.ErrBadCommand) {
				if a.status != 400 {
					t.Fatalf("status %d, want 400: %s", a.status, a.body)
				}
				return
			}
			if a.status != 503 || a.body != c.body {
				t.Fatalf("answer %d %q, want 503 %q", a.status, a.body, c.body)
			}
			if got := a.header["Retry-After"]; got != "1" {
				t.Fatalf("Retry-After %q, want 1", got)
			}
			if _, ok, _ := f.store.Lookup("orders:msg_1"); ok {
				t.Fatal("a failed claim stored the event")
			}
		})
	}
}

// TestClaimNotCommittedIsLoggedSampled: an election turns every claim in
// flight into a "claim not committed"; the log gets the first ten, then ten
// a second, each saying how many it stands for, while every answer is 503.
func TestClaimNotCommittedIsLoggedSampled(t *testing.T) {
	f := newIntakeFixture(t)
	var logs bytes.Buffer
	f.in.log = slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Now() // the signatures are checked against it too
	f.in.now = func() time.Time { return now }
	f.store.failClaim = fmt.Errorf("claim: %w", errNoQuorum)
	for i := range 50 {
		if a := f.do(request{path: "/in/orders", body: `{"a":1}`, id: fmt.Sprintf("msg_%d", i)}); a.status != 503 {
			t.Fatalf("claim %d: %d, want 503", i, a.status)
		}
	}
	if n := strings.Count(logs.String(), "claim not committed"); n != 10 {
		t.Fatalf("%d lines for 50 claims at one moment, want the burst of 10:\n%s", n, logs.String())
	}
	now = now.Add(time.Second)
	f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_late"})
	if !strings.Contains(logs.String(), "not_logged_since_last=40") {
		t.Fatalf("the next line does not count the 40 held back:\n%s", logs.String())
	}
}

// TestChangedDuplicateIsLoggedSampled: a captured delivery sent again and
// again under another stored event's id (a scheme that signs no timestamp
// never lets it expire) is a duplicate each time; the log gets the first
// ten "duplicate with a different body" lines, then ten a second, each
// saying how many it stands for.
func TestChangedDuplicateIsLoggedSampled(t *testing.T) {
	f := newIntakeFixture(t)
	var logs bytes.Buffer
	f.in.log = slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Now() // the signatures are checked against it too
	f.in.now = func() time.Time { return now }
	if a := f.do(request{path: "/in/orders", body: `{"a":1}`, id: "msg_1"}); a.status != 202 {
		t.Fatalf("first delivery: %d %s", a.status, a.body)
	}
	for i := range 50 {
		if a := f.do(request{path: "/in/orders", body: `{"a":2}`, id: "msg_1"}); a.status != 200 {
			t.Fatalf("changed duplicate %d: %d %s, want 200", i, a.status, a.body)
		}
	}
	if n := strings.Count(logs.String(), "duplicate with a different body"); n != 10 {
		t.Fatalf("%d lines for 50 changed duplicates at one moment, want the burst of 10:\n%s", n, logs.String())
	}
	now = now.Add(time.Second)
	f.do(request{path: "/in/orders", body: `{"a":2}`, id: "msg_1"})
	if !strings.Contains(logs.String(), "not_logged_since_last=40") {
		t.Fatalf("the next line does not count the 40 held back:\n%s", logs.String())
	}
}

// TestHandshakesStoreNothing: Slack's and Zoom's verified handshakes get
// their challenge's answer, one without its challenge a 400, and neither is
// stored as an event, even with an id a key could be read from.
func TestHandshakesStoreNothing(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "slack.secret"), "slack-signing-secret-0123456789\n")
	mustWrite(t, filepath.Join(dir, "zoom.secret"), "zoom-secret-token-0123456789ab\n")
	store := newMemStore(t)
	var logs bytes.Buffer // handle runs on this goroutine
	in := New(Options{Store: store, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Sources: loadSources(t, dir, `
[[source]]
name = "slack"
provider = "slack"
secret_files = ["slack.secret"]
forward = "http://127.0.0.1:1/slack"
key = ["json:event_id"]

[[source]]
name = "zoom"
provider = "zoom"
secret_files = ["zoom.secret"]
forward = "http://127.0.0.1:1/zoom"
`)})
	cases := []struct {
		source, secret, body string
		status               int
		contains             string
	}{
		{"slack", "slack-signing-secret-0123456789", `{"type":"url_verification","challenge":"c-123","event_id":"Ev1"}`, 200, `"challenge":"c-123"`},
		{"slack", "slack-signing-secret-0123456789", `{"type":"url_verification","event_id":"Ev2"}`, 400, "url_verification without a challenge: nothing stored"},
		// Slack's notice that it withheld a minute of events: no event_id,
		// answered 200 (a refusal counts toward disabling the app) and logged.
		{"slack", "slack-signing-secret-0123456789", `{"token":"x","type":"app_rate_limited","team_id":"T123456","minute_rate_limited":1518467820,"api_app_id":"A123456"}`, 200, `"status":"noted"`},
		{"zoom", "zoom-secret-token-0123456789ab", `{"event":"endpoint.url_validation","event_ts":1,"payload":{"plainToken":"p-1"}}`, 200, `"plainToken":"p-1"`},
		{"zoom", "zoom-secret-token-0123456789ab", `{"event":"endpoint.url_validation","event_ts":2,"payload":{}}`, 400, "without a payload.plainToken: nothing stored"},
	}
	for _, c := range cases {
		scheme, _ := providers.Lookup(c.source)
		hs, err := scheme.Sign([]byte(c.body), []byte(c.secret), time.Now(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/in/" + c.source)
		req.Header.SetContentType("application/json")
		for _, h := range hs {
			req.Header.Set(h.Name, h.Value)
		}
		req.SetBodyString(c.body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 40000}, nil)
		in.handle(&ctx)
		if got := ctx.Response.StatusCode(); got != c.status || !strings.Contains(string(ctx.Response.Body()), c.contains) {
			t.Errorf("%s %s: %d %s; want %d with %s", c.source, c.body, got, ctx.Response.Body(), c.status, c.contains)
		}
	}
	if !strings.Contains(logs.String(), `level=WARN msg="slack rate-limited the app`) || !strings.Contains(logs.String(), "source=slack team_id=T123456 minute=2018-02-12T20:37:00Z") {
		t.Errorf("the rate-limit notice is not logged as a WARN with its team and minute:\n%s", logs.String())
	}
	for _, key := range []string{"slack:Ev1", "slack:Ev2"} {
		if _, found, err := store.Lookup(key); err != nil || found {
			t.Errorf("%s stored (%v, %v): a handshake is never an event", key, found, err)
		}
	}
	if _, counts, err := store.eng.Counts(); err != nil || len(counts) != 0 {
		t.Errorf("events stored by handshakes: %v (%v)", counts, err)
	}
}

// On a source whose order allows missing = "unordered", an event without the
// order fields is claimed without the guard, but one that names an order
// member twice is refused all the same: the guard would not be skipped for a
// missing field, but for a value readers disagree on.
func TestUnorderedSourceRefusesADuplicateOrderMember(t *testing.T) {
	dir := t.TempDir()
	secret, err := providers.GenerateSecret("standard")
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "lax.secret"), secret+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "lax"
provider = "standard"
secret_files = ["lax.secret"]
forward = "http://127.0.0.1:1/lax"
order = { object = "json:data.id", time = "json:created", missing = "unordered" }
`)
	store := newMemStore(t)
	f := &intakeFixture{t: t, in: New(Options{Store: store, Sources: set}), store: store, secret: secret}
	if a := f.do(request{path: "/in/lax", body: `{"id":"e1"}`, id: "msg_1"}); a.status != 202 {
		t.Fatalf("an event without the order fields: %d %s, want 202 (claimed unordered)", a.status, a.body)
	}
	a := f.do(request{path: "/in/lax", body: `{"created":5,"data":{"id":"o1","id":"o2"}}`, id: "msg_2"})
	if a.status != 400 || !strings.Contains(a.body, "appears twice in the body") {
		t.Fatalf("an order member named twice: %d %s, want 400", a.status, a.body)
	}
	if _, stored, _ := store.Lookup("lax:msg_2"); stored {
		t.Fatal("the refused event was stored")
	}
}
