package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestTruncatedFileIsRefused: a copy of an engine file cut short (a backup
// interrupted by a full disk) is refused with ErrCorrupt by CheckFile and
// Open, instead of faulting (SIGBUS) when bbolt reads a page past its end;
// the whole file passes.
func TestTruncatedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.db")
	writeEngineFile(t, path, 400, make([]byte, 512))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(path); err != nil {
		t.Fatalf("the whole file: %v", err)
	}
	// bbolt grows a file ahead of its pages in use: what matters is the
	// high-water mark its meta page records.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(f, 0)
	f.Close()
	if err != nil || !m.valid() {
		t.Fatalf("meta page 0: %+v %v", m, err)
	}
	used := int(m.pgid) * int(m.pageSize)
	if used < 100000 || used > len(whole) {
		t.Fatalf("%d bytes in use of %d: the test needs a file of some size", used, len(whole))
	}
	cut := filepath.Join(t.TempDir(), "cut.db")
	if err := os.WriteFile(cut, whole[:used], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(cut); err != nil {
		t.Fatalf("the file cut at its pages in use (%d bytes): %v", used, err)
	}
	for _, n := range []int{100, 5000, 8192, 50000, used / 2, used - 4096} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			cut := filepath.Join(t.TempDir(), "cut.db")
			if err := os.WriteFile(cut, whole[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			if err := CheckFile(cut); !errors.Is(err, ErrCorrupt) {
				t.Errorf("CheckFile of the first %d of %d bytes in use: %v, want ErrCorrupt", n, used, err)
			}
			if e, err := Open(cut, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
				if err == nil {
					e.Close()
				}
				t.Errorf("Open of the first %d of %d bytes in use: %v, want ErrCorrupt", n, used, err)
			}
		})
	}
}

// damagedFileFixture writes an engine file of a few hundred events (a
// B+tree of several levels) and returns its bytes and page size.
func damagedFileFixture(t *testing.T) ([]byte, int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "engine.db")
	writeEngineFile(t, path, 3000, make([]byte, 64))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return whole, os.Getpagesize()
}

// openFDCount counts this process's open file descriptors.
func openFDCount(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(fds)
}

// TestDamagedFileIsRefused: a backup with a page that points outside the
// file (a branch element's child id far past the end: bbolt reads unmapped
// memory, a fault that would kill the process) or random bytes flipped in
// its data pages (bbolt panics on some) is refused with ErrCorrupt or, when
// the damage is where nothing is checked (a payload's bytes), accepted; it
// never panics, and every file it opened is closed. Open, which a node runs
// on its own file at start, refuses them the same way.
func TestDamagedFileIsRefused(t *testing.T) {
	whole, pageSize := damagedFileFixture(t)
	m, err := readMeta(bytes.NewReader(whole), 0)
	if err != nil || int(m.pageSize) != pageSize {
		t.Skipf("meta page size %d, want %d (%v)", m.pageSize, pageSize, err)
	}
	dir := t.TempDir()
	write := func(b []byte) string {
		p := filepath.Join(dir, "damaged.db")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := openFDCount(t)

	// Every branch page's first child points to page 2^30: 4 TiB into a
	// mapping of a few hundred KiB.
	far := slices.Clone(whole)
	branches := 0
	for off := 2 * pageSize; off+pageSize <= int(m.pgid)*pageSize; off += pageSize {
		const headerLen, branchFlag = 16, 0x01
		if binary.LittleEndian.Uint16(far[off+8:]) == branchFlag && binary.LittleEndian.Uint16(far[off+10:]) > 0 {
			binary.LittleEndian.PutUint64(far[off+headerLen+8:], 1<<30)
			branches++
		}
	}
	if branches == 0 {
		t.Fatal("the fixture has no branch page")
	}
	if err := CheckFile(write(far)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a child page far past the file (%d branch pages): %v, want ErrCorrupt", branches, err)
	}
	// A node's own file damaged on its disk meets Open, not CheckFile.
	if e, err := Open(write(far), Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			e.Close()
		}
		t.Errorf("Open with a child page far past the file: %v, want ErrCorrupt", err)
	}

	// Random flips, as a damaged disk or a bad copy would make them.
	rng := rand.New(rand.NewPCG(7, 12))
	refused, accepted := 0, 0
	n := 200
	if testing.Short() || raceEnabled {
		n = 60
	}
	for i := range n {
		b := slices.Clone(whole)
		for range 20 {
			off := 2*pageSize + rng.IntN(int(m.pgid)*pageSize-2*pageSize)
			b[off] ^= byte(1 + rng.IntN(255))
		}
		p := write(b)
		checked := CheckFile(p)
		switch {
		case checked == nil:
			accepted++
		case errors.Is(checked, ErrCorrupt):
			refused++
		default:
			t.Errorf("flips %d: %v, want nil or ErrCorrupt", i, checked)
		}
		// Open, as a node opens its own file: refused without a panic,
		// or opened.
		e, err := Open(p, Options{NoSync: true})
		if err == nil {
			e.Close()
		} else if !errors.Is(err, ErrCorrupt) {
			t.Errorf("flips %d: Open: %v, want nil or ErrCorrupt", i, err)
		}
	}
	t.Logf("%d damaged copies: %d refused, %d accepted (damage in unchecked bytes)", n, refused, accepted)
	if refused == 0 {
		t.Error("no damaged copy was refused")
	}
	if after := openFDCount(t); after > before {
		t.Errorf("%d file descriptors open after the checks, %d before: a damaged file was left open", after, before)
	}
}

// FuzzCheckFile feeds damaged engine files to CheckFile: it must answer
// (never panic or fault), and a file it accepts must open read-write, the
// way a restore installs it, without bbolt panicking (its freelist rebuild
// walks every page).
func FuzzCheckFile(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.db")
	writeEngineFile(f, path, 40, []byte(`{"n":1}`))
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	m, err := readMeta(bytes.NewReader(seed), 0)
	if err != nil || !m.valid() {
		f.Fatal("seed meta", err)
	}
	// The fuzzer changes the data pages (from page 2, through the pages in
	// use); the meta pages, checksummed, stay the seed's.
	head, tail := int(2*m.pageSize), int(m.pgid)*int(m.pageSize)
	f.Add(seed[head:tail])
	f.Fuzz(func(t *testing.T, pages []byte) {
		if len(pages) != tail-head {
			return
		}
		b := slices.Concat(seed[:head], pages) // the file ends with its pages in use
		p := filepath.Join(t.TempDir(), "f.db")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckFile(p); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("CheckFile: %v, want nil or ErrCorrupt", err)
			}
			return
		}
		e, err := Open(p, Options{NoSync: true})
		if err != nil {
			return
		}
		e.Close()
	})
}

// writeEngineFile writes an engine file at path holding n claimed events
// with payload, one entry each, and closes it.
func writeEngineFile(tb testing.TB, path string, n int, payload []byte) {
	tb.Helper()
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		cmd := claimCmd(fmt.Sprintf("src:k%05d", i), t0+int64(i))
		cmd.Payload = payload
		if _, err := e.Apply(uint64(i+1), cmd); err != nil {
			tb.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestOpenLockedFileSaysWhy: a file another Open holds (another oncehook on
// the same data_dir) is refused after the lock timeout with an error that
// says so, wrapping bbolt's timeout.
func TestOpenLockedFileSaysWhy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.db")
	mustOpenPath(t, path, Options{NoSync: true})
	e, err := Open(path, Options{NoSync: true, LockTimeout: 50 * time.Millisecond})
	if err == nil {
		e.Close()
		t.Fatal("a second Open of a held file succeeded")
	}
	if !errors.Is(err, bolt.ErrTimeout) || !strings.Contains(err.Error(), "another process holds its lock (is another oncehook running on this data_dir?)") {
		t.Fatalf("Open = %v; want bbolt's timeout, saying another process holds the file", err)
	}
}
