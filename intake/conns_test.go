package intake

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
)

// TestMaxConnsPerIPIsApplied: [node] max_conns_per_ip reaches the intake's
// server; a client address over it is refused with 429 at accept.
func TestMaxConnsPerIPIsApplied(t *testing.T) {
	in := New(Options{Store: nullStore{}, MaxConnsPerIP: 2})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := in.HTTPServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Shutdown()
		<-served
	}()
	addr := ln.Addr().String()
	// Two kept-alive connections, each proven open by an answered request.
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection within the cap: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	resp := rawRequest(t, "http://"+addr, "GET /livez HTTP/1.1\r\nHost: x", "")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third connection: status %d, want 429", resp.StatusCode)
	}
}
