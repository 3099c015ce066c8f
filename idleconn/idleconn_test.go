package idleconn

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair returns both ends of a TCP connection on loopback.
func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// becomes waits until Reusable(c) is want: bytes and a close travel
// through the kernel, not in step with the peer's call returning.
func becomes(t *testing.T, c net.Conn, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for Reusable(c) != want {
		if time.Now().After(deadline) {
			t.Fatalf("Reusable stayed %v", !want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReusable(t *testing.T) {
	t.Run("idle and open", func(t *testing.T) {
		c, _ := pair(t)
		if !Reusable(c) {
			t.Fatal("an idle open connection is not reusable")
		}
		// The peek does not consume: it says the same again.
		if !Reusable(c) {
			t.Fatal("second look differs")
		}
	})
	t.Run("bytes nobody asked for", func(t *testing.T) {
		c, s := pair(t)
		if _, err := s.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		becomes(t, c, false)
		// Peeked, not read: the bytes are still there for whoever looks.
		b := make([]byte, 4)
		if n, err := c.Read(b); err != nil || string(b[:n]) != "HTTP" {
			t.Fatalf("read %q, %v", b[:n], err)
		}
	})
	t.Run("closed by the peer", func(t *testing.T) {
		c, s := pair(t)
		s.Close()
		becomes(t, c, false)
	})
	t.Run("closed here", func(t *testing.T) {
		c, _ := pair(t)
		c.Close()
		if Reusable(c) {
			t.Fatal("a closed connection is reusable")
		}
	})
	t.Run("not a socket", func(t *testing.T) {
		c, s := net.Pipe()
		defer c.Close()
		defer s.Close()
		if !Reusable(c) {
			t.Fatal("a connection that cannot be peeked at is taken as reusable")
		}
	})
}

// TestProbe: a Probe made once says what Reusable says, each time it is
// asked, and asking allocates nothing (it runs before every reuse of a
// handler connection).
func TestProbe(t *testing.T) {
	c, s := pair(t)
	p := NewProbe(c)
	for range 3 {
		if !p.Reusable() {
			t.Fatal("an idle open connection is not reusable")
		}
	}
	if n := testing.AllocsPerRun(100, func() { p.Reusable() }); n != 0 {
		t.Errorf("Reusable allocates %v times", n)
	}
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Reusable() {
		if time.Now().After(deadline) {
			t.Fatal("a stray byte never made the connection unusable")
		}
		time.Sleep(time.Millisecond)
	}
	pc, ps := net.Pipe()
	defer pc.Close()
	defer ps.Close()
	if !NewProbe(pc).Reusable() {
		t.Fatal("a connection that cannot be peeked at is taken as reusable")
	}
}
