package engine

import (
	"bytes"
	"errors"
	"testing"
)

func TestSplitEntryJoinsBack(t *testing.T) {
	big := EncodeEntry(nil, []Command{{Op: OpClaim, Key: "s:1", Source: "s", Payload: bytes.Repeat([]byte("x"), 3*FragmentChunk+17)}})
	for _, tc := range []struct {
		name  string
		entry []byte
		chunk int
		want  int // fragments; 0: none (the entry goes as it is)
	}{
		{"small entry", EncodeEntry(nil, []Command{{Op: OpNoop}}), 0, 0},
		{"exactly one chunk", bytes.Repeat([]byte{2}, 100), 100, 0},
		{"one byte over", bytes.Repeat([]byte{2}, 101), 100, 2},
		{"a large claim", big, 0, 4},
		{"tiny chunks", big[:1000], 7, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frags := SplitEntry(tc.entry, tc.chunk)
			if len(frags) != tc.want {
				t.Fatalf("%d fragments, want %d", len(frags), tc.want)
			}
			if tc.want == 0 {
				return
			}
			var joined []byte
			for i, b := range frags {
				if len(b) > 256<<10 {
					t.Fatalf("fragment %d is %d bytes, over the decoder's first piece", i, len(b))
				}
				f, ok, err := ParseFragment(b)
				if !ok || err != nil {
					t.Fatalf("fragment %d: ok %v, err %v", i, ok, err)
				}
				if f.Sum != EntrySum(tc.entry) {
					t.Fatalf("fragment %d carries checksum %08x, the entry's is %08x", i, f.Sum, EntrySum(tc.entry))
				}
				if f.Total != len(tc.entry) || f.Offset != len(joined) {
					t.Fatalf("fragment %d: total %d offset %d; want %d and %d", i, f.Total, f.Offset, len(tc.entry), len(joined))
				}
				if f.Last() != (i == len(frags)-1) {
					t.Fatalf("fragment %d: Last() = %v", i, f.Last())
				}
				joined = append(joined, f.Bytes...)
			}
			if !bytes.Equal(joined, tc.entry) {
				t.Fatal("the joined fragments differ from the entry")
			}
		})
	}
}

func TestParseFragment(t *testing.T) {
	entry := EncodeEntry(nil, []Command{{Op: OpNoop}})
	if _, ok, err := ParseFragment(entry); ok || err != nil {
		t.Fatalf("an ordinary entry: ok %v, err %v; want not a fragment", ok, err)
	}
	if _, ok, err := ParseFragment(nil); ok || err != nil {
		t.Fatalf("empty data: ok %v, err %v", ok, err)
	}
	// frag builds a fragment header by hand: total, offset, a checksum, then rest.
	frag := func(total, off []byte, rest ...byte) []byte {
		b := append(append([]byte{fragmentVersion}, total...), off...)
		return append(append(b, 0xde, 0xad, 0xbe, 0xef), rest...)
	}
	if f, ok, err := ParseFragment(frag(uvarint(2), uvarint(1), 7)); !ok || err != nil || f.Sum != 0xdeadbeef || f.Total != 2 || f.Offset != 1 || !bytes.Equal(f.Bytes, []byte{7}) {
		t.Fatalf("a well-formed fragment: %+v, ok %v, err %v", f, ok, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"no header", []byte{fragmentVersion}},
		{"no offset", []byte{fragmentVersion, 10}},
		{"no checksum", []byte{fragmentVersion, 10, 0, 1, 2, 3}},
		{"no bytes", frag(uvarint(10), uvarint(0))},
		{"total zero", frag(uvarint(0), uvarint(0), 1)},
		{"offset past the end", frag(uvarint(2), uvarint(2), 1)},
		{"bytes past the end", frag(uvarint(2), uvarint(1), 1, 1)},
		{"non-minimal varint", frag([]byte{0x82, 0x00}, uvarint(0), 1)},
		{"total over the bound", frag(uvarint(MaxJoinedEntry+1), uvarint(0), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok, err := ParseFragment(tc.b); !ok || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ok %v, err %v; want a fragment that is ErrCorrupt", ok, err)
			}
		})
	}
}

// A fragment handed to DecodeEntry is a caller's mistake, not a newer
// binary's entry: it must not read as ErrNewerFormat, which stops a node.
func TestDecodeEntryRefusesAFragment(t *testing.T) {
	frags := SplitEntry(bytes.Repeat([]byte{1}, 10), 4)
	_, err := DecodeEntry(frags[0])
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNewerFormat) {
		t.Fatalf("DecodeEntry(fragment) = %v; want ErrCorrupt", err)
	}
}

func FuzzParseFragment(f *testing.F) {
	for _, b := range SplitEntry(EncodeEntry(nil, []Command{{Op: OpClaim, Key: "s:1", Source: "s", Payload: []byte("payload")}}), 8) {
		f.Add(b)
	}
	f.Add([]byte{fragmentVersion, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ok, err := ParseFragment(b)
		if !ok || err != nil {
			return
		}
		if fr.Total <= 0 || fr.Total > MaxJoinedEntry || fr.Offset < 0 || len(fr.Bytes) == 0 || fr.Offset+len(fr.Bytes) > fr.Total {
			t.Fatalf("accepted an inconsistent fragment: total %d offset %d bytes %d", fr.Total, fr.Offset, len(fr.Bytes))
		}
	})
}
