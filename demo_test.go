package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
			d, err := startDemo(context.Background(), dir, io.Discard)
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
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("token file mode: %v %v", fi.Mode(), err)
			}
			// A second start keeps the long token.
			d2, err := startDemo(context.Background(), dir, io.Discard)
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
