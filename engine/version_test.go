package engine

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// stampFormat writes format f into the meta bucket of the closed engine file at path.
func stampFormat(t *testing.T, path string, f uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Put(metaFormat, be64(f)) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// copyFixture copies a testdata file into a test directory (Open writes to it).
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "engine.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOpenStampsFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	e := mustOpenPath(t, path, Options{NoSync: true})
	if f, err := e.Format(); err != nil || f != FormatVersion {
		t.Fatalf("new file: Format() = %d, %v; want %d", f, err, FormatVersion)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// An older stamp (or none) is raised to ours at Open.
	for _, old := range []uint64{0, 1, FormatVersion - 1} {
		stampFormat(t, path, old)
		e, err := Open(path, Options{NoSync: true})
		if err != nil {
			t.Fatalf("format %d: Open: %v", old, err)
		}
		f, err := e.Format()
		e.Close()
		if err != nil || f != FormatVersion {
			t.Fatalf("format %d: Format() after Open = %d, %v; want %d", old, f, err, FormatVersion)
		}
	}
}

// A stamp far beyond any release is damage (bbolt keeps no checksum of its
// data pages), not a newer binary: the error must not send the operator
// after an upgrade that does not exist.
func TestDamagedFormatStampIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "damaged.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	for _, tc := range []struct {
		format uint64
		want   error
	}{
		{FormatVersion + formatsAhead, ErrNewerFormat},
		{FormatVersion + formatsAhead + 1, ErrCorrupt},
		{2097170, ErrCorrupt}, // a stamp a damaged page gave the fuzzer
	} {
		stampFormat(t, path, tc.format)
		err := CheckFile(path)
		if !errors.Is(err, tc.want) {
			t.Errorf("format %d: %v, want %v", tc.format, err, tc.want)
		}
		if tc.want == ErrCorrupt && (errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "which no release wrote")) {
			t.Errorf("format %d: %v, want it called damage", tc.format, err)
		}
	}
}

// A file or snapshot stamped by a newer binary is refused by Open, Restore and
// CheckFile, with an error naming both formats; Restore leaves the state alone.
func TestNewerFormatRefused(t *testing.T) {
	newer := filepath.Join(t.TempDir(), "newer.db")
	e, err := Open(newer, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(1, Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src"}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	stampFormat(t, newer, FormatVersion+1)
	want := fmt.Sprintf("engine file written by format %d; this binary reads up to format %d: upgrade this node's binary",
		FormatVersion+1, FormatVersion)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err = %v; want ErrNewerFormat naming %q", what, err, want)
		}
	}

	_, err = Open(newer, Options{NoSync: true})
	refused("Open", err)
	refused("CheckFile", CheckFile(newer))

	live := newHarness(t)
	live.apply(Command{Op: OpClaim, Now: t0, Key: "src:live", Source: "src"})
	before, err := live.e.Hash()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := os.Open(newer)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	refused("Restore", live.e.Restore(snap))
	if after, err := live.e.Hash(); err != nil || after != before {
		t.Fatalf("Restore of a newer snapshot changed the state (%v)", err)
	}
	if f, err := live.e.Format(); err != nil || f != FormatVersion {
		t.Fatalf("Format() after the refused Restore = %d, %v", f, err)
	}
}

// A snapshot carries its format: a snapshot of this binary's file restores
// with the stamp, and an unstamped (older) one is stamped once restored.
func TestSnapshotCarriesFormat(t *testing.T) {
	src := newHarness(t)
	src.apply(Command{Op: OpClaim, Now: t0, Key: "src:a", Source: "src"})
	var buf bytes.Buffer
	if _, err := src.e.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var f uint64
	err = db.View(func(tx *bolt.Tx) (err error) { f, err = fileFormat(tx.Bucket(bMeta)); return err })
	db.Close()
	if err != nil || f != FormatVersion {
		t.Fatalf("snapshot format = %d, %v; want %d", f, err, FormatVersion)
	}

	dst := newHarness(t)
	old, err := os.Open(filepath.Join("testdata", "format1", "engine.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := dst.e.Restore(old); err != nil {
		t.Fatal(err)
	}
	if f, err := dst.e.Format(); err != nil || f != FormatVersion {
		t.Fatalf("Format() after restoring a format 1 snapshot = %d, %v; want %d", f, err, FormatVersion)
	}
	if err := dst.e.Check(); err != nil {
		t.Fatal(err)
	}
}

// An entry a newer binary wrote fails to decode with ErrNewerFormat (not
// ErrCorrupt, which a node may skip) and names what it does not know.
func TestDecodeEntryNewerFormat(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"entry version", []byte{fragmentVersion + 1, 0}, fmt.Sprintf("entry version %d is from a newer format", fragmentVersion+1)},
		{"entry format", []byte{entryVersion, FormatVersion + 1, 0}, fmt.Sprintf("entry of format %d is from a newer format", FormatVersion+1)},
		{"field bit", append([]byte{entryVersion, FormatVersion, 1, byte(OpNoop)}, uvarint(1<<numFields)...),
			fmt.Sprintf("entry field %d (mask %#x) is from a newer format", numFields, uint64(1)<<numFields)},
		{"high field bit", append([]byte{relayVersion, 1, byte(OpNoop)}, uvarint(1<<63|1<<(numFields+3))...),
			fmt.Sprintf("entry field %d", numFields+3)},
		{"op", []byte{entryVersion, FormatVersion, 1, byte(lastOp + 1), 0}, fmt.Sprintf("op %d is from a newer format", lastOp+1)},
		{"op after a good command", []byte{relayVersion, 2, byte(OpNoop), 0, 0xff, 0}, "op 255 is from a newer format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, shared := range []bool{false, true} {
				cmds, err := decodeEntry(tt.b, shared)
				if !errors.Is(err, ErrNewerFormat) || errors.Is(err, ErrCorrupt) {
					t.Fatalf("decode = %v, %v; want ErrNewerFormat only", cmds, err)
				}
				reads := fmt.Sprintf("this binary reads up to format %d", FormatVersion)
				if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), reads) {
					t.Fatalf("err %q does not name %q and %q", err, tt.want, reads)
				}
			}
		})
	}
	// Every op and field this binary knows still decodes.
	for op := Op(0); op <= lastOp; op++ {
		if _, err := DecodeEntry(EncodeEntry(nil, []Command{{Op: op}})); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	if _, err := DecodeEntry([]byte{0, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("entry version 0: %v; want ErrCorrupt", err)
	}
}

func uvarint(v uint64) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// fixtureEvents reads the events the generator read back from the first
// release's engine (testdata/format1/events.json).
func fixtureEvents(t *testing.T) []Event {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "format1", "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	if err := json.Unmarshal(b, &evs); err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Fatal("no events in events.json")
	}
	return evs
}

func compareEvents(t *testing.T, e *Engine, want []Event, adjust func(got *Event, want Event)) {
	t.Helper()
	for _, w := range want {
		got, err := e.Get(w.Key, true)
		if err != nil {
			t.Fatalf("Get(%s): %v", w.Key, err)
		}
		if adjust != nil {
			adjust(&got, w)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s reads back\n got %+v\nwant %+v", w.Key, got, w)
		}
	}
}

// The engine file written by the first release (format 1, before the stamp)
// opens, passes Check, reads back the events that release read, and takes
// new commands.
func TestFormat1File(t *testing.T) {
	path := copyFixture(t, "format1/engine.db")
	e := mustOpenPath(t, path, Options{NoSync: true})
	if err := e.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	compareEvents(t, e, fixtureEvents(t), nil)
	if f, err := e.Format(); err != nil || f != FormatVersion {
		t.Fatalf("Format() = %d, %v; want the file stamped %d", f, err, FormatVersion)
	}
	res, err := e.Apply(e.LastApplied()+1, Command{Op: OpClaim, Now: t0, Key: "stripe:new", Source: "stripe", Payload: []byte("{}")})
	if err != nil || res[0].Err != nil || !res[0].Created {
		t.Fatalf("claim on the old file: %+v, %v", res, err)
	}
	if err := e.Check(); err != nil {
		t.Fatalf("Check after a claim: %v", err)
	}
}

// The log the first release wrote (testdata/format1/entries.hex) decodes and,
// replayed into an empty engine, yields the events that release had.
func TestFormat1Log(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "format1", "entries.hex"))
	if err != nil {
		t.Fatal(err)
	}
	e := mustOpen(t, Options{NoSync: true})
	for i, line := range strings.Fields(string(b)) {
		raw, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		cmds, err := DecodeEntry(raw)
		if err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
		if !bytes.Equal(EncodeRelayEntry(nil, cmds), raw) {
			t.Fatalf("entry %d re-encodes differently", i+1)
		}
		res, err := e.Apply(uint64(i+1), cmds...)
		if err != nil {
			t.Fatalf("entry %d: %v", i+1, err)
		}
		for j, r := range res {
			if r.Err != nil {
				t.Fatalf("entry %d command %d: %v", i+1, j, r.Err)
			}
		}
	}
	// Version 1 entries are applied with the meanings of the binary that
	// wrote them (legacyFormat): not queued by object, no fresh window on
	// replay. So the replay gives exactly the events that release had, and
	// the same file as the release's own, byte for byte.
	compareEvents(t, e, fixtureEvents(t), nil)
	if err := e.Check(); err != nil {
		t.Fatal(err)
	}
	old := mustOpenPath(t, copyFixture(t, "format1/engine.db"), Options{NoSync: true})
	if got, want := mustHash(t, e), mustHash(t, old); got != want {
		t.Fatalf("replaying the release's log gives a file that differs from the release's own (hash %x, want %x)", got[:8], want[:8])
	}
}

// TestOlderWritersMeanings: commands of an entry an older binary wrote
// (version 1, read as legacyFormat) are applied with that binary's
// meanings, those of today's entries with today's, so that replicas running
// different binaries during a rolling upgrade compute the same state.
func TestOlderWritersMeanings(t *testing.T) {
	// through passes cmds through the log encoding: legacy uses the version
	// 1 layout an older leader wrote, today the current one.
	through := func(t *testing.T, legacy bool, cmds ...Command) []Command {
		t.Helper()
		b := EncodeEntry(nil, cmds)
		if legacy {
			b = EncodeRelayEntry(nil, cmds)
		}
		out, err := DecodeEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, legacy := range []bool{true, false} {
		name := map[bool]string{true: "older writer", false: "today's writer"}[legacy]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			h.apply(through(t, legacy, claimCmd("src:pending", t0), orderedClaim("src:ordered", t0, "src:o", 1))...)
			ordered := h.get("src:ordered")
			if queued := ordered.OrderObject != ""; queued == legacy {
				t.Fatalf("ordered claim queued = %v; an older writer's claims join no object queue, today's do", queued)
			}
			// Expire after the retention: an older writer's expire deleted
			// every event of the bucket, today's keeps unfinished ones.
			r := h.apply(through(t, legacy, Command{Op: OpExpire, Now: t0 + 48*hour})...)[0]
			_, err := h.e.Get("src:pending", false)
			if kept := err == nil; kept == legacy {
				t.Fatalf("pending event kept by expire = %v (n %d, err %v); want deleted only by an older writer's expire", kept, r.N, err)
			}
			if err := h.e.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A replay by an older writer keeps the event's expiry; today's gives a
	// fresh window.
	for _, legacy := range []bool{true, false} {
		h := newHarness(t, Options{NoSync: true})
		h.one(claimCmd("src:r", t0))
		tok := h.one(leaseCmd(t0, 1)).Events[0].Token
		h.one(completeCmd("src:r", tok, t0))
		before := h.get("src:r").ExpiresAt
		h.apply(through(t, legacy, Command{Op: OpReplay, Now: t0 + 20*hour, Keys: []string{"src:r"}, Who: "ops"})...)
		after := h.get("src:r").ExpiresAt
		if moved := after != before; moved == legacy {
			t.Fatalf("legacy %v: replay moved the expiry %d -> %d", legacy, before, after)
		}
	}
}
