package cluster

// The fsm's joining of split entries, over any sequence of
// log entries (only ParseFragment, one entry at a time, was fuzzed).

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// splitLogs reads in as a sequence of log entries: a length byte, then
// that many bytes (the last one may be short).
func splitLogs(in []byte) [][]byte {
	var out [][]byte
	for len(in) > 0 {
		n := int(in[0])
		in = in[1:]
		n = min(n, len(in))
		out = append(out, in[:n:n])
		in = in[n:]
	}
	return out
}

func joinLogs(datas ...[]byte) []byte {
	var b []byte
	for _, d := range datas {
		if len(d) > 255 {
			panic("seed entry over 255 bytes")
		}
		b = append(b, byte(len(d)))
		b = append(b, d...)
	}
	return b
}

// FuzzJoinFragments: whatever the log holds, joinFragment never panics; an
// ordinary entry comes back as it is; a joined entry is exactly the bytes
// of a run of fragments from offset 0 to its total, in log order and with
// nothing between them, its checksum is theirs, and it does not change when
// later entries are read (it must not alias a buffer that is reused).
func FuzzJoinFragments(f *testing.F) {
	entry := engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim, Key: "s:1", Source: "s", Payload: []byte("payload-of-the-entry")}})
	frags := engine.SplitEntry(entry, 8)
	f.Add(joinLogs(frags...))
	f.Add(joinLogs(append(frags[:1:1], entry, frags[1])...))
	f.Add(joinLogs(append(append([][]byte{}, frags...), frags...)...))
	f.Add(joinLogs(frags[0], frags[0], frags[1], frags[len(frags)-1]))
	f.Add(joinLogs(entry, []byte{3}, []byte{3, 1, 0, 0, 0, 0, 0, 'x'}))
	f.Fuzz(func(t *testing.T, in []byte) {
		logs := splitLogs(in)
		var fs fsm
		type got struct {
			whole []byte
			copy  []byte
		}
		var wholes []got
		run := [][]byte(nil) // fragment bodies since the last offset 0, in order
		runOK := false
		for i, d := range logs {
			l := &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: d}
			fr, isFrag, perr := engine.ParseFragment(d)
			whole, err := fs.joinFragment(l)
			switch {
			case !isFrag:
				if err != nil || !bytes.Equal(whole, d) {
					t.Fatalf("entry %d, not a fragment: %q, %v; want it back", i, whole, err)
				}
				run, runOK = nil, false
				continue
			case perr != nil:
				if err == nil {
					t.Fatalf("entry %d: malformed fragment (%v) accepted", i, perr)
				}
				if !errors.Is(err, engine.ErrCorrupt) {
					t.Fatalf("entry %d: %v does not wrap ErrCorrupt", i, err)
				}
				run, runOK = nil, false
				continue
			}
			if fr.Offset == 0 {
				run, runOK = [][]byte{fr.Bytes}, true
			} else if runOK {
				run = append(run, fr.Bytes)
			}
			if err != nil {
				run, runOK = nil, false
				continue
			}
			if whole == nil {
				if fr.Last() {
					t.Fatalf("entry %d: the last fragment answered nothing", i)
				}
				continue
			}
			if !fr.Last() {
				t.Fatalf("entry %d: a fragment that is not the last answered %d bytes", i, len(whole))
			}
			if !runOK || !bytes.Equal(whole, bytes.Join(run, nil)) {
				t.Fatalf("entry %d: joined %q, not the run of fragments %q", i, whole, run)
			}
			if len(whole) != fr.Total || engine.EntrySum(whole) != fr.Sum {
				t.Fatalf("entry %d: joined %d bytes with sum %08x; fragment says %d, %08x", i, len(whole), engine.EntrySum(whole), fr.Total, fr.Sum)
			}
			wholes = append(wholes, got{whole, bytes.Clone(whole)})
			run, runOK = nil, false
		}
		for _, w := range wholes {
			if !bytes.Equal(w.whole, w.copy) {
				t.Fatalf("a joined entry changed after later entries were read")
			}
		}
	})
}
