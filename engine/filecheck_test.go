package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestTruncatedFileIsRefused: a copy of an engine file cut short (a backup
// interrupted by a full disk) is refused with ErrCorrupt by CheckFile and
// Open, instead of faulting (SIGBUS) when bbolt reads a page past its end;
// the whole file passes.
func TestTruncatedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.db")
	e, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		cmd := claimCmd(fmt.Sprintf("src:k%04d", i), t0)
		cmd.Payload = make([]byte, 512)
		if _, err := e.Apply(uint64(i+1), cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
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
