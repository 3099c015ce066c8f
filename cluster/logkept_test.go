package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// claimSolo claims n keys with prefix on a single node.
func claimSolo(t *testing.T, n *Node, prefix string, count int) {
	t.Helper()
	for i := range count {
		// A deadline for each claim, not one for them all: how many fit in
		// a span depends on the machine's load.
		if _, err := n.Claim(ctxT(t, 10*time.Second), claimCmd(fmt.Sprintf("src:%s%d", prefix, i))); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesALostRaftLog: a node whose raft log was lost, emptied,
// replaced by an older copy or cut short, while its engine file stayed,
// does not start (it would vote or hand out indexes as if it lacked
// entries it applied and acknowledged), and says which file and what to do.
// The same data directory with its log put back starts and has every event.
func TestRefusesALostRaftLog(t *testing.T) {
	tests := []struct {
		name     string
		snapshot bool // take a snapshot covering everything applied first
		damage   func(t *testing.T, logPath, older string)
		want     string
	}{
		{"removed", false, func(t *testing.T, p, _ string) { os.Remove(p) }, "the engine file has applied up to"},
		{"emptied", false, func(t *testing.T, p, _ string) { os.Truncate(p, 0) }, "the engine file has applied up to"},
		{"an older copy", false, func(t *testing.T, p, older string) { copyFile(t, older, p) }, "the engine file has applied up to"},
		{"removed after a snapshot", true, func(t *testing.T, p, _ string) { os.Remove(p) }, "holds no term"},
		{"cut short", false, func(t *testing.T, p, _ string) {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			os.Truncate(p, st.Size()/4)
		}, "a truncated copy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "raft", "logs.db")
			older := filepath.Join(t.TempDir(), "logs.db")

			n := openSolo(t, dir, func(c *Config) { c.SnapshotThreshold = 1 << 20 })
			claimSolo(t, n, "a", 5)
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			copyFile(t, logPath, older)
			n = openSolo(t, dir, func(c *Config) { c.SnapshotThreshold = 1 << 20 })
			claimSolo(t, n, "b", 300)
			if tt.snapshot {
				if err := n.raft.Snapshot().Error(); err != nil {
					t.Fatal(err)
				}
			}
			want, _ := n.Hash()
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			kept := filepath.Join(t.TempDir(), "logs.db")
			copyFile(t, logPath, kept)

			tt.damage(t, logPath, older)
			started, err := Open(Config{ID: "solo", Dir: dir, Logger: quietLogger(), RaftLogLevel: "error"})
			if err == nil {
				started.Close()
				t.Fatal("the node started on a damaged raft log")
			}
			for _, s := range []string{logPath, tt.want, "move its data directory away"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}

			// Nothing was changed by the refusal: with its log back, the
			// node starts with every event.
			copyFile(t, kept, logPath)
			n = openSolo(t, dir, nil)
			defer n.Close()
			if got, _ := n.Hash(); got != want {
				t.Fatal("the engine changed across the refused start")
			}
			if _, err := n.Get("src:b299", false); err != nil {
				t.Fatalf("last event: %v", err)
			}
		})
	}
}

// TestStartsWithADamagedSnapshot: the newest snapshot is only a way to
// catch up; a node whose engine file is current starts without it, and a
// damaged one is logged, not fatal (it used to stop the start while
// reading the snapshot's size for the snapshot schedule).
func TestStartsWithADamagedSnapshot(t *testing.T) {
	dir := t.TempDir()
	n := openSolo(t, dir, nil)
	claimSolo(t, n, "a", 50)
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	claimSolo(t, n, "b", 10)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	states, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "state.bin"))
	if err != nil || len(states) != 1 {
		t.Fatalf("snapshot files %v, %v", states, err)
	}
	if err := os.Truncate(states[0], 100); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, nil)
	defer n.Close()
	for _, k := range []string{"src:a0", "src:b9"} {
		if _, err := n.Get(k, false); err != nil {
			t.Fatalf("%s after the restart: %v", k, err)
		}
	}
	r, err := n.Claim(ctxT(t, 10*time.Second), claimCmd("src:after"))
	if err != nil || r.Err != nil || r.State != engine.StatePending {
		t.Fatalf("claim after the restart: %+v, %v", r, err)
	}
}

// TestRestartAfterRestoringAnotherClustersBackup: a backup carries its own
// cluster's applied index, which can be far past this cluster's log; once
// restored, the node records this cluster's snapshot index for it, so a
// restart passes the raft log check and finds the restored events.
func TestRestartAfterRestoringAnotherClustersBackup(t *testing.T) {
	a := openSolo(t, t.TempDir(), nil)
	claimSolo(t, a, "a", 200)
	backup := backupFile(t, a)
	a.Close()

	dir := t.TempDir()
	b := openSolo(t, dir, nil)
	if err := b.Restore(ctxT(t, 10*time.Second), backup); err != nil {
		t.Fatal(err)
	}
	if applied, last := b.eng.LastApplied(), b.raft.LastIndex(); applied > last {
		t.Fatalf("applied %d past the log's %d after the restore", applied, last)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openSolo(t, dir, nil)
	defer b.Close()
	if _, err := b.Get("src:a199", false); err != nil {
		t.Fatalf("restored event after the restart: %v", err)
	}
}

// TestRestoredEventsLeaseAboveTheirTokens: a backup of a cluster whose log
// is longer holds tokens above the new cluster's indexes. After the restore
// its events are leased at once, under tokens above their own and above
// any the new cluster issued before (engine/tokenbase.go), also when the
// same backup is restored a second time.
func TestRestoredEventsLeaseAboveTheirTokens(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	a := openSolo(t, t.TempDir(), nil)
	claimSolo(t, a, "a", 300)
	evs, err := a.Lease(ctx, 1000, time.Minute)
	if err != nil || len(evs) != 300 {
		t.Fatalf("lease on the old cluster: %d events, %v", len(evs), err)
	}
	// Ten wait for a retry, due at once; the rest are done.
	top := map[string]uint64{}
	for i, ev := range evs {
		if i >= 10 {
			if err := a.Complete(ctx, ev.Key, ev.Token, nil, "", 0); err != nil {
				t.Fatal(err)
			}
			continue
		}
		top[ev.Key] = ev.Token
		if err := a.Fail(ctx, ev.Key, ev.Token, time.Nanosecond, 10, "handler 500", "", 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	evs = evs[:10]
	backup := backupFile(t, a)
	a.Close()

	b := openSolo(t, t.TempDir(), nil)
	defer b.Close()
	for round := range 2 {
		upload := filepath.Join(t.TempDir(), "upload.db") // the admin restores its own copy
		copyFile(t, backup, upload)
		if err := b.Restore(ctx, upload); err != nil {
			t.Fatal(err)
		}
		got, err := b.Lease(ctx, 100, time.Minute)
		if err != nil || len(got) != len(evs) {
			t.Fatalf("round %d: lease after the restore: %d events, %v; want %d at once", round, len(got), err, len(evs))
		}
		for _, ev := range got {
			if ev.Token <= top[ev.Key] {
				t.Fatalf("round %d: %s leased under token %d, not above %d", round, ev.Key, ev.Token, top[ev.Key])
			}
			top[ev.Key] = ev.Token
		}
	}
}

// backupFile writes n's backup (Backup) to a file and returns its path.
func backupFile(t *testing.T, n *Node) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := n.Backup(f); err != nil {
		t.Fatal(err)
	}
	return path
}
