package cluster

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// TestRelayStreamKeepsNoLargeBuffer: the leader's side of a relay stream
// does not keep the buffer of a large batch once it has answered it. A
// follower keeps idle streams open in its pool, so a kept buffer (up to the
// frame limit, bodies up to max_body) would stay in memory for as long; a
// small one is kept for the next batch.
func TestRelayStreamKeepsNoLargeBuffer(t *testing.T) {
	kept := make(chan int, 2)
	n := &Node{cfg: Config{relayKept: func(c int) { kept <- c }}} // not started: every request is answered rpcNoLeader
	srv, cli := net.Pipe()
	done := make(chan struct{})
	go func() { n.serveRelay(srv); close(done) }()
	defer func() { cli.Close(); <-done }()

	r, w := bufio.NewReader(cli), bufio.NewWriter(cli)
	for _, size := range []int{4 << 10, 40 << 20} {
		sent := make(chan error, 1)
		go func() { sent <- writeFrame(w, rpcApply, make([]byte, size)) }()
		if st, _, err := readFrame(r, nil); err != nil || st != rpcNoLeader {
			t.Fatalf("answer %d, %v", st, err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		c := <-kept
		if size > frameChunk && c > frameChunk {
			t.Fatalf("after a %d MiB batch the stream keeps a buffer of %d MiB", size>>20, c>>20)
		}
		if size <= frameChunk && c < size {
			t.Fatalf("after a %d KiB batch the stream keeps %d bytes, not the buffer for the next", size>>10, c)
		}
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
