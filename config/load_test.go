package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"oncehook/providers"
)

// TestLoadInvalid loads each invalid fixture and checks that every problem
// marked in it (`# want: key: message`) is reported as `file:line: key:
// message` at the marker's line, and that nothing else is reported.
func TestLoadInvalid(t *testing.T) {
	for _, name := range []string{
		"bad_values.toml",
		"syntax.toml",
		"syntax_source.toml",
		"unknown_keys.toml",
		"node_invalid.toml",
		"listeners.toml",
		"admin_invalid.toml",
		"cluster_advertise.toml",
		"cluster_peers.toml",
		"cluster_self.toml",
		"cluster_mismatch.toml",
		"cluster_empty.toml",
		"sources_invalid.toml",
		"retention_invalid.toml",
	} {
		t.Run(strings.TrimSuffix(name, ".toml"), func(t *testing.T) {
			c, path, err := loadTestdata(t, name)
			if err == nil {
				t.Fatalf("Load succeeded, want errors")
			}
			if c != nil {
				t.Errorf("Load returned a Config with an error")
			}
			got := problemsOf(t, err)
			ws := wants(t, name)
			for _, w := range ws {
				prefix := fmt.Sprintf("%s:%d: %s", path, w.line, w.text)
				found := false
				for _, e := range got {
					if strings.HasPrefix(e.Error(), prefix) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no error %q; got:%s", prefix, dump(got))
				}
			}
			if len(got) != len(ws) {
				t.Errorf("got %d errors, want %d:%s", len(got), len(ws), dump(got))
			}
			// The joined message is in file order, one problem a line.
			if lines := strings.Split(err.Error(), "\n"); len(lines) != len(got) {
				t.Errorf("joined error has %d lines, want %d", len(lines), len(got))
			}
		})
	}
}

func TestLoadErrorSentinels(t *testing.T) {
	_, _, err := loadTestdata(t, "unknown_keys.toml")
	if !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key error does not wrap ErrUnknownKey: %v", err)
	}
	_, _, err = loadTestdata(t, "sources_invalid.toml")
	if !errors.Is(err, ErrSecretFileMode) {
		t.Errorf("world-readable secret error does not wrap ErrSecretFileMode: %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing secret file error does not wrap fs.ErrNotExist: %v", err)
	}
	if !errors.Is(err, providers.ErrBadSecret) {
		t.Errorf("malformed secret error does not wrap providers.ErrBadSecret: %v", err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.toml")
	_, err := Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), path+": cannot read config: ") {
		t.Fatalf("Load(missing) = %v", err)
	}
}

// TestLoadEmptyFile: an empty file is a single node with no sources.
func TestLoadEmptyFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "empty.toml", "", 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Path = path
	// The default data dir is the config file's directory's.
	want.Node.DataDir = filepath.Join(filepath.Dir(path), "data")
	c.lines = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load(empty) = %+v, want %+v", c, want)
	}
}

// TestDataDirIsTheConfigFilesDirectorys: a relative data_dir, like every
// relative path in the file, is resolved against the file's directory, not
// the working directory: a node started from elsewhere opens the same data.
func TestDataDirIsTheConfigFilesDirectorys(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "oncehook.toml", "[node]\ndata_dir = \"state/node1\"\n", 0o644)
	t.Chdir(t.TempDir())
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "node1"); c.Node.DataDir != want {
		t.Errorf("data_dir = %q, want %q", c.Node.DataDir, want)
	}
	// A relative config path from another directory ends in the same place.
	t.Chdir(filepath.Dir(dir))
	c, err = Load(filepath.Join(filepath.Base(dir), "oncehook.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "node1"); c.Node.DataDir != want {
		t.Errorf("data_dir through a relative config path = %q, want %q", c.Node.DataDir, want)
	}
}

func TestLoadValid(t *testing.T) {
	c := mustLoadTestdata(t, "valid.toml")
	dir := filepath.Dir(c.Path)

	if want := (Node{ID: "node2", DataDir: "/var/lib/oncehook", Listen: "0.0.0.0:8080", LogLevel: "debug", LogFormat: "json", MaxConnsPerIP: DefaultMaxConnsPerIP}); c.Node != want {
		t.Errorf("Node = %+v, want %+v", c.Node, want)
	}
	cl := c.Cluster
	if cl == nil {
		t.Fatal("Cluster is nil")
	}
	if cl.RaftListen != "0.0.0.0:7070" || cl.Advertise != "10.0.0.2:7070" || cl.TLS() {
		t.Errorf("Cluster = %+v", cl)
	}
	if want := []Peer{{"node1", "10.0.0.1:7070"}, {"node2", "10.0.0.2:7070"}, {"node3", "10.0.0.3:7070"}}; !reflect.DeepEqual(cl.Peers, want) {
		t.Errorf("Peers = %v, want %v", cl.Peers, want)
	}
	if string(cl.Token) != clusterToken || cl.TokenFile != filepath.Join(dir, "cluster.token") {
		t.Errorf("cluster token not read from %s", cl.TokenFile)
	}
	if c.Admin.Listen != "127.0.0.1:7171" || len(c.Admin.Tokens) != 2 {
		t.Fatalf("Admin = %+v", c.Admin)
	}
	if tk := c.Admin.Tokens[0]; tk.Name != "ops" || string(tk.Token) != adminToken || tk.TokenFile != filepath.Join(dir, "admin.token") {
		t.Errorf("admin token 0 = %+v", tk)
	}
	if tk := c.Admin.Tokens[1]; tk.Name != "ci" || string(tk.Token) != "ci-inline-token-value-0123456789abcdef" || tk.TokenFile != "" {
		t.Errorf("admin token 1 = %+v", tk)
	}

	if len(c.Sources) != 3 {
		t.Fatalf("%d sources, want 3", len(c.Sources))
	}
	s := c.Sources[0]
	want := Source{
		Name:           "stripe-live",
		Provider:       "stripe",
		Secrets:        []Secret{Secret(stripeSecret)},
		SecretFiles:    []string{filepath.Join(dir, "stripe.secret")},
		Tolerance:      Duration(10 * time.Minute),
		Key:            []string{"json:id"},
		Retention:      Duration(720 * time.Hour),
		MaxBody:        512 * KiB,
		Forward:        "https://handler.internal:9443/stripe",
		ForwardHeaders: []string{"Stripe-Signature"},
		Mode:           "sync",
		AckStatus:      202,
		Lease:          Duration(time.Minute),
		MaxAttempts:    3,
		BackoffMin:     Duration(2 * time.Second),
		BackoffMax:     Duration(time.Hour),
		ForwardTimeout: Duration(20 * time.Second),
		AllowIPs: []netip.Prefix{
			netip.MustParsePrefix("10.1.2.3/32"),
			netip.MustParsePrefix("192.168.0.0/16"),
			netip.MustParsePrefix("2001:db8::/32"),
			netip.MustParsePrefix("10.0.0.0/8"), // masked
		},
		TrustedProxies: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.7/32"),
			netip.MustParsePrefix("fd00::/8"),
		},
		KeysURL:     "https://keys.example.com/jwks.json",
		KeysRefresh: Duration(90 * time.Minute),
		SchemaFile:  filepath.Join(dir, "schema.json"),
		Order:       &Order{Object: "json:data.object.id", Time: "json:created"},
		ReplayGuard: ReplayGuardOff, // stripe signs the event id (in the body)
		Type:        "json:type",
	}
	want.DeadRetention, want.PayloadRetention = Duration(DefaultDeadRetention), Duration(DefaultPayloadRetention)
	if !reflect.DeepEqual(s, want) {
		t.Errorf("source[0] =\n%+v\nwant\n%+v", s, want)
	}

	s = c.Sources[1]
	if len(s.Secrets) != 2 || string(s.Secrets[0]) != standardSecret || s.SecretFiles != nil {
		t.Errorf("source[1] inline secrets = %d, files %v", len(s.Secrets), s.SecretFiles)
	}
	if s.MaxBody != MiB || s.Retention != Duration(96*time.Hour) || s.Tolerance != Duration(DefaultTolerance) {
		t.Errorf("source[1] = %+v", s)
	}

	s = c.Sources[2]
	wantSpec := providers.HMACSpec{Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "v1=",
		TimestampHeader: "X-Timestamp", IDHeader: "X-Request-Id", Template: "{id}.{timestamp}.{body}"}
	if s.Provider != "hmac" || s.HMAC == nil || *s.HMAC != wantSpec {
		t.Errorf("source[2] provider %q hmac %+v", s.Provider, s.HMAC)
	}
	for i := range c.Sources {
		mustBuildVerifier(t, &c.Sources[i])
	}
}

// TestProviderDefaults checks that an unset key, retention and ack_status
// take the provider's defaults (docs/sources.md's provider table) and that a set
// one wins.
func TestProviderDefaults(t *testing.T) {
	c := mustLoadTestdata(t, "providers.toml")
	tests := []struct {
		name      string
		key       []string
		retention time.Duration
		ack       int
	}{
		{"github", []string{"header:X-GitHub-Delivery"}, 168 * time.Hour, 202},
		{"stripe", []string{"json:id"}, 168 * time.Hour, 202},
		{"shopify", []string{"header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id"}, 72 * time.Hour, 202},
		{"standard", []string{"header:webhook-id"}, 96 * time.Hour, 202},
		{"svix", []string{"header:svix-id|header:webhook-id"}, 96 * time.Hour, 202},
		{"slack", []string{"json:event_id"}, 24 * time.Hour, 202},
		{"gitlab", []string{"header:Idempotency-Key|header:X-Gitlab-Event-UUID"}, 72 * time.Hour, 202},
		{"paddle", []string{"json:event_id"}, 168 * time.Hour, 202},
		{"twilio", []string{"header:I-Twilio-Idempotency-Token"}, 24 * time.Hour, 202},
		{"linear", []string{"header:Linear-Delivery"}, 72 * time.Hour, 202},
		{"zoom", []string{"json:event", "json:event_ts"}, 24 * time.Hour, 202},
		{"asaas", []string{"json:id"}, 384 * time.Hour, 200},
		{"hmac", []string{"header:X-Request-Id"}, 168 * time.Hour, 202},
		{"stripe-custom", []string{"header:X-Custom-Id"}, 24 * time.Hour, 200},
	}
	if len(c.Sources) != len(tests) {
		t.Fatalf("%d sources, want %d", len(c.Sources), len(tests))
	}
	for i, tt := range tests {
		s := c.Sources[i]
		if s.Name != tt.name {
			t.Fatalf("source[%d] is %q, want %q", i, s.Name, tt.name)
		}
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(s.Key, tt.key) {
				t.Errorf("key = %q, want %q", s.Key, tt.key)
			}
			if time.Duration(s.Retention) != tt.retention {
				t.Errorf("retention = %s, want %s", s.Retention, tt.retention)
			}
			if s.AckStatus != tt.ack {
				t.Errorf("ack_status = %d, want %d", s.AckStatus, tt.ack)
			}
			// The tolerance is 5m but for linear (its recommended 60 s).
			wantTol := Duration(5 * time.Minute)
			if tt.name == "linear" {
				wantTol = Duration(time.Minute)
			}
			if s.Tolerance != wantTol {
				t.Errorf("tolerance = %s, want %s", s.Tolerance, wantTol)
			}
			// Provider-independent defaults.
			if s.MaxBody != MiB || s.Mode != "async" ||
				s.Lease != Duration(30*time.Second) || s.MaxAttempts != 8 || s.BackoffMin != Duration(time.Second) ||
				s.BackoffMax != Duration(10*time.Minute) || s.ForwardTimeout != Duration(10*time.Second) ||
				s.KeysRefresh != Duration(5*time.Minute) || s.AllowIPs != nil || s.Order != nil {
				t.Errorf("defaults = %+v", s)
			}
			mustBuildVerifier(t, &s)
		})
	}
	if h := c.Sources[12].HMAC; h == nil || h.Algorithm != "sha256" || h.Encoding != "hex" || h.Template != "{body}" {
		t.Errorf("hmac defaults = %+v", h)
	}
}

// TestLoadTwice: Load has no side effects, and Validate is idempotent.
func TestLoadTwice(t *testing.T) {
	_, path, err := loadTestdata(t, "valid.toml")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Validate(); err != nil {
			t.Fatalf("Validate after Load: %v", err)
		}
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two Loads differ:\n%+v\n%+v", a, b)
	}

	// Twice on an invalid config: the same problems, not more.
	a.Sources[0].Lease = Duration(time.Second)
	a.Node.LogLevel = "loud"
	e1, e2 := a.Validate(), a.Validate()
	if e1 == nil || e2 == nil || e1.Error() != e2.Error() {
		t.Errorf("Validate twice:\n%v\n%v", e1, e2)
	}
	if n := len(problemsOf(t, e1)); n != 2 {
		t.Errorf("%d problems, want 2: %v", n, e1)
	}
	// Lines survive into Validate for a loaded config.
	if !strings.Contains(e1.Error(), path+":6: node.log_level: ") {
		t.Errorf("Validate lost the line: %v", e1)
	}
}

// TestSecretFileReread: Load reads secret files anew every time (SIGHUP).
func TestSecretFileReread(t *testing.T) {
	_, path, err := loadTestdata(t, "providers.toml")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(path), "stripe.secret", "whsec_rotated\n", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(c.Sources[1].Secrets[0]); got != "whsec_rotated" {
		t.Errorf("secret after rewrite = %q", got)
	}
}

// TestSecretFileBOM: a secret or token file saved with a UTF-8 byte order
// mark (Notepad) or Windows line endings yields the value without them: the
// mark kept would pass validation and fail every signature (401). Only a
// leading mark is the file's encoding; one elsewhere is left to the value.
func TestSecretFileBOM(t *testing.T) {
	const bom = "\ufeff"
	for _, tc := range []struct {
		name, content, want string
	}{
		{"plain", standardSecret + "\n", standardSecret},
		{"bom", bom + standardSecret, standardSecret},
		{"bom and newline", bom + standardSecret + "\n", standardSecret},
		{"bom and crlf", bom + standardSecret + "\r\n", standardSecret},
		{"bom and spaces", bom + "  " + standardSecret + " \r\n", standardSecret},
		{"mark inside", "whsec_" + bom + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_" + bom + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "s.secret", tc.content, 0o600)
			writeFile(t, dir, "admin.token", strings.ReplaceAll(tc.content, standardSecret, adminToken), 0o600)
			writeFile(t, dir, "cluster.token", strings.ReplaceAll(tc.content, standardSecret, clusterToken), 0o600)
			path := writeFile(t, dir, "c.toml", `
[admin]
tokens = [{ name = "ops", token_file = "admin.token" }]
[cluster]
raft_listen = "127.0.0.1:7070"
peers = ["node1=127.0.0.1:7070"]
token_file = "cluster.token"
[[source]]
name = "a"
provider = "standard"
secret_files = ["s.secret"]
forward = "http://127.0.0.1:9000/a"
`, 0o600)
			c, err := Load(path)
			if tc.name == "mark inside" {
				// Not a file encoding: the value is taken as written, and
				// the standard provider refuses it (not base64).
				if err == nil || !strings.Contains(err.Error(), "source[0].secret_files[0]") {
					t.Fatalf("Load: %v, want the secret refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(c.Sources[0].Secrets[0]); got != tc.want {
				t.Errorf("secret = %q, want %q", got, tc.want)
			}
			if got, want := string(c.Admin.Tokens[0].Token), strings.ReplaceAll(tc.want, standardSecret, adminToken); got != want {
				t.Errorf("admin token = %q, want %q", got, want)
			}
			if got, want := string(c.Cluster.Token), strings.ReplaceAll(tc.want, standardSecret, clusterToken); got != want {
				t.Errorf("cluster token = %q, want %q", got, want)
			}
		})
	}
}

func TestCredentialsDirectory(t *testing.T) {
	dir := t.TempDir()
	creds := t.TempDir()
	writeFile(t, dir, "stripe.secret", "from-config-dir", 0o600)
	writeFile(t, dir, "github.secret", "github-from-config-dir", 0o600)
	writeFile(t, creds, "stripe.secret", "from-credentials", 0o400)
	abs := writeFile(t, t.TempDir(), "abs.secret", "absolute", 0o600)
	writeFile(t, creds, "abs.secret", "wrong", 0o400)
	writeFile(t, creds, "admin.token", "admin-from-credentials-0123456789abcdef", 0o400)
	path := writeFile(t, dir, "c.toml", fmt.Sprintf(`
[admin]
tokens = [{ name = "ops", token_file = "admin.token" }]
[[source]]
name = "a"
provider = "stripe"
secret_files = ["stripe.secret", "github.secret", %q]
forward = "http://127.0.0.1:9000/a"
`, abs), 0o644)

	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{string(c.Sources[0].Secrets[0]), string(c.Sources[0].Secrets[1]), string(c.Sources[0].Secrets[2])}
	want := []string{"from-credentials", "github-from-config-dir", "absolute"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("secrets = %q, want %q", got, want)
	}
	if wantFiles := []string{filepath.Join(creds, "stripe.secret"), filepath.Join(dir, "github.secret"), abs}; !reflect.DeepEqual(c.Sources[0].SecretFiles, wantFiles) {
		t.Errorf("secret files = %q, want %q", c.Sources[0].SecretFiles, wantFiles)
	}
	if got := string(c.Admin.Tokens[0].Token); got != "admin-from-credentials-0123456789abcdef" {
		t.Errorf("admin token = %q", got)
	}

	t.Setenv("CREDENTIALS_DIRECTORY", "")
	c, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "admin.tokens[0].token_file: cannot read secret file") {
		t.Fatalf("without credentials: %v", err)
	}
}

// TestSecretFileMode: group-readable is fine (0640, root:oncehook); readable
// by others, or writable by the group or by others, is refused, with the path
// and the exact chmod in the message.
func TestSecretFileMode(t *testing.T) {
	for _, tt := range []struct {
		mode        os.FileMode
		what, chmod string // "" = accepted
	}{
		{0o600, "", ""}, {0o400, "", ""}, {0o640, "", ""}, {0o440, "", ""},
		{0o604, "readable by others", "o-rwx"},
		{0o644, "readable by others", "o-rwx"},
		{0o444, "readable by others", "o-rwx"},
		{0o606, "readable by others", "o-rwx"},
		{0o660, "writable by its group", "g-w"},
		{0o620, "writable by its group", "g-w"},
		{0o602, "writable by others", "o-w"},
		{0o622, "writable by its group or by others", "go-w"},
		{0o664, "readable by others or writable by its group", "g-w,o-rwx"},
		{0o666, "readable by others or writable by its group", "g-w,o-rwx"},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			secret := writeFile(t, dir, "s.secret", "the-secret-value", tt.mode)
			path := writeFile(t, dir, "c.toml", `[[source]]
name = "a"
provider = "github"
secret_files = ["s.secret"]
forward = "http://127.0.0.1:9000/a"
`, 0o644)
			_, err := Load(path)
			if tt.what == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := fmt.Sprintf("%s:4: source[0].secret_files[0]: secret file %s has mode %#o: it must not be %s (chmod %s %s)",
				path, secret, tt.mode, tt.what, tt.chmod, secret)
			if err == nil || err.Error() != want || !errors.Is(err, ErrSecretFileMode) {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
			if strings.Contains(err.Error(), "the-secret-value") {
				t.Fatal("error shows the secret")
			}
			// The chmod it names is the fix.
			if err := os.Chmod(secret, tt.mode&^chmodMask(tt.chmod)); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); err != nil {
				t.Fatalf("after chmod %s: %v", tt.chmod, err)
			}
		})
	}
}

// chmodMask is the bits a symbolic "who-perms[,who-perms]" removal clears.
func chmodMask(arg string) os.FileMode {
	var m os.FileMode
	for _, part := range strings.Split(arg, ",") {
		who, perms, _ := strings.Cut(part, "-")
		var bits os.FileMode
		for _, p := range perms {
			bits |= map[rune]os.FileMode{'r': 4, 'w': 2, 'x': 1}[p]
		}
		for _, w := range who {
			m |= bits << map[rune]uint{'g': 3, 'o': 0}[w]
		}
	}
	return m
}

// TestTokenAndKeyFileModes: every kind of credential file is held to the
// same rule as secret_files: admin and cluster token files, and the cluster's
// TLS key.
func TestTokenAndKeyFileModes(t *testing.T) {
	for _, tt := range []struct {
		name, key string
		toml      func(file string) string
	}{
		{"admin token_file", "admin.tokens[0].token_file", func(f string) string {
			return fmt.Sprintf("[admin]\ntokens = [{ name = \"ops\", token_file = %q }]\n", f)
		}},
		{"cluster token_file", "cluster.token_file", func(f string) string {
			return fmt.Sprintf("[cluster]\nraft_listen = \"127.0.0.1:7070\"\npeers = [\"node1=127.0.0.1:7070\"]\ntoken_file = %q\n", f)
		}},
	} {
		for _, mode := range []os.FileMode{0o620, 0o602, 0o644} {
			t.Run(fmt.Sprintf("%s/%#o", tt.name, mode), func(t *testing.T) {
				dir := t.TempDir()
				tok := writeFile(t, dir, "x.token", clusterToken, mode)
				path := writeFile(t, dir, "c.toml", tt.toml(tok), 0o600)
				_, err := Load(path)
				what, chmod := unsafeMode(mode)
				want := fmt.Sprintf("%s: secret file %s has mode %#o: it must not be %s (chmod %s %s)", tt.key, tok, mode, what, chmod, tok)
				if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrSecretFileMode) {
					t.Fatalf("err = %v\nwant %s", err, want)
				}
				if strings.Contains(err.Error(), clusterToken) {
					t.Fatal("error shows the token")
				}
				if err := os.Chmod(tok, 0o600); err != nil {
					t.Fatal(err)
				}
				if _, err := Load(path); err != nil {
					t.Fatalf("mode 0600: %v", err)
				}
			})
		}
	}
	t.Run("tls_key group-writable", func(t *testing.T) {
		dir := t.TempDir()
		cert, key, ca := writeTLS(t, dir)
		if err := os.Chmod(key, 0o660); err != nil {
			t.Fatal(err)
		}
		c := Default()
		c.Cluster = &Cluster{RaftListen: "10.0.0.1:7070", Peers: []Peer{{"node1", "10.0.0.1:7070"}}, TLSCert: cert, TLSKey: key, TLSCA: ca}
		err := c.Validate()
		want := "cluster.tls_key: key file " + key + " has mode 0660: it must not be writable by its group (chmod g-w " + key + ")"
		if err == nil || err.Error() != want || !errors.Is(err, ErrSecretFileMode) {
			t.Fatalf("err = %v\nwant %s", err, want)
		}
	})
	t.Run("tls_ca writable by others", func(t *testing.T) {
		dir := t.TempDir()
		cert, key, ca := writeTLS(t, dir)
		if err := os.Chmod(ca, 0o646); err != nil {
			t.Fatal(err)
		}
		c := Default()
		c.Cluster = &Cluster{RaftListen: "10.0.0.1:7070", Peers: []Peer{{"node1", "10.0.0.1:7070"}}, TLSCert: cert, TLSKey: key, TLSCA: ca}
		err := c.Validate()
		want := "cluster.tls_ca: certificate file " + ca + " has mode 0646: it must not be writable by others, who would choose whom the node trusts (chmod o-w " + ca + ")"
		if err == nil || err.Error() != want || !errors.Is(err, ErrSecretFileMode) {
			t.Fatalf("err = %v\nwant %s", err, want)
		}
	})
}

// TestInlineCredentialsMode: a config file that holds a secret or a token
// inline is itself a secret file: readable by others, it is refused at the
// first inline credential's line, with the chmod that fixes it. Without
// inline credentials its mode is the operator's business.
func TestInlineCredentialsMode(t *testing.T) {
	const source = "[[source]]\nname = \"a\"\nprovider = \"github\"\nforward = \"http://127.0.0.1:9000/a\"\n"
	const standard = "[[source]]\nname = \"a\"\nprovider = \"standard\"\nforward = \"http://127.0.0.1:9000/a\"\n"
	for _, tt := range []struct {
		name string
		toml string
		mode os.FileMode
		want string // "" = accepted; else "line: key"
	}{
		{"inline secrets, 0644", source + "secrets = [\"inline-secret-value\"]\n", 0o644, "5: source[0].secrets"},
		{"inline secrets, 0604", source + "secrets = [\"inline-secret-value\"]\n", 0o604, "5: source[0].secrets"},
		{"inline secrets, 0640", source + "secrets = [\"inline-secret-value\"]\n", 0o640, ""},
		{"inline secrets, 0600", source + "secrets = [\"inline-secret-value\"]\n", 0o600, ""},
		{"inline admin token, 0644", "[admin]\ntokens = [{ name = \"ops\", token = \"" + adminToken + "\" }]\n", 0o644, "2: admin.tokens[0].token"},
		{"inline admin token, 0600", "[admin]\ntokens = [{ name = \"ops\", token = \"" + adminToken + "\" }]\n", 0o600, ""},
		{"both, token first", "[admin]\ntokens = [{ name = \"ops\", token = \"" + adminToken + "\" }]\n" + source + "secrets = [\"inline-secret-value\"]\n", 0o644, "2: admin.tokens[0].token"},
		// whpk_ public keys verify and cannot sign: not credentials.
		{"inline public keys only, 0644", standard + "secrets = [\"whpk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\"]\n", 0o644, ""},
		{"a public key and a secret, 0644", standard + "secrets = [\"whpk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\", \"inline-secret-value\"]\n", 0o644, "5: source[0].secrets"},
		{"files only, 0644", "[admin]\ntokens = [{ name = \"ops\", token_file = \"admin.token\" }]\n" + source + "secret_files = [\"github.secret\"]\n", 0o644, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureDir(t)
			path := writeFile(t, dir, "c.toml", tt.toml, tt.mode)
			_, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := fmt.Sprintf("%s:%s: config file %s holds inline credentials and has mode %#o: it must not be readable by others (chmod o-rwx %s)",
				path, tt.want, path, tt.mode, path)
			if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, ErrSecretFileMode) {
				t.Fatalf("err = %v\nwant %s", err, want)
			}
			if n := len(problemsOf(t, err)); n != 1 {
				t.Errorf("%d problems, want 1: %v", n, err)
			}
			if strings.Contains(err.Error(), "inline-secret-value") || strings.Contains(err.Error(), adminToken) {
				t.Fatal("error shows a credential")
			}
		})
	}
}

// TestInlineSecretThatNamesAFile: an inline secret or admin token that is
// a reference, beyond doubt (the path of a file that exists, a variable's
// name), is refused: it would be the key itself, a string anyone can guess.
// One that only reads like a path, or starts with '$', is warned of; a
// base64 secret that starts with '/' loads without a word.
func TestInlineSecretThatNamesAFile(t *testing.T) {
	const source = "[[source]]\nname = \"a\"\nprovider = \"github\"\nforward = \"http://127.0.0.1:9000/a\"\n"
	for _, tt := range []struct {
		name, toml string
		want       string // "" = accepted; else "line: key"
		warn       string // a warning that must be given, when accepted
	}{
		{"existing file, relative", source + "secrets = [\"./github.secret\"]\n", "5: source[0].secrets[0]", ""},
		{"existing file, absolute", source + "secrets = [\"DIR/github.secret\"]\n", "5: source[0].secrets[0]", ""},
		{"file: and an existing file", source + "secrets = [\"a-real-secret-value\", \"file:DIR/github.secret\"]\n", "5: source[0].secrets[1]", ""},
		{"shell variable", source + "secrets = [\"${GITHUB_WEBHOOK_SECRET}\"]\n", "5: source[0].secrets[0]", ""},
		{"bare variable", source + "secrets = [\"$GITHUB_WEBHOOK_SECRET\"]\n", "5: source[0].secrets[0]", ""},
		{"windows variable", source + "secrets = [\"%GITHUB_SECRET%\"]\n", "5: source[0].secrets[0]", ""},
		{"env: reference", source + "secrets = [\"env:GITHUB_SECRET\"]\n", "5: source[0].secrets[0]", ""},
		{"admin token, existing file", "[admin]\ntokens = [{ name = \"ops\", token = \"DIR/admin.token\" }]\n", "2: admin.tokens[0].token", ""},
		{"a path to no file", source + "secrets = [\"/etc/oncehook/github.secret\"]\n", "", "source[0].secrets[0]: reads like a file's path"},
		{"admin token, a path to no file", "[admin]\ntokens = [{ name = \"ops\", token = \"/etc/oncehook/credentials/admin-ops.token\" }]\n", "", "admin.tokens[0].token: reads like a file's path"},
		{"base64 starting with a slash", source + "secrets = [\"/x9K+Qa7/Lm0pZr2Tt5Vw8Yb1Nc4De6Fg3Hj9Ik0Lo=\"]\n", "", ""},
		{"typed token starting with a dollar", source + "secrets = [\"$uperS3cretGitlabToken-2024\"]\n", "", "source[0].secrets[0]: starts with $"},
		{"lower-case variable", source + "secrets = [\"$github_webhook_secret\"]\n", "", "source[0].secrets[0]: starts with $"},
		{"a command's output", source + "secrets = [\"$(cat /etc/oncehook/github.secret)\"]\n", "5: source[0].secrets[0]: is a shell command's output", ""},
		{"variable with a default", source + "secrets = [\"${GITHUB_SECRET:-}\"]\n", "5: source[0].secrets[0]", ""},
		{"a one-level path to no file", source + "secrets = [\"/github.secret\"]\n", "", "source[0].secrets[0]: reads like a file's path"},
		{"a home path to no file", source + "secrets = [\"~/github.secret\"]\n", "", "source[0].secrets[0]: reads like a file's path"},
		{"slashes and dollars inside", source + "secrets = [\"a/b$c%d~e\"]\n", "", ""},
		{"admin token", "[admin]\ntokens = [{ name = \"ops\", token = \"" + adminToken + "\" }]\n", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixtureDir(t)
			path := writeFile(t, dir, "c.toml", strings.ReplaceAll(tt.toml, "DIR", dir), 0o600)
			c, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				w := c.Warnings()
				found := slices.ContainsFunc(w, func(s string) bool { return tt.warn != "" && strings.HasPrefix(s, tt.warn) })
				if tt.warn != "" && !found {
					t.Fatalf("warnings %q, want one starting %q", w, tt.warn)
				}
				if tt.warn == "" && slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "an inline value is the secret as written") }) {
					t.Fatalf("warnings %q for a value that is no path", w)
				}
				return
			}
			want := fmt.Sprintf("%s:%s", path, tt.want) // a row may name what the value is
			if !strings.Contains(tt.want, ": is ") {
				want += ": is "
			}
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "_file") {
				t.Fatalf("err = %v\nwant %s...", err, want)
			}
			if n := len(problemsOf(t, err)); n != 1 {
				t.Errorf("%d problems, want 1: %v", n, err)
			}
			if strings.Contains(err.Error(), "GITHUB") || strings.Contains(err.Error(), dir+"/github") {
				t.Fatal("error shows the value")
			}
		})
	}
}

// TestVerifierFromLoad: a verifier built from a loaded source's
// VerifierOptions accepts what the provider signs with the file's secret
// (trailing newline trimmed).
func TestVerifierFromLoad(t *testing.T) {
	c := mustLoadTestdata(t, "providers.toml")
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"id":"evt_1"}`)
	for _, i := range []int{0, 1, 3} { // github, stripe, standard
		s := c.Sources[i]
		sch, _ := providers.Lookup(s.Provider)
		hs, err := sch.Sign(body, s.Secrets[0], now, "msg_1", nil)
		if err != nil {
			t.Fatal(err)
		}
		h := headers{}
		for _, x := range hs {
			h[strings.ToLower(x.Name)] = x.Value
		}
		v := mustBuildVerifier(t, &s)
		if err := v.Verify(&providers.Request{Body: body, Header: h, Now: now}); err != nil {
			t.Errorf("%s: Verify = %v", s.Name, err)
		}
		if err := v.Verify(&providers.Request{Body: []byte(`{}`), Header: h, Now: now}); err == nil {
			t.Errorf("%s: Verify accepted a changed body", s.Name)
		}
	}
}

type headers map[string]string

func (h headers) Peek(name string) []byte {
	v, ok := h[strings.ToLower(name)]
	if !ok {
		return nil
	}
	return []byte(v)
}

// TestSyntaxErrorHidesText: a TOML syntax error says what the parser
// expected at file:line and key, never the text it found there, which may
// be a secret pasted without quotes: validate prints the error and serve
// logs it. Errors that quote no input keep the parser's words.
func TestSyntaxErrorHidesText(t *testing.T) {
	const secret = "SUPERSECRETVALUE123"
	for _, tt := range []struct{ src, want string }{
		{"[[source]]\nname = \"a\"\nsecrets = [" + secret + "]\n", ":3: source[0].secrets: syntax error: expected a value (a string must be quoted)"},
		{"[[source]]\nname = \"a\"\nsecrets = [\n  \"whsec_ok\",\n  " + secret + ",\n]\n", ":5: source[0].secrets: syntax error: expected a value (a string must be quoted)"},
		{"[cluster]\ntoken = " + secret + "\n", ":2: cluster.token: syntax error: expected a value (a string must be quoted)"},
		{"[cluster]\ntoken = \"" + secret + "\\xZZ\"\n", `:2: cluster.token: syntax error: expected two hexadecimal digits after '\x'`},
		{"[cluster]\ntoken = \"" + secret + "\\u12\"\n", `:2: cluster.token: syntax error: expected four hexadecimal digits after '\u'`},
		{"[cluster]\ntoken = \"" + secret + "\\q\"\n", ":2: cluster.token: syntax error: invalid escape in a string"},
		{"[cluster]\ntoken = \"SUPER\" " + secret + "\n", ":2: cluster: syntax error: expected a top-level item to end with a newline, comment, or EOF (a string or duration must be quoted"},
		{"[[source]]\nlease = 5s\n", ":2: source[0]: syntax error: expected a top-level item to end with a newline, comment, or EOF (a string or duration must be quoted: lease = \"30s\")"},
		{"[[source]]\nsecrets = [\"a\" " + secret + "]\n", ":2: source[0].secrets: syntax error: expected a comma (',') or array terminator (']')"},
		{"[[source]]\nsecrets = [1234567890123456789012345678]\n", ":2: source[0].secrets: syntax error: number out of range for int64"},
		{"[[source]]\nsecrets = [1234567890123456789_]\n", ":2: source[0].secrets: syntax error: invalid integer: underscores must be surrounded by digits"},
		{"[[source]]\nsecrets = [1234567890123456789.]\n", ":2: source[0].secrets: syntax error: invalid float: '.' must be followed by one or more digits"},
		{"[[source]]\nsecrets = [1234567890123456789e]\n", ":2: source[0].secrets: syntax error: invalid float"},
		{"[cluster]\ntoken = 1234567890123456789-13-45T99:99:99Z\n", ":2: cluster.token: syntax error:"},
		{"whsec_" + secret + "+x\n", ":1: syntax error: expected '.' or '='"},
		// No input quoted: kept as the parser says it.
		{"[cluster]\ntoken = '" + secret + "\n", ":2: cluster.token: strings cannot contain newlines"},
		// Inside an inline array of tables: which element, when the line
		// holds one; of several on a line the scanner cannot tell.
		{"[admin]\ntokens = [{ name = \"a\", token = \"x\" }, { name = \"b\", token = '" + secret + " }]\n", ":2: admin.tokens.token: strings cannot contain newlines"},
		{"[admin]\ntokens = [{ name = \"a\", token = 12" + secret + " }, { name = \"b\", token = \"y\" }]\n", ":2: admin.tokens.token: syntax error"},
		{"[admin]\ntokens = [\n  { name = \"a\", token = '" + secret + " },\n  { name = \"b\", token = \"x\" },\n]\n", ":3: admin.tokens[0].token: strings cannot contain newlines"},
		{"[node]\nid = \"a\"\n[node]\n", ":3: node: set twice: a key, or a [table] other than an array of tables ([[source]]), may appear once"},
		{"[[source]]\nname = \"a\"\nname = \"b\"\n", ":3: source[0].name: set twice"},
		// A header left unclosed: its own line, no key (the parser is on
		// the next line, under the table before).
		{"[node]\nid = \"a\"\n\n[[source]\nname = \"x\"\n", ":4: syntax error: expected end of table array name delimiter ']'"},
		{"[node]\nid = \"a\"\n  [admin\nlisten = \"x\"\n", ":3: syntax error: expected '.' or ']' to end table name"},
		{"[node]\nid = \"a\"\n[[source]", ":3: syntax error: expected end of table array name delimiter ']'"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.toml", tt.src, 0o600)
			_, err := Load(path)
			if err == nil || !strings.HasPrefix(err.Error(), path+tt.want) {
				t.Fatalf("%q: %v\nwant prefix %s", tt.src, err, path+tt.want)
			}
			for _, leak := range []string{secret, "1234567890123456789"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("%q: error %q quotes the value", tt.src, err)
				}
			}
		})
	}
	// A message of a form not known (a newer parser's) is not quoted.
	if got := syntaxMessage(`something new about "` + secret + `"`); strings.Contains(got, secret) {
		t.Errorf("unknown message form: %q", got)
	}
}

// TestLoadShapes: values of the wrong TOML shape are errors naming the key
// and line, whatever the table syntax.
func TestLoadShapes(t *testing.T) {
	for _, tt := range []struct{ src, want string }{
		{"node = 5", `:1: node: want a table, got an integer`},
		{"[[node]]\nid = \"x\"", `:1: node: want a table, got an array of tables`},
		{"source = 5", `:1: source: incompatible types`},
		{"[node]\nid = \"n1\"\n\n[source.x]\nprovider = \"github\"\n", `:4: source: want an array of tables ([[source]], or [{...}]), got a table`},
		{"[admin]\nlisten = \"127.0.0.1:7071\"\ntokens = { name = \"x\" }\n", `:3: admin.tokens: want an array of tables ([[admin.tokens]], or [{...}]), got a table`},
		{"[cluster]\npeers = { a = \"b\" }\n", `:2: cluster.peers: incompatible types: TOML value has type map[string]any; destination has type slice`},
		{"[cluster]\npeers = \"node1=10.0.0.1:7070\"", `:2: cluster.peers: incompatible types: TOML value has type string`},
		{"[[source]]\nname = \"a\"\nhmac = 5\n", `:3: source[0].hmac: type mismatch`},
		{"[[admin.tokens]]\nname = \"a\"\ntoken = \"t\"\n[[admin.tokens]]\nname = \"b\"\ntoken_file = 5\n",
			`:6: admin.tokens[1].token_file: incompatible types`},
		{"[\"weird key\"]\na = 1\n", `:1: "weird key": unknown key`},
		{"[node]\nid = \"a\"\n[node]\nid = \"b\"\n", `:3: node: set twice`},
		{"[admin]\ntokens = [{ name = \"a\", token = \"t\" }]\n\n[[admin.tokens]]\nname = \"b\"\n",
			`:4: admin.tokens: [[admin.tokens]] cannot add to the admin.tokens set above (an inline list or a [admin.tokens] table): write every entry as a [[admin.tokens]] table, or all of them in one inline list`},
		{"[source]\nname = \"a\"\n[[source]]\nname = \"b\"\n", `:3: source: [[source]] cannot add to the source set above`},
		{"[node]\nid = \"a\"\n[[node]]\nid = \"b\"\n", `:3: node: [[node]] after node was set above: node is one table, written once as [node]`},
	} {
		path := writeFile(t, t.TempDir(), "c.toml", tt.src, 0o644)
		_, err := Load(path)
		if err == nil || !slices.ContainsFunc(strings.Split(err.Error(), "\n"), func(l string) bool { return strings.HasPrefix(l, path+tt.want) }) {
			t.Errorf("%q: %v\nwant a line starting %s", tt.src, err, path+tt.want)
		}
	}
	// The array-of-tables form of admin tokens is the inline form's equal.
	dir := fixtureDir(t)
	path := writeFile(t, dir, "c.toml", "[[admin.tokens]]\nname = \"ops\"\ntoken_file = \"admin.token\"\n", 0o644)
	c, err := Load(path)
	if err != nil || len(c.Admin.Tokens) != 1 || string(c.Admin.Tokens[0].Token) != adminToken {
		t.Errorf("[[admin.tokens]]: %v %+v", err, c)
	}
}

// TestRaftTimeouts: [cluster] heartbeat_timeout and election_timeout
// default to 1s, take a duration from 100ms to 1m, and name the key and the
// range otherwise; the election timeout is at least the heartbeat timeout.
func TestRaftTimeouts(t *testing.T) {
	for _, tt := range []struct {
		lines               string
		heartbeat, election time.Duration
		err                 string
	}{
		{"", time.Second, time.Second, ""},
		{"heartbeat_timeout = \"3s\"\nelection_timeout = \"5s\"", 3 * time.Second, 5 * time.Second, ""},
		{"heartbeat_timeout = \"100ms\"\nelection_timeout = \"1m\"", 100 * time.Millisecond, time.Minute, ""},
		{"heartbeat_timeout = \"50ms\"", 0, 0, "cluster.heartbeat_timeout: 50ms is out of range: want 100ms to 1m (default 1s)"},
		{"election_timeout = \"2m\"", 0, 0, "cluster.election_timeout: 2m is out of range: want 100ms to 1m (default 1s)"},
		{"election_timeout = \"-1s\"", 0, 0, "cluster.election_timeout: -1s is out of range"},
		// raft refuses an election timeout under the heartbeat timeout:
		// refused here, not at the node's next start.
		{"heartbeat_timeout = \"3s\"\nelection_timeout = \"3s\"", 3 * time.Second, 3 * time.Second, ""},
		{"heartbeat_timeout = \"3s\"", 0, 0, ":5: cluster.election_timeout: 1s (the default) is less than heartbeat_timeout 3s: raft would refuse to start"},
		{"heartbeat_timeout = \"3s\"\nelection_timeout = \"2s\"", 0, 0, ":6: cluster.election_timeout: 2s is less than heartbeat_timeout 3s"},
		// Set to the default's value in the file: not called the default.
		{"heartbeat_timeout = \"3s\"\nelection_timeout = \"1s\"", 0, 0, ":6: cluster.election_timeout: 1s is less than heartbeat_timeout 3s"},
		{"election_timeout = \"500ms\"", 0, 0, ":5: cluster.election_timeout: 500ms is less than heartbeat_timeout 1s"},
	} {
		t.Run(tt.lines, func(t *testing.T) {
			dir := t.TempDir()
			tok := writeFile(t, dir, "x.token", clusterToken, 0o600)
			path := writeFile(t, dir, "c.toml", fmt.Sprintf("[cluster]\nraft_listen = \"127.0.0.1:7070\"\npeers = [\"node1=127.0.0.1:7070\"]\ntoken_file = %q\n%s\n", tok, tt.lines), 0o600)
			c, err := Load(path)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := time.Duration(c.Cluster.HeartbeatTimeout); got != tt.heartbeat {
				t.Errorf("heartbeat %v, want %v", got, tt.heartbeat)
			}
			if got := time.Duration(c.Cluster.ElectionTimeout); got != tt.election {
				t.Errorf("election %v, want %v", got, tt.election)
			}
		})
	}
}

// TestParsePrefix: allow_ips and trusted_proxies entries, IPv4-mapped ones
// taken as the IPv4 they map (the intake compares a peer's address
// unmapped: a mapped entry would never match).
func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1":             "10.0.0.1/32",
		"10.1.2.3/8":           "10.0.0.0/8",
		"::1":                  "::1/128",
		"fd00::7/8":            "fd00::/8",
		"::ffff:127.0.0.2":     "127.0.0.2/32",
		"::ffff:127.0.0.0/120": "127.0.0.0/24",
		"::ffff:0:0/96":        "0.0.0.0/0",
		"::ffff:0:0/80":        "error",
		"fe80::1%eth0":         "error",
		"10.0.0.1/33":          "error",
		"host.example":         "error",
	} {
		p, err := parsePrefix(in)
		got := p.String()
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("parsePrefix(%q) = %s (%v), want %s", in, got, err, want)
		}
	}
}

// TestConfigWritableByOthers: a config file others may write is refused,
// whatever it holds; one its group may write is the operator's business.
func TestConfigWritableByOthers(t *testing.T) {
	const src = "[node]\nid = \"n1\"\n"
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o644, true}, {0o660, true}, {0o666, false}, {0o602, false}} {
		path := writeFile(t, t.TempDir(), "c.toml", src, tt.mode)
		_, err := Load(path)
		if tt.ok != (err == nil) {
			t.Errorf("mode %#o: %v, want ok %v", tt.mode, err, tt.ok)
			continue
		}
		if !tt.ok && (!errors.Is(err, ErrSecretFileMode) || !strings.Contains(err.Error(), "must not be writable by others") || !strings.Contains(err.Error(), "chmod o-w "+path)) {
			t.Errorf("mode %#o: %v", tt.mode, err)
		}
	}
}

// TestForwardTimeoutUnderLease: forward_timeout must be under lease; the
// error calls a value the default only when the file does not set it.
func TestForwardTimeoutUnderLease(t *testing.T) {
	const head = "[[source]]\nname = \"a\"\nprovider = \"github\"\nsecrets = [\"s\"]\nforward = \"http://127.0.0.1:9000/a\"\n"
	for _, tt := range []struct{ lines, want string }{
		{"lease = \"5s\"\n", "source[0].forward_timeout: 10s (the default) must be less than lease 5s"},
		{"lease = \"5s\"\nforward_timeout = \"10s\"\n", "source[0].forward_timeout: 10s must be less than lease 5s"},
		{"forward_timeout = \"30s\"\n", "source[0].forward_timeout: 30s must be less than lease 30s (the default)"},
		{"forward_timeout = \"30s\"\nlease = \"30s\"\n", "source[0].forward_timeout: 30s must be less than lease 30s:"},
	} {
		path := writeFile(t, t.TempDir(), "c.toml", head+tt.lines, 0o600)
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.lines, err, tt.want)
		}
	}
}

// TestLoadReportsEveryProblem: a value that does not decode (a duration,
// a size, a type) does not hide the file's other problems, and is reported
// once: its unset value is not judged again.
func TestLoadReportsEveryProblem(t *testing.T) {
	src := "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_0123456789abcdef0123456789abcdef\"]\n" +
		"forward = \"http://127.0.0.1:9000/\"\ntolerance = \"abc\"\nmode = \"bogus\"\nmax_attempts = -3\nretention = 5\n"
	path := writeFile(t, t.TempDir(), "c.toml", src, 0o600)
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		":6: source[0].tolerance: invalid duration",
		":7: source[0].mode: invalid mode",
		":8: source[0].max_attempts:",
		":9: source[0].retention:",
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, path+want) }) {
			t.Errorf("no problem %q in:\n%v", want, err)
		}
	}
	if len(lines) != 4 {
		t.Errorf("%d problems, want 4 (an undecoded value judged again?):\n%v", len(lines), err)
	}
}

// TestPermissionDeniedSaysWhoReads: a file this process may not read is
// reported with the user and group it runs as and the chgrp/chmod that
// lets it (the likeliest first failure under systemd: files written by
// root, read by the service user); other errors get no such hint. The
// tests run as root, which reads anything, so the error is made here.
func TestPermissionDeniedSaysWhoReads(t *testing.T) {
	denied := &fs.PathError{Op: "open", Path: "/etc/oncehook/orders.secret", Err: syscall.EACCES}
	got := errText(denied)
	for _, want := range []string{
		"open /etc/oncehook/orders.secret: permission denied",
		fmt.Sprintf("uid %d", os.Geteuid()),
		"chmod 0640 /etc/oncehook/orders.secret",
		"chgrp oncehook /etc/oncehook/orders.secret",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errText = %q, want it to contain %q", got, want)
		}
	}
	missing := &fs.PathError{Op: "open", Path: "/etc/oncehook/x", Err: syscall.ENOENT}
	if got := errText(missing); got != "open /etc/oncehook/x: no such file or directory" {
		t.Errorf("errText(missing) = %q", got)
	}
}
