package powercut

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if op := os.Getenv(childEnv); op != "" {
		os.Exit(child(op, os.Args[len(os.Args)-1]))
	}
	goleak.VerifyTestMain(m)
}

// childEnv makes the test binary a child that maps a file of the mount.
// A page fault on a FUSE file waits for the FUSE server; when the server is
// this same Go process, a stop-the-world garbage collection waits for the
// faulting thread, which waits for the stopped server: both hang for good.
// So whatever mmaps a file of the mount (bbolt, the mmap test) runs in a
// child process, as the nodes of the system tests do.
const childEnv = "POWERCUT_TEST_CHILD"

// child runs op on path and reports on stdout; its exit code is 0 on success.
func child(op, path string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	switch op {
	case "mmap":
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fail(err)
		}
		mm, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return fail(err)
		}
		_ = mm[4096] // fault the page in before the write
		if _, err := f.WriteAt([]byte("fresh"), 4096); err != nil {
			return fail(err)
		}
		fmt.Printf("mmap:%s\n", mm[4096:4101])
		return 0
	case "bbolt", "bbolt-nosync":
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			return fail(err)
		}
		err = db.Update(func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucket([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte("first"), []byte("1"))
		})
		if err != nil {
			return fail(err)
		}
		db.NoSync = op == "bbolt-nosync"
		err = db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket([]byte("b")).Put([]byte("second"), bytes.Repeat([]byte("2"), 10000))
		})
		if err != nil {
			return fail(err)
		}
		var seen bool
		db.View(func(tx *bbolt.Tx) error {
			seen = tx.Bucket([]byte("b")).Get([]byte("second")) != nil
			return nil
		})
		// The process dies without closing: the power goes.
		fmt.Printf("seen:%v\n", seen)
		return 0
	}
	return fail(fmt.Errorf("unknown child op %q", op))
}

// runChild runs the test binary as a child doing op on path and returns what
// it printed.
func runChild(t *testing.T, op, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", path)
	cmd.Env = append(os.Environ(), childEnv+"="+op)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", op, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mount mounts a fresh backing dir (pre-filled with files) and returns the
// mount; the test's cleanup unmounts it if the test did not cut it.
func mount(t *testing.T, files map[string][]byte) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("powercut: %v (needs root, /dev/fuse and the fuse3 package)", err)
	}
	dir := t.TempDir()
	back, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "mnt")
	for _, d := range []string{back, mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(back, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m, err := Mount(back, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return m
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func open(t *testing.T, path string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCut: what a cut keeps and what it undoes, file by file.
func TestCut(t *testing.T) {
	orig := pattern(10000, 1) // two full blocks and a part
	for _, tc := range []struct {
		name string
		act  func(t *testing.T, dir string) // on the mount
		want map[string][]byte              // backing files after the cut (nil: absent)
	}{
		{"write then fsync survives", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "new"), os.O_CREATE|os.O_RDWR)
			_, err := f.Write([]byte("durable"))
			must(t, err)
			must(t, f.Sync())
			must(t, f.Close())
		}, map[string][]byte{"new": []byte("durable"), "a": orig}},
		{"write without fsync is lost; the created file stays (metadata is durable)", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "new"), os.O_CREATE|os.O_RDWR)
			_, err := f.Write([]byte("volatile"))
			must(t, err)
			must(t, f.Close())
		}, map[string][]byte{"new": {}, "a": orig}},
		{"partial overwrite and extension are restored", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			_, err := f.WriteAt(bytes.Repeat([]byte{'x'}, 100), 4000) // across the first block's end
			must(t, err)
			_, err = f.WriteAt(bytes.Repeat([]byte{'y'}, 5000), 9000) // past the end
			must(t, err)
			must(t, f.Close())
		}, map[string][]byte{"a": orig}},
		{"fdatasync keeps the writes before it, not those after", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			_, err := f.WriteAt([]byte("kept"), 10)
			must(t, err)
			must(t, syscall.Fdatasync(int(f.Fd())))
			_, err = f.WriteAt([]byte("lost"), 20)
			must(t, err)
			must(t, f.Close())
		}, map[string][]byte{"a": splice(orig, 10, []byte("kept"))}},
		{"shrinking truncate is restored", func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, "a"), 5))
		}, map[string][]byte{"a": orig}},
		{"ftruncate, growth and rewrite are restored", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			must(t, f.Truncate(3000))
			must(t, f.Truncate(20000))
			_, err := f.WriteAt([]byte("zz"), 5000)
			must(t, err)
			must(t, f.Close())
		}, map[string][]byte{"a": orig}},
		{"a synced truncate survives", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			must(t, f.Truncate(3000))
			must(t, f.Sync())
			_, err := f.WriteAt([]byte("zz"), 0)
			must(t, err)
			must(t, f.Close())
		}, map[string][]byte{"a": orig[:3000]}},
		{"an fsync of one file keeps another's writes volatile", func(t *testing.T, dir string) {
			a := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			b := open(t, filepath.Join(dir, "b"), os.O_CREATE|os.O_RDWR)
			_, err := a.WriteAt([]byte("lost"), 0)
			must(t, err)
			_, err = b.Write([]byte("kept"))
			must(t, err)
			must(t, b.Sync())
			must(t, a.Close())
			must(t, b.Close())
		}, map[string][]byte{"a": orig, "b": []byte("kept")}},
		{"a renamed file is restored under its new name", func(t *testing.T, dir string) {
			f := open(t, filepath.Join(dir, "a"), os.O_RDWR)
			_, err := f.WriteAt([]byte("lost"), 0)
			must(t, err)
			must(t, f.Close())
			must(t, os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "c")))
		}, map[string][]byte{"a": nil, "c": orig}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t, map[string][]byte{"a": orig})
			tc.act(t, m.Mountpoint)
			must(t, m.Cut())
			for name, want := range tc.want {
				got, err := os.ReadFile(filepath.Join(m.Backing, name))
				if want == nil {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s: exists after the cut (err %v)", name, err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s after the cut: %d bytes %q..., want %d bytes %q...", name, len(got), head(got), len(want), head(want))
				}
			}
		})
	}
}

func splice(b []byte, off int, s []byte) []byte {
	out := bytes.Clone(b)
	copy(out[off:], s)
	return out
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// TestWritesAreVisibleThroughTheMount: until the cut, the mount shows every
// write at once, to read(2) and to a shared read-only mmap (how bbolt reads
// its file), and so does the backing file.
func TestWritesAreVisibleThroughTheMount(t *testing.T) {
	m := mount(t, map[string][]byte{"a": pattern(8192, 1)})
	path := filepath.Join(m.Mountpoint, "a")
	if got := runChild(t, "mmap", path); got != "mmap:fresh" {
		t.Errorf("the child's mmap read %q after its write, want %q", got, "mmap:fresh")
	}
	r := open(t, path, os.O_RDONLY)
	defer r.Close()
	buf := make([]byte, 5)
	_, err := r.ReadAt(buf, 4096)
	must(t, err)
	if string(buf) != "fresh" {
		t.Errorf("read(2) of another handle gives %q, want %q", buf, "fresh")
	}
	back, err := os.ReadFile(filepath.Join(m.Backing, "a"))
	must(t, err)
	if string(back[4096:4101]) != "fresh" {
		t.Errorf("backing file has %q, want the write through", back[4096:4101])
	}
	if m.Unsynced() != 1 {
		t.Errorf("Unsynced = %d, want 1", m.Unsynced())
	}
}

// TestCutFreezesOpenFiles: a handle still open at the cut (a process the
// test forgot to kill) gets EIO afterwards and changes nothing.
func TestCutFreezesOpenFiles(t *testing.T) {
	orig := pattern(100, 3)
	m := mount(t, map[string][]byte{"a": orig})
	f := open(t, filepath.Join(m.Mountpoint, "a"), os.O_RDWR)
	defer f.Close()
	_, err := f.WriteAt([]byte("lost"), 0)
	must(t, err)
	must(t, m.Cut())
	if _, err := f.WriteAt([]byte("late"), 0); err == nil {
		t.Error("a write after the cut succeeded")
	}
	got, err := os.ReadFile(filepath.Join(m.Backing, "a"))
	must(t, err)
	if !bytes.Equal(got, orig) {
		t.Errorf("backing file after the cut: %q..., want the original", head(got))
	}
}

// TestBbolt: a real bbolt database on the mount. A commit with NoSync is lost
// at the cut, a synced one is kept, and the file opens and checks clean
// either way.
func TestBbolt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noSync bool
		want   bool // the second commit's key present after the cut
	}{
		{"synced commit survives", false, true},
		{"NoSync commit is lost", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t, nil)
			op := "bbolt"
			if tc.noSync {
				op = "bbolt-nosync"
			}
			if got := runChild(t, op, filepath.Join(m.Mountpoint, "db")); got != "seen:true" {
				t.Fatalf("the child reports %q: the second commit not visible through the mount before the cut", got)
			}
			must(t, m.Cut())

			db, err := bbolt.Open(filepath.Join(m.Backing, "db"), 0o600, nil)
			must(t, err)
			defer db.Close()
			must(t, db.View(func(tx *bbolt.Tx) error {
				for err := range tx.Check() {
					t.Errorf("check after the cut: %v", err)
				}
				b := tx.Bucket([]byte("b"))
				if b == nil || b.Get([]byte("first")) == nil {
					t.Error("the first (synced) commit is gone")
				}
				if got := b != nil && b.Get([]byte("second")) != nil; got != tc.want {
					t.Errorf("second commit present = %v after the cut, want %v", got, tc.want)
				}
				return nil
			}))
		})
	}
}

// TestTornCut: a torn cut keeps each unsynced block's new content or its
// synced one, never anything else, and with a fixed seed some of each; Keep 1
// keeps every change, Keep 0 none.
func TestTornCut(t *testing.T) {
	const blocks = 64
	orig := pattern(blocks*blockSize, 1)
	changed := pattern(blocks*blockSize, 7)
	for _, tc := range []struct {
		name       string
		keep       float64
		kept, lost bool // some block kept its change; some lost it
	}{
		{"keep nothing", 0, false, true},
		{"keep half", 0.5, true, true},
		{"keep everything", 1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mount(t, map[string][]byte{"a": orig})
			f := open(t, filepath.Join(m.Mountpoint, "a"), os.O_RDWR)
			_, err := f.WriteAt(changed, 0)
			must(t, err)
			must(t, f.Close())
			must(t, m.CutWith(CutOptions{Keep: tc.keep, Seed: 1}))
			got, err := os.ReadFile(filepath.Join(m.Backing, "a"))
			must(t, err)
			if len(got) != len(orig) {
				t.Fatalf("size %d after the cut, want %d", len(got), len(orig))
			}
			var kept, lost bool
			for b := 0; b < blocks; b++ {
				blk := got[b*blockSize : (b+1)*blockSize]
				switch {
				case bytes.Equal(blk, changed[b*blockSize:(b+1)*blockSize]):
					kept = true
				case bytes.Equal(blk, orig[b*blockSize:(b+1)*blockSize]):
					lost = true
				default:
					t.Fatalf("block %d is neither the synced nor the written content", b)
				}
			}
			if kept != tc.kept || lost != tc.lost {
				t.Errorf("some block kept its change: %v, want %v; some lost it: %v, want %v", kept, tc.kept, lost, tc.lost)
			}
		})
	}
}
