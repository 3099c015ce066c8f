package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Large payloads are stored in pieces (format 14; docs/architecture.md,
// "Large bodies").
//
// bbolt keeps a value inside its leaf: one run of pages however large the
// value, written at commit with one copy. A payload of tens of MiB in the
// payloads bucket was therefore written again whole each time a later
// payload landed in its leaf (bbolt never splits a leaf of four keys or
// fewer, and payloads arrive in time order, at the bucket's end) and when
// its neighbours were dropped: about three times its size per claim. And
// its one copy at commit, a memmove the scheduler cannot interrupt, held
// every other goroutine of the process up for as long as the garbage
// collector waited to stop the world (263 ms measured for 60 MiB, enough
// for a leader to lose its lease).
//
// A payload longer than pieceLen keeps its headers in the payloads bucket,
// in a value of version piecedVersion that gives the payload's length and
// the piece size, and its bytes in the pieces bucket, pieceLen to a piece,
// under the payload's key followed by the piece's number (4 bytes, big
// endian). Each piece is its own value: written once, at the claim's
// commit, with a copy of pieceLen; deleted with the payload. A piece key is
// never another payload's: every payload key is a fixed 8-byte time and an
// event key, so two piece keys of equal length with different event keys
// differ before the number. They may sort between each other, though (an
// event key that extends another by bytes below a piece number's first),
// so pieces are found by their exact keys, never by walking on.

// pieceLen is the size of a payload's pieces (the last may be shorter).
// Two pieces fill a page run of 33 pages; bbolt splits a run of more.
const pieceLen = 64 << 10

// piecedVersion is the version of a payload value whose bytes are in the
// pieces bucket: the headers as in version 1, then the payload's length and
// the piece size, uvarints, and nothing after.
const piecedVersion = 2

// bPieces holds the pieces of the payloads stored in pieces.
var bPieces = []byte("pieces")

// pieced says whether a claim applied with format f stores payload in
// pieces. Entries of binaries before formatPieces store it whole, as those
// binaries do, so that replicas applying them write identical files.
func pieced(f int, payload []byte) bool {
	return f >= formatPieces && len(payload) > pieceLen
}

// appendPiecedHead encodes the payloads-bucket value of a payload stored in
// pieces of plen bytes.
func appendPiecedHead(dst []byte, headers []Header, n, plen int) []byte {
	dst = append(dst, piecedVersion)
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for i := range headers {
		dst = appendString(dst, headers[i].Name)
		dst = appendString(dst, headers[i].Value)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	return binary.AppendUvarint(dst, uint64(plen))
}

// pieceKey appends the key of piece i of the payload stored under pk.
func pieceKey(dst, pk []byte, i int) []byte {
	return binary.BigEndian.AppendUint32(append(dst, pk...), uint32(i))
}

// pieceAt returns the key of piece i of the payload whose key starts the
// applier's piece scratch (set by setPieceBase), in that scratch.
func (a *applier) pieceAt(i int) []byte {
	a.pbuf = binary.BigEndian.AppendUint32(a.pbuf[:a.pbase], uint32(i))
	return a.pbuf
}

// setPieceBase starts the piece scratch with the payload key pk.
func (a *applier) setPieceBase(pk []byte) {
	a.pbuf, a.pbase = append(a.pbuf[:0], pk...), len(pk)
}

// pieceCount is the number of pieces of a payload of n bytes in pieces of
// plen bytes.
func pieceCount(n, plen int) int { return (n + plen - 1) / plen }

// payloadHead is a decoded payloads-bucket value: the headers, and either
// the payload itself (version 1, copied) or its length and piece size.
type payloadHead struct {
	headers []Header
	payload []byte
	pieced  bool
	n, plen int
}

// decodePayloadHead decodes a payloads-bucket value of either version.
func decodePayloadHead(key, b []byte) (payloadHead, error) {
	var h payloadHead
	d := decoder{b: b}
	v := d.byte("payload version")
	if d.err == nil && v != payloadVersion && v != piecedVersion {
		d.fail(fmt.Sprintf("payload version %d", v))
	}
	if n := d.count("headers", 2); n > 0 {
		h.headers = make([]Header, n)
		for i := range h.headers {
			h.headers[i].Name = string(d.bytes("header name"))
			h.headers[i].Value = string(d.bytes("header value"))
		}
	}
	if d.err == nil && v == piecedVersion {
		h.pieced = true
		n, plen := d.uvarint("payload length"), d.uvarint("piece size")
		switch {
		case d.err != nil:
		case len(d.b) != 0:
			d.fail("bytes after a pieced payload's head")
		case n == 0 || n > MaxPayloadLen || plen == 0 || plen > MaxPayloadLen:
			d.fail(fmt.Sprintf("pieced payload of %d bytes in pieces of %d", n, plen))
		default:
			h.n, h.plen = int(n), int(plen)
		}
	}
	if d.err != nil {
		return payloadHead{}, fmt.Errorf("payload %q: %w", clip(key), d.err)
	}
	if !h.pieced && len(d.b) > 0 {
		h.payload = append([]byte(nil), d.b...)
	}
	return h, nil
}

// readPieces joins the pieces of the payload stored under pk with head h
// into a new slice, through a cursor of the pieces bucket (nil: the file
// has none).
func readPieces(c *bolt.Cursor, pk []byte, h payloadHead) ([]byte, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: payload %q is in pieces and the file has no pieces bucket", ErrCorrupt, clip(pk[8:]))
	}
	out := make([]byte, 0, h.n)
	want := make([]byte, 0, len(pk)+4)
	for i := range pieceCount(h.n, h.plen) {
		// Each piece by its own key: another payload's pieces may sort
		// between two of these (see the note at the top).
		want = pieceKey(want[:0], pk, i)
		k, v := c.Seek(want)
		if !bytes.Equal(k, want) || len(v) != min(h.plen, h.n-len(out)) {
			return nil, fmt.Errorf("%w: payload %q: piece %d of %d missing or of %d bytes", ErrCorrupt, clip(pk[8:]), i, pieceCount(h.n, h.plen), len(v))
		}
		out = append(out, v...)
	}
	return out, nil
}

// putPayload stores a claim's headers and payload under the payload key
// time|key of the claim (c.Now, c.Key).
func (a *applier) putPayload(c *Command) error {
	pk := a.tk(c.Now, c.Key)
	if !pieced(c.semantics(), c.Payload) {
		pv := appendPayload(a.arena.make(payloadSize(c.Headers, c.Payload)), c.Headers, c.Payload)
		return a.payloads.Put(pk, pv)
	}
	n := len(c.Payload)
	head := appendPiecedHead(a.arena.make(payloadSize(c.Headers, nil)+binary.MaxVarintLen64), c.Headers, n, pieceLen)
	if err := a.payloads.Put(pk, head); err != nil {
		return err
	}
	b := a.piecesBucket()
	a.setPieceBase(pk)
	for i := 0; i*pieceLen < n; i++ {
		// The command's bytes are not the engine's to keep until the
		// commit: each piece is copied, and one piece is one copy.
		p := append(a.arena.make(min(pieceLen, n-i*pieceLen)), c.Payload[i*pieceLen:min(n, (i+1)*pieceLen)]...)
		if err := b.Put(a.pieceAt(i), p); err != nil {
			return err
		}
	}
	return nil
}

// getPayload returns the headers and payload stored under the payload key
// pk, copied, and whether there is one.
func (a *applier) getPayload(pk []byte) ([]Header, []byte, bool, error) {
	pv := a.payp.get(pk)
	if pv == nil {
		return nil, nil, false, nil
	}
	h, err := decodePayloadHead(pk[8:], pv)
	if err != nil || !h.pieced {
		return h.headers, h.payload, err == nil, err
	}
	p, err := readPieces(a.piecesBucket().Cursor(), pk, h)
	return h.headers, p, err == nil, err
}

// delPayload deletes the payload stored under the payload key pk, its
// pieces included, and says whether there was one.
func (a *applier) delPayload(pk []byte) (bool, error) {
	pv := a.payp.get(pk)
	if pv == nil {
		return false, nil
	}
	if len(pv) > 0 && pv[0] == piecedVersion {
		h, err := decodePayloadHead(pk[8:], pv)
		if err != nil {
			return false, err
		}
		a.setPieceBase(pk)
		c := a.piecesBucket().Cursor()
		for i := range pieceCount(h.n, h.plen) {
			key := a.pieceAt(i)
			if k, _ := c.Seek(key); !bytes.Equal(k, key) {
				return false, fmt.Errorf("%w: payload %q: piece %d missing", ErrCorrupt, clip(pk[8:]), i)
			}
			if err := c.Delete(); err != nil {
				return false, err
			}
		}
	}
	// pk may be the applier's scratch key, which the loop above left alone.
	return true, a.payp.del(pk)
}

// piecesBucket returns the pieces bucket, packed like the other buckets
// that grow at their end.
func (a *applier) piecesBucket() *bolt.Bucket {
	if a.pieces == nil {
		a.pieces = a.tx.Bucket(bPieces)
		a.pieces.FillPercent = appendFill
	}
	return a.pieces
}
