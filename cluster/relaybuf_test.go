package cluster

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// TestRelayStreamKeepsNoLargeBuffer: the leader's side of a relay stream
// does not keep the buffer of a large batch once it has answered it. A
// follower keeps idle streams open in its pool, so a kept buffer (up to the
// frame limit, bodies up to max_body) would stay in memory for as long.
func TestRelayStreamKeepsNoLargeBuffer(t *testing.T) {
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	n := &Node{} // not started: every request is answered rpcNoLeader
	srv, cli := net.Pipe()
	done := make(chan struct{})
	go func() { n.serveRelay(srv); close(done) }()
	defer func() { cli.Close(); <-done }()

	const frame = 40 << 20
	before := live()
	w := bufio.NewWriter(cli)
	sent := make(chan error, 1)
	go func() { sent <- writeFrame(w, rpcApply, make([]byte, frame)) }()
	st, _, err := readFrame(bufio.NewReader(cli), nil)
	if err != nil || st != rpcNoLeader {
		t.Fatalf("answer %d, %v", st, err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// The stream is open and idle, as a follower's pool keeps it.
	if grew := int64(live()) - int64(before); grew > 8<<20 {
		t.Fatalf("an idle relay stream keeps %d MiB after a %d MiB batch", grew>>20, frame>>20)
	}
}

// TestRelayFrameHoldsTheLargestBatch: the largest batch a follower's
// proposer can send (all but its last proposal filling maxEntryBytes, the
// last a claim with a payload of the largest max_body, the longest key and
// a request's worth of headers) fits a relay frame: a claim the intake
// accepts through a follower is not refused by the frame limit.
func TestRelayFrameHoldsTheLargestBatch(t *testing.T) {
	claim := func(key string, payload int, headers []engine.Header) engine.Command {
		return engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: make([]byte, payload),
			Retention: int64(time.Hour), Headers: headers}
	}
	big := claim("src:"+strings.Repeat("k", engine.MaxKeyLen-4), engine.MaxPayloadLen,
		[]engine.Header{{Name: "X-Forwarded", Value: strings.Repeat("v", 16<<10)}})
	cmds := []engine.Command{claim("src:filler", maxEntryBytes-cmdBytes([]engine.Command{claim("src:filler", 0, nil)})-1, nil), big}
	if cmdBytes(cmds[:1]) >= maxEntryBytes {
		t.Fatal("the filler alone reaches the bound: the proposer would not add the large claim")
	}
	body := engine.EncodeRelayEntry(nil, cmds)
	var wire bytes.Buffer
	w := bufio.NewWriter(&wire)
	if err := writeFrame(w, rpcApply, body); err != nil {
		t.Fatal(err)
	}
	if _, got, err := readFrame(bufio.NewReader(&wire), nil); err != nil || len(got) != len(body) {
		t.Fatalf("a batch of %d bytes (frame limit %d): %v", len(body), maxFrame, err)
	}
}
