package cluster

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"oncehook/connlimit"
)

func TestZZDiffBusyCloseWaits(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:26901")
	if err != nil {
		t.Skip(err)
	}
	m, err := newMux(ln, "127.0.0.1:26901", []byte(strings.Repeat("k", 32)), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m.preAuth = connlimit.NewCounter(connlimit.Limits{Total: 1, PerNetwork: 1})
	m.serve()
	hold, _ := net.Dial("tcp", "127.0.0.1:26901")
	defer hold.Close()
	time.Sleep(50 * time.Millisecond)
	busy, _ := net.Dial("tcp", "127.0.0.1:26901")
	defer busy.Close()
	b := make([]byte, 64)
	_ = busy.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := io.ReadFull(busy, b)
	t.Logf("read %d %q %v", n, b[:n], err)
	hold.Close()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	m.close()
	t.Logf("mux close took %s", time.Since(start))
}
