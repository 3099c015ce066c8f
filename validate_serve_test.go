package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/cluster"
	"oncehook/forward"
)

// TestValidateRefusesWhatServeRefuses: for each config, `oncehook validate`
// fails if and only if serve refuses it, at start and on a SIGHUP reload,
// because all three compile the sources with intake.CompileSource. Among
// the cases are mistakes only compiling finds (a schema that does not
// compile) and mistakes Load finds (a malformed secret, a bad key part).
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	const handlerURL = "http://127.0.0.1:1" // nothing is delivered
	dir := t.TempDir()
	tn := startNodeWithSources(t, dir, handlerURL, "") // the node the reloads go to
	startDir := t.TempDir()
	for _, d := range []string{dir, startDir} {
		mustWrite(t, filepath.Join(d, "orders.secret"), tn.secret+"\n")
		mustWrite(t, filepath.Join(d, "admin.token"), tn.token+"\n")
		mustWrite(t, filepath.Join(d, "good.schema.json"), `{"type":"object","required":["id"]}`)
		mustWrite(t, filepath.Join(d, "bad.schema.json"), `{"type": 12}`)
		mustWrite(t, filepath.Join(d, "notjson.schema.json"), `{"type": `)
	}
	const head = "\n[[source]]\nname = \"extra\"\nforward = \"http://127.0.0.1:1/extra\"\n"
	standard := head + "provider = \"standard\"\nsecret_files = [\"orders.secret\"]\n"
	tests := []struct {
		name    string
		source  string
		refused bool
	}{
		{"plain source", standard, false},
		{"schema", standard + `schema_file = "good.schema.json"` + "\n", false},
		{"keys_url on loopback, no secrets", head + "provider = \"standard\"\nkeys_url = \"http://127.0.0.1:1/keys\"\n", false},
		{"type filter", standard + "type = \"json:type\"\naccept_types = [\"order.paid\"]\n", false},
		{"schema does not compile", standard + `schema_file = "bad.schema.json"` + "\n", true},
		{"schema is not JSON", standard + `schema_file = "notjson.schema.json"` + "\n", true},
		{"schema missing", standard + `schema_file = "gone.schema.json"` + "\n", true},
		{"malformed secret", head + "provider = \"standard\"\nsecrets = [\"whsec_!!!not-base64!!!\"]\n", true},
		{"bad key part", standard + "key = [\"query:id\"]\n", true},
		{"bad order field", standard + "order = { object = \"id\", time = \"json:created\" }\n", true},
		{"bad type field", standard + "type = \"type\"\naccept_types = [\"order.paid\"]\n", true},
		{"hmac template without body", head + "provider = \"hmac\"\nsecrets = [\"s3cret\"]\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\", id_header = \"X-Id\", template = \"{id}\" }\n", true},
		{"unknown provider", head + "provider = \"nope\"\nsecret_files = [\"orders.secret\"]\n", true},
		{"keys_url over http to another host", standard + "keys_url = \"http://keys.example.com/keys\"\n", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// validate, through the CLI's own entry point.
			startPath := filepath.Join(startDir, fmt.Sprintf("start%d.toml", i))
			mustWrite(t, startPath, nodeConfig(filepath.Join(startDir, fmt.Sprint(i)), handlerURL, "", tt.source))
			var out, errOut bytes.Buffer
			validateErr := run(context.Background(), []string{"validate", "-config", startPath}, &out, &errOut)

			// serve at start: a node from the same file.
			startErr := loadAndStart(startPath)
			if startErr != nil && strings.HasPrefix(startErr.Error(), "started") {
				if shutdownErr := strings.TrimPrefix(startErr.Error(), "started"); shutdownErr != "" {
					t.Errorf("shutdown:%s", shutdownErr)
				}
				startErr = nil
			}

			// serve on SIGHUP: the running node reloads the same sources.
			reloadPath := filepath.Join(dir, fmt.Sprintf("reload%d.toml", i))
			mustWrite(t, reloadPath, nodeConfig(dir, handlerURL, "", tt.source))
			tn.n.reload(reloadPath)
			reloadRefused := strings.Contains(tn.metricsText(), "oncehook_config_last_reload_successful 0")

			if (validateErr != nil) != tt.refused || (startErr != nil) != tt.refused || reloadRefused != tt.refused {
				t.Fatalf("want refused=%v: validate: %v; start: %v; reload refused: %v",
					tt.refused, validateErr, startErr, reloadRefused)
			}
			if tt.refused && !strings.Contains(validateErr.Error(), startErr.Error()) {
				t.Errorf("validate says\n%v\nserve says\n%v", validateErr, startErr)
			}
			// A mistake only compiling finds is named like Load's:
			// file:line: key: message.
			if tt.name == "schema does not compile" {
				text, _ := os.ReadFile(startPath)
				line := 1 + strings.Count(string(text[:strings.Index(string(text), "schema_file")]), "\n")
				if want := fmt.Sprintf("%s:%d: source[3].schema_file: ", startPath, line); !strings.HasPrefix(validateErr.Error(), want) {
					t.Errorf("validate says %q, want it to start %q", validateErr, want)
				}
				// The reload's log line says where, as validate does.
				if want := fmt.Sprintf("%s:%d: source[3].schema_file: ", reloadPath, line); !strings.Contains(tn.logs(), want) {
					t.Errorf("the reload's log does not name %q:\n%s", want, tn.logs())
				}
			}
			if !tt.refused && !strings.Contains(out.String(), ": ok (") {
				t.Errorf("validate printed %q", out.String())
			}
		})
	}
}

// TestDrainLimitFollowsTheSlowestSource: a leader's drain before a
// hand-over lasts as long as the longest forward_timeout of the running
// sources, plus a second for the outcome's commit (the cluster never waits
// less than its own minimum).
func TestDrainLimitFollowsTheSlowestSource(t *testing.T) {
	n := &node{}
	targets := map[string]forward.Target{"fast": {Timeout: 2 * time.Second}, "slow": {Timeout: 25 * time.Second}}
	n.targets.Store(&targets)
	if got := (drainer{nil, n}).DrainLimit(); got != 26*time.Second {
		t.Fatalf("DrainLimit %v, want 26s", got)
	}
	targets = map[string]forward.Target{"fast": {Timeout: 2 * time.Second}}
	if got := (drainer{nil, n}).DrainLimit(); got != 3*time.Second {
		t.Fatalf("after a reload to a faster source: DrainLimit %v, want 3s", got)
	}
}

// TestLeadBeforeTheNodeIsWired: raft may make a node leader while
// cluster.Open still runs (a wiped node elected while it waits to be added
// back), before the node's cluster, metrics and targets are set. Its
// leader work waits for them instead of touching them (a nil cluster
// panicked, and the panic, held behind the leader work's wait, left the
// leader up without a forwarder: acknowledged events never delivered), and
// returns when the leadership ends first.
func TestLeadBeforeTheNodeIsWired(t *testing.T) {
	n := &node{wired: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.lead(ctx)
	}()
	cancel()
	<-done
	if n.forwarder.Load() != nil {
		t.Fatal("a forwarder started before the node was wired")
	}
}

// TestValidateAsRootNotesAnotherOwnersDataDir: run as root (ahead of the
// service user's start), validate judges a data dir another user owns for
// that user, and says so: serve run as root would refuse it.
func TestValidateAsRootNotesAnotherOwnersDataDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the data dir to another user")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "oncehook.toml")
	if err := os.WriteFile(path, []byte("[node]\ndata_dir = \""+data+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr); err != nil {
		t.Fatalf("validate: %v\n%s", err, stderr.String())
	}
	if want := "is owned by user nobody (uid 65534) and was checked for that user: serve must run as it"; !strings.Contains(stdout.String(), want) &&
		!strings.Contains(stdout.String(), "is owned by uid 65534 and was checked for that user") {
		t.Errorf("validate printed:\n%s\nwant a note that the data dir is another user's", stdout.String())
	}
	// What the note warns of: serve's own check, as root, refuses it.
	if lock, err := cluster.LockDataDir(data); !errors.Is(err, cluster.ErrDataDirUnsafe) {
		if lock != nil {
			lock.Close()
		}
		t.Fatalf("LockDataDir as root of another user's dir: %v, want ErrDataDirUnsafe", err)
	}
}
