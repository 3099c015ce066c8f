package adminclient

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"oncehook/admin"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestErrorHints: the two first mistakes with a client command get a hint on
// what to change, because the API's answer alone does not say: no token
// configured (401 "missing bearer token") and the intake's address given
// for the admin one (its 404 "not found"). Other errors are printed as the
// API words them, without a hint that would mislead.
func TestErrorHints(t *testing.T) {
	const tokenHint = "set -token-file, ONCEHOOK_TOKEN_FILE or ONCEHOOK_TOKEN"
	const addrHint = "the admin listener ([admin] listen)?"
	for _, tc := range []struct {
		name     string
		token    string // the client's; "": none configured
		status   int
		body     string
		call     func(c *Client) error
		want     string
		hint     string // "": no hint
		withheld string // a hint that must not be given
	}{
		{"no token", "", 401, `{"error":"missing bearer token"}`, callStatus, "GET /v1/status: 401: missing bearer token", tokenHint, addrHint},
		{"no token, backup", "", 401, `{"error":"missing bearer token"}`, callBackup, "backup: 401: missing bearer token", tokenHint, addrHint},
		{"wrong token", "wrong", 401, `{"error":"invalid bearer token"}`, callStatus, "GET /v1/status: 401: invalid bearer token", "", tokenHint},
		{"intake address", "tok", 404, `{"status":"error","error":"not found"}` + "\n", callStatus, "GET /v1/status: 404: not found", addrHint, tokenHint},
		{"intake address, no token", "", 404, `{"status":"error","error":"not found"}` + "\n", callStatus, "GET /v1/status: 404: not found", addrHint, tokenHint},
		{"intake address, backup", "tok", 404, `{"status":"error","error":"not found"}` + "\n", callBackup, "backup: 404: not found", addrHint, tokenHint},
		{"unknown event", "tok", 404, `{"error":"no event with key \"s:k\""}`, callShow, `GET /v1/events/s:k: 404: no event with key "s:k"`, "", addrHint},
		{"unknown source", "tok", 404, `{"error":"unknown source orders"}`, callPause, "POST /v1/sources/orders/pause: 404: unknown source orders", "", addrHint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := answeringAlways(t, tc.status, tc.body)
			c := newTestClient(t, url, tc.token)
			err := tc.call(c)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.want) {
				t.Errorf("error %q, want it to start with %q", msg, tc.want)
			}
			if tc.hint != "" && !strings.Contains(msg, tc.hint) {
				t.Errorf("error %q, want the hint %q", msg, tc.hint)
			}
			if tc.hint == "" && msg != tc.want {
				t.Errorf("error %q, want %q and no hint", msg, tc.want)
			}
			if strings.Contains(msg, tc.withheld) {
				t.Errorf("error %q has the hint %q, which does not apply", msg, tc.withheld)
			}
			if tc.hint == addrHint && !strings.Contains(msg, url) {
				t.Errorf("error %q does not name the address %s", msg, url)
			}
		})
	}
}

// callStatus asks for the status; the test servers' answers are not a
// healthy cluster's, which Status reports after printing them.
func callStatus(c *Client) error {
	err := c.Status(context.Background(), &bytes.Buffer{}, false)
	if errors.As(err, new(ErrNotHealthy)) {
		return nil
	}
	return err
}
func callShow(c *Client) error {
	return c.ShowEvent(context.Background(), &bytes.Buffer{}, "s:k", false)
}
func callPause(c *Client) error {
	return c.Pause(context.Background(), &bytes.Buffer{}, "orders", "r", true)
}
func callBackup(c *Client) error {
	return c.SaveSnapshot(context.Background(), &bytes.Buffer{}, filepath.Join(os.TempDir(), "oncehook-adminclient-test-never-written"))
}

// TestTokenSources: a token file's surrounding white space and a byte order
// mark (Notepad) are not part of the token (sent, the mark would make every
// call a 401); ONCEHOOK_TOKEN is trimmed as token files are; an empty token
// file, or a token with control bytes (a binary file), is an error naming
// where the token came from, before anything is sent.
func TestTokenSources(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env, file string // file: the token file's content; "-": no file
		sent, err string
		mode      os.FileMode // 0o600 when 0
		warn      string      // what the CLI says on stderr
	}{
		{"plain file", "", "s3cret-token\n", "Bearer s3cret-token", "", 0, ""},
		{"a file others can read", "", "s3cret-token\n", "Bearer s3cret-token", "", 0o644, "has mode 0644: anyone on this machine can read the admin token (chmod o-rwx "},
		{"a file its group can read", "", "s3cret-token\n", "Bearer s3cret-token", "", 0o640, ""},
		{"bom", "", "\ufeffs3cret-token\n", "Bearer s3cret-token", "", 0, ""},
		{"bom crlf", "", "\ufeffs3cret-token\r\n", "Bearer s3cret-token", "", 0, ""},
		{"env with a newline", "s3cret-token\n", "-", "Bearer s3cret-token", "", 0, ""},
		{"an empty file", "", "\n", "", " is empty", 0, ""},
		{"a binary file", "", "\x8f\x01abc\x1b", "", " holds control bytes", 0, ""},
		{"control bytes in the env", "s3cret\x01token", "-", "", "ONCEHOOK_TOKEN holds control bytes", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent = r.Header.Get("Authorization")
				w.Write([]byte(statusOld))
			}))
			t.Cleanup(srv.Close)
			path := ""
			if tc.file != "-" {
				path = filepath.Join(t.TempDir(), "token")
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				if tc.mode != 0 {
					if err := os.Chmod(path, tc.mode); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Setenv("ONCEHOOK_TOKEN", tc.env)
			t.Setenv("ONCEHOOK_TOKEN_FILE", path)
			t.Setenv("ONCEHOOK_CA", "")
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			var stderr strings.Builder
			fs.SetOutput(&stderr)
			mk := Flags(fs)
			if err := fs.Parse([]string{"-addr", srv.URL}); err != nil {
				t.Fatal(err)
			}
			c, err := mk()
			if tc.warn == "" && stderr.Len() > 0 || tc.warn != "" && !strings.Contains(stderr.String(), tc.warn+path) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.warn)
			}
			if strings.Contains(stderr.String(), "s3cret") {
				t.Errorf("the warning shows the token: %q", stderr.String())
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || path != "" && !strings.Contains(err.Error(), path) {
					t.Fatalf("err %v, want %q naming where the token came from", err, tc.err)
				}
				if strings.Contains(err.Error(), "abc") || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("the error shows the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := callStatus(c); err != nil {
				t.Fatal(err)
			}
			if sent != tc.sent {
				t.Errorf("Authorization %q, want %q", sent, tc.sent)
			}
		})
	}
}

// newTestClient makes a client for addr as the commands do, with token as
// ONCEHOOK_TOKEN unless ONCEHOOK_TOKEN_FILE is set.
func newTestClient(t *testing.T, addr, token string) *Client {
	t.Helper()
	if os.Getenv("ONCEHOOK_TOKEN_FILE") == "" {
		t.Setenv("ONCEHOOK_TOKEN_FILE", "")
		t.Setenv("ONCEHOOK_TOKEN", token)
	}
	t.Setenv("ONCEHOOK_CA", "")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	mk := Flags(fs)
	if err := fs.Parse([]string{"-addr", addr}); err != nil {
		t.Fatal(err)
	}
	c, err := mk()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRestoreCutOffSaysItMayHaveTaken: a node that stops while a restore's
// answer is due (the connection breaks) leaves the operator not knowing
// whether the cluster took the backup; the error says so and how to tell.
func TestRestoreCutOffSaysItMayHaveTaken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the node went away before its answer
		}
	}))
	defer srv.Close()
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(backup, []byte("a backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, srv.URL, "admin-token-for-tests-0123456789abcdef")
	var out bytes.Buffer
	err := c.RestoreSnapshot(context.Background(), &out, backup)
	if err == nil || !strings.Contains(err.Error(), "whether the restore took is unknown") {
		t.Fatalf("restore cut off: %v, want an error saying the outcome is unknown", err)
	}
}

// TestSaveSnapshotChecksTheFileFirst: a path that cannot be written, or
// that is not a regular file, is an error naming it, before the node is
// asked for a backup (which it would stream into a closed connection and
// log as failed); a save over an existing file says it replaced it, and
// touches no other file beside it.
func TestSaveSnapshotChecksTheFileFirst(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Write([]byte("backup bytes"))
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, "token")
	missing := filepath.Join(t.TempDir(), "no-such-dir", "backup.db")
	err := c.SaveSnapshot(t.Context(), io.Discard, missing)
	if err == nil || !strings.Contains(err.Error(), "cannot write "+missing+": ") || strings.Contains(err.Error(), ".tmp") {
		t.Fatalf("save into a missing directory: %v, want an error naming %s", err, missing)
	}
	if asked.Load() != 0 {
		t.Fatal("the node was asked for a backup that could not be written")
	}
	dir := filepath.Join(t.TempDir(), "a-directory")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSnapshot(t.Context(), io.Discard, dir); err == nil || err.Error() != "cannot write "+dir+": not a regular file" {
		t.Fatalf("save over a directory: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(filepath.Join(dir, "elsewhere"), link); err != nil {
		t.Fatal(err)
	}
	if err := c.SaveSnapshot(t.Context(), io.Discard, link); err == nil || !strings.Contains(err.Error(), "a symbolic link") {
		t.Fatalf("save over a symbolic link: %v", err)
	}
	if asked.Load() != 0 {
		t.Fatal("the node was asked for a backup that could not be written")
	}
	file := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(file+".tmp", []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if b, err := os.ReadFile(file + ".tmp"); err != nil || string(b) != "someone else's" {
			t.Errorf("a file beside the backup was overwritten: %q, %v", b, err)
		}
		if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}()
	for i, want := range []string{"saved " + file + " (12 bytes)\n", "saved " + file + " (12 bytes), replacing the file that was there\n"} {
		var out bytes.Buffer
		if err := c.SaveSnapshot(t.Context(), &out, file); err != nil || out.String() != want {
			t.Fatalf("save %d: %q, %v; want %q", i+1, out.String(), err, want)
		}
	}
}

// answeringAlways serves body as JSON with status to every request until the
// test ends, and returns its URL.
func answeringAlways(t *testing.T, status int, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSaveSnapshotWantsAWholeStream: a node announces the trailer that ends
// a whole backup; a stream that ends without it, that is cut, or whose
// length differs saved nothing and leaves the previous backup in place. A
// node from before the trailer announces none, and its stream is saved.
func TestSaveSnapshotWantsAWholeStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		serve   func(w http.ResponseWriter)
		saved   bool
		wantErr string
	}{
		{"whole, with its end mark", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", backupTrailer)
			w.Write([]byte("backup bytes"))
			w.Header().Set(backupTrailer, "12")
		}, true, ""},
		{"a node without end marks", func(w http.ResponseWriter) {
			w.Write([]byte("backup bytes"))
		}, true, ""},
		{"failed part way: no end mark", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", backupTrailer)
			w.Write([]byte("backup"))
		}, false, "ended without its end mark after 6 bytes"},
		{"an end mark of another length", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", backupTrailer)
			w.Write([]byte("backup"))
			w.Header().Set(backupTrailer, "12")
		}, false, "sent 6 bytes but says the backup is 12"},
		{"cut off", func(w http.ResponseWriter) {
			w.Header().Set("Trailer", backupTrailer)
			w.Write([]byte("backup"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, false, "the stream was cut after 6 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.serve(w) }))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			t.Cleanup(srv.Close)
			c := newTestClient(t, srv.URL, "token")
			file := filepath.Join(t.TempDir(), "backup.db")
			if err := os.WriteFile(file, []byte("the last good backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := c.SaveSnapshot(t.Context(), io.Discard, file)
			b, _ := os.ReadFile(file)
			if tc.saved {
				if err != nil || string(b) != "backup bytes" {
					t.Fatalf("saved %q, %v; want the stream saved", b, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "nothing saved") {
				t.Errorf("error %v, want one saying %q and nothing saved", err, tc.wantErr)
			}
			if string(b) != "the last good backup" {
				t.Errorf("the previous backup was replaced by %q", b)
			}
			if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// TestShellQuote: the paging hint quotes an event key, which a webhook
// sender chose, for a shell; a real shell reads each back as it was and runs
// nothing inside it.
func TestShellQuote(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	trap := filepath.Join(dir, "ran")
	for _, key := range []string{
		"stripe:evt_123",
		"std:msg_2Lx/a.b@c%d+e=f,g-h",
		"stripe:$(touch " + trap + ")",
		"stripe:`touch " + trap + "`",
		"stripe:${HOME}$HOME",
		"it's:a 'key' with spaces",
		`a"b\c!d*e?f[g]h;i&j|k<l>m(n)o{p}q~r#s`,
		"",
	} {
		quoted := shellQuote(key)
		out, err := exec.Command(sh, "-c", "printf %s "+quoted).Output()
		if err != nil || string(out) != key {
			t.Errorf("%q quoted as %s reads back as %q (%v)", key, quoted, out, err)
		}
	}
	if _, err := os.Stat(trap); err == nil {
		t.Fatal("a quoted key ran a command")
	}
}

// TestRestoreOfADirectory: a FILE that is no regular file is refused before
// anything is sent, so the outcome is known: nothing restored.
func TestRestoreOfADirectory(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL, "token")
	dir := t.TempDir()
	err := c.RestoreSnapshot(t.Context(), io.Discard, dir)
	if err == nil || err.Error() != "cannot restore "+dir+": not a regular file; nothing sent" {
		t.Fatalf("restore of a directory: %v", err)
	}
	if asked.Load() != 0 {
		t.Fatal("the node was sent a directory")
	}
}

// TestRefusedConnectionHint: a node that refuses the connection (not
// running, or another address) gets a hint naming -addr and ONCEHOOK_ADDR.
func TestRefusedConnectionHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newTestClient(t, "http://"+addr, "tok")
	err = callStatus(c)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "-addr or ONCEHOOK_ADDR") {
		t.Fatalf("status against a closed port: %v, want the refusal and the -addr hint", err)
	}
}

// TestBrokenOffRequestHint: a request the node took and then dropped the
// connection of (a leader killed mid-request) may have taken effect: the
// error says so for a change; a read needs no such warning.
func TestBrokenOffRequestHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			conn.Read(buf) // the request, then no answer
			conn.Close()
		}
	}()
	c := newTestClient(t, "http://"+ln.Addr().String(), "tok")
	const hint = "it may have taken effect"
	if err := callPause(c); err == nil || !strings.Contains(err.Error(), hint) {
		t.Fatalf("pause cut off: %v, want the hint %q", err, hint)
	}
	if err := callStatus(c); err == nil || strings.Contains(err.Error(), hint) {
		t.Fatalf("status cut off: %v, want an error without the hint", err)
	}
	// Cut off in the TLS handshake, before the request was sent: nothing
	// can have taken effect.
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer closing.Close()
	go func() {
		for {
			conn, err := closing.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	if err := callPause(newTestClient(t, "https://"+closing.Addr().String(), "tok")); err == nil || strings.Contains(err.Error(), hint) {
		t.Fatalf("pause cut off in the TLS handshake: %v, want an error without the hint", err)
	}
}

// TestReplayPrintsWhatMayHaveTaken: a replay answered 503 with its keys'
// fates (no leader for some, an outcome unknown for others) prints them
// before the error, so the operator sees which keys may have replayed.
func TestReplayPrintsWhatMayHaveTaken(t *testing.T) {
	url := answeringAlways(t, 503, `{"error":"replay: cluster: outcome unknown","replayed":0,"keys":[],"skipped":[{"key":"s:a","error":"outcome unknown, it may have been replayed"}]}`)
	c := newTestClient(t, url, "tok")
	var out bytes.Buffer
	err := c.Replay(context.Background(), &out, admin.ReplayRequest{Keys: []string{"s:a"}, Reason: "r"})
	if err == nil || !strings.Contains(out.String(), "it may have been replayed") {
		t.Fatalf("replay answered 503: err %v, printed %q; want the error and the keys' fates printed", err, out.String())
	}
}

// TestPrintJSONKeepsKeysAsSent: the CLI's JSON prints a key holding &, <
// or > as it is, so that it can be copied into the next command.
func TestPrintJSONKeepsKeysAsSent(t *testing.T) {
	var b strings.Builder
	if err := printJSON(&b, map[string]string{"key": "stripe:a?q=1&b=<2>"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"stripe:a?q=1&b=<2>"`) {
		t.Fatalf("printed %s", b.String())
	}
}

// TestResetConnectionHint: an address that resets the connection without
// an answer (the cluster port given for the admin one) gets a hint naming
// -addr; a change cut off that way still says it may have taken effect.
func TestResetConnectionHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Read(make([]byte, 4096))
			conn.(*net.TCPConn).SetLinger(0) // close with a reset
			conn.Close()
		}
	}()
	c := newTestClient(t, "http://"+ln.Addr().String(), "tok")
	const hint = "is this the [admin] listen address, not the cluster port?"
	err = callStatus(c)
	if err == nil || !errors.Is(err, syscall.ECONNRESET) {
		t.Skipf("no reset seen: %v", err)
	}
	if !strings.Contains(err.Error(), hint) {
		t.Fatalf("status reset: %v, want the hint %q", err, hint)
	}
	if err := callPause(c); err == nil || !strings.Contains(err.Error(), "it may have taken effect") {
		t.Fatalf("pause reset: %v, want the may-have-taken-effect hint", err)
	}
}

// TestAddressWithAPathHint: an admin address given with a path (…/v1)
// answers the API's "no such route"; the error says to drop the path.
func TestAddressWithAPathHint(t *testing.T) {
	url := answeringAlways(t, 404, `{"error":"no such route"}`)
	const hint = "has a path: give the listener's address alone"
	if err := callStatus(newTestClient(t, url+"/v1", "tok")); err == nil || !strings.Contains(err.Error(), hint) {
		t.Fatalf("status at %s/v1: %v, want the hint %q", url, err, hint)
	}
	if err := callStatus(newTestClient(t, url, "tok")); err == nil || strings.Contains(err.Error(), hint) {
		t.Fatalf("status at %s: %v, want no path hint", url, err)
	}
}

// TestStatusOfAFrozenNodeEnds: a node that accepts the connection but never
// answers (stopped with SIGSTOP: the kernel still accepts) ends status and
// peers after StatusWait, saying what it may mean, instead of after the
// 60 s other commands may need.
func TestStatusOfAFrozenNodeEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	was := StatusWait
	StatusWait = 300 * time.Millisecond
	defer func() { StatusWait = was }()
	c := newTestClient(t, "http://"+ln.Addr().String(), "admin-token-for-tests-0123456789abcdef")
	for name, call := range map[string]func() error{
		"status": func() error { return c.Status(context.Background(), io.Discard, false) },
		"peers":  func() error { return c.ListPeers(context.Background(), io.Discard) },
	} {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "no answer within 300ms: the node may be stopped, frozen or busy") {
			t.Errorf("%s of a frozen node: %v", name, err)
		}
	}
}

// TestAddressWithoutAPort: a bare host (no scheme written) means the admin
// listener's default port, not http's 80, where no node listens; an address
// with a scheme is kept as written (a proxy's or an ingress's 443), and so
// are a port, a path and IPv6 brackets.
func TestAddressWithoutAPort(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"127.0.0.1", "http://127.0.0.1:7071"},
		{"node1:", "http://node1:7071"},
		{"10.0.0.2:8000", "http://10.0.0.2:8000"},
		{"[::1]", "http://[::1]:7071"},
		{"fd00::2", "http://[fd00::2]:7071"},
		{"10.0.0.2/oncehook", "http://10.0.0.2:7071/oncehook"},
		{"http://node1.internal", "http://node1.internal"},
		{"https://admin.example.com", "https://admin.example.com"},
		{"https://node1.internal:7443", "https://node1.internal:7443"},
		{"http://10.0.0.2/oncehook", "http://10.0.0.2/oncehook"},
	} {
		if c := newTestClient(t, tt.addr, "admin-token-for-tests-0123456789abcdef"); c.base != tt.want {
			t.Errorf("-addr %s: base %s, want %s", tt.addr, c.base, tt.want)
		}
	}
}

// TestNoEventsSaysSo: an empty page prints the table's header on stdout and
// says on stderr that nothing matched, naming the filter.
func TestNoEventsSaysSo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"events":[],"next":""}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, "admin-token-for-tests-0123456789abcdef")
	var stdout, stderr bytes.Buffer
	if err := c.Events(context.Background(), &stdout, &stderr, EventsQuery{State: "dead", Source: "orders", Limit: 50}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout.String(), "KEY") || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("stdout %q, want the header alone", stdout.String())
	}
	if got := stderr.String(); got != "no events in state dead, of source orders\n" {
		t.Errorf("stderr %q", got)
	}
}

// TestRestoreToNobodySaysNothingWasSent: a restore whose connection was
// never made (nothing listens at the address) sent nothing, and says so,
// rather than that its outcome is unknown.
func TestRestoreToNobodySaysNothingWasSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	backup := filepath.Join(t.TempDir(), "backup.db")
	if err := os.WriteFile(backup, []byte("a backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t, "http://"+addr, "admin-token-for-tests-0123456789abcdef")
	var out bytes.Buffer
	err = c.RestoreSnapshot(context.Background(), &out, backup)
	if err == nil || !strings.Contains(err.Error(), "nothing sent: no restore") || strings.Contains(err.Error(), "unknown") {
		t.Fatalf("restore to nobody: %v, want it to say nothing was sent", err)
	}
}
