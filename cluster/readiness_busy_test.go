package cluster

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"oncehook/connlimit"

	"github.com/hashicorp/raft"
)

// TestBusyPeerIsNotACredentialRefusal: a raft dial that a peer
// refuses because its cap of connections not yet proved is full (the
// handshake answers busy: ErrPeerBusy, wrapped in ErrPeerUnproven) is
// recorded by raftLayer.Dial as a refusal of this node's
// handshake, and Node.Ready (ops.go raftRefusalsSaid) then tells the
// operator that the peer's "cluster token_file or certificates differ from
// theirs, or they run an older release": the wrong fix for a connection
// flood; it is not recorded (readiness.go's refusalOf says busy itself).
func TestBusyPeerIsNotACredentialRefusal(t *testing.T) {
	m, addr := tlsMux(t, func(m *mux) {
		m.preAuth = connlimit.NewCounter(connlimit.Limits{Total: 1, PerNetwork: 1})
		m.memberAuth = connlimit.NewCounter(connlimit.Limits{Total: 1, PerNetwork: 1})
		m.onRelay = func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
	})
	held, err := net.Dial("tcp", addr) // silent: holds the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitFor(t, "the silent connection counted", func() bool { return m.openConns() == 1 })
	_, err = raftLayer{m}.Dial(raftServerAddr(addr), 5*time.Second)
	if !errors.Is(err, ErrPeerBusy) {
		t.Fatalf("raft dial over the cap: %v, want ErrPeerBusy", err)
	}
	if got := m.refusedRaft(30 * time.Second); len(got) > 0 {
		t.Fatalf("a busy peer is listed as refusing this node's credentials: %v (readiness would say its token or certificates differ)", got)
	}
}

func raftServerAddr(a string) raft.ServerAddress { return raft.ServerAddress(a) }
