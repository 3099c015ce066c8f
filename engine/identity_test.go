package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func mustClusterID(t *testing.T, e *Engine) string {
	t.Helper()
	id, err := e.ClusterID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestIdentifyNamesTheClusterOnce: the first identify applied names the
// cluster on every replica; a later one (a second leader that proposed
// before it applied the first) changes nothing, and an id outside the
// bounds is refused without a change.
func TestIdentifyNamesTheClusterOnce(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	for _, h := range []*harness{a, b} {
		if id := mustClusterID(t, h.e); id != "" {
			t.Fatalf("a new file is named %q", id)
		}
		cases := []struct {
			cmd   Command
			n     int
			bad   bool
			after string
		}{
			{Command{Op: OpIdentify, Now: t0}, 0, true, ""},
			{Command{Op: OpIdentify, Now: t0, Key: strings.Repeat("x", MaxClusterIDLen+1)}, 0, true, ""},
			{Command{Op: OpIdentify, Now: t0, Key: "first"}, 1, false, "first"},
			{Command{Op: OpIdentify, Now: t0, Key: "second"}, 0, false, "first"},
		}
		for i, c := range cases {
			r := h.one(c.cmd)
			if (r.Err != nil) != c.bad || (r.Err != nil && !errors.Is(r.Err, ErrBadCommand)) || r.N != c.n {
				t.Fatalf("case %d: result %+v, want bad %v, N %d", i, r, c.bad, c.n)
			}
			if id := mustClusterID(t, h.e); id != c.after {
				t.Fatalf("case %d: cluster id %q, want %q", i, id, c.after)
			}
		}
	}
	if mustHash(t, a.e) != mustHash(t, b.e) {
		t.Fatal("two replicas that applied the same identifies differ")
	}
	// Reopened, the name stays.
	path := a.e.Path()
	if err := a.e.Close(); err != nil {
		t.Fatal(err)
	}
	a.e = mustOpenPath(t, path, Options{})
	if id := mustClusterID(t, a.e); id != "first" {
		t.Fatalf("cluster id after a reopen %q, want first", id)
	}
}

// TestRestoreKeepsTheClusterID: a backup carries its cluster's id; restored
// into another cluster (the leader prepares the upload with its own id), the
// cluster keeps its own name, and with no id to keep it takes the backup's.
func TestRestoreKeepsTheClusterID(t *testing.T) {
	src := newHarness(t)
	src.one(Command{Op: OpIdentify, Now: t0, Key: "theirs"})
	src.one(claimCmd("src:a", t0))
	backup := backupFile(t, src)

	for _, c := range []struct{ keep, want string }{{"ours", "ours"}, {"", "theirs"}} {
		dst := newHarness(t)
		raw, err := os.ReadFile(backup)
		if err != nil {
			t.Fatal(err)
		}
		upload := filepath.Join(t.TempDir(), "upload.db")
		if err := os.WriteFile(upload, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := PrepareRestore(upload, 10, c.keep); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(upload)
		if err != nil {
			t.Fatal(err)
		}
		err = dst.e.RestoreAt(f, 11)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if id := mustClusterID(t, dst.e); id != c.want {
			t.Fatalf("keep %q: cluster id after the restore %q, want %q", c.keep, id, c.want)
		}
		if _, ok, _ := dst.e.Exists("src:a"); !ok {
			t.Fatal("the backup's event is missing")
		}
	}
	if err := PrepareRestore(backup, 10, strings.Repeat("x", MaxClusterIDLen+1)); err == nil {
		t.Fatal("an overlong cluster id was written")
	}
}
