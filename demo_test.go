package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oncehook/cluster"
	"oncehook/config"
)

// TestDemoAdminToken: demo mode makes an admin token long enough for the
// 32-byte rule, and replaces one that an older version left short, so that
// the demo config loads either way.
func TestDemoAdminToken(t *testing.T) {
	for _, tt := range []struct {
		name, existing string // "" = no token file yet
	}{
		{"fresh", ""},
		{"short token left over", "short-demo-token\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "admin.token")
			if tt.existing != "" {
				mustWrite(t, path, tt.existing)
			}
			d, err := startDemo(context.Background(), dir, "127.0.0.1:8080", "127.0.0.1:7071", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tok := strings.TrimSpace(string(b))
			if len(tok) < config.MinTokenLen || len(d.cfg.Admin.Tokens) != 1 || string(d.cfg.Admin.Tokens[0].Token) != tok {
				t.Fatalf("demo admin token of %d bytes, config %+v", len(tok), d.cfg.Admin)
			}
			// Every file demo mode writes is 0600, as the data dir's are.
			for _, name := range []string{"admin.token", "demo.secret", "demo.toml", "demo-event.json"} {
				fi, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s mode %v, want 0600", name, fi.Mode())
				}
			}
			// A second start keeps the long token.
			d2, err := startDemo(context.Background(), dir, "127.0.0.1:8080", "127.0.0.1:7071", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer d2.close()
			if string(d2.cfg.Admin.Tokens[0].Token) != tok {
				t.Fatal("a second demo start replaced a good token")
			}
		})
	}
}

// TestDemoAddresses: demo mode takes its intake and admin addresses from
// -listen and -admin-listen (a machine whose 8080 is taken can still run
// it), and writes them into the config that `send` and the clients read;
// with -config those flags are refused, not ignored.
func TestDemoAddresses(t *testing.T) {
	dir := t.TempDir()
	d, err := startDemo(context.Background(), dir, "127.0.0.1:18080", "127.0.0.1:17071", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if d.cfg.Node.Listen != "127.0.0.1:18080" || d.cfg.Admin.Listen != "127.0.0.1:17071" {
		t.Fatalf("demo config listens on %s and %s", d.cfg.Node.Listen, d.cfg.Admin.Listen)
	}
	written, err := config.Load(filepath.Join(dir, "demo.toml"))
	if err != nil || written.Node.Listen != "127.0.0.1:18080" || written.Admin.Listen != "127.0.0.1:17071" {
		t.Fatalf("demo.toml: %+v %v", written, err)
	}
	for _, args := range [][]string{
		{"-config", "x.toml", "-listen", "127.0.0.1:1"},
		{"-config", "x.toml", "-admin-listen", "127.0.0.1:1"},
		{"-config", "x.toml", "-data", dir},
	} {
		err := cmdServe(context.Background(), args, io.Discard, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "demo mode only") {
			t.Errorf("serve %q: %v, want a usage error", args, err)
		}
	}
}

// TestServeTouchesNoHeldOrUnsafeDataDir: serve takes the data dir's lock and
// checks who could have written to it before it reads or writes anything
// there: a second process on a running node's directory leaves the node's
// restore files, and a directory others can write to is refused untouched.
func TestServeTouchesNoHeldOrUnsafeDataDir(t *testing.T) {
	args := func(dir string) []string {
		return []string{"-data", dir, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0"}
	}
	held := t.TempDir()
	upload := filepath.Join(held, "restore-1.db")
	if err := os.WriteFile(upload, []byte("an upload in progress"), 0o600); err != nil {
		t.Fatal(err)
	}
	lock, err := cluster.LockDataDir(held)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := cmdServe(t.Context(), args(held), io.Discard, io.Discard); !errors.Is(err, cluster.ErrDataDirBusy) {
		t.Fatalf("serve on a held data dir: %v, want ErrDataDirBusy", err)
	}
	if _, err := os.Stat(upload); err != nil {
		t.Errorf("the running node's upload: %v", err)
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := cmdServe(t.Context(), args(open), io.Discard, io.Discard); !errors.Is(err, cluster.ErrDataDirUnsafe) {
		t.Fatalf("serve on a world-writable data dir: %v, want ErrDataDirUnsafe", err)
	}
	for _, dir := range []string{held, open} {
		if _, err := os.Stat(filepath.Join(dir, "demo.toml")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused serve wrote its demo files (%v)", dir, err)
		}
	}
}

// TestDemoRefusesANodesDataDir: `serve` without -config in a directory
// whose data dir is a real node's refuses to run the demo on it, names the
// node and writes nothing into it.
func TestDemoRefusesANodesDataDir(t *testing.T) {
	dir := t.TempDir()
	n, err := cluster.Open(cluster.Config{ID: "node1", Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(dir)
	_, err = startDemo(context.Background(), dir, "127.0.0.1:0", "127.0.0.1:0", io.Discard)
	if err == nil || !strings.Contains(err.Error(), `node "node1"'s state`) {
		t.Fatalf("demo on node1's data dir: %v, want a refusal naming node1", err)
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Fatalf("the refused demo wrote into the node's data dir: %d entries, then %d", len(before), len(after))
	}
	// A data dir of an earlier release records no id: its state alone, with
	// no demo config beside it, says it is a node's.
	if err := os.Remove(filepath.Join(dir, "node.id")); err != nil {
		t.Fatal(err)
	}
	if _, err := startDemo(context.Background(), dir, "127.0.0.1:0", "127.0.0.1:0", io.Discard); err == nil || !strings.Contains(err.Error(), "state") {
		t.Fatalf("demo on an earlier release's node data dir: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node.id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused demo recorded an id: %v", err)
	}
}

// TestValidateRefusesAnotherNodesDataDir: validate judges the data dir's
// owner as serve does, so that a config serve refuses is not "ok".
func TestValidateRefusesAnotherNodesDataDir(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	n, err := cluster.Open(cluster.Config{ID: "node1", Dir: data, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, "s.secret"), "0123456789abcdef0123456789abcdef\n")
	cfg := filepath.Join(dir, "node2.toml")
	if err := os.WriteFile(cfg, []byte("[node]\nid = \"node2\"\ndata_dir = \"data\"\n\n[[source]]\nname = \"s\"\nprovider = \"github\"\nsecret_files = [\"s.secret\"]\nforward = \"http://127.0.0.1:9000/s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), []string{"validate", "-config", cfg}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `node "node1"'s, and node.id is "node2"`) {
		t.Fatalf("validate of node2 on node1's data dir: %v, want the refusal serve gives", err)
	}
}
