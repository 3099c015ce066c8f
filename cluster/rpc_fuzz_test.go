package cluster

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
)

// TestLargeFrames: a frame over frameChunk is read whole, into the caller's
// buffer when it is large enough; a header that announces one whose bytes
// never come costs about frameChunk of memory, not the size it announces.
func TestLargeFrames(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), (3*frameChunk+5)/16)
	var in bytes.Buffer
	w := bufio.NewWriter(&in)
	for range 2 {
		if err := writeFrame(w, rpcOK, body); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&in)
	kind, got, err := readFrame(r, nil)
	if err != nil || kind != rpcOK || !bytes.Equal(got, body) {
		t.Fatalf("first frame: kind %d, %d bytes, %v", kind, len(got), err)
	}
	_, again, err := readFrame(r, got)
	if err != nil || !bytes.Equal(again, body) || &again[0] != &got[0] {
		t.Fatalf("second frame: %d bytes, %v; want it read into the first one's buffer", len(again), err)
	}
	if _, _, err := readFrame(r, nil); err != io.EOF {
		t.Fatalf("after two frames: %v, want EOF", err)
	}

	hdr := []byte{0, 0, 0, 0, rpcOK, 'x'}
	binary.BigEndian.PutUint32(hdr, maxFrame)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(hdr)), nil); err == nil {
		t.Fatal("a frame cut short was read")
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 4*frameChunk {
		t.Fatalf("a header announcing %d bytes cost %d bytes of memory", maxFrame, n)
	}
}

// FuzzReadFrame: the relay's frames come from another member over the
// cluster port. Whatever the bytes, readFrame returns whole frames whose
// bodies are as long as their headers say, then an error; what it read
// written back with writeFrame is the input's prefix it consumed; it never
// panics.
func FuzzReadFrame(f *testing.F) {
	frame := func(kind byte, body string) []byte {
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		if err := writeFrame(w, kind, []byte(body)); err != nil {
			f.Fatal(err)
		}
		return b.Bytes()
	}
	f.Add(append(frame(rpcOK, "results"), frame(rpcErr, "no quorum")...))
	f.Add(frame(rpcBadRequest, ""))
	f.Add([]byte{0, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0})
	f.Add([]byte{0, 0, 0, 9, rpcOK, 'a'})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		var buf []byte
		for {
			kind, body, err := readFrame(r, buf)
			if err != nil {
				break
			}
			if len(body)+5 > len(in) {
				t.Fatalf("a frame of %d bytes from %d bytes of input", len(body), len(in))
			}
			if err := writeFrame(w, kind, body); err != nil {
				t.Fatal(err)
			}
			buf = body
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("frames written back %x are not a prefix of the input %x", out.Bytes(), in)
		}
	})
}

// FuzzDecodeJoin: a join request's body is refused or read into an id and
// an address that encode back to a body read the same way.
func FuzzDecodeJoin(f *testing.F) {
	f.Add(encodeJoin("node4", "10.0.0.4:7000"))
	f.Add(encodeJoin("", ""))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add(binary.AppendUvarint(nil, 1<<62))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, addr, err := decodeJoin(b)
		if err != nil {
			return
		}
		if len(id)+len(addr) > len(b) {
			t.Fatalf("%d+%d bytes decoded from %d", len(id), len(addr), len(b))
		}
		id2, addr2, err := decodeJoin(encodeJoin(id, addr))
		if err != nil || id2 != id || addr2 != addr {
			t.Fatalf("re-decoded %q %q (%v), want %q %q", id2, addr2, err, id, addr)
		}
	})
}
