//go:build failpoints

package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"oncehook/failpoint"
)

// TestBootIDOverride: in a failpoints build the boot id comes from the file
// failpoint.EnvBootIDFile names, so a test can reboot a node's machine: a
// changed id makes an engine file that was left dirty untrusted.
func TestBootIDOverride(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "boot")
	t.Setenv(failpoint.EnvBootIDFile, file)
	for _, id := range []string{"boot-1", "boot-2"} {
		if err := os.WriteFile(file, []byte(id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := bootID(); got != id {
			t.Fatalf("bootID() = %q with %s holding %q", got, failpoint.EnvBootIDFile, id)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "fsm.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, "boot-1", "dirty"); err != nil {
		t.Fatal(err)
	}
	if engineTrusted(dir, bootID()) {
		t.Error("an engine file left dirty under boot-1 is trusted under boot-2")
	}
}
