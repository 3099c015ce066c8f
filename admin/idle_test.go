package admin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"oncehook/connlimit"
)

// TestIdleAdminConnectionGivesWay: on a full admin listener, a connection
// kept open after its answer (one scrape, then silence) gives its place to
// a new one, so that a few clients holding idle connections cannot lock
// the operator out for the idle timeout.
func TestIdleAdminConnectionGivesWay(t *testing.T) {
	_, s := newTestServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := connlimit.Wrap(ln, connlimit.Limits{Total: 1}, connlimit.Options{Name: "admin", MinIdle: time.Nanosecond})
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(wl) }()
	t.Cleanup(func() { s.srv.Close(); <-done })
	addr := ln.Addr().String()

	get := func(c net.Conn, br *bufio.Reader, auth bool) int {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req := "GET /metrics HTTP/1.1\r\nHost: " + addr + "\r\n"
		if auth {
			req = "GET /v1/status HTTP/1.1\r\nHost: " + addr + "\r\n"
			req += "Authorization: Bearer " + testToken + "\r\n"
		}
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			return 0
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	idler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idler.Close()
	ib := bufio.NewReader(idler)
	if st := get(idler, ib, false); st != http.StatusNotFound {
		t.Fatalf("a scrape without a token: %d, want 404", st)
	}
	// The idle connection holds the only place until the operator's comes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		st := get(op, bufio.NewReader(op), true)
		op.Close()
		if st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator's request beside an idle connection: %d, want 200", st)
		}
		time.Sleep(10 * time.Millisecond) // the idle state follows the answer by a moment
	}
	_ = idler.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ib.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the idle connection read %v, want EOF (closed)", err)
	}
	if wl.Reaped() < 1 {
		t.Errorf("reaped %d, want at least 1", wl.Reaped())
	}
}
