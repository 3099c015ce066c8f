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
		var req fasthttp.Request
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/in/ts")
		for _, h := range hs {
			req.Header.Set(h.Name, h.Value)
		}
		req.Header.Set("X-Request-Id", id)
		req.SetBodyString(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 40000}, nil)
		in.handle(&ctx)
		return answer{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body())}
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
