package powercut

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// blockSize is the unit in which original content is saved before its first
// unsynced change.
const blockSize = 4096

// ErrUnavailable: FUSE cannot be mounted here (not root, no /dev/fuse, or the
// mount itself is refused); the error wrapping it says which.
var ErrUnavailable = errors.New("powercut: FUSE unavailable")

var probe struct {
	once sync.Once
	err  error
}

// Available reports whether this process can mount a FUSE file system, by
// mounting and unmounting one once (the answer is kept); nil if it can.
// Tests skip with its message otherwise.
func Available() error {
	probe.once.Do(func() {
		if os.Geteuid() != 0 {
			probe.err = fmt.Errorf("%w: needs root", ErrUnavailable)
			return
		}
		f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
		if err != nil {
			probe.err = fmt.Errorf("%w: %v", ErrUnavailable, err)
			return
		}
		f.Close()
		dir, err := os.MkdirTemp("", "powercut-probe-")
		if err != nil {
			probe.err = fmt.Errorf("%w: %v", ErrUnavailable, err)
			return
		}
		defer os.RemoveAll(dir)
		back, mnt := filepath.Join(dir, "b"), filepath.Join(dir, "m")
		os.Mkdir(back, 0o700)
		os.Mkdir(mnt, 0o700)
		m, err := Mount(back, mnt)
		if err != nil {
			probe.err = fmt.Errorf("%w: %v", ErrUnavailable, err)
			return
		}
		if err := m.Unmount(); err != nil {
			probe.err = fmt.Errorf("%w: unmount: %v", ErrUnavailable, err)
		}
	})
	return probe.err
}

// FS is one mount of a backing directory. Its methods are safe for
// concurrent use.
type FS struct {
	Backing, Mountpoint string
	server              *fuse.Server

	// mu guards frozen, done and files, and is held across each write or
	// truncate together with the saving of what it destroys, so that Cut
	// sees every change either complete with its undo record or not at all.
	mu     sync.Mutex
	frozen bool // Cut began: every operation fails with EIO
	done   bool // unmounted
	files  map[uint64]*fileLog
}

// fileLog is what one backing file (by inode number) needs to return to its
// state at its last fsync: its size then and the original content of every
// block changed since. fd is a descriptor of the backing file itself, kept
// open until the log is forgotten, so that a rename does not lose the file.
type fileLog struct {
	fd     int
	size   int64
	blocks map[int64][]byte
}

// Mount serves the directory backing at mountpoint (both must exist).
// The caller must Cut or Unmount it.
func Mount(backing, mountpoint string) (*FS, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("powercut: backing dir: %w", err)
	}
	m := &FS{Backing: backing, Mountpoint: mountpoint, files: map[uint64]*fileLog{}}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}}, m: m}
	root.RootData.RootNode = root
	srv, err := fs.Mount(mountpoint, root, &fs.Options{MountOptions: fuse.MountOptions{
		FsName:      "powercut:" + backing,
		Name:        "powercut",
		DirectMount: true, // mount(2) as root; fusermount3 only as the fallback
		// The default, spelled out: file locks stay in the kernel (bbolt's
		// flock works across processes of this mount).
		EnableLocks: false,
	}})
	if err != nil {
		return nil, fmt.Errorf("powercut: mount %s: %w", mountpoint, err)
	}
	m.server = srv
	return m, nil
}

// Unmount unmounts without a power cut: every write stays in the backing
// files, as after a clean shutdown.
func (m *FS) Unmount() error { return m.stop(func() {}) }

// stop freezes the mount (every further open, read, write, truncate and sync
// fails with EIO), unmounts it, then runs then under mu and forgets every
// file's log.
func (m *FS) stop(then func()) error {
	m.mu.Lock()
	m.frozen = true
	m.mu.Unlock()
	if err := m.unmount(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	then()
	m.forgetAll()
	return nil
}

// CutOptions shape a cut. The zero value loses every unsynced change.
type CutOptions struct {
	// Keep is the probability that an unsynced change survives the cut: each
	// 4 KiB block changed since its file's last fsync, and each such file's
	// size, independently keeps its new state (the kernel wrote it back
	// before the power went) or returns to its synced state. Between 0 and 1
	// it tears a file's unsynced writes; 0 loses them all.
	Keep float64
	// Seed seeds the choices (the same seed, changes and Keep: the same
	// outcome).
	Seed uint64
}

// Cut is the power cut: the mount refuses every further file operation, is
// unmounted, and every write and truncate since each file's last fsync is
// undone in the backing directory. Processes using the mount must be dead.
func (m *FS) Cut() error { return m.CutWith(CutOptions{}) }

// CutWith is Cut with options: a torn cut keeps part of the unsynced changes.
func (m *FS) CutWith(o CutOptions) error {
	var errs []error
	err := m.stop(func() {
		rng := rand.New(rand.NewPCG(o.Seed, 0x706f776572637574))
		keep := func() bool { return o.Keep > 0 && rng.Float64() < o.Keep }
		for _, ino := range slices.Sorted(maps.Keys(m.files)) {
			if err := m.files[ino].undo(keep); err != nil {
				errs = append(errs, fmt.Errorf("powercut: undo inode %d: %w", ino, err))
			}
		}
	})
	return errors.Join(append(errs, err)...)
}

// unmount unmounts once; a busy mount (a process still holds a file) is
// detached lazily, its remaining operations already failing with EIO.
func (m *FS) unmount() error {
	m.mu.Lock()
	done := m.done
	m.done = true
	m.mu.Unlock()
	if done {
		return nil
	}
	if err := m.server.Unmount(); err != nil {
		if derr := syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("powercut: unmount %s: %w (lazy: %v)", m.Mountpoint, err, derr)
		}
	}
	return nil
}

func (m *FS) forgetAll() {
	for ino, l := range m.files {
		syscall.Close(l.fd)
		delete(m.files, ino)
	}
}

// Unsynced is the number of files with changes a cut would undo now.
func (m *FS) Unsynced() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.files)
}

// change runs op, which modifies bytes [from, to) of the file fd (to < 0:
// up to its end), after saving the original content of every block of that
// range the file had at its last fsync.
func (m *FS) change(fd int, from, to int64, op func() syscall.Errno) syscall.Errno {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		return syscall.EIO
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	l := m.files[st.Ino]
	if l == nil {
		dup, err := syscall.Dup(fd)
		if err != nil {
			return fs.ToErrno(err)
		}
		l = &fileLog{fd: dup, size: st.Size, blocks: map[int64][]byte{}}
		m.files[st.Ino] = l
	}
	if to < 0 || to > l.size {
		to = l.size
	}
	for b := from / blockSize; b*blockSize < to; b++ {
		if _, ok := l.blocks[b]; ok {
			continue
		}
		// Not changed since the last fsync, and within the size then: the
		// file still holds the original here.
		n := min(blockSize, l.size-b*blockSize)
		buf := make([]byte, n)
		got, err := syscall.Pread(fd, buf, b*blockSize)
		if err != nil {
			return fs.ToErrno(err)
		}
		l.blocks[b] = buf[:got]
	}
	return op()
}

// synced forgets fd's file's log: its content is durable.
func (m *FS) synced(fd int) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.files[st.Ino]; l != nil {
		syscall.Close(l.fd)
		delete(m.files, st.Ino)
	}
}

func (m *FS) isFrozen() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.frozen
}

// undo returns the file to its last synced state, except for the size and
// the blocks for which keep says the new state survived.
func (l *fileLog) undo(keep func() bool) error {
	size := l.size
	if keep() {
		var st syscall.Stat_t
		if err := syscall.Fstat(l.fd, &st); err != nil {
			return err
		}
		size = st.Size
	}
	if err := syscall.Ftruncate(l.fd, size); err != nil {
		return err
	}
	for _, b := range slices.Sorted(maps.Keys(l.blocks)) {
		if keep() || b*blockSize >= size {
			continue
		}
		buf := l.blocks[b]
		buf = buf[:min(int64(len(buf)), size-b*blockSize)]
		if _, err := syscall.Pwrite(l.fd, buf, b*blockSize); err != nil {
			return err
		}
	}
	return syscall.Fsync(l.fd)
}

// node is a loopback node whose files keep undo logs.
type node struct {
	*fs.LoopbackNode
	m *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), m: n.m}
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.m.isFrozen() {
		return nil, 0, syscall.EIO
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.m.wrap(fh), fl, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.m.isFrozen() {
		return nil, nil, 0, syscall.EIO
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, n.m.wrap(fh), fl, 0
}

// Setattr without a file handle (truncate(2) by path) is saved like an
// ftruncate; with one, the handle's Setattr does it.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.m.isFrozen() {
		return syscall.EIO
	}
	sz, ok := in.GetSize()
	if _, mine := f.(*file); mine || !ok {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	p := filepath.Join(n.RootData.Path, n.Path(n.Root()))
	fd, err := syscall.Open(p, syscall.O_RDWR, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	return n.m.change(fd, int64(sz), -1, func() syscall.Errno {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	})
}

func (m *FS) wrap(fh fs.FileHandle) fs.FileHandle {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	return &file{lf: lf, fd: fd, m: m}
}

// file is a loopback file handle whose writes, truncates and syncs go
// through the undo log. It deliberately does not offer PassthroughFd: every
// read and write must pass through this process.
type file struct {
	lf *fs.LoopbackFile
	fd int // lf's descriptor, valid until Release
	m  *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.m.isFrozen() {
		return nil, syscall.EIO
	}
	n, err := syscall.Pread(f.fd, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var n int
	errno := f.m.change(f.fd, off, off+int64(len(data)), func() syscall.Errno {
		var err error
		n, err = syscall.Pwrite(f.fd, data, off)
		return fs.ToErrno(err)
	})
	return uint32(n), errno
}

// Fsync (FUSE sends fsync and fdatasync alike, with a flag) makes the file's
// changes durable: its log is forgotten.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if f.m.isFrozen() {
		return syscall.EIO
	}
	if errno := f.lf.Fsync(ctx, flags); errno != 0 {
		return errno
	}
	f.m.synced(f.fd)
	return 0
}

func (f *file) Flush(ctx context.Context) syscall.Errno {
	if f.m.isFrozen() {
		return syscall.EIO
	}
	return f.lf.Flush(ctx)
}

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if f.m.isFrozen() {
		return syscall.EIO
	}
	return f.lf.Getattr(ctx, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	sz, ok := in.GetSize()
	if !ok {
		if f.m.isFrozen() {
			return syscall.EIO
		}
		return f.lf.Setattr(ctx, in, out)
	}
	return f.m.change(f.fd, int64(sz), -1, func() syscall.Errno {
		return f.lf.Setattr(ctx, in, out)
	})
}

// Allocate allows plain allocation (mode 0, which may grow the file, and
// FALLOC_FL_KEEP_SIZE); punching or zeroing ranges is refused.
func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	if mode&^keepSize != 0 {
		return syscall.EOPNOTSUPP
	}
	// The blocks gained read as zeros and lie past the synced size or, within
	// it, were already there: only the size needs saving.
	return f.m.change(f.fd, 0, 0, func() syscall.Errno {
		return f.lf.Allocate(ctx, off, size, mode)
	})
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if f.m.isFrozen() {
		return 0, syscall.EIO
	}
	return f.lf.Lseek(ctx, off, whence)
}
