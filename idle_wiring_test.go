package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/connlimit"
)

// TestIdleIntakeConnectionGivesWay: the intake's fasthttp server tells its
// listener which connections wait for a request head (intakeIdleHook,
// intakeServing), so a full intake takes a new delivery's connection in
// place of one held idle after its answer, or trickling its next head a
// byte at a time (fasthttp calls a connection active at its first byte),
// instead of refusing every sender until the timeouts.
func TestIdleIntakeConnectionGivesWay(t *testing.T) {
	for _, next := range []string{"", "GET /livez HTTP/1.1\r\nHo"} {
		name := "idle"
		if next != "" {
			name = "trickling"
		}
		t.Run(name, func(t *testing.T) { idleIntakeGivesWay(t, next) })
	}
}

func idleIntakeGivesWay(t *testing.T, next string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := connlimit.Wrap(ln, connlimit.Limits{Total: 1}, connlimit.Options{Name: "intake", MinIdle: time.Nanosecond})
	srv := &fasthttp.Server{Handler: intakeServing(wl, func(ctx *fasthttp.RequestCtx) {}), ConnState: intakeIdleHook(wl), IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(wl) }()
	defer func() { srv.Shutdown(); <-done }()
	addr := ln.Addr().String()

	get := func(c net.Conn, br *bufio.Reader) int {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
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
	if st := get(idler, ib); st != http.StatusOK {
		t.Fatalf("first request: %d", st)
	}
	if next != "" {
		io.WriteString(idler, next)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		st := get(c, bufio.NewReader(c))
		c.Close()
		if st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection beside an idle one: %d, want 200", st)
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
