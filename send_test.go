package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSendAddsHeaders: `oncehook send -header` carries the header an hmac
// source's key reads (the example config's legacy source could not be
// sent to without it), beside a signature computed the source's way; -id
// alone fills that header; a
// -header cannot replace the signature, and a malformed one is a usage
// error.
func TestSendAddsHeaders(t *testing.T) {
	dir := t.TempDir()
	const secret = "legacy-secret-for-tests-0123456789"
	mustWrite(t, filepath.Join(dir, "legacy.secret"), secret+"\n")
	mustWrite(t, filepath.Join(dir, "event.json"), `{"a":1}`)
	mustWrite(t, filepath.Join(dir, "oncehook.toml"), `[node]
id = "node1"
data_dir = "data"
listen = "127.0.0.1:0"

[[source]]
name = "legacy"
provider = "hmac"
secret_files = ["legacy.secret"]
key = ["header:X-Request-Id"]
hmac = { header = "X-Signature", algorithm = "sha256", encoding = "hex", prefix = "sha256=" }
forward = "http://127.0.0.1:9/legacy"
`)
	got := make(chan http.Header, 1)
	intake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		if r.Header.Get("X-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			w.WriteHeader(http.StatusUnauthorized)
		} else {
			w.WriteHeader(http.StatusAccepted)
		}
		got <- r.Header.Clone()
	}))
	defer intake.Close()
	send := func(extra ...string) (string, error) {
		args := append([]string{"send", "-config", filepath.Join(dir, "oncehook.toml"), "-source", "legacy",
			"-file", filepath.Join(dir, "event.json"), "-url", intake.URL + "/in/legacy"}, extra...)
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := run(ctx, args, &out, &errOut)
		return out.String(), err
	}

	if out, err := send("-header", "X-Request-Id: req-1"); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	h := <-got
	if h.Get("X-Request-Id") != "req-1" || len(h.Values("X-Signature")) != 1 {
		t.Fatalf("headers %v: want X-Request-Id req-1 and one signature, the computed one", h)
	}
	// A header the signing sets is refused, not silently replaced.
	if _, err := send("-header", "X-Request-Id: req-1", "-header", "X-Signature: forged"); err == nil {
		t.Fatal("-header X-Signature: sent; want a usage error (the signing sets it)")
	} else if msg, code := exitStatus(err); code != 2 || !strings.Contains(msg, "-header X-Signature: hmac's signing sets this header") {
		t.Fatalf("-header X-Signature: exit %d %q; want a usage error naming the header", code, msg)
	}
	select {
	case h := <-got:
		t.Fatalf("the refused send reached the intake: %v", h)
	default:
	}
	// -id alone fills the header the key reads; -header wins over it.
	if out, err := send("-id", "req-2"); err != nil {
		t.Fatalf("send -id: %v\n%s", err, out)
	}
	if h := <-got; h.Get("X-Request-Id") != "req-2" {
		t.Fatalf("send -id req-2: X-Request-Id %q, want req-2", h.Get("X-Request-Id"))
	}
	if out, err := send("-id", "req-3", "-header", "X-Request-Id: req-4"); err != nil {
		t.Fatalf("send: %v\n%s", err, out)
	}
	if h := <-got; h.Values("X-Request-Id")[0] != "req-4" || len(h.Values("X-Request-Id")) != 1 {
		t.Fatalf("send -id req-3 -header req-4: X-Request-Id %q, want only req-4", h.Values("X-Request-Id"))
	}
	for _, bad := range []string{"X-Request-Id", ": v", "X Request: v"} {
		_, err := send("-header", bad)
		if msg, code := exitStatus(err); code != 2 || !strings.Contains(msg, "-header") {
			t.Errorf("-header %q: exit %d %q, want a usage error", bad, code, msg)
		}
	}
}

// TestSendRefusalKeepsTheSecret: a -header naming the header a token
// provider's signing sets (gitlab's X-Gitlab-Token carries the secret) is
// refused without quoting the value the signing put there.
func TestSendRefusalKeepsTheSecret(t *testing.T) {
	dir := t.TempDir()
	const secret = "gitlab-token-for-tests-0123456789"
	mustWrite(t, filepath.Join(dir, "gitlab.secret"), secret+"\n")
	mustWrite(t, filepath.Join(dir, "event.json"), `{"object_kind":"push"}`)
	mustWrite(t, filepath.Join(dir, "oncehook.toml"), `[node]
id = "node1"
data_dir = "data"
listen = "127.0.0.1:0"

[[source]]
name = "gl"
provider = "gitlab"
secret_files = ["gitlab.secret"]
forward = "http://127.0.0.1:9/gl"
`)
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"send", "-config", filepath.Join(dir, "oncehook.toml"), "-source", "gl",
		"-file", filepath.Join(dir, "event.json"), "-url", "http://127.0.0.1:9/in/gl", "-header", "X-Gitlab-Token: guess"}, &out, &errOut)
	msg, code := exitStatus(err)
	if code != 2 || !strings.Contains(msg, "-header X-Gitlab-Token: gitlab's signing sets this header") {
		t.Fatalf("exit %d %q; want a usage error naming the header", code, msg)
	}
	if strings.Contains(msg+out.String()+errOut.String(), secret) {
		t.Fatalf("the refusal quotes the secret: %q", msg)
	}
}
