package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrDataDirBusy: another process holds the data dir's lock.
var ErrDataDirBusy = errors.New("another process holds the data dir (is another oncehook running on it?)")

// ErrDataDirUnsafe: another user could have written into the data dir.
var ErrDataDirUnsafe = errors.New("another user could have placed files in it")

// dataDirLockName is the lock file under the data dir.
const dataDirLockName = "oncehook.lock"

// nodeIDName records the id of the node whose state the data dir holds.
const nodeIDName = "node.id"

// ErrDataDirOtherNode: the data dir holds another node's state.
var ErrDataDirOtherNode = errors.New("the data dir holds another node's state")

// DataDirLock is the lock a node holds on its data dir while it runs.
type DataDirLock struct{ f *os.File }

// Close releases the lock.
func (l *DataDirLock) Close() error { return l.f.Close() }

// LockDataDir prepares dir for a node before anything reads or writes in it
// (docs/security.md, "Files"): it makes it (0700) when missing, refuses one
// that another user could have written to, and takes the lock that keeps a
// second process off it.
//
// Everything in the data dir is trusted: the engine file, the raft log and
// snapshots, the cached keys of a keys_url source (a key there verifies
// deliveries), and the files a restore or a start rewrites. A directory
// another user can write to, or an entry another user owns, may be a link to
// a file of theirs (the payloads would be written where they read them) or a
// keys document of theirs (forged deliveries would verify). Neither is
// mended here: the operator must look at what is in it.
//
// The lock comes before any clean-up a start does (abandoned restores and
// uploads): a second process started on the directory by mistake must not
// remove the running node's files before the engine's own lock stops it.
func LockDataDir(dir string) (lock *DataDirLock, err error) {
	defer func() { err = dataDirHint(dir, err) }()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, cannotMake(dir, err)
	}
	if err := checkDataDir(dir, os.Geteuid()); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, dataDirLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s: %w", dir, ErrDataDirBusy)
		}
		return nil, fmt.Errorf("data dir: lock %s: %w", path, err)
	}
	return &DataDirLock{f: f}, nil
}

// dataDirHint adds to an error about the data dir what the operator can
// do about the two a wrong path or owner causes: a path through a file, and
// a file under it this process may not open (a permission error about
// another file, a TLS key, is left as it is).
func dataDirHint(dir string, err error) error {
	var made makeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &made):
		return err
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w; data_dir %s, or a directory on its way, is a file: name a directory", err, dir)
	case errors.Is(err, fs.ErrPermission) && strings.Contains(err.Error(), dir):
		return fmt.Errorf("%w; this process runs as uid %d: make the data dir %s and everything in it this user's "+
			"(chown -R), or run the node as the user that owns it", err, os.Geteuid(), dir)
	}
	return err
}

// CheckDataDir runs LockDataDir's checks on dir without making, locking or
// changing anything, for validate: nil when this user may not look into it
// (serve, as the service user, will), and when dir does not exist yet and
// serve could make it (canMake). Run as root, ahead of the service user's
// start, it judges the entries against the directory's own owner instead of
// this process's user.
func CheckDataDir(dir string) error {
	uid := os.Geteuid()
	if uid == 0 {
		uid = -1
	}
	err := checkDataDir(dir, uid)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return canMake(dir, uid == -1)
	case errors.Is(err, fs.ErrPermission):
		return nil
	}
	return dataDirHint(dir, err)
}

// cannotMake is the error of a data dir that could not be made, with what
// the operator can do about it (dataDirHint adds nothing to it).
func cannotMake(dir string, err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		uid := os.Geteuid()
		err = fmt.Errorf("data dir: cannot make %s: %w; this process runs as uid %d: make it as root for that user "+
			"(install -d -m 700 -o %d %s), or name a directory it may write in", dir, err, uid, uid, dir)
	case errors.Is(err, syscall.ENOTDIR):
		err = fmt.Errorf("data dir: cannot make %s: %w; a directory on its way is a file: name a directory", dir, err)
	default:
		err = fmt.Errorf("data dir: cannot make %s: %w", dir, err)
	}
	return makeError{err}
}

// makeError is an error cannotMake explained.
type makeError struct{ error }

func (e makeError) Unwrap() error { return e.error }

// canMake reports why serve could not make the missing directory dir, as
// MkdirAll would fail: nil when it could, or cannot be judged. The nearest
// existing directory on its way must be a directory, and one this user may
// write to; root is not judged on that (it writes anywhere, and the service
// user it validates for is not known here).
func canMake(dir string, root bool) error {
	p := filepath.Clean(dir)
	for {
		info, err := os.Stat(p)
		switch {
		case err == nil && !info.IsDir():
			return cannotMake(dir, &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR})
		case err == nil:
			if root {
				return nil
			}
			// As this process's effective ids, as mkdir will judge it
			// (access(2) alone checks the real ones).
			if err := unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK|unix.X_OK, unix.AT_EACCESS); err != nil {
				return cannotMake(dir, &fs.PathError{Op: "mkdir in", Path: p, Err: err})
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return nil // unreadable on the way: serve, as another user, may do better
		}
		up := filepath.Dir(p)
		if up == p {
			return nil
		}
		p = up
	}
}

// checkDataDir refuses a data dir that is not a directory, is writable by
// its group or others, or is owned by another user than uid, and one
// holding an entry another user owns. Root counts as no other user: it can
// write anywhere anyway (and owns lost+found at the top of a file system).
// uid -1 judges the entries against the directory's owner, and not the
// directory. The directory itself may be a link (to another disk); links
// inside it are checked as links: whoever owns one chose where it points.
func checkDataDir(dir string, uid int) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("data dir %s: not a directory", dir)
	}
	if perm := info.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data dir %s: writable by its group or others (mode %04o): %w; "+
			"check them, then chmod 700 it", dir, perm, ErrDataDirUnsafe)
	}
	if err := checkAncestors(dir); err != nil {
		return err
	}
	owner, known := ownerOf(info)
	if !known {
		return nil
	}
	who := "this process's user"
	if uid < 0 {
		uid, who = owner, "the data dir's owner"
	} else if owner != uid && owner != 0 {
		return fmt.Errorf("data dir %s: owned by uid %d, not by this process's user (uid %d): %w; "+
			"check them, then chown -R it to this user", dir, owner, uid, ErrDataDirUnsafe)
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if info, lerr := os.Lstat(p); errors.Is(err, fs.ErrPermission) && lerr == nil && p != dir {
				if o, ok := ownerOf(info); ok && o == 0 {
					return fs.SkipDir // root's, closed to this user: lost+found
				}
			}
			return fmt.Errorf("data dir: %w", err)
		}
		if p == dir {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if o, ok := ownerOf(info); ok && o != uid && o != 0 {
			return fmt.Errorf("data dir %s: %s is owned by uid %d, not by %s (uid %d): %w; "+
				"check it, then remove it or chown it", dir, p, o, who, uid, ErrDataDirUnsafe)
		}
		return nil
	})
}

// ownerOf returns the uid that owns a file, when the system says.
func ownerOf(info fs.FileInfo) (int, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// checkAncestors refuses a data dir reached through a directory that anyone
// may write to without the sticky bit: anyone on the host could rename the
// data dir, or a link on the way to it, and put one of theirs in its place
// while the node runs, and its next snapshot, keys cache or restore would go
// there. /tmp (sticky) is fine: only the owner of an entry may move it
// there. Every directory the path is looked up in counts, following each
// link met on the way (physically, as the kernel does). A directory this
// process may not look at is not judged.
func checkAncestors(dir string) error {
	for _, d := range lookedUpIn(dir) {
		info, err := os.Stat(d)
		if err != nil {
			continue
		}
		if m := info.Mode(); m.Perm()&0o002 != 0 && m&fs.ModeSticky == 0 {
			return fmt.Errorf("data dir %s: %s, on the way to it, is writable by anyone without the sticky bit (mode %04o), "+
				"so anyone could put a directory of theirs in the data dir's place: %w; chmod o-w (or +t) it",
				dir, d, m.Perm(), ErrDataDirUnsafe)
		}
	}
	return nil
}

// lookedUpIn returns the directories in which the components of path are
// looked up, following links (at most 40, as the kernel), in order. It stops
// at the first component that cannot be read.
func lookedUpIn(path string) []string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	var dirs []string
	pending := strings.Split(abs, "/")
	cur := "/"
	for hops := 0; len(pending) > 0; {
		name := pending[0]
		pending = pending[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		dirs = append(dirs, cur)
		next := filepath.Join(cur, name)
		info, err := os.Lstat(next)
		if err != nil {
			break
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			break
		}
		target, err := os.Readlink(next)
		if err != nil {
			break
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		pending = append(strings.Split(target, "/"), pending...)
	}
	return dirs
}

// DataDirOwner returns the id of the node whose state dir holds: "" when
// it holds no state (none yet, or wiped) or when no node recorded its id
// (a data dir of an earlier release, until its first start).
func DataDirOwner(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, nodeIDName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	held := false
	for _, name := range []string{"fsm.db", filepath.Join("raft", "logs.db")} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			held = true
		}
	}
	if !held {
		return "", nil
	}
	return strings.TrimSpace(string(b)), nil
}

// CheckDataDirOwner refuses, without changing anything, a data dir that
// holds another node's state than id's (for validate: serve would refuse
// it at its start).
func CheckDataDirOwner(dir, id string) error {
	owner, err := DataDirOwner(dir)
	if err != nil || owner == "" || owner == id {
		return nil // unreadable here: serve, as the service user, judges it
	}
	return fmt.Errorf("data dir %s: %w: node %q's, and node.id is %q (remove %s if that record is wrong)",
		dir, ErrDataDirOtherNode, owner, id, filepath.Join(dir, nodeIDName))
}

// claimDataDir records id as the node whose state dir holds, and refuses a
// dir that holds another node's: started on it, a node would run under an
// id its cluster does not count (never ready, every delivery refused), or,
// at another member's address, vote with that member's log.
func claimDataDir(dir, id string) error {
	owner, err := DataDirOwner(dir)
	if err != nil {
		return err
	}
	switch owner {
	case id:
		return nil
	case "":
		if err := writeDurably(filepath.Join(dir, nodeIDName), []byte(id+"\n")); err != nil {
			return fmt.Errorf("data dir: record the node's id: %w", err)
		}
		return nil
	}
	return fmt.Errorf("data dir %s: %w: node %q's, and this node's id is %q. A node's data dir is its own: "+
		"start %q with its own config; if this is %q's own data dir and its id was recorded wrongly, remove %s and start again; "+
		"to start %q as a new node, give it an empty data dir (a cluster member then rejoins and catches up, a single node starts with no events)",
		dir, ErrDataDirOtherNode, owner, id, owner, id, filepath.Join(dir, nodeIDName), id)
}
