package intake

import (
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/config"
	"oncehook/engine"
	"oncehook/providers"
)

// compileSecret is the standard source's secret in TestCompileSource.
const compileSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// loadConfig writes a config with the given [[source]] tables into dir and
// loads it.
func loadConfig(t *testing.T, dir, sourcesTOML string) *config.Config {
	t.Helper()
	mustWrite(t, filepath.Join(dir, "admin.token"), "admin-token-for-tests-0123456789abcdef\n")
	cfgPath := filepath.Join(dir, "oncehook.toml")
	mustWrite(t, cfgPath, "[admin]\ntokens = [{ name = \"ops\", token_file = \"admin.token\" }]\n"+sourcesTOML)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// httpHeaders reads a providers.Request's headers from an http.Header.
type httpHeaders http.Header

func (h httpHeaders) Peek(name string) []byte {
	if v := http.Header(h).Get(name); v != "" {
		return []byte(v)
	}
	return nil
}

// TestCompileSource: one source in, a ready source or an error naming the
// source and the key out; the input is not changed. Compile refuses a set
// with any such source.
func TestCompileSource(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "good.schema.json"), `{"type":"object"}`)
	mustWrite(t, filepath.Join(dir, "bad.schema.json"), `{"type": 12}`)
	cfg := loadConfig(t, dir, `
[[source]]
name = "orders"
provider = "standard"
secrets = ["`+compileSecret+`"]
forward = "http://127.0.0.1:9/orders"
schema_file = "good.schema.json"
order = { object = "json:data.id", time = "json:created" }
type = "json:type"
accept_types = ["order.paid"]

[[source]]
name = "generic"
provider = "hmac"
secrets = ["generic-secret"]
key = ["header:X-Request-Id"]
hmac = { header = "X-Signature" }
forward = "http://127.0.0.1:9/generic"
`)
	good, generic := cfg.Sources[0], cfg.Sources[1]
	generic.HMAC = &providers.HMACSpec{Header: "X-Signature", Algorithm: "SHA512"} // as built in code

	tests := []struct {
		name   string
		change func(s *config.Source)
		err    string // "": compiles
	}{
		{"as loaded", func(*config.Source) {}, ""},
		{"unknown provider", func(s *config.Source) { s.Provider = "nope" }, `source orders: unknown provider "nope"`},
		{"malformed secret", func(s *config.Source) { s.Secrets = []config.Secret{config.Secret("whsec_***")} }, "source orders: verifier: "},
		{"no secret, no keys_url", func(s *config.Source) { s.Secrets = nil }, "source orders: verifier: "},
		{"keys_url only", func(s *config.Source) { s.Secrets, s.KeysURL = nil, "https://keys.example.com/k" }, ""},
		{"bad key part", func(s *config.Source) { s.Key = []string{"query:id"} }, "source orders: key: "},
		{"no key", func(s *config.Source) { s.Key = nil }, "source orders: key: "},
		{"bad order object", func(s *config.Source) { s.Order = &config.Order{Object: "id", Time: "json:created"} }, "source orders: order.object: "},
		{"bad order time", func(s *config.Source) { s.Order = &config.Order{Object: "json:id", Time: "when"} }, "source orders: order.time: "},
		{"bad type", func(s *config.Source) { s.Type = "type" }, "source orders: type: "},
		{"schema does not compile", func(s *config.Source) { s.SchemaFile = filepath.Join(dir, "bad.schema.json") }, "source orders: schema_file "},
		{"schema missing", func(s *config.Source) { s.SchemaFile = filepath.Join(dir, "gone.json") }, "source orders: schema_file "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			s.Order = &config.Order{Object: good.Order.Object, Time: good.Order.Time}
			tt.change(&s)
			before := s
			src, err := CompileSource(s)
			if !reflect.DeepEqual(s, before) {
				t.Errorf("CompileSource changed its source")
			}
			_, setErr := Compile([]config.Source{generic, s})
			if tt.err == "" {
				if err != nil || setErr != nil {
					t.Fatalf("CompileSource = %v, Compile = %v", err, setErr)
				}
				if src.name != s.Name || src.keyer == nil || src.verifier == nil || src.schema == nil || src.typeField == nil || src.orderObject == nil {
					t.Errorf("compiled source is missing parts: %+v", src)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Fatalf("CompileSource = %v, want %q...", err, tt.err)
			}
			if setErr == nil || setErr.Error() != err.Error() {
				t.Errorf("Compile = %v, want CompileSource's error", setErr)
			}
			if strings.Contains(err.Error(), "***") {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}

	// The verifiers serve: the standard one checks the signature, the
	// hmac one fills its table's defaults in a copy, and a keys_url source
	// without secrets refuses until its key set gives it keys.
	now := time.Now()
	body := []byte(`{"type":"order.paid"}`)
	sch, _ := providers.Lookup("standard")
	hs, err := sch.Sign(body, []byte(compileSecret), now, "msg_1", nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for _, x := range hs {
		h.Set(x.Name, x.Value)
	}
	src, err := CompileSource(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.verifier.Verify(&providers.Request{Body: body, Header: httpHeaders(h), Now: now}); err != nil {
		t.Errorf("Verify = %v", err)
	}
	if err := src.verifier.Verify(&providers.Request{Body: []byte(`{}`), Header: httpHeaders(h), Now: now}); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("Verify of a changed body = %v", err)
	}
	if _, err := CompileSource(generic); err != nil || generic.HMAC.Algorithm != "SHA512" || generic.HMAC.Template != "" {
		t.Errorf("hmac source: %v, table now %+v", err, generic.HMAC)
	}
	keysOnly := good
	keysOnly.Secrets, keysOnly.KeysURL = nil, "https://keys.example.com/k"
	if src, err = CompileSource(keysOnly); err != nil {
		t.Fatal(err)
	}
	if err := src.verifier.Verify(&providers.Request{Body: body, Header: httpHeaders(h), Now: now}); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("keys_url source before its keys: Verify = %v, want a bad signature", err)
	}
}

// The stored headers hold Content-Type once, whether or not forward_headers
// lists it, and each listed header's first value.
func TestForwardHeadersStored(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.Header.Add("X-Multi", "one")
	ctx.Request.Header.Add("X-Multi", "two")
	got := forwardHeaders(&ctx, []string{"content-type", "X-Multi", "X-Absent", "Content-Type"})
	want := []engine.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "X-Multi", Value: "one"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored headers %v, want %v", got, want)
	}
}

// A header listed twice in forward_headers, in any case, is stored once: the
// handler gets the provider's header once, as it was sent.
func TestForwardHeadersListedTwice(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Add("X-Lower", "only")
	got := forwardHeaders(&ctx, uniqueNames([]string{"x-lower", "X-LOWER", "X-Lower"}))
	want := []engine.Header{{Name: "x-lower", Value: "only"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stored headers %v, want %v", got, want)
	}
	if got := uniqueNames([]string{"A", "b", "a", "B", "c"}); !reflect.DeepEqual(got, []string{"A", "b", "c"}) {
		t.Fatalf("uniqueNames = %q", got)
	}
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "s.secret"), "whsec_"+strings.Repeat("QUFB", 8)+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "twice"
provider = "standard"
secret_files = ["s.secret"]
forward = "http://127.0.0.1:1/t"
forward_headers = ["x-lower", "X-LOWER", "X-Other"]
`)
	if got := set.Source("twice").fwdHeaders; !reflect.DeepEqual(got, []string{"x-lower", "X-Other"}) {
		t.Fatalf("compiled forward headers %q, want each name once", got)
	}
}
