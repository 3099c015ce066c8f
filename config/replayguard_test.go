package config

import (
	"strings"
	"testing"
)

// TestReplayGuardDefaults: the guard is on by default exactly for the schemes
// whose signature covers no event id, an explicit value wins, and anything
// but "body" or "off" is refused with the key's line.
func TestReplayGuardDefaults(t *testing.T) {
	tests := []struct {
		name, source, want, err string
	}{
		{"github", `provider = "github"`, "body", ""},
		{"gitlab", `provider = "gitlab"`, "body", ""},
		{"linear", `provider = "linear"`, "body", ""},
		{"twilio", `provider = "twilio"`, "body", ""},
		{"stripe", `provider = "stripe"`, "off", ""},
		{"shopify", `provider = "shopify"`, "off", ""},
		{"standard", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]", "off", ""},
		{"slack", `provider = "slack"`, "off", ""},
		{"hmac body only", `provider = "hmac"` + "\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\" }", "body", ""},
		{"hmac signs an id", `provider = "hmac"` + "\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\", id_header = \"X-Id\", template = \"{id}.{body}\" }", "off", ""},
		{"github off", `provider = "github"` + "\nreplay_guard = \"off\"", "off", ""},
		{"stripe on", `provider = "stripe"` + "\nreplay_guard = \"Body\"", "body", ""},
		{"invalid", `provider = "github"` + "\nreplay_guard = \"sometimes\"", "", `replay_guard: invalid replay_guard "sometimes"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.source, tt.err)
			if s == nil {
				return
			}
			if got := s.ReplayGuard; got != tt.want {
				t.Fatalf("replay_guard = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMaxConnsPerIP: the intake's per-address connection cap is a [node]
// key with a default in the hundreds; 0 and negative values are refused.
func TestMaxConnsPerIP(t *testing.T) {
	for _, tt := range []struct {
		line string
		want int
		err  string
	}{
		{"", DefaultMaxConnsPerIP, ""},
		{"max_conns_per_ip = 64", 64, ""},
		{"max_conns_per_ip = 0", 0, "node.max_conns_per_ip: must be 1..65536, got 0"},
		{"max_conns_per_ip = -1", 0, "node.max_conns_per_ip: must be 1..65536, got -1"},
	} {
		path := writeFile(t, t.TempDir(), "oncehook.toml", "[node]\n"+tt.line+"\n", 0o600)
		c, err := Load(path)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: Load: %v, want %q", tt.line, err, tt.err)
			}
		case err != nil:
			t.Errorf("%q: Load: %v", tt.line, err)
		case c.Node.MaxConnsPerIP != tt.want:
			t.Errorf("%q: max_conns_per_ip = %d, want %d", tt.line, c.Node.MaxConnsPerIP, tt.want)
		}
	}
	if DefaultMaxConnsPerIP < 100 || DefaultMaxConnsPerIP >= 1000 {
		t.Fatalf("default %d is not in the hundreds", DefaultMaxConnsPerIP)
	}
}
