package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLockDataDir: a data dir another user could have written to is refused
// before anything in it is used, and one process at a time holds it.
func TestLockDataDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the dir to lock
		want  string                                // "": locked
	}{
		{"missing: made 0700", func(t *testing.T, dir string) string { return filepath.Join(dir, "new", "data") }, ""},
		{"private", func(t *testing.T, dir string) string { return dir }, ""},
		{"readable by others", func(t *testing.T, dir string) string { chmod(t, dir, 0o755); return dir }, ""},
		{"writable by others", func(t *testing.T, dir string) string { chmod(t, dir, 0o777); return dir }, "writable by its group or others (mode 0777)"},
		{"writable by its group", func(t *testing.T, dir string) string { chmod(t, dir, 0o770); return dir }, "writable by its group or others (mode 0770)"},
		{"a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "f")
			write(t, p)
			return p
		}, "is a file: name a directory"},
		{"below a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "f")
			write(t, p)
			return filepath.Join(p, "data")
		}, "a directory on its way is a file: name a directory"},
		{"a link to a private dir", func(t *testing.T, dir string) string {
			real := filepath.Join(dir, "real")
			if err := os.Mkdir(real, 0o700); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, "link")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, ""},
		{"below a dir anyone can write to", func(t *testing.T, dir string) string {
			open := filepath.Join(dir, "open")
			if err := os.Mkdir(open, 0o700); err != nil {
				t.Fatal(err)
			}
			chmod(t, open, 0o777)
			return filepath.Join(open, "data")
		}, "is writable by anyone without the sticky bit (mode 0777)"},
		{"a link to a private dir, in a dir anyone can write to", func(t *testing.T, dir string) string {
			real := filepath.Join(dir, "private", "data")
			if err := os.MkdirAll(real, 0o700); err != nil {
				t.Fatal(err)
			}
			open := filepath.Join(dir, "open")
			if err := os.Mkdir(open, 0o700); err != nil {
				t.Fatal(err)
			}
			chmod(t, open, 0o777)
			link := filepath.Join(open, "data")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is writable by anyone without the sticky bit (mode 0777)"},
		{"below a sticky dir anyone can write to", func(t *testing.T, dir string) string {
			open := filepath.Join(dir, "tmp")
			if err := os.Mkdir(open, 0o700); err != nil {
				t.Fatal(err)
			}
			chmod(t, open, os.ModeSticky|0o777)
			return filepath.Join(open, "data")
		}, ""},
		{"a link of ours inside", func(t *testing.T, dir string) string {
			if err := os.Symlink("/etc/hostname", filepath.Join(dir, "fsm.db")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, ""},
		{"an entry another user owns", func(t *testing.T, dir string) string {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			p := filepath.Join(dir, "keys", "src.json")
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, p)
			if err := os.Lchown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "keys/src.json is owned by uid 65534"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t, t.TempDir())
			l, err := LockDataDir(dir)
			if tc.want != "" {
				if l != nil {
					l.Close()
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
				if _, err := os.Lstat(filepath.Join(dir, dataDirLockName)); err == nil {
					t.Error("the refused dir got a lock file")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if info, err := os.Stat(dir); err != nil || info.Mode().Perm()&0o022 != 0 {
				t.Fatalf("dir %v, %v", info.Mode(), err)
			}
		})
	}

	// The owner check, for a user other than this process's (root counts as
	// no other user: as root, the dir is given away first).
	other := t.TempDir()
	uid := os.Geteuid() + 1
	if os.Geteuid() == 0 {
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		uid = 0
	}
	if err := checkDataDir(other, uid); !errors.Is(err, ErrDataDirUnsafe) || !strings.Contains(err.Error(), "owned by uid") {
		t.Errorf("a dir of another user: %v", err)
	}

	dir := t.TempDir()
	first, err := LockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := LockDataDir(dir); !errors.Is(err, ErrDataDirBusy) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("a second lock: %v, want ErrDataDirBusy", err)
	}
	first.Close()
	again, err := LockDataDir(dir)
	if err != nil {
		t.Fatalf("the lock after the first was released: %v", err)
	}
	again.Close()
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTightenTreeLeavesLinks: the walk that makes the snapshot tree private
// chmods no link: os.Chmod would change the mode of what it points at.
func TestTightenTreeLeavesLinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "theirs")
	write(t, target)
	chmod(t, target, 0o644)
	chmod(t, outside, 0o755)
	if err := os.Symlink(target, filepath.Join(root, "file-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dir-link")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "state.bin"))
	chmod(t, filepath.Join(root, "state.bin"), 0o644)
	if err := tightenTree(root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{target: 0o644, outside: 0o755, filepath.Join(root, "state.bin"): 0o600} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v, %v; want %04o", p, info.Mode().Perm(), err, want)
		}
	}
}

// TestDataDirOwnersAsRoot: root's entries are no other user's (lost+found
// at the top of a file system), and validate run as root judges the
// entries against the data dir's owner, the service user, not against root.
func TestDataDirOwnersAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	const service, stranger = 999, 65534
	dir := t.TempDir()
	own := func(p string, uid int) {
		t.Helper()
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "fsm.db"))
	own(dir, service)
	own(filepath.Join(dir, "fsm.db"), service)
	if err := checkDataDir(dir, service); err != nil {
		t.Errorf("the service user's dir with root's lost+found: %v", err)
	}
	if err := CheckDataDir(dir); err != nil {
		t.Errorf("validate as root of the service user's dir: %v", err)
	}
	planted := filepath.Join(dir, "keys")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	own(planted, stranger)
	if err := CheckDataDir(dir); !errors.Is(err, ErrDataDirUnsafe) || !strings.Contains(err.Error(), "not by the data dir's owner (uid 999)") {
		t.Errorf("validate as root, a stranger's entry: %v", err)
	}
	if err := checkDataDir(dir, service); !errors.Is(err, ErrDataDirUnsafe) {
		t.Errorf("serve as the service user, a stranger's entry: %v", err)
	}
}

// TestDataDirChainedLinkThroughOpenDir: a data dir named through a link
// whose target runs through a link in a directory anyone may write to is
// refused: neither the path as named (safe/data) nor the one it resolves to
// (private/p/data) passes through the open directory, yet anyone can
// replace open/l and redirect the data dir.
func TestDataDirChainedLinkThroughOpenDir(t *testing.T) {
	root := t.TempDir()
	private := filepath.Join(root, "private", "p")
	if err := os.MkdirAll(filepath.Join(private, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, open, 0o777)
	if err := os.Symlink(private, filepath.Join(open, "l")); err != nil { // replaceable by anyone
		t.Fatal(err)
	}
	safe := filepath.Join(root, "safe")
	if err := os.Mkdir(safe, 0o700); err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(safe, "data")
	if err := os.Symlink(filepath.Join(open, "l", "data"), named); err != nil {
		t.Fatal(err)
	}
	// Control: named directly through the open dir, it is refused.
	if err := checkAncestors(filepath.Join(open, "l", "data")); !errors.Is(err, ErrDataDirUnsafe) {
		t.Fatalf("control: %v", err)
	}
	if err := checkAncestors(named); !errors.Is(err, ErrDataDirUnsafe) {
		t.Errorf("data dir %s -> %s/l/data (l replaceable by anyone) accepted: checkAncestors = %v", named, open, err)
	}
}

// TestDataDirOfAnotherNode: a node refuses a data dir that holds another
// node's state (it would run under an id its cluster does not count, never
// ready), names both ids and what to do; a dir whose state was wiped, or
// one an earlier release left without the record, is taken.
func TestDataDirOfAnotherNode(t *testing.T) {
	dir := t.TempDir()
	as := func(id string) func(*Config) { return func(c *Config) { c.ID = id } }
	n := openSolo(t, dir, as("node1"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{ID: "node2", Dir: dir, Logger: quietLogger()})
	if !errors.Is(err, ErrDataDirOtherNode) || !strings.Contains(err.Error(), `"node1"`) || !strings.Contains(err.Error(), `"node2"`) {
		t.Fatalf("node2 on node1's data dir: %v, want ErrDataDirOtherNode naming both", err)
	}
	if owner, err := DataDirOwner(dir); owner != "node1" || err != nil {
		t.Fatalf("owner after the refusal: %q %v", owner, err)
	}
	// The same node starts again on it.
	n = openSolo(t, dir, as("node1"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// An earlier release recorded no id: the first start records its own.
	if err := os.Remove(filepath.Join(dir, nodeIDName)); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, as("node1"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if owner, err := DataDirOwner(dir); owner != "node1" || err != nil {
		t.Fatalf("owner recorded at the first start: %q %v", owner, err)
	}
	// State wiped, the record left behind: another node may start on it.
	for _, name := range []string{"fsm.db", "raft"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if owner, err := DataDirOwner(dir); owner != "" || err != nil {
		t.Fatalf("owner of a wiped dir: %q %v", owner, err)
	}
	n = openSolo(t, dir, as("node2"))
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDataDirPermissionHint: a permission error about a file in the data
// dir (the node runs as a user that does not own it; the tests run as root,
// which no mode stops) says what to do; one about another file does not
// get the data dir's advice.
func TestDataDirPermissionHint(t *testing.T) {
	dir := "/var/lib/oncehook"
	inside := fmt.Errorf("open engine: %w", &fs.PathError{Op: "open", Path: dir + "/fsm.db", Err: fs.ErrPermission})
	if got := dataDirHint(dir, inside).Error(); !strings.Contains(got, "chown -R") || !strings.Contains(got, "this process runs as uid") {
		t.Errorf("permission error in the data dir: %q, want the chown advice", got)
	}
	if !errors.Is(dataDirHint(dir, inside), fs.ErrPermission) {
		t.Error("the hint lost the error it wraps")
	}
	outside := &fs.PathError{Op: "open", Path: "/etc/oncehook/cluster.key", Err: fs.ErrPermission}
	if got := dataDirHint(dir, outside).Error(); strings.Contains(got, "chown") {
		t.Errorf("permission error outside the data dir: %q, want no data dir advice", got)
	}
	if dataDirHint(dir, nil) != nil {
		t.Error("a nil error got a hint")
	}
}

// TestCanMake: validate judges a missing data dir as serve's MkdirAll would
// meet it: a file on its way, or (for a user other than root) a directory on
// its way this user may not write in, is refused with what to do.
func TestCanMake(t *testing.T) {
	root := os.Geteuid() == 0
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the data dir
		want  error                                 // nil: serve can make it
		hint  string
	}{
		{"missing, in a writable dir", func(t *testing.T, dir string) string {
			return filepath.Join(dir, "a", "b")
		}, nil, ""},
		{"a file on its way", func(t *testing.T, dir string) string {
			if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "f", "a", "b")
		}, syscall.ENOTDIR, "a directory on its way is a file"},
		{"a read-only dir on its way", func(t *testing.T, dir string) string {
			if root {
				t.Skip("root writes in any directory")
			}
			ro := filepath.Join(dir, "ro")
			if err := os.Mkdir(ro, 0o500); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(ro, "a")
		}, fs.ErrPermission, "make it as root for that user (install -d -m 700"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.setup(t, t.TempDir())
			err := CheckDataDir(data)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("CheckDataDir: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), "cannot make "+data) || !strings.Contains(err.Error(), tt.hint) {
				t.Fatalf("CheckDataDir: %v, want %v, naming %s, with %q", err, tt.want, data, tt.hint)
			}
			if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				t.Errorf("the check made something: %v", err)
			}
		})
	}
}
