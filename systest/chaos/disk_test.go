package chaos

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"oncehook/internal/testproc"
)

// Slow disk (S13): a node's data dir is its own ext4 on a loop device, and
// the node's process is put in a block-I/O cgroup that caps the write IOPS of
// that device (cgroup v2 io.max, or v1 blkio.throttle.write_iops_device where
// the io controller is bound to v1, as on the reference machine). The writes
// the cap sees are the node's own fsyncs of the raft log and the engine.

// cgroupIO says how this machine throttles block I/O, probed once.
var cgroupIO struct {
	once sync.Once
	v2   bool   // io.max
	root string // the hierarchy to create cgroups in
	err  error
}

func probeCgroupIO() {
	cgroupIO.once.Do(func() {
		for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
			b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
			if err == nil && containsWord(string(b), "io") {
				cgroupIO.v2, cgroupIO.root = true, root
				return
			}
		}
		if _, err := os.Stat("/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device"); err == nil {
			cgroupIO.root = "/sys/fs/cgroup/blkio"
			return
		}
		cgroupIO.err = fmt.Errorf("no block-I/O throttling: cgroup v2 has no io controller and there is no v1 blkio hierarchy with blkio.throttle.write_iops_device")
	})
}

func containsWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// requireSlowDisk skips t unless loop devices, mkfs.ext4 and block-I/O
// throttling are all available.
func requireSlowDisk(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chaos: slow-disk scenario skipped: not root (loop devices, mounts and cgroups need it)")
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("chaos: slow-disk scenario skipped: %s not installed", tool)
		}
	}
	probeCgroupIO()
	if cgroupIO.err != nil {
		t.Skipf("chaos: slow-disk scenario skipped: %v", cgroupIO.err)
	}
}

// loopDisk is an ext4 image on a loop device mounted on a node's data dir.
type loopDisk struct {
	t            testing.TB
	img, dev     string
	mnt          string
	major, minor uint32

	mu sync.Mutex
	cg string // the node's I/O cgroup, once made
}

// newLoopDisk makes a sparse image of size bytes, formats it ext4, attaches it
// to a free loop device and mounts it on mnt. Cleanups unmount and detach it
// (after the node's process is gone: they are registered before it starts).
func newLoopDisk(t testing.TB, img, mnt string, size int64) *loopDisk {
	t.Helper()
	requireSlowDisk(t)
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nsRun("mkfs.ext4", "-q", "-F", "-E", "nodiscard", img); err != nil {
		t.Skipf("chaos: slow-disk scenario skipped: mkfs.ext4 fails here: %v", err)
	}
	// Each cleanup is registered before what it undoes exists (and runs on
	// SIGINT/SIGTERM too); reverse order: unmount, then detach.
	d := &loopDisk{t: t, img: img, mnt: mnt}
	var dev struct {
		sync.Mutex
		path string
	}
	testproc.Cleanup(t, func() {
		dev.Lock()
		defer dev.Unlock()
		if dev.path != "" {
			nsRun("losetup", "-d", dev.path)
		}
	})
	out, err := nsRun("losetup", "-f", "--show", img)
	if err != nil {
		t.Skipf("chaos: slow-disk scenario skipped: no free loop device: %v", err)
	}
	d.dev = strings.TrimSpace(out)
	dev.Lock()
	dev.path = d.dev
	dev.Unlock()
	var st unix.Stat_t
	if err := unix.Stat(d.dev, &st); err != nil {
		t.Fatal(err)
	}
	d.major, d.minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	testproc.Cleanup(t, func() { nsRun("umount", "-l", mnt) })
	if _, err := nsRun("mount", "-t", "ext4", d.dev, mnt); err != nil {
		t.Skipf("chaos: slow-disk scenario skipped: cannot mount ext4 from %s: %v", d.dev, err)
	}
	if err := os.Chmod(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *loopDisk) devID() string { return fmt.Sprintf("%d:%d", d.major, d.minor) }

// throttle puts pid in the disk's I/O cgroup and caps the device's write IOPS
// (0 lifts the cap).
func (d *loopDisk) throttle(pid, iops int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cg == "" {
		cg := filepath.Join(cgroupIO.root, testproc.NamePrefix()+filepath.Base(d.img))
		if cgroupIO.v2 {
			// The io controller must be enabled for the children of root.
			if err := os.WriteFile(filepath.Join(cgroupIO.root, "cgroup.subtree_control"), []byte("+io"), 0o644); err != nil {
				return fmt.Errorf("enable the io controller: %w", err)
			}
		}
		d.cg = cg
		testproc.Cleanup(d.t, d.removeCgroup) // before the cgroup exists
		if err := os.Mkdir(cg, 0o755); err != nil && !os.IsExist(err) {
			d.cg = ""
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(d.cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move %d into %s: %w", pid, d.cg, err)
	}
	var file, val string
	switch {
	case cgroupIO.v2 && iops > 0:
		file, val = "io.max", fmt.Sprintf("%s wiops=%d", d.devID(), iops)
	case cgroupIO.v2:
		file, val = "io.max", d.devID()+" wiops=max"
	default:
		file, val = "blkio.throttle.write_iops_device", fmt.Sprintf("%s %d", d.devID(), iops)
	}
	if err := os.WriteFile(filepath.Join(d.cg, file), []byte(val), 0o644); err != nil {
		return fmt.Errorf("%s %q: %w", file, val, err)
	}
	return nil
}

// writes is the number of write requests to the device that passed the
// cgroup's throttle so far.
func (d *loopDisk) writes() int64 {
	d.mu.Lock()
	cg := d.cg
	d.mu.Unlock()
	if cg == "" {
		return 0
	}
	file := "blkio.throttle.io_serviced"
	if cgroupIO.v2 {
		file = "io.stat"
	}
	f, err := os.Open(filepath.Join(cg, file))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 || fs[0] != d.devID() {
			continue
		}
		if !cgroupIO.v2 && fs[1] == "Write" && len(fs) == 3 {
			n, _ := strconv.ParseInt(fs[2], 10, 64)
			return n
		}
		for _, kv := range fs[1:] {
			if v, ok := strings.CutPrefix(kv, "wios="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// removeCgroup moves whatever is left in the cgroup back to the root and
// removes it. It runs before the node's own cleanup kills it.
func (d *loopDisk) removeCgroup() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cg == "" {
		return
	}
	if b, err := os.ReadFile(filepath.Join(d.cg, "cgroup.procs")); err == nil {
		for _, pid := range strings.Fields(string(b)) {
			os.WriteFile(filepath.Join(cgroupIO.root, "cgroup.procs"), []byte(pid), 0o644)
		}
	}
	if err := syscall.Rmdir(d.cg); err != nil && !os.IsNotExist(err) {
		d.t.Logf("remove cgroup %s: %v", d.cg, err)
	}
	d.cg = ""
}
