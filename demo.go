package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"oncehook/cluster"
	"oncehook/config"
	"oncehook/providers"
)

// demoSetup is `oncehook serve` without a config: a single node on ./data with
// a "demo" source (Standard Webhooks scheme) forwarding to an in-process sink.
// It writes a real config file, so `oncehook send -config data/demo.toml` works
// against it unchanged.
type demoSetup struct {
	cfg        *config.Config
	dir        string
	configPath string
	secret     string
	fresh      bool
	sinkSrv    *http.Server
}

// demoNodeID is the demo node's id.
const demoNodeID = "demo"

func startDemo(ctx context.Context, dir, listen, adminListen string, stderr io.Writer) (*demoSetup, error) {
	dir = absPath(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo data dir: %w", err)
	}
	// A real node's data dir (./data is the usual name) is not the demo's:
	// its files would be written into it, and the node refused on it.
	// A data dir of an earlier release records no id: one holding state
	// without the demo's own config is a node's too.
	owner, err := cluster.DataDirOwner(dir)
	if err != nil {
		return nil, fmt.Errorf("demo data dir: %w", err)
	}
	if owner == "" && holdsState(dir) && !exists(filepath.Join(dir, "demo.toml")) {
		return nil, fmt.Errorf("demo data dir %s holds a node's state (no demo config beside it): `oncehook serve` without -config runs a demo on it; "+
			"start that node with `oncehook serve -config FILE`, or run the demo in another directory (or with -data DIR)", dir)
	}
	if owner != "" && owner != demoNodeID {
		return nil, fmt.Errorf("demo data dir %s holds node %q's state: `oncehook serve` without -config runs a demo on it; "+
			"start that node with `oncehook serve -config FILE`, or run the demo in another directory (or with -data DIR)", dir, owner)
	}
	d := &demoSetup{dir: dir, configPath: filepath.Join(dir, "demo.toml")}
	secretPath := filepath.Join(dir, "demo.secret")
	b, err := os.ReadFile(secretPath)
	if os.IsNotExist(err) {
		s, gerr := providers.GenerateSecret("standard")
		if gerr != nil {
			return nil, gerr
		}
		if err := os.WriteFile(secretPath, []byte(s+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("demo secret: %w", err)
		}
		b, err, d.fresh = []byte(s), nil, true
	}
	if err != nil {
		return nil, fmt.Errorf("demo secret: %w", err)
	}
	d.secret = string(trimSpace(b))
	// The admin token: 64 hex characters, well over the 32 bytes an admin
	// token needs. One left short by an older version is replaced, else the
	// demo config would not load.
	tokenPath := filepath.Join(dir, "admin.token")
	if b, err := os.ReadFile(tokenPath); err != nil || len(trimSpace(b)) < config.MinTokenLen {
		tok, _ := providers.GenerateSecret("hmac")
		if err := os.WriteFile(tokenPath, []byte(tok+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("demo admin token: %w", err)
		}
		if err := os.Chmod(tokenPath, 0o600); err != nil {
			return nil, fmt.Errorf("demo admin token: %w", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo sink: %w", err)
	}
	d.sinkSrv = &http.Server{Handler: newSink(stderr, false, http.StatusOK), ReadHeaderTimeout: 10 * time.Second}
	go d.sinkSrv.Serve(ln)

	event := filepath.Join(dir, "demo-event.json")
	if _, err := os.Stat(event); os.IsNotExist(err) {
		os.WriteFile(event, []byte(`{"type":"invoice.paid","data":{"id":"inv_1","amount":4200}}`+"\n"), 0o600)
	}
	toml := fmt.Sprintf(`# Written by "oncehook serve" in demo mode; rewritten at every demo start.
[node]
id = %q
data_dir = %q
listen = %q

[admin]
listen = %q
tokens = [{ name = "demo", token_file = "admin.token" }]

[[source]]
name = "demo"
provider = "standard"
secret_files = ["demo.secret"]
forward = "http://%s/demo"
`, demoNodeID, dir, listen, adminListen, ln.Addr())
	if err := os.WriteFile(d.configPath, []byte(toml), 0o600); err != nil {
		d.close()
		return nil, fmt.Errorf("demo config: %w", err)
	}
	if d.cfg, err = config.Load(d.configPath); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *demoSetup) announce(log *slog.Logger, listen string) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil {
				return r
			}
		}
		return p
	}
	if d.fresh {
		// Printed once, when it is made; it stays in the secret file after.
		log.Info("demo source secret (Standard Webhooks)", "secret_file", rel(filepath.Join(d.dir, "demo.secret")))
		fmt.Fprintf(os.Stderr, "\n  demo secret: %s\n\n", d.secret)
	}
	log.Info("demo mode: try it", "command",
		fmt.Sprintf("oncehook send -config %s -source demo -file %s", rel(d.configPath), rel(filepath.Join(d.dir, "demo-event.json"))),
		"intake", "http://"+listen+"/in/demo")
}

func (d *demoSetup) close() {
	if d.sinkSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		d.sinkSrv.Shutdown(ctx)
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// holdsState reports whether dir holds a node's state (an engine file or a
// raft log).
func holdsState(dir string) bool {
	return exists(filepath.Join(dir, "fsm.db")) || exists(filepath.Join(dir, "raft", "logs.db"))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
