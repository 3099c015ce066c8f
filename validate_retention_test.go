package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oncehook/forward"
)

// TestValidateWarnsAboutRetention: `oncehook validate` prints one warning
// line per retention or key problem, in the file's order, and still
// succeeds.
func TestValidateWarnsAboutRetention(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "oncehook.toml")
	mustWrite(t, path, fmt.Sprintf(`[node]
data_dir = %q

[[source]]
name = "stripe"
provider = "stripe"
secrets = ["whsec_stripe_test_secret"]
forward = "http://127.0.0.1:9000/stripe"
key = ["header:Stripe-Signature"]
retention = "24h"

[[source]]
name = "fine"
provider = "stripe"
secrets = ["whsec_stripe_other_secret"]
forward = "http://127.0.0.1:9000/fine"
`, filepath.Join(dir, "data")))
	var out, errOut bytes.Buffer
	if err := cmdValidate([]string{"-config", path}, &out, &errOut); err != nil {
		t.Fatalf("validate: %v (%s)", err, errOut.String())
	}
	var warnings []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(line, ": warning: ") {
			warnings = append(warnings, line)
		}
	}
	// Each names the line of its key, as an error does, in the file's order.
	want := []string{
		":9: warning: source[0].key[0]: header:Stripe-Signature is a signature, timestamp or token header",
		":9: warning: source[0].key[0]: header:Stripe-Signature is not covered by stripe's signature: a captured delivery resent with another value there verifies as a new event; the replay guard is on for this source",
		":10: warning: source[0].retention: 24h is shorter than stripe's documented retry window of 72h",
	}
	if len(warnings) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.Contains(warnings[i], w) {
			t.Errorf("warning %q, want %q", warnings[i], w)
		}
	}
	if !strings.Contains(out.String(), ": ok (single node, 2 sources)") {
		t.Errorf("no ok line:\n%s", out.String())
	}
}

// TestValidateWarnsOfReservedForwardHeaders: a forward_headers entry the
// forwarder sets or drops on every delivery is warned about, each of them
// (forward's own header names are the reference), and a provider header is
// not.
func TestValidateWarnsOfReservedForwardHeaders(t *testing.T) {
	own := []string{forward.HeaderIdempotencyKey, forward.HeaderEventKey, forward.HeaderSource, forward.HeaderAttempt,
		forward.HeaderFencingToken, forward.HeaderLastStep, "content-length", "Host", "oncehook-verified"}
	quoted := make([]string, 0, len(own)+1)
	for _, h := range append([]string{"X-GitHub-Event"}, own...) {
		quoted = append(quoted, fmt.Sprintf("%q", h))
	}
	path := githubConfig(t, t.TempDir(), fmt.Sprintf("forward_headers = [%s]\n", strings.Join(quoted, ", ")))
	var out, errOut bytes.Buffer
	if err := cmdValidate([]string{"-config", path}, &out, &errOut); err != nil {
		t.Fatalf("validate: %v (%s)", err, errOut.String())
	}
	for i, h := range own {
		want := fmt.Sprintf(":9: warning: source[0].forward_headers[%d]: %s is set or dropped by oncehook", i+1, h)
		if !strings.Contains(out.String(), want) {
			t.Errorf("no warning %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "forward_headers[0]") {
		t.Errorf("a provider header was warned about:\n%s", out.String())
	}
}

// TestValidateWarnsOfCredentialForwardHeaders: a forwarded header is stored
// with the event and shown by the admin API, so one that carries the
// sender's credentials is warned about; a provider header is not.
func TestValidateWarnsOfCredentialForwardHeaders(t *testing.T) {
	path := githubConfig(t, t.TempDir(), `forward_headers = ["X-GitHub-Event", "authorization", "Cookie", "Proxy-Authorization"]`+"\n")
	var out, errOut bytes.Buffer
	if err := cmdValidate([]string{"-config", path}, &out, &errOut); err != nil {
		t.Fatalf("validate: %v (%s)", err, errOut.String())
	}
	for i, h := range []string{"authorization", "Cookie", "Proxy-Authorization"} {
		want := fmt.Sprintf(":9: warning: source[0].forward_headers[%d]: %s carries the sender's credentials", i+1, h)
		if !strings.Contains(out.String(), want) {
			t.Errorf("no warning %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "forward_headers[0]") {
		t.Errorf("a provider header was warned about:\n%s", out.String())
	}
}

// TestValidateWarnsAlsoWhenASourceFails: a source that does not compile
// fails validate, and the warnings about the rest of the file are printed
// all the same, so that fixing the error does not reveal them one run later.
func TestValidateWarnsAlsoWhenASourceFails(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "bad.schema.json"), `{"type": 12}`)
	path := githubConfig(t, dir, "forward_headers = [\"Host\"]\nschema_file = \"bad.schema.json\"\n")
	var out, errOut bytes.Buffer
	err := cmdValidate([]string{"-config", path}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "schema_file") {
		t.Fatalf("validate: %v, want the schema refused", err)
	}
	if want := ":9: warning: source[0].forward_headers[0]: Host is set or dropped by oncehook"; !strings.Contains(out.String(), want) {
		t.Errorf("no warning %q in\n%s", want, out.String())
	}
}

// githubConfig writes dir/oncehook.toml: one github source "gh" whose
// settings end with extra, the first of them on line 9.
func githubConfig(t *testing.T, dir, extra string) string {
	t.Helper()
	path := filepath.Join(dir, "oncehook.toml")
	mustWrite(t, path, fmt.Sprintf(`[node]
data_dir = %q

[[source]]
name = "gh"
provider = "github"
secrets = ["github-test-secret"]
forward = "http://127.0.0.1:9000/gh"
%s`, filepath.Join(dir, "data"), extra))
	return path
}

// TestValidateChecksTheDataDir: validate refuses the data dir serve would
// refuse, so that ExecStartPre fails with the reason; one that does not
// exist yet is serve's to make.
func TestValidateChecksTheDataDir(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, data string)
		want  string // "": ok
	}{
		{"missing", func(*testing.T, string) {}, ""},
		{"private", func(t *testing.T, data string) { mustMkdir(t, data, 0o700) }, ""},
		{"writable by others", func(t *testing.T, data string) { mustMkdir(t, data, 0o777) }, "oncehook.toml:2: node.data_dir: data dir " + "DATA" + ": writable by its group or others (mode 0777)"},
		{"a file", func(t *testing.T, data string) { mustWrite(t, data, "x") }, "node.data_dir: data dir DATA: not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			tt.setup(t, data)
			path := filepath.Join(dir, "oncehook.toml")
			mustWrite(t, path, fmt.Sprintf("[node]\ndata_dir = %q\n", data))
			var out, errOut bytes.Buffer
			err := cmdValidate([]string{"-config", path}, &out, &errOut)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if want := strings.ReplaceAll(tt.want, "DATA", data); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("validate: %v, want %q", err, want)
			}
		})
	}
}

func mustMkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// TestValidateAndServeSayWhyTheDataDirCannotBeMade: a data dir that does not
// exist and cannot be made (a file on its way) is refused by validate as
// serve refuses it, and both place the problem in the file, as Load's
// errors are, with what to do about it.
func TestValidateAndServeSayWhyTheDataDirCannotBeMade(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	mustWrite(t, file, "x")
	data := filepath.Join(file, "data")
	path := filepath.Join(dir, "oncehook.toml")
	mustWrite(t, path, fmt.Sprintf(`[node]
data_dir = %q
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"

[[source]]
name = "gh"
provider = "github"
secrets = ["github-test-secret"]
forward = "http://127.0.0.1:9000/gh"
`, data))
	want := path + ":2: node.data_dir: data dir: cannot make " + data + ": "
	var out, errOut bytes.Buffer
	err := cmdValidate([]string{"-config", path}, &out, &errOut)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "is a file: name a directory") {
		t.Errorf("validate: %v\nwant %q ... a file on its way", err, want)
	}
	err = cmdServe(t.Context(), []string{"-config", path}, io.Discard, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "is a file: name a directory") {
		t.Errorf("serve: %v\nwant %q ... a file on its way", err, want)
	}
	if strings.Count(fmt.Sprint(err), "name a directory") != 1 {
		t.Errorf("serve: %v\nthe hint is given more than once", err)
	}
}
