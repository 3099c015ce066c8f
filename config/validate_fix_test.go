package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScrub: a secret quoted in an error is redacted; a value too short to
// be one is not, since it is then likely a word of the message itself.
func TestScrub(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msg     string
		secrets []Secret
		want    string
	}{
		{"quoted secret", "bad key whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw here", []Secret{Secret(standardSecret)}, "bad key <redacted> here"},
		{"8 bytes", "bad key abcdefgh here", []Secret{Secret("abcdefgh")}, "bad key <redacted> here"},
		{"the prefix as the secret", "want whsec_ followed by base64", []Secret{Secret("whsec_")}, "want whsec_ followed by base64"},
		{"a word as the secret", "secret #1 is empty", []Secret{Secret("empty")}, "secret #1 is empty"},
		{"several", "x 0123456789 y whsec_", []Secret{Secret("whsec_"), Secret("0123456789")}, "x <redacted> y whsec_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scrub(tc.msg, tc.secrets); got != tc.want {
				t.Errorf("scrub(%q) = %q, want %q", tc.msg, got, tc.want)
			}
		})
	}
}

// TestUnusableSecretMessage: validate's message for a malformed secret reads
// as the provider wrote it, and still names no real secret.
func TestUnusableSecretMessage(t *testing.T) {
	for _, tc := range []struct {
		secret, want string
	}{
		{"whsec_", "whsec_ followed by base64"},
		{"whsec_not base64 but a long secret!", "whsec_ followed by base64"},
	} {
		t.Run(tc.secret, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.toml")
			src := "[[source]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [" + `"` + tc.secret + `"` + "]\nforward = \"http://127.0.0.1:9000/\"\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), "source[0].secrets[0]: unusable secret: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant the unusable secret, with %q", err, tc.want)
			}
			if len(tc.secret) >= 8 && strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error quotes the secret: %v", err)
			}
		})
	}
}

// TestRetentionNotPositiveReportedOnce: a retention that is not positive is
// reported at retention only; payload_retention, unset (or 0, its default),
// is derived from it and is not reported too. Set, it is still checked.
func TestRetentionNotPositiveReportedOnce(t *testing.T) {
	for _, tc := range []struct {
		name, lines string
		want        []string
	}{
		{"zero", `retention = "0s"`, []string{"source[0].retention: must be positive, got 0s"}},
		{"negative", `retention = "-1h"`, []string{"source[0].retention: must be positive, got -1h"}},
		{"payload 0 is its default", "retention = \"0s\"\npayload_retention = \"0s\"", []string{"source[0].retention: must be positive, got 0s"}},
		{"payload set too", "retention = \"0s\"\npayload_retention = \"-5m\"", []string{
			"source[0].retention: must be positive, got 0s",
			"source[0].payload_retention: must be positive, got -5m",
		}},
		{"payload longer", "retention = \"0s\"\npayload_retention = \"1h\"", []string{
			"source[0].retention: must be positive, got 0s",
			"source[0].payload_retention: 1h is longer than retention 0s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.toml")
			src := "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"0123456789abcdef0123456789abcdef\"]\nforward = \"http://127.0.0.1:9000/\"\n" + tc.lines + "\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("%d problems, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d: %q, want %q", i, got[i], w)
				}
			}
		})
	}
}

// TestKeysRefreshHasAFloor: a keys_refresh under MinKeysRefresh (a typo of
// "5m" as "5ms") would fetch the sender's keys endpoint hundreds of times a
// second; it is refused, naming the key and line. The floor itself passes.
func TestKeysRefreshHasAFloor(t *testing.T) {
	for _, tc := range []struct{ refresh, want string }{
		{"5ms", `:7: source[0].keys_refresh: 5ms is under the minimum of 10s`},
		{"9s", `:7: source[0].keys_refresh: 9s is under the minimum of 10s`},
		{"10s", ""},
		{"5m", ""},
	} {
		t.Run(tc.refresh, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.toml")
			src := "[[source]]\nname = \"s\"\nprovider = \"standard\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nforward = \"http://127.0.0.1:9000/\"\n" +
				"keys_url = \"https://keys.example.com/keys.json\"\nkeys_refresh = \"" + tc.refresh + "\"\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Load: %v, want %q", err, tc.want)
			}
		})
	}
}
