package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Fragments carry an entry too large for one Raft log entry (format 13).
//
// Both libraries around the log decode an entry's data as one msgpack byte
// string, and their decoder reads a string longer than 256 KiB in 256 KiB
// pieces, copying everything read so far at each piece: the copying grows
// with the square of the size (8 GiB for a 64 MiB body, on every node, and
// again at each read of the entry from the log file). On three nodes a
// 32 MiB claim took seconds of CPU per node and one of 60 MiB never
// committed: the leader lost its lease while its followers decoded it
// (docs/architecture.md, "Large bodies"). So the cluster cuts an encoded
// entry larger than FragmentChunk into fragments, one log entry each, sent
// one after the other, and every replica joins them in log order and
// applies the whole entry at the index of the last one. Each fragment is
// decoded in one piece.
//
// A fragment is
//
//	fragmentVersion, uvarint total length, uvarint offset,
//	CRC-32C of the whole entry (4 bytes, big endian), the bytes
//
// where the bytes are entry[offset:offset+len]. The checksum names the entry
// a fragment belongs to: the head of one entry and the tail of another of
// the same length (a leader refused part way through one entry, then
// another) never join into an entry nobody proposed, and the joined entry is
// checked against it. The version byte is what an
// older binary reads as an entry version it does not know (ErrNewerFormat),
// so it stops rather than skip the fragment.
const fragmentVersion = 3

// FragmentChunk is the most bytes of an entry one fragment carries: with its
// header, a fragment's data stays within the decoder's first piece.
const FragmentChunk = 256<<10 - 32 // the header takes at most 1+10+10+4 bytes

// MaxJoinedEntry bounds the whole entry a run of fragments announces, so a
// corrupt length cannot make a replica allocate without limit. The largest
// entry the cluster writes is one batch's byte bound plus one claim of
// MaxPayloadLen.
const MaxJoinedEntry = 2*MaxPayloadLen + 16<<20

// Fragment is one piece of an entry (ParseFragment).
type Fragment struct {
	Total  int    // length of the whole entry
	Offset int    // where Bytes starts in it
	Sum    uint32 // CRC-32C (Castagnoli) of the whole entry (EntrySum)
	Bytes  []byte // aliases the parsed data
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EntrySum is the checksum fragments carry of the entry they cut.
func EntrySum(entry []byte) uint32 { return crc32.Checksum(entry, castagnoli) }

// Last tells whether f completes its entry.
func (f Fragment) Last() bool { return f.Offset+len(f.Bytes) == f.Total }

// SplitEntry cuts an encoded entry into fragments of at most chunk bytes of
// it each (FragmentChunk when chunk <= 0). It returns nil when entry fits in
// one chunk: such an entry goes into the log as it is.
func SplitEntry(entry []byte, chunk int) [][]byte {
	if chunk <= 0 {
		chunk = FragmentChunk
	}
	if len(entry) <= chunk {
		return nil
	}
	sum := EntrySum(entry)
	frags := make([][]byte, 0, (len(entry)+chunk-1)/chunk)
	for off := 0; off < len(entry); off += chunk {
		part := entry[off:min(off+chunk, len(entry))]
		b := make([]byte, 0, 1+2*binary.MaxVarintLen64+4+len(part))
		b = append(b, fragmentVersion)
		b = binary.AppendUvarint(b, uint64(len(entry)))
		b = binary.AppendUvarint(b, uint64(off))
		b = binary.BigEndian.AppendUint32(b, sum)
		frags = append(frags, append(b, part...))
	}
	return frags
}

// ParseFragment reads b as a fragment. ok is false when b is not one (an
// ordinary entry, for DecodeEntry); a malformed fragment gives an error
// wrapping ErrCorrupt. f.Bytes aliases b. It never panics.
func ParseFragment(b []byte) (f Fragment, ok bool, err error) {
	if len(b) == 0 || b[0] != fragmentVersion {
		return Fragment{}, false, nil
	}
	d := decoder{b: b[1:]}
	total := d.uvarint("fragment total")
	off := d.uvarint("fragment offset")
	var sum uint32
	switch {
	case d.err != nil:
	case len(d.b) < 4:
		d.fail("fragment checksum")
	default:
		sum = binary.BigEndian.Uint32(d.b)
		d.b = d.b[4:]
	}
	switch {
	case d.err != nil:
	case total == 0 || total > MaxJoinedEntry:
		d.fail(fmt.Sprintf("fragment of an entry of %d bytes", total))
	case len(d.b) == 0:
		d.fail("empty fragment")
	case off >= total || uint64(len(d.b)) > total-off:
		d.fail(fmt.Sprintf("fragment of %d bytes at %d of an entry of %d", len(d.b), off, total))
	}
	if d.err != nil {
		return Fragment{}, true, fmt.Errorf("entry: %w", d.err)
	}
	return Fragment{Total: int(total), Offset: int(off), Sum: sum, Bytes: d.b}, true, nil
}
