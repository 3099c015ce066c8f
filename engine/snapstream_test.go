package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
)

// streamOf fills a fresh engine with n claimed events (a few done) and
// returns it with its snapshot stream and its plain snapshot (the file).
func streamOf(t *testing.T, n int) (*harness, []byte, []byte) {
	t.Helper()
	h := newHarness(t, Options{NoSync: true})
	cmds := make([]Command, 0, n)
	for i := range n {
		c := claimCmd(keyN(i), t0+int64(i)*sec)
		c.Payload = fmt.Appendf(nil, `{"id":"evt_%08d","type":"invoice.paid","amount":%d}`, i, i*7)
		cmds = append(cmds, c)
	}
	h.apply(cmds...)
	for _, ev := range h.one(leaseCmd(t0+hour, 10)).Events {
		h.one(completeCmd(ev.Key, ev.Token, t0+hour))
	}
	view, err := h.e.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	var stream, plain bytes.Buffer
	size, err := view.WriteStream(&stream)
	if err != nil {
		t.Fatalf("WriteStream: %v", err)
	}
	if _, err := view.WriteTo(&plain); err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if size != int64(plain.Len()) {
		t.Fatalf("WriteStream says the file is %d bytes; the plain copy is %d", size, plain.Len())
	}
	return h, stream.Bytes(), plain.Bytes()
}

// A snapshot stream holds the engine file compressed, and restores to the
// same state as the plain copy of the file (a backup, or a snapshot from
// before the streams) does.
func TestSnapshotStreamRestores(t *testing.T) {
	src, stream, plain := streamOf(t, 2000)
	if !bytes.HasPrefix(stream, []byte("oncehook\x01")) {
		t.Fatalf("stream starts %q, want the header", stream[:min(len(stream), 9)])
	}
	// The file is mostly half-empty pages: a stream of a quarter of it
	// would already be a poor compressor.
	if len(stream) > len(plain)/4 {
		t.Fatalf("stream of %d bytes for a %d-byte file", len(stream), len(plain))
	}
	t.Logf("%d-byte file, %d-byte stream", len(plain), len(stream))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"snapshot stream", stream},
		{"plain engine file", plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size, err := SnapshotFileSize(bytes.NewReader(tc.data), int64(len(tc.data)))
			if err != nil || size != int64(len(plain)) {
				t.Fatalf("SnapshotFileSize = %d, %v; want %d", size, err, len(plain))
			}
			dst := newHarness(t, Options{NoSync: true})
			dst.one(claimCmd("src:only-here", t0))
			if err := dst.e.Restore(bytes.NewReader(tc.data)); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if mustHash(t, dst.e) != mustHash(t, src.e) {
				t.Fatal("restored state differs from the snapshot's")
			}
			if dst.e.LastApplied() != src.e.LastApplied() {
				t.Fatalf("LastApplied = %d, want %d", dst.e.LastApplied(), src.e.LastApplied())
			}
			if _, err := dst.e.Get("src:only-here", false); !errors.Is(err, ErrNotFound) {
				t.Fatalf("an event of the replaced state is still there: %v", err)
			}
		})
	}
}

// A damaged or foreign stream is refused with an error that says why, and
// the live state stays as it was and usable.
func TestSnapshotStreamRefused(t *testing.T) {
	_, stream, plain := streamOf(t, 500)
	body := stream[snapStreamHeaderLen:]
	header := func(version byte, size uint64) []byte {
		h := append([]byte("oncehook"), version)
		return binary.BigEndian.AppendUint64(h, size)
	}
	flipped := bytes.Clone(stream)
	flipped[len(flipped)/2] ^= 0x40
	cases := []struct {
		name string
		data []byte
		is   error // nil: any error
	}{
		{"header cut short", stream[:12], nil},
		{"stream cut short", stream[:len(stream)*2/3], nil},
		{"no compressed data", stream[:snapStreamHeaderLen], ErrCorrupt},
		{"newer stream version", append(header(2, uint64(len(plain))), body...), ErrNewerFormat},
		{"header says more", append(header(snapStreamZstd, uint64(len(plain))+4096), body...), ErrCorrupt},
		{"header says less", append(header(snapStreamZstd, uint64(len(plain))-4096), body...), ErrCorrupt},
		{"absurd size", append(header(snapStreamZstd, 1<<63), body...), ErrCorrupt},
		{"a byte flipped", flipped, nil},
		{"garbage after the stream", append(bytes.Clone(stream), "trailing"...), nil},
		{"magic then garbage", append(header(snapStreamZstd, 4096), bytes.Repeat([]byte{0xAB}, 4096)...), nil},
	}
	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	before := mustHash(t, h.e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := h.e.Restore(bytes.NewReader(tc.data))
			if err == nil {
				t.Fatal("Restore accepted it")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Restore: %v; want %v", err, tc.is)
			}
			if mustHash(t, h.e) != before || h.e.LastApplied() != 1 {
				t.Fatal("a refused Restore changed the state")
			}
		})
	}
	if r := h.one(claimCmd("src:b", t0)); !r.Created {
		t.Fatalf("engine unusable after refused restores: %+v", r)
	}
}

// byteCount counts what is written to it.
type byteCount int64

func (c *byteCount) Write(p []byte) (int, error) { *c += byteCount(len(p)); return len(p), nil }

// fullDisk counts what is written to it, up to a limit: past it, writes
// fail as on a full disk. A few bytes of zstd can stand for gigabytes.
type fullDisk struct {
	n, limit int64
}

var errDiskFull = errors.New("disk full")

func (d *fullDisk) Write(p []byte) (int, error) {
	if d.n+int64(len(p)) > d.limit {
		return 0, errDiskFull
	}
	d.n += int64(len(p))
	return len(p), nil
}

// FuzzSnapshotStream: no input makes copySnapshot panic, and whatever it
// accepts as a stream decompressed to exactly the size its header gives.
func FuzzSnapshotStream(f *testing.F) {
	var stream bytes.Buffer
	h := newHarness(f, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	view, err := h.e.BeginSnapshot()
	if err != nil {
		f.Fatal(err)
	}
	if _, err := view.WriteStream(&stream); err != nil {
		f.Fatal(err)
	}
	view.Close()
	f.Add(stream.Bytes())
	f.Add([]byte("oncehook"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00plain"))
	f.Fuzz(func(t *testing.T, data []byte) {
		disk := fullDisk{limit: 32 << 20}
		written, err := copySnapshot(&disk, bytes.NewReader(data))
		if disk.n != written {
			t.Fatalf("copySnapshot says %d bytes, wrote %d", written, disk.n)
		}
		if err != nil || !bytes.HasPrefix(data, snapStreamMagic) {
			return
		}
		size, err := SnapshotFileSize(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("stream accepted, header refused: %v", err)
		}
		if written != size {
			t.Fatalf("stream accepted with %d bytes, header says %d", written, size)
		}
	})
}

// Writing a stream reads the file once and compresses it on one goroutine;
// its cost per byte of file is what a snapshot of a big state costs.
func BenchmarkSnapshotStream(b *testing.B) {
	h := newHarness(b, Options{NoSync: true})
	cmds := make([]Command, 0, 1000)
	for i := range 20_000 {
		cmds = append(cmds, claimCmd(keyN(i), t0+int64(i)))
		if len(cmds) == cap(cmds) {
			h.apply(cmds...)
			cmds = cmds[:0]
		}
	}
	view, err := h.e.BeginSnapshot()
	if err != nil {
		b.Fatal(err)
	}
	defer view.Close()
	var out byteCount
	b.ReportAllocs()
	for b.Loop() {
		out = 0
		n, err := view.WriteStream(&out)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(n)
	}
	b.ReportMetric(float64(out), "stream-bytes")
}

// TestRestoreEndsAStalledView: a restore does not wait for a snapshot view
// whose reader is slow (an admin backup read a byte at a time): the view's
// writing ends at its next write with ErrViewAborted, the restore
// completes, and reads go on, on the restored state.
func TestRestoreEndsAStalledView(t *testing.T) {
	h, _, plain := streamOf(t, 2000)
	view, err := h.e.BeginSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	wrote := make(chan error, 1)
	go func() {
		_, err := view.WriteTo(pw)
		view.Close()
		pw.CloseWithError(err)
		wrote <- err
	}()
	buf := make([]byte, 4096)
	if _, err := io.ReadFull(pr, buf); err != nil { // the backup has begun
		t.Fatal(err)
	}
	restored := make(chan error, 1)
	go func() { restored <- h.e.Restore(bytes.NewReader(plain)) }()
	// The reader stalls until the restore has asked the view to end, then
	// drips on, a read at a time, until the view gives up.
	for !view.abort.Load() {
		runtime.Gosched()
	}
	for done := false; !done; {
		select {
		case err := <-wrote:
			if !errors.Is(err, ErrViewAborted) {
				t.Fatalf("the stalled view ended with %v, want ErrViewAborted", err)
			}
			done = true
		default:
			if _, err := pr.Read(buf); err != nil && !errors.Is(err, ErrViewAborted) {
				t.Fatalf("read: %v", err)
			}
		}
	}
	if err := <-restored; err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, err := h.e.Get(keyN(0), false); err != nil {
		t.Fatalf("read after the restore: %v", err)
	}
}
