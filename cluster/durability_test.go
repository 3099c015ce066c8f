package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func openSolo(t *testing.T, dir string) *Node {
	t.Helper()
	n, err := Open(Config{ID: "solo", Dir: dir, Logger: quietLogger(), RaftLogLevel: "off",
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "single node leads", n.IsLeader)
	if err := n.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return n
}

// After an operating-system crash the unsynced engine file is not trusted: it
// is rebuilt from the newest snapshot and the log, to the same bytes.
func TestEngineFileIsRebuiltAfterAMachineCrash(t *testing.T) {
	if bootID() == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id: the engine syncs every commit here")
	}
	dir := t.TempDir()
	n := openSolo(t, dir)
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 40; i++ {
		if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := n.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, markerName)); string(b) != bootID()+" clean\n" {
		t.Fatalf("marker after a clean close: %q", b)
	}
	// Pretend the machine crashed while the engine was running unsynced: the
	// marker names another boot and no clean close; the file holds garbage.
	if err := writeMarker(dir, "an-earlier-boot", "dirty"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fsm.db"), []byte("torn pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir)
	defer n.Close()
	if _, err := os.Stat(filepath.Join(dir, "fsm.db.untrusted")); err != nil {
		t.Fatalf("the untrusted file was not set aside: %v", err)
	}
	after, _ := n.Hash()
	if before != after {
		t.Fatal("the rebuilt engine differs from the one before the crash")
	}
	for _, k := range []string{"src:a0", "src:b39"} {
		if _, ok, _ := n.Lookup(k); !ok {
			t.Fatalf("%s lost", k)
		}
	}
}

// A process crash (no clean close, same boot) keeps the engine file: its
// commits are in the page cache.
func TestEngineFileIsKeptAfterAProcessCrash(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot id")
	}
	dir := t.TempDir()
	n := openSolo(t, dir)
	if _, err := n.Claim(ctxT(t, 5*time.Second), claimCmd("src:kept")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, bootID(), "dirty"); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir)
	defer n.Close()
	if _, err := os.Stat(filepath.Join(dir, "fsm.db.untrusted")); err == nil {
		t.Fatal("a file from this boot was distrusted")
	}
	if _, ok, _ := n.Lookup("src:kept"); !ok {
		t.Fatal("claim lost")
	}
}
