package testproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// legacyPrefixes are the names the chaos suite gave its namespaces and
// cgroups before Prefix; Sweep removes those of dead runs too.
var legacyPrefixes = []string{"ohchaos-"}

// cgroupRoots are where the chaos suite makes its block-I/O cgroups.
var cgroupRoots = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/blkio"}

// Sweep removes what runs of the harness left whose test binary is gone: it
// kills the processes marked with such a run (EnvRun) and those inside its
// network namespaces, deletes those namespaces, unmounts the mounts under its
// run directory (tmpfs, loop-mounted ext4) deepest first, detaches the loop
// devices backed by files there and device-mapper devices named for it,
// removes its cgroups and its run directory. A run is gone when no process
// has the PID in its mark or name; a recycled PID keeps its leftovers for a
// later sweep, never the other way round. It never touches a thing of a live
// run, nor anything neither marked nor named by the harness. It returns one
// line per thing removed; nothing left means nil.
func Sweep() ([]string, error) {
	var s sweeper
	s.processes()
	s.namespaces()
	s.mounts()
	s.loops()
	s.dm()
	s.cgroups()
	s.dirs()
	return s.done, errors.Join(s.errs...)
}

type sweeper struct {
	done []string
	errs []error
}

func (s *sweeper) did(format string, args ...any) {
	s.done = append(s.done, fmt.Sprintf(format, args...))
}
func (s *sweeper) fail(err error) { s.errs = append(s.errs, err) }

// deadRun reports whether name starts with one of our prefixes and a PID
// that is neither ours nor alive.
func deadRun(name string) bool {
	for _, p := range append([]string{Prefix}, legacyPrefixes...) {
		rest, ok := strings.CutPrefix(name, p)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			return false
		}
		return !alive(pid)
	}
	return false
}

// underDeadRun reports whether a component of path is named for a dead run.
func underDeadRun(path string) bool {
	for _, c := range strings.Split(path, "/") {
		if deadRun(c) {
			return true
		}
	}
	return false
}

func alive(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() && pid > 1 {
			out = append(out, pid)
		}
	}
	return out
}

// runMark is the run PID in a process's EnvRun, or 0.
func runMark(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(EnvRun+"=")); ok {
			n, _ := strconv.Atoi(string(v))
			return n
		}
	}
	return 0
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// gone reports whether pid has exited (no entry, or a zombie nobody reaped).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// kill SIGKILLs pids and waits (up to 10 s) for them to be gone: a mount or
// loop device they hold frees only then.
func (s *sweeper) kill(pids []int, why string) {
	for _, pid := range pids {
		what := cmdline(pid)
		syscall.Kill(pid, syscall.SIGCONT)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.fail(fmt.Errorf("kill %d (%s): %w", pid, what, err))
			continue
		}
		s.did("process %d (%s), %s", pid, what, why)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if !gone(pid) {
			s.fail(fmt.Errorf("process %d still there 10s after SIGKILL", pid))
		}
	}
}

func (s *sweeper) processes() {
	var victims []int
	for _, pid := range pids() {
		if run := runMark(pid); run > 0 && !alive(run) {
			victims = append(victims, pid)
		}
	}
	s.kill(victims, "marked by a dead run")
}

const netnsDir = "/run/netns"

func (s *sweeper) namespaces() {
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if !deadRun(e.Name()) {
			continue
		}
		path := filepath.Join(netnsDir, e.Name())
		// What still runs inside a namespace of ours was started by the
		// harness (the namespace exists for nothing else).
		var ns unix.Stat_t
		if err := unix.Stat(path, &ns); err == nil {
			var inside []int
			for _, pid := range pids() {
				var st unix.Stat_t
				if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Dev == ns.Dev && st.Ino == ns.Ino {
					inside = append(inside, pid)
				}
			}
			s.kill(inside, "inside namespace "+e.Name())
		}
		// What `ip netns del` does: detach the bind mount, remove the file.
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			s.fail(fmt.Errorf("unmount namespace %s: %w", path, err))
			continue
		}
		if err := os.Remove(path); err != nil {
			s.fail(fmt.Errorf("remove namespace %s: %w", path, err))
			continue
		}
		s.did("network namespace %s (its veths and iptables rules with it)", e.Name())
	}
}

// mountPoints lists the mount points of this mount namespace.
func mountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (s *sweeper) mounts() {
	var ours []string
	for _, mp := range mountPoints() {
		if underDeadRun(mp) && !strings.HasPrefix(mp, netnsDir+"/") {
			ours = append(ours, mp)
		}
	}
	// Deepest first: a mount inside another goes before it.
	slices.SortFunc(ours, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range slices.Compact(ours) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			s.fail(fmt.Errorf("unmount %s: %w", mp, err))
			continue
		}
		s.did("mount %s", mp)
	}
}

func (s *sweeper) loops() {
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range devs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if !underDeadRun(backing) {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			s.fail(fmt.Errorf("open %s: %w", dev, err))
			continue
		}
		err = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		unix.Close(fd)
		if err != nil {
			s.fail(fmt.Errorf("detach %s (%s): %w", dev, backing, err))
			continue
		}
		s.did("loop device %s (%s)", dev, backing)
	}
}

// dm removes device-mapper devices named for a dead run, with dmsetup.
func (s *sweeper) dm() {
	names, _ := filepath.Glob("/sys/block/dm-*/dm/name")
	for _, f := range names {
		b, err := os.ReadFile(f)
		name := strings.TrimSpace(string(b))
		if err != nil || !deadRun(name) {
			continue
		}
		if out, err := CombinedOutput(exec.Command("dmsetup", "remove", "--retry", name)); err != nil {
			s.fail(fmt.Errorf("dmsetup remove %s: %w: %s", name, err, bytes.TrimSpace(out)))
			continue
		}
		s.did("device-mapper device %s", name)
	}
}

func (s *sweeper) cgroups() {
	for _, root := range cgroupRoots {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if !e.IsDir() || !deadRun(e.Name()) {
				continue
			}
			cg := filepath.Join(root, e.Name())
			// Its processes were ours and are dead by now; move any straggler
			// out so the directory can go.
			if b, err := os.ReadFile(filepath.Join(cg, "cgroup.procs")); err == nil {
				for _, pid := range strings.Fields(string(b)) {
					os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(pid), 0o644)
				}
			}
			if err := syscall.Rmdir(cg); err != nil {
				s.fail(fmt.Errorf("remove cgroup %s: %w", cg, err))
				continue
			}
			s.did("cgroup %s", cg)
		}
	}
}

func (s *sweeper) dirs() {
	tmp := os.TempDir()
	ents, _ := os.ReadDir(tmp)
	mps := mountPoints()
	for _, e := range ents {
		if !e.IsDir() || !deadRun(e.Name()) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		// Never delete through a mount we could not remove.
		if slices.ContainsFunc(mps, func(mp string) bool { return strings.HasPrefix(mp, dir+"/") }) {
			s.fail(fmt.Errorf("%s still has a mount under it; left in place", dir))
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			s.fail(fmt.Errorf("remove %s: %w", dir, err))
			continue
		}
		s.did("directory %s", dir)
	}
}
