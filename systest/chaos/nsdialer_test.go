package chaos

import (
	"context"
	"errors"
	"net"
	"testing"
)

// TestNSDialerDialAfterClose: a dial racing the namespace's teardown (a
// scenario's load still running when a SIGINT cleanup removes the topology)
// fails with net.ErrClosed instead of panicking the test binary mid-cleanup.
func TestNSDialerDialAfterClose(t *testing.T) {
	d, err := newNSDialer("unused", 0)
	if err != nil {
		t.Fatal(err)
	}
	d.close()
	if _, err := d.DialContext(context.Background(), "tcp", "127.0.0.1:1"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("dial after close: %v, want net.ErrClosed", err)
	}
}
