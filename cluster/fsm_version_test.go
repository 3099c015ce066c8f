package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"

	"oncehook/engine"
)

// The FSM skips a corrupt entry (every replica rejects it the same way) but
// stops the node at an entry a newer binary wrote: the replicas that run one
// apply it, so skipping it would diverge from them.
func TestFSMNewerEntryIsFatal(t *testing.T) {
	claim := func(key string) []byte {
		return engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim, Now: 1, Key: key, Source: "s", Payload: []byte("{}")}})
	}
	corrupt := []byte{1, 1, byte(engine.OpClaim)} // truncated: no field mask
	// A field-mask bit above every field this binary knows (bit 62).
	newer := []byte{1, 1, byte(engine.OpNoop), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40}
	tests := []struct {
		name      string
		data      [][]byte
		wantFatal bool
		applied   uint64 // LastApplied after the batch
		results   []string
	}{
		{"corrupt is skipped", [][]byte{claim("s:a"), corrupt, claim("s:b")}, false, 3,
			[]string{"ok", "corrupt record", "ok"}},
		{"newer stops", [][]byte{claim("s:a"), newer, claim("s:b")}, true, 1,
			[]string{"ok", ErrShutdown.Error(), ErrShutdown.Error()}},
		{"newer first", [][]byte{newer, claim("s:a")}, true, 0,
			[]string{ErrShutdown.Error(), ErrShutdown.Error()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng, err := engine.Open(filepath.Join(t.TempDir(), "engine.db"), engine.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			var fatal []error
			f := &fsm{eng: eng, fatal: func(err error) { fatal = append(fatal, err) }}
			defer func() {
				if f.flushTimer != nil {
					f.flushTimer.Stop()
				}
			}()
			logs := make([]*raft.Log, len(tt.data))
			for i, d := range tt.data {
				logs[i] = &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: d}
			}
			out := f.ApplyBatch(logs)
			for i, o := range out {
				a := o.(*applied)
				got := "ok"
				if a.err != nil {
					got = a.err.Error()
				} else if a.results[0].Err != nil {
					got = a.results[0].Err.Error()
				}
				if !strings.Contains(got, tt.results[i]) {
					t.Errorf("log %d: %q; want %q", i+1, got, tt.results[i])
				}
			}
			if tt.wantFatal {
				if len(fatal) != 1 || !errors.Is(fatal[0], engine.ErrNewerFormat) ||
					!strings.Contains(fatal[0].Error(), "entry field 62") ||
					!strings.Contains(fatal[0].Error(), "this binary reads up to format") {
					t.Fatalf("fatal = %v; want one ErrNewerFormat naming the field and this binary's format", fatal)
				}
			} else if len(fatal) != 0 {
				t.Fatalf("fatal = %v; want none", fatal)
			}
			if err := eng.Flush(); err != nil {
				t.Fatal(err)
			}
			if got := eng.LastApplied(); got != tt.applied {
				t.Fatalf("LastApplied = %d; want %d", got, tt.applied)
			}
		})
	}
}

// A snapshot written by a newer binary (its engine file stamped with a higher
// format) is refused by the FSM's Restore, naming both formats, and the
// node's state stays as it was.
func TestFSMRestoreNewerSnapshotRefused(t *testing.T) {
	dir := t.TempDir()
	newer := filepath.Join(dir, "newer.db")
	src, err := engine.Open(newer, engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Apply(1, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	src.Close()
	db, err := bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("format"), binary.BigEndian.AppendUint64(nil, engine.FormatVersion+1))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(newer)
	if err != nil {
		t.Fatal(err)
	}

	snaps := raft.NewInmemSnapshotStore()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 5, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := snaps.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}

	eng, err := engine.Open(filepath.Join(dir, "engine.db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	f := &fsm{eng: eng, snaps: snaps, fatal: func(err error) { t.Errorf("fatal: %v", err) }}
	err = f.Restore(rc)
	want := fmt.Sprintf("engine file written by format %d; this binary reads up to format %d", engine.FormatVersion+1, engine.FormatVersion)
	if !errors.Is(err, engine.ErrNewerFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Restore of a newer snapshot: %v; want ErrNewerFormat naming %q", err, want)
	}
	if eng.LastApplied() != 0 {
		t.Fatalf("LastApplied = %d after the refused restore", eng.LastApplied())
	}
	if _, err := eng.Get("src:a", false); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("the refused snapshot's event is readable: %v", err)
	}
}

// A restore that failed after the engine's file was replaced leaves the
// engine closed: the node stops (fatal) rather than run on without a state.
// Any other failure leaves the state as it was, and the node runs on.
func TestIncompleteRestoreStopsTheNode(t *testing.T) {
	snaps := raft.NewInmemSnapshotStore()
	sink, err := snaps.Create(raft.SnapshotVersionMax, 5, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(filepath.Join(t.TempDir(), "engine.db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	for _, tc := range []struct {
		name      string
		err       error
		wantFatal bool
	}{
		{"after the rename", fmt.Errorf("engine: restore: sync: %w: EIO", engine.ErrRestoreIncomplete), true},
		{"before the rename", errors.New("engine: restore: not an engine file"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fatal []error
			f := &fsm{eng: eng, snaps: snaps, fatal: func(err error) { fatal = append(fatal, err) },
				restoreAt: func(io.Reader, uint64) error { return tc.err }}
			_, rc, err := snaps.Open(sink.ID())
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Restore(rc); !errors.Is(err, tc.err) {
				t.Fatalf("Restore: %v; want %v", err, tc.err)
			}
			if got := len(fatal) == 1 && errors.Is(fatal[0], tc.err); got != tc.wantFatal {
				t.Fatalf("fatal %v; want the node stopped: %v", fatal, tc.wantFatal)
			}
		})
	}
}

// An engine that cannot apply an entry (a storage error) stops the node:
// raft moves its applied index on whatever ApplyBatch returns, so a replica
// that answered the entry with an error and went on would have skipped a
// write the others made.
func TestFSMEngineErrorIsFatal(t *testing.T) {
	eng, err := engine.Open(filepath.Join(t.TempDir(), "engine.db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var fatal []error
	f := &fsm{eng: eng, fatal: func(err error) { fatal = append(fatal, err) }}
	defer func() {
		if f.flushTimer != nil {
			f.flushTimer.Stop()
		}
	}()
	data := engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim, Now: 1, Key: "s:a", Source: "s", Payload: []byte("{}")}})
	f.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogCommand, Data: data}})
	if len(fatal) != 0 {
		t.Fatalf("a healthy engine stopped the node: %v", fatal)
	}
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil { // what a storage error would leave
		t.Fatal(err)
	}
	data = engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim, Now: 2, Key: "s:b", Source: "s", Payload: []byte("{}")}})
	out := f.ApplyBatch([]*raft.Log{{Index: 2, Type: raft.LogCommand, Data: data}})
	if len(fatal) != 1 || !strings.Contains(fatal[0].Error(), "fsm apply of entries 2..2") {
		t.Fatalf("fatal = %v, want the node stopped for entry 2", fatal)
	}
	if a := out[0].(*applied); !errors.Is(a.err, ErrShutdown) {
		t.Fatalf("entry 2 answered %v, want ErrShutdown", a.err)
	}
}
