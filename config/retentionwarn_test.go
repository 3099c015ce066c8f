package config

import (
	"slices"
	"strings"
	"testing"

	"oncehook/providers"
)

// sourceWarnings loads a config of one source "s" made of lines (a provider
// line included) and returns its warnings about sources.
func sourceWarnings(t *testing.T, lines string) []string {
	t.Helper()
	if !strings.Contains(lines, "secrets") {
		lines += "\nsecrets = [\"" + standardSecret + "\"]"
	}
	text := "[[source]]\nname = \"s\"\nforward = \"http://127.0.0.1:9000/\"\n" + lines + "\n"
	c, err := Load(writeFile(t, t.TempDir(), "oncehook.toml", text, 0o600))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	var w []string
	for _, line := range c.Warnings() {
		if strings.HasPrefix(line, "source[") {
			w = append(w, line)
		}
	}
	return w
}

// TestNoRetentionWarningOnDefaults: every provider's defaults pass the
// retention and key checks.
func TestNoRetentionWarningOnDefaults(t *testing.T) {
	for _, name := range providers.Names() {
		lines := "provider = \"" + name + "\""
		if name == "hmac" {
			lines += "\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\", timestamp_header = \"X-Ts\", template = \"{timestamp}.{body}\" }"
		}
		w := sourceWarnings(t, lines)
		if name == "shopify" && len(w) == 1 && strings.HasPrefix(w[0], "source[0].replay_guard: ") {
			continue // the guard it lacks by default (TestShopifyGuardWarning)
		}
		if len(w) != 0 {
			t.Errorf("%s with its defaults: %q", name, w)
		}
	}
}

// TestRetentionWarnings: one line per problem, naming the key and the
// numbers; a config that only warns still loads.
func TestRetentionWarnings(t *testing.T) {
	tests := []struct {
		name  string
		lines string
		want  []string // substrings, one per warning, in order
	}{
		{"retention below the window", "provider = \"stripe\"\nretention = \"24h\"",
			[]string{"source[0].retention: 24h is shorter than stripe's documented retry window of 72h: a resend after the key expired is claimed and delivered again; set at least 84h"}},
		{"retention at the window", "provider = \"shopify\"\nretention = \"48h\"\nreplay_guard = \"off\"", nil},
		{"retries outlive the key", "provider = \"twilio\"\nretention = \"5h\"\nmax_attempts = 10\nbackoff_max = \"1h\"",
			[]string{"source[0].max_attempts: max_attempts 10 waits up to backoff_max 1h before each of 9 retries, beyond retention 5h: an event still retrying is kept past its retention (an unfinished key never expires)"}},
		// Ten attempts wait before nine retries: nine hours.
		{"retries just fit", "provider = \"twilio\"\nretention = \"9h\"\nmax_attempts = 10\nbackoff_max = \"1h\"", nil},
		{"one attempt never waits", "provider = \"twilio\"\nretention = \"100h\"\nmax_attempts = 1\nbackoff_max = \"200h\"", nil},
		{"signature header", "provider = \"stripe\"\nkey = [\"header:Stripe-Signature\"]",
			[]string{"source[0].key[0]: header:Stripe-Signature is a signature, timestamp or token header",
				"source[0].key[0]: header:Stripe-Signature is not covered by stripe's signature: a captured delivery resent with another value there verifies as a new event; the replay guard is on for this source"}},
		{"any case", "provider = \"github\"\nkey = [\"header:x-hub-signature-256\"]",
			[]string{"source[0].key[0]: header:x-hub-signature-256"}},
		{"an alternative", "provider = \"standard\"\nkey = [\"json:id\", \"header:webhook-id|header:webhook-timestamp\"]",
			[]string{"source[0].key[1]: header:webhook-timestamp"}},
		{"slack timestamp", "provider = \"slack\"\nkey = [\"header:X-Slack-Request-Timestamp\"]",
			[]string{"source[0].key[0]: header:X-Slack-Request-Timestamp is a signature, timestamp or token header: its value changes on every delivery (or is the secret), so every resend would be a new event; key on the event's id; the replay guard is off for this source, so nothing else catches such a resend"}},
		{"hmac's own headers", "provider = \"hmac\"\nkey = [\"header:X-Sig\", \"header:x-ts\"]\nhmac = { header = \"X-Sig\", timestamp_header = \"X-Ts\", template = \"{timestamp}.{body}\" }",
			[]string{"source[0].key[0]: header:X-Sig", "source[0].key[1]: header:x-ts"}},
		{"the delivery id", "provider = \"github\"\nkey = [\"header:X-GitHub-Delivery\"]", nil},
		{"hmac retention under twice its tolerance", "provider = \"hmac\"\nkey = [\"header:X-Id\"]\nretention = \"1m\"\nmax_attempts = 1\ntolerance = \"5m\"\nhmac = { header = \"X-Sig\", timestamp_header = \"X-Ts\", template = \"{timestamp}.{body}\" }",
			[]string{"source[0].retention: 1m is shorter than twice tolerance 5m: a delivery still inside its signed time's tolerance after its key expired is claimed and delivered again; set at least 10m"}},
		{"hmac without a signed time", "provider = \"hmac\"\nkey = [\"header:X-Id\"]\nretention = \"1m\"\nmax_attempts = 1\nhmac = { header = \"X-Sig\", template = \"{body}\" }", nil},
		{"all three", "provider = \"stripe\"\nretention = \"1h\"\nkey = [\"header:Stripe-Signature\"]",
			[]string{"source[0].retention: 1h is shorter", "source[0].max_attempts: max_attempts 8 waits up to backoff_max 10m before each of 7 retries, beyond retention 1h", "source[0].key[0]: header:Stripe-Signature", "the replay guard is on"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sourceWarnings(t, tt.lines)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.Contains(got[i], want) {
					t.Errorf("warning %d %q, want it to contain %q", i, got[i], want)
				}
				if strings.Contains(got[i], "\n") {
					t.Errorf("warning %d spans lines: %q", i, got[i])
				}
			}
			if slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, standardSecret) }) {
				t.Error("a warning shows the secret")
			}
		})
	}
}

// TestShopifyGuardWarning: a shopify source left with its default replay
// guard (off) is told what a captured delivery can do; one whose file sets
// replay_guard, either way, is not.
func TestShopifyGuardWarning(t *testing.T) {
	for _, tt := range []struct {
		lines string
		warn  bool
	}{
		{"provider = \"shopify\"", true},
		{"provider = \"shopify\"\nkey = [\"header:X-Shopify-Event-Id\"]", true},
		{"provider = \"shopify\"\nreplay_guard = \"off\"", false},
		{"provider = \"shopify\"\nreplay_guard = \"body\"", false},
		{"provider = \"github\"", false},
		{"provider = \"stripe\"", false},
	} {
		w := sourceWarnings(t, tt.lines)
		got := len(w) == 1 && strings.HasPrefix(w[0], "source[0].replay_guard: ") &&
			strings.Contains(w[0], "a captured delivery resent with a new value there is a new event")
		if got != tt.warn || (!tt.warn && len(w) != 0) {
			t.Errorf("%q: warnings %q, want the guard warning: %v", tt.lines, w, tt.warn)
		}
	}
}

// TestIneffectiveKeyWarnings: a key the file sets that does nothing for its
// source is warned about; the same key where it acts is not.
func TestIneffectiveKeyWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, lines, want string
	}{
		{"trusted_proxies off twilio", "provider = \"standard\"\ntrusted_proxies = [\"10.0.0.0/8\"]", "source[0].trusted_proxies: read for twilio sources only"},
		{"burst without a rate", "provider = \"standard\"\nmax_rate_burst = 5", "source[0].max_rate_burst: has no effect without max_rate"},
		{"burst with a rate", "provider = \"standard\"\nmax_rate = 2\nmax_rate_burst = 5", ""},
		{"ack_status on sync", "provider = \"standard\"\nmode = \"sync\"\nack_status = 200", "source[0].ack_status: a sync source answers with its handler's status"},
		{"ack_status on async", "provider = \"standard\"\nack_status = 200", ""},
		{"sync by default ack", "provider = \"standard\"\nmode = \"sync\"", ""},
		{"defaults written out", "provider = \"standard\"\nmax_rate_burst = 0\ntrusted_proxies = []", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sourceWarnings(t, tc.lines)
			switch {
			case tc.want == "" && len(w) != 0:
				t.Fatalf("warnings %q, want none", w)
			case tc.want != "" && (len(w) != 1 || !strings.HasPrefix(w[0], tc.want)):
				t.Fatalf("warnings %q, want one starting %q", w, tc.want)
			}
		})
	}
}
