package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"oncehook/providers"
)

// Secret values the fixtures use; tests check that none of them leaks.
const (
	stripeSecret   = "whsec_stripe-test-secret-value"
	githubSecret   = "github-test-secret-value"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	adminToken     = "admin-token-value-0123456789abcdef0123456789"
	ops2Token      = "ops2-token-value-0123456789abcdef0123456789"
	clusterToken   = "cluster-token-value-0123456789abcdef0123456789"
)

// writeFile writes content to dir/name with exactly mode perm (no umask).
func writeFile(t *testing.T, dir, name, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// fixtureDir returns a temporary directory holding the secret, token and
// schema files the testdata configs name. Modes cannot come from testdata
// itself: git keeps no permission bits but the executable one.
func fixtureDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "stripe.secret", stripeSecret+"\n", 0o600)
	writeFile(t, dir, "github.secret", githubSecret+"\n", 0o640)
	writeFile(t, dir, "standard.secret", standardSecret+"\n", 0o400)
	writeFile(t, dir, "admin.token", adminToken+"\n", 0o600)
	writeFile(t, dir, "ops2.token", ops2Token+"\n", 0o600)
	writeFile(t, dir, "cluster.token", clusterToken+"\n", 0o600)
	writeFile(t, dir, "short.token", "short-token\n", 0o600)
	writeFile(t, dir, "open.secret", "world-readable-secret\n", 0o644)
	writeFile(t, dir, "empty.secret", "\n", 0o600)
	writeFile(t, dir, "schema.json", `{"type":"object"}`, 0o644)
	if err := os.Mkdir(filepath.Join(dir, "adir.secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loadTestdata copies testdata/name into a fixture directory and loads it.
func loadTestdata(t *testing.T, name string) (*Config, string, error) {
	t.Helper()
	dir := fixtureDir(t)
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	// 0600: some fixtures hold inline secrets, which a file readable by
	// others may not (TestInlineCredentialsMode).
	path := writeFile(t, dir, name, string(data), 0o600)
	c, err := Load(path)
	return c, path, err
}

// mustLoadTestdata loads testdata/name and fails the test on error.
func mustLoadTestdata(t *testing.T, name string) *Config {
	t.Helper()
	c, _, err := loadTestdata(t, name)
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	return c
}

// mustBuildVerifier builds s's verifier from its VerifierOptions, as
// intake.CompileSource does, and fails the test when that fails.
func mustBuildVerifier(t *testing.T, s *Source) providers.Verifier {
	t.Helper()
	sch, ok := providers.Lookup(s.Provider)
	if !ok {
		t.Fatalf("source %s: unknown provider %q", s.Name, s.Provider)
	}
	v, err := sch.NewVerifier(s.VerifierOptions())
	if err != nil {
		t.Fatalf("source %s: verifier: %v", s.Name, err)
	}
	return v
}

// want is one expected problem, read from a `# want: key: message` marker.
type want struct {
	line int
	text string // "key: message prefix"
}

var reWant = regexp.MustCompile(`#\s*want(-next)?:\s*`)

// wants reads the markers of a testdata file: `# want: KEY: MSG` expects an
// error at the marker's line, `# want-next: KEY: MSG` at the next line. A line
// may carry several `# want:` markers.
func wants(t *testing.T, name string) []want {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []want
	for i, line := range strings.Split(string(data), "\n") {
		locs := reWant.FindAllStringSubmatchIndex(line, -1)
		for j, loc := range locs {
			end := len(line)
			if j+1 < len(locs) {
				end = locs[j+1][0]
			}
			n := i + 1
			if loc[2] >= 0 { // -next
				n++
			}
			out = append(out, want{line: n, text: strings.TrimSpace(line[loc[1]:end])})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no # want: markers", name)
	}
	return out
}

// problemsOf splits a joined Load error into its *Error parts.
func problemsOf(t *testing.T, err error) []*Error {
	t.Helper()
	var list []*Error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("problem %v (%T) is not an *Error", err, err)
		}
		list = append(list, e)
	}
	walk(err)
	return list
}

func dump(list []*Error) string {
	var b strings.Builder
	for _, e := range list {
		fmt.Fprintf(&b, "\n\t%s", e)
	}
	return b.String()
}

// loadOneSource loads a config of one source "s" forwarding to loopback,
// made of lines (a stripe source unless lines name a provider; an inline
// secret unless they give one). With wantErr set it checks that Load fails
// with a message containing it and returns nil; else it fails on any error
// and returns the source.
func loadOneSource(t *testing.T, lines, wantErr string) *Source {
	t.Helper()
	if !strings.Contains(lines, "provider") {
		lines = "provider = \"stripe\"\n" + lines
	}
	if !strings.Contains(lines, "secrets") {
		lines += "\nsecrets = [\"0123456789abcdef0123456789abcdef\"]"
	}
	text := "[[source]]\nname = \"s\"\nforward = \"http://127.0.0.1:9000/\"\n" + lines + "\n"
	c, err := Load(writeFile(t, t.TempDir(), "oncehook.toml", text, 0o600))
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Load: %v, want an error containing %q", err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return &c.Sources[0]
}
