package admin

import (
	"bufio"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oncehook/config"
)

func TestZZDiffUncleanPaths(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "admin.token"), []byte(testToken+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "orders.secret"), []byte("whsec_"+strings.Repeat("QUFB", 8)+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "oncehook.toml"), []byte(`[node]
id = "node1"
data_dir = "`+filepath.Join(dir, "data")+`"
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"
tokens = [{ name = "ops", token_file = "admin.token" }]

[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/orders"
`), 0o600)
	cfg, err := config.Load(filepath.Join(dir, "oncehook.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: func() *config.Config { return cfg }, Store: newEngineStore(t), Version: "test"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := s.srv.Handler
	for _, line := range []string{
		"GET /./v1/status HTTP/1.1", "GET /v1//status HTTP/1.1", "GET /v1/status/. HTTP/1.1",
		"GET /v1/./status HTTP/1.1", "GET /v1%2Fstatus HTTP/1.1", "GET /v1/%2e/status HTTP/1.1",
		"GET /v1/status/ HTTP/1.1", "GET /debug/pprof HTTP/1.1", "GET /nope/../v1/status HTTP/1.1",
		"CONNECT /v1//status HTTP/1.1", "GET /v1/status?x=//a HTTP/1.1", "GET //metrics HTTP/1.1",
		"GET /v1/events/a%2F..%2Fb HTTP/1.1", "GET http://127.0.0.1//v1/status HTTP/1.1",
	} {
		req, err := http_ReadRequest(line)
		if err != nil {
			t.Errorf("%s: %v", line, err)
			continue
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		t.Logf("%-45s -> %d loc=%q conn=%q", line, w.Code, w.Header().Get("Location"), w.Header().Get("Connection"))
	}
}

func http_ReadRequest(line string) (*httpRequest, error) {
	return readReq(bufio.NewReader(strings.NewReader(line + "\r\nHost: 127.0.0.1\r\n\r\n")))
}
