package intake

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/config"
	"oncehook/providers"
)

// BenchmarkIntakeHandler: one signed 1 KiB Standard Webhooks delivery through
// the intake handler per op, on a reused RequestCtx.
func BenchmarkIntakeHandler(b *testing.B) { benchIntakeHandler(b, "") }

// BenchmarkIntakeHandlerJSONKey: the same delivery on a source keyed by a
// JSON field, so the body is also checked to be valid JSON.
func BenchmarkIntakeHandlerJSONKey(b *testing.B) { benchIntakeHandler(b, "key = [\"json:id\"]\n") }

// benchIntakeHandler runs the intake benchmark on a standard source with extra TOML
// keys appended to its table.
func benchIntakeHandler(b *testing.B, sourceExtra string) {
	dir := b.TempDir()
	secret, _ := providers.GenerateSecret("standard")
	mustWrite(b, filepath.Join(dir, "orders.secret"), secret+"\n")
	mustWrite(b, filepath.Join(dir, "admin.token"), "admin-token-for-tests-0123456789abcdef\n")
	cfgPath := filepath.Join(dir, "oncehook.toml")
	mustWrite(b, cfgPath, fmt.Sprintf("[node]\nid = \"node1\"\ndata_dir = %q\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntokens = [{ name = \"ops\", token_file = \"admin.token\" }]\n",
		filepath.Join(dir, "data"))+"\n[[source]]\nname = \"orders\"\nprovider = \"standard\"\nsecret_files = [\"orders.secret\"]\nforward = \"http://127.0.0.1:1/orders\"\n"+sourceExtra)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	set, err := Compile(cfg.Sources)
	if err != nil {
		b.Fatal(err)
	}
	in := New(Options{Store: nullStore{}, Sources: set})
	s, _ := providers.Lookup("standard")
	pad := make([]byte, 1024-64)
	for i := range pad {
		pad[i] = 'x'
	}
	const n = 1024 // distinct signed requests, signed before the clock starts
	type signed struct {
		body []byte
		hs   []providers.Header
	}
	reqs := make([]signed, n)
	for i := range reqs {
		id := "msg_" + strconv.Itoa(i)
		body := []byte(fmt.Sprintf(`{"id":%q,"pad":"%s"}`, id, pad))
		hs, err := s.Sign(body, []byte(secret), time.Now(), id, nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = signed{body, hs}
	}
	var ctx fasthttp.RequestCtx
	var req fasthttp.Request
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	b.ReportAllocs()
	b.SetBytes(1024)
	i := 0
	for b.Loop() {
		r := &reqs[i%n]
		i++
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/in/orders")
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.Header.SetContentType("application/json")
		for _, h := range r.hs {
			ctx.Request.Header.Set(h.Name, h.Value)
		}
		ctx.Request.SetBodyRaw(r.body)
		in.handle(&ctx)
		if ctx.Response.StatusCode() != fasthttp.StatusAccepted {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
