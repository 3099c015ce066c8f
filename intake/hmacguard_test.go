package intake

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// TestHMACTimestampReplayGuard: a generic sender whose template signs a
// timestamp but whose key is an unsigned header has the replay guard on,
// and the guard holds the signed timestamp with the body. A captured
// delivery resent under a new id (its own timestamp, within the tolerance)
// is a duplicate of the original; the sender's next event with the same
// body (a heartbeat) carries a new timestamp and is a new event, not a
// replay held for the source's retention.
func TestHMACTimestampReplayGuard(t *testing.T) {
	const secret = "generic-secret-tsonly-0123456789abcdef"
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "ts.secret"), secret+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "ts"
provider = "hmac"
secret_files = ["ts.secret"]
key = ["header:X-Request-Id"]
hmac = { header = "X-Sig", timestamp_header = "X-Ts", template = "{timestamp}.{body}" }
forward = "http://127.0.0.1:1/ts"
`)
	spec := &providers.HMACSpec{Header: "X-Sig", TimestampHeader: "X-Ts", Template: "{timestamp}.{body}"}
	scheme, _ := providers.Lookup("hmac")
	store := newMemStore(t)
	in := New(Options{Store: store, Sources: set})
	send := func(id string, at time.Time, body string) answer {
		t.Helper()
		hs, err := scheme.Sign([]byte(body), []byte(secret), at, "", spec)
		if err != nil {
			t.Fatal(err)
		}
		return postSigned(in, "/in/ts", append(hs, providers.Header{Name: "X-Request-Id", Value: id}), body)
	}
	now := time.Now()
	const ping = `{"ping":1}`
	for _, step := range []struct {
		name, id string
		at       time.Time
		body     string
		want     int
		wantBody string
	}{
		{"the first event", "r1", now.Add(-time.Minute), ping, 202, `"key":"ts:r1"`},
		{"the same delivery under a new id", "r2", now.Add(-time.Minute), ping, 200, `"key":"ts:r1"`},
		{"the next event with the same body", "r3", now, ping, 202, `"key":"ts:r3"`},
		{"another body at the first time", "r4", now.Add(-time.Minute), `{"ping":2}`, 202, `"key":"ts:r4"`},
	} {
		a := send(step.id, step.at, step.body)
		if a.status != step.want || !strings.Contains(a.body, step.wantBody) {
			t.Fatalf("%s: %d %s, want %d with %s", step.name, a.status, a.body, step.want, step.wantBody)
		}
		_, stored, err := store.Lookup("ts:" + step.id)
		if err != nil || stored != (step.want == 202) {
			t.Fatalf("%s: stored %v (%v), want %v", step.name, stored, err, step.want == 202)
		}
	}
}

// TestShopifyReplayGuardByListedTopic: Shopify sends one body under several
// topics at once (orders/create and orders/updated of a new order). On a
// source with the guard on that lists its topics (accept_types), the guard
// holds the topic with the body: each listed topic's delivery is a new
// event, and the captured body resent under a listed topic and a new event
// id is a duplicate; a topic not listed is filtered, so a captured body
// gives at most one new event per listed topic. Without the list the topic,
// unsigned, could be anything: the guard holds the body alone.
func TestShopifyReplayGuardByListedTopic(t *testing.T) {
	const secret = "shop-secret-2-0123456789abcdef0123456"
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "shop.secret"), secret+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "listed"
provider = "shopify"
secret_files = ["shop.secret"]
replay_guard = "body"
accept_types = ["orders/create", "orders/updated"]
forward = "http://127.0.0.1:1/listed"

[[source]]
name = "unlisted"
provider = "shopify"
secret_files = ["shop.secret"]
replay_guard = "body"
forward = "http://127.0.0.1:1/unlisted"
`)
	scheme, _ := providers.Lookup("shopify")
	store := newMemStore(t)
	in := New(Options{Store: store, Sources: set})
	send := func(source, id, topic, body string) answer {
		t.Helper()
		hs, err := scheme.Sign([]byte(body), []byte(secret), time.Now(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		return postSigned(in, "/in/"+source, append(hs, providers.Header{Name: "X-Shopify-Topic", Value: topic}), body)
	}
	const order = `{"id":820982911946154500,"total_price":"10.00"}`
	for _, step := range []struct {
		name, source, id, topic string
		want                    int
		wantBody                string
	}{
		{"orders/create", "listed", "e1", "orders/create", 202, `"key":"listed:e1"`},
		{"orders/updated, the same body", "listed", "e2", "orders/updated", 202, `"key":"listed:e2"`},
		{"orders/create resent under a new id", "listed", "e3", "orders/create", 200, `"key":"listed:e1"`},
		{"orders/updated resent under a new id", "listed", "e4", "orders/updated", 200, `"key":"listed:e2"`},
		{"resent under a topic not listed", "listed", "e5", "anything/5", 200, `"status":"filtered"`},
		{"no list: orders/create", "unlisted", "u1", "orders/create", 202, `"key":"unlisted:u1"`},
		{"no list: another topic, the same body", "unlisted", "u2", "anything/2", 200, `"key":"unlisted:u1"`},
	} {
		a := send(step.source, step.id, step.topic, order)
		if a.status != step.want || !strings.Contains(a.body, step.wantBody) {
			t.Fatalf("%s: %d %s, want %d with %s", step.name, a.status, a.body, step.want, step.wantBody)
		}
	}
}

// postSigned runs a POST of body to path with headers through the intake's
// handler, from 127.0.0.1.
func postSigned(in *Server, path string, headers []providers.Header, body string) answer {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(path)
	for _, h := range headers {
		req.Header.Set(h.Name, h.Value)
	}
	req.SetBodyString(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 40000}, nil)
	in.handle(&ctx)
	return answer{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body())}
}
