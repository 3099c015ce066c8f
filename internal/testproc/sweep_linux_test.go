package testproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// deadPID is the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=exit")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if alive(pid) {
		t.Skipf("PID %d was recycled at once", pid)
	}
	return pid
}

func TestDeadRun(t *testing.T) {
	dead := deadPID(t)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("%s%d-chaos-123", Prefix, dead), true},
		{fmt.Sprintf("ohchaos-%d-1-hub", dead), true},
		{fmt.Sprintf("%s%d-chaos-123", Prefix, os.Getpid()), false}, // ours, alive
		{Prefix + "1-x", false},                                     // init never dies
		{Prefix + "abc-x", false},
		{fmt.Sprintf("%s%d", Prefix, dead), false}, // no dash after the PID: not our name
		{fmt.Sprintf("oncehook-systest-%d-x", dead), false},
		{fmt.Sprintf("x%s%d-x", Prefix, dead), false},
	} {
		if got := deadRun(tc.name); got != tc.want {
			t.Errorf("deadRun(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSweep: Sweep removes a dead run's marked process, namespace, mount and
// run directory, and leaves a live run's alone; a second Sweep finds nothing.
func TestSweep(t *testing.T) {
	dead := deadPID(t)
	root := os.Geteuid() == 0
	tmp := os.TempDir()

	deadDir := filepath.Join(tmp, fmt.Sprintf("%s%d-sweeptest", Prefix, dead))
	liveDir := filepath.Join(tmp, NamePrefix()+"sweeptest")
	for _, d := range []string{deadDir, liveDir} {
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.MkdirAll(filepath.Join(d, "mnt"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	mnt := filepath.Join(deadDir, "mnt")
	if root {
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ns := fmt.Sprintf("%s%d-sweeptest", Prefix, dead)
	haveNS := false
	if _, err := exec.LookPath("ip"); err == nil && root {
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Logf("no namespace part: ip netns add: %v: %s", err, out)
		} else {
			haveNS = true
		}
	}

	// A process marked by the dead run, started without Start (which would
	// mark it with ours), and one of ours.
	orphan := exec.Command(os.Args[0])
	orphan.Env = append(os.Environ(), helperEnv+"=wait", EnvRun+"="+strconv.Itoa(dead))
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan error, 1)
	go func() { orphanDone <- orphan.Wait() }()
	t.Cleanup(func() { orphan.Process.Kill() })
	mine, _ := startHelper(t, "spawn")

	removed, err := Sweep()
	for _, r := range removed {
		t.Log("swept", r)
	}
	if err != nil {
		t.Errorf("sweep: %v", err)
	}
	if err := <-orphanDone; err == nil || err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the dead run's process ended with %v, want SIGKILL", err)
	}
	if !mine.Running() || runMark(mine.Pid()) != os.Getpid() {
		t.Errorf("a live run's process was killed")
	}
	if _, err := os.Stat(deadDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead run's directory is still there: %v", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("a live run's directory was removed: %v", err)
	}
	for _, mp := range mountPoints() {
		if mp == mnt {
			t.Errorf("%s is still mounted", mnt)
		}
	}
	if haveNS {
		if _, err := os.Stat(filepath.Join(netnsDir, ns)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s is still there: %v", ns, err)
		}
	}

	again, err := Sweep()
	if len(again) != 0 || err != nil {
		t.Errorf("a second sweep found %q, %v; want nothing", again, err)
	}
}
