package systest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/internal/testcluster"
)

// TestNewUserDemo follows the README as a new user: serve with no config, send
// the demo event twice, look at it with the client commands, stop with SIGTERM.
func TestNewUserDemo(t *testing.T) {
	dir := t.TempDir()
	srv := start(t, "serve-demo", dir, "serve")
	testcluster.WaitFor(t, "demo config written and node ready", 30*time.Second, func() bool {
		if _, err := os.Stat(filepath.Join(dir, "data", "demo.toml")); err != nil {
			return false
		}
		code, _ := get("http://127.0.0.1:8080/readyz", "")
		return code == 200
	})
	if !strings.Contains(srv.Output(), "oncehook send -config data/demo.toml -source demo -file data/demo-event.json") {
		t.Fatalf("serve did not print the send command:\n%s", srv.Output())
	}
	out, code := run(t, dir, "send", "-config", "data/demo.toml", "-source", "demo", "-file", "data/demo-event.json", "-id", "evt_demo")
	if code != 0 || !strings.Contains(out, "202") || !strings.Contains(out, `"accepted"`) {
		t.Fatalf("first send (exit %d):\n%s", code, out)
	}
	out, code = run(t, dir, "send", "-config", "data/demo.toml", "-source", "demo", "-file", "data/demo-event.json", "-id", "evt_demo")
	if code != 0 || !strings.Contains(out, "200") || !strings.Contains(out, `"duplicate"`) {
		t.Fatalf("second send (exit %d):\n%s", code, out)
	}
	testcluster.WaitFor(t, "the demo sink logged the delivery", 10*time.Second, func() bool {
		return strings.Contains(srv.Output(), `delivery key="demo:evt_demo"`)
	})
	if n := strings.Count(srv.Output(), `delivery key="demo:evt_demo"`); n != 1 {
		t.Fatalf("the sink saw the event %d times", n)
	}
	os.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(dir, "data", "admin.token"))
	defer os.Unsetenv("ONCEHOOK_TOKEN_FILE")
	out, code = run(t, dir, "status")
	if code != 0 || !strings.Contains(out, "leader") {
		t.Fatalf("status (exit %d):\n%s", code, out)
	}
	out, code = run(t, dir, "events", "show", "demo:evt_demo")
	if code != 0 || !strings.Contains(out, `"state": "done"`) {
		t.Fatalf("events show (exit %d):\n%s", code, out)
	}
	// Backup, one more event, restore: the state is the backup's again.
	out, code = run(t, dir, "snapshot", "save", "backup.db")
	if code != 0 || !strings.Contains(out, "saved backup.db") {
		t.Fatalf("snapshot save (exit %d):\n%s", code, out)
	}
	if out, code := run(t, dir, "send", "-config", "data/demo.toml", "-source", "demo", "-file", "data/demo-event.json", "-id", "evt_after_backup"); code != 0 {
		t.Fatalf("send after backup (exit %d):\n%s", code, out)
	}
	if out, code := run(t, dir, "snapshot", "restore", "not-there.db"); code == 0 {
		t.Fatalf("restore of a missing file succeeded:\n%s", out)
	}
	out, code = run(t, dir, "snapshot", "restore", "backup.db")
	if code != 0 || !strings.Contains(out, "restored") {
		t.Fatalf("snapshot restore (exit %d):\n%s", code, out)
	}
	if out, code := run(t, dir, "events", "show", "demo:evt_after_backup"); code == 0 {
		t.Fatalf("an event newer than the backup survived the restore:\n%s", out)
	}
	if out, code := run(t, dir, "events", "show", "demo:evt_demo"); code != 0 || !strings.Contains(out, `"state": "done"`) {
		t.Fatalf("the backed-up event after the restore (exit %d):\n%s", code, out)
	}
	if !srv.Stop(testcluster.StopTimeout) {
		t.Fatalf("serve did not stop within %s of SIGTERM", testcluster.StopTimeout)
	}
	if code := srv.ExitCode(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM:\n%s", code, srv.Output())
	}
}

func TestValidateExitCodes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "s.secret"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n")
	writeFile(t, filepath.Join(dir, "good.toml"), `[[source]]
name = "a"
provider = "standard"
secret_files = ["s.secret"]
forward = "http://127.0.0.1:9000/a"
`)
	writeFile(t, filepath.Join(dir, "bad.toml"), `[[source]]
name = "a"
provider = "standard"
secret_files = ["s.secret"]
forward = "http://127.0.0.1:9000/a"
tolerance = "five minutes"
`)
	if out, code := run(t, dir, "validate", "-config", "good.toml"); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("valid config: exit %d\n%s", code, out)
	}
	out, code := run(t, dir, "validate", "-config", "bad.toml")
	if code != 1 || !strings.Contains(out, "bad.toml:6") || !strings.Contains(out, "tolerance") {
		t.Fatalf("invalid config: exit %d\n%s", code, out)
	}
	// Cluster authentication: required, 32 bytes at least; clear text off
	// loopback is a warning, not an error.
	writeFile(t, filepath.Join(dir, "cluster.token"), "systest-cluster-token-0123456789abcdef\n")
	writeFile(t, filepath.Join(dir, "short.token"), "short\n")
	cluster := func(name, extra string) {
		writeFile(t, filepath.Join(dir, name), `[node]
id = "node1"

[cluster]
raft_listen = "10.0.0.1:7070"
peers = ["node1=10.0.0.1:7070", "node2=10.0.0.2:7070", "node3=10.0.0.3:7070"]
`+extra)
	}
	cluster("open.toml", "")
	cluster("short.toml", `token_file = "short.token"`+"\n")
	cluster("clear.toml", `token_file = "cluster.token"`+"\n")
	for _, tt := range []struct {
		file string
		code int
		want string
	}{
		{"open.toml", 1, "open.toml:4: cluster.token_file: required: the cluster port needs authentication"},
		{"short.toml", 1, "cluster.token_file: the token in "},
		{"clear.toml", 0, ": warning: cluster: peer node1=10.0.0.1:7070 is not on loopback and TLS is off"},
	} {
		if out, code := run(t, dir, "validate", "-config", tt.file); code != tt.code || !strings.Contains(out, tt.want) {
			t.Fatalf("validate %s: exit %d, want %d and %q\n%s", tt.file, code, tt.code, tt.want, out)
		}
	}
	if _, code := run(t, dir, "validate"); code != 2 {
		t.Fatalf("validate without -config: exit %d, want 2", code)
	}
	if _, code := run(t, dir, "no-such-command"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	out, code = run(t, dir, "keygen")
	if code != 0 || !strings.HasPrefix(out, "whsec_") {
		t.Fatalf("keygen: exit %d %q", code, out)
	}
	if out, code := run(t, dir, "version"); code != 0 || !strings.HasPrefix(out, "oncehook ") || !strings.Contains(out, "data format ") {
		t.Fatalf("version: exit %d %q", code, out)
	}
}
