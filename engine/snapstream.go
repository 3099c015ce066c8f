package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// A Raft snapshot is the engine file, and most of that file compresses
// away: pages are about two thirds full, keys share their source prefix,
// records repeat their layout, and much of the file is free pages. A
// million retained keys made a 460 MB copy that zstd's
// fastest level brings to 13 MB in under half a second of one core
// (docs/performance.md, "Compressed snapshots"). So the snapshot the
// cluster persists and sends to followers is a snapshot stream:
//
//	8 bytes  "oncehook" (a bbolt file starts with page id 0: eight zero bytes)
//	1 byte   the stream version: snapStreamZstd
//	8 bytes  the size of the engine file it holds, big endian
//	...      the file, as one zstd stream (frames with checksums)
//
// Restore reads either a stream or a plain engine file, which is what an
// operator's backup is (Backup, GET /v1/backup) and what every snapshot
// was before the streams: so an older snapshot, or one an older leader
// sends during a rolling upgrade, still installs.
var snapStreamMagic = []byte("oncehook")

const (
	snapStreamZstd      = 1 // the only version: zstd over the whole file
	snapStreamHeaderLen = 8 + 1 + 8
	// snapStreamMaxWindow bounds the decoder's memory; the writer's fastest
	// level uses a far smaller window.
	snapStreamMaxWindow = 64 << 20
)

// WriteStream writes the view as a snapshot stream (see snapStreamMagic) and
// returns the size of the engine file it holds, not the bytes written.
// Compression runs on the calling goroutine only, so a snapshot takes at
// most one core from the claims.
func (s *SnapshotView) WriteStream(w io.Writer) (int64, error) {
	size := s.tx.Size()
	var hdr [snapStreamHeaderLen]byte
	copy(hdr[:], snapStreamMagic)
	hdr[8] = snapStreamZstd
	binary.BigEndian.PutUint64(hdr[9:], uint64(size))
	if _, err := w.Write(hdr[:]); err != nil {
		return 0, fmt.Errorf("engine: write snapshot: %w", err)
	}
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return 0, fmt.Errorf("engine: write snapshot: %w", err)
	}
	n, err := s.tx.WriteTo(abortableWriter{w: enc, abort: &s.abort})
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("copied %d bytes of a %d-byte file", n, size)
	}
	if err != nil {
		return n, fmt.Errorf("engine: write snapshot: %w", err)
	}
	return n, nil
}

// SnapshotFileSize reads the start of a snapshot and returns the size of
// the engine file it holds: the header's figure for a snapshot stream,
// stored for a plain engine file (whose stored size is the file's). The
// cluster sizes its snapshot schedule on the state, not on the compressed
// bytes.
func SnapshotFileSize(r io.Reader, stored int64) (int64, error) {
	var hdr [snapStreamHeaderLen]byte
	n, err := io.ReadFull(r, hdr[:])
	if n < len(snapStreamMagic) || !bytes.Equal(hdr[:len(snapStreamMagic)], snapStreamMagic) {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, fmt.Errorf("engine: read snapshot: %w", err)
		}
		return stored, nil
	}
	return parseStreamHeader(hdr[:n], err)
}

// parseStreamHeader checks a header that starts with the magic; readErr is
// the error of reading it (a short header).
func parseStreamHeader(hdr []byte, readErr error) (int64, error) {
	if len(hdr) < snapStreamHeaderLen {
		return 0, fmt.Errorf("engine: snapshot stream header cut short (%d of %d bytes): %v", len(hdr), snapStreamHeaderLen, readErr)
	}
	if v := hdr[8]; v != snapStreamZstd {
		return 0, fmt.Errorf("snapshot stream version %d; this binary reads version %d: %w", v, snapStreamZstd, ErrNewerFormat)
	}
	size := binary.BigEndian.Uint64(hdr[9:])
	if size > 1<<62 {
		return 0, fmt.Errorf("engine: snapshot stream header: file size %d: %w", size, ErrCorrupt)
	}
	return int64(size), nil
}

// copySnapshot writes the engine file that r holds to w: a snapshot
// stream decompressed, anything else as it is (a plain file; Restore checks
// it is an engine file). It returns the bytes written.
func copySnapshot(w io.Writer, r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if p, _ := br.Peek(len(snapStreamMagic)); !bytes.Equal(p, snapStreamMagic) {
		return io.Copy(w, br)
	}
	var hdr [snapStreamHeaderLen]byte
	n, rerr := io.ReadFull(br, hdr[:])
	size, err := parseStreamHeader(hdr[:n], rerr)
	if err != nil {
		return 0, err
	}
	dec, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(snapStreamMaxWindow))
	if err != nil {
		return 0, fmt.Errorf("engine: read snapshot stream: %w", err)
	}
	defer dec.Close()
	// One byte past the stated size is enough to tell a stream that holds
	// more than its header says, without writing all of it.
	written, err := io.Copy(w, io.LimitReader(dec, size+1))
	if err != nil {
		return written, fmt.Errorf("engine: read snapshot stream: %w", err)
	}
	if written != size {
		return written, fmt.Errorf("engine: snapshot stream holds %s bytes, its header says %d: %w", heldBytes(written, size), size, ErrCorrupt)
	}
	return written, nil
}

// heldBytes names what a stream held when it was not its header's size:
// copySnapshot stops one byte past that size.
func heldBytes(written, size int64) string {
	if written > size {
		return "more than " + strconv.FormatInt(size, 10)
	}
	return strconv.FormatInt(written, 10)
}
