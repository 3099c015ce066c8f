//go:build !failpoints

package failpoint

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestReleaseBuildIsInert: without the tag, Enabled is the constant false, and
// a process whose environment arms every hook, jumps the clock and sets the
// retention knobs runs every hook as a no-op, reads the plain wall clock and
// has no knob set. The environment is set on a child process, because a
// failpoints build would read it at init.
func TestReleaseBuildIsInert(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled is true in a build without the failpoints tag")
	}
	if os.Getenv("FAILPOINT_INERT_CHILD") == "1" {
		for _, n := range []string{AfterClaimApplyBeforeResponse, AfterHandlerDoneBeforeApply, BeforeSnapshotPersist} {
			Inject(n) // would panic if armed
		}
		time.Sleep(300 * time.Millisecond) // a failpoints build polls the files every 100 ms
		for _, n := range []string{AfterClaimApplyBeforeResponse, AfterHandlerDoneBeforeApply, BeforeSnapshotPersist} {
			Inject(n)
		}
		if d := Now().Sub(time.Now()); d < -time.Second || d > time.Second {
			t.Fatalf("Now is off the wall clock by %s", d)
		}
		if BucketWidth() != 0 || ExpireInterval() != 0 {
			t.Fatalf("retention knobs set in a release build: width %s, expire interval %s", BucketWidth(), ExpireInterval())
		}
		if id, ok := BootID(); ok {
			t.Fatalf("boot id overridden in a release build: %q", id)
		}
		return
	}
	dir := t.TempDir()
	spec := AfterClaimApplyBeforeResponse + "=panic;" + AfterHandlerDoneBeforeApply + "=panic;" + BeforeSnapshotPersist + "=panic"
	if err := os.WriteFile(filepath.Join(dir, "fp"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clock"), []byte("10m"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "boot"), []byte("rebooted"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseBuildIsInert$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FAILPOINT_INERT_CHILD=1", EnvSpec+"="+spec,
		EnvFile+"="+filepath.Join(dir, "fp"), EnvClockFile+"="+filepath.Join(dir, "clock"),
		EnvBucketWidth+"=1s", EnvExpireInterval+"=100ms", EnvBootIDFile+"="+filepath.Join(dir, "boot"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a release build reacted to its environment (%s, %s, %s, %s, %s, %s): %v\n%s", EnvSpec, EnvFile, EnvClockFile, EnvBucketWidth, EnvExpireInterval, EnvBootIDFile, err, out)
	}
}

// TestReleaseBinaryHasNoFailpoints builds the oncehook binary as `make build`
// does and as the chaos suite does (-tags failpoints): the release binary holds
// none of the hook names or control variables; the failpoints binary holds
// them (so the check can fail).
func TestReleaseBinaryHasNoFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the oncehook binary twice")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command: %v", err)
	}
	needles := []string{AfterClaimApplyBeforeResponse, AfterHandlerDoneBeforeApply, BeforeSnapshotPersist, EnvSpec, EnvFile, EnvClockFile,
		EnvBucketWidth, EnvExpireInterval, EnvBootIDFile}
	dir := t.TempDir()
	for _, b := range []struct {
		name string
		args []string
		want bool
	}{
		{"release", []string{"-trimpath", "-ldflags=-s -w"}, false},
		{"release, with symbols", nil, false},
		{"failpoints", []string{"-tags", "failpoints"}, true},
	} {
		bin := filepath.Join(dir, "oncehook")
		args := append(append([]string{"build", "-o", bin}, b.args...), "oncehook")
		if out, err := exec.Command(goBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range needles {
			if got := bytes.Contains(data, []byte(n)); got != b.want {
				t.Errorf("%s binary: contains %q = %v, want %v", b.name, n, got, b.want)
			}
		}
		os.Remove(bin)
	}
}
