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
		// A key of the operator's on a header the scheme does not sign:
		// the body decides, unless the operator said otherwise.
		{"standard keyed on its own header", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:X-Custom-Id\"]", "body", ""},
		{"standard keyed on it, guard off", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:X-Custom-Id\"]\nreplay_guard = \"off\"", "off", ""},
		{"standard keyed on the signed id and the body", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:Webhook-Id\", \"json:data.id\"]", "off", ""},
		// A signed timestamp is not the sender's to write: the guard stays
		// off, so that a later event with a body seen before (a heartbeat)
		// is not taken for a replay. keyPartChangesPerDelivery warns of
		// such a key for its own reason.
		{"standard keyed on the id and the timestamp", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:webhook-id\", \"header:Webhook-Timestamp\"]", "off", ""},
		{"slack keyed on its timestamp", `provider = "slack"` + "\nkey = [\"json:event_id\", \"header:X-Slack-Request-Timestamp\"]", "off", ""},
		{"hmac signs an id and a timestamp, keyed on both", `provider = "hmac"` + "\nkey = [\"header:X-Id\", \"header:X-Ts\"]\nhmac = { header = \"X-Sig\", id_header = \"X-Id\", timestamp_header = \"X-Ts\", template = \"{id}.{timestamp}.{body}\" }", "off", ""},
		{"standard keyed on its signature header", `provider = "standard"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:webhook-signature\"]", "body", ""},
		{"svix keyed on svix-id", `provider = "svix"` + "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = [\"header:svix-id\"]", "off", ""},
		{"stripe keyed on a header", `provider = "stripe"` + "\nkey = [\"header:X-Request-Id\"]", "body", ""},
		{"shopify keyed on its own header", `provider = "shopify"` + "\nkey = [\"header:X-Shopify-Webhook-Id\"]", "off", ""},
		{"hmac signs an id, keyed on another header", `provider = "hmac"` + "\nkey = [\"header:X-Other\"]\nhmac = { header = \"X-Sig\", id_header = \"X-Id\", template = \"{id}.{body}\" }", "body", ""},
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

// TestUnsignedKeyWarnings: a key of the operator's that reads a header the
// scheme does not sign is warned about, saying what the guard does; keys
// on signed data, providers whose guard is on anyway, and shopify's
// deliberate choice are not.
func TestUnsignedKeyWarnings(t *testing.T) {
	const whsec = "\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]"
	for _, tt := range []struct {
		name, source, want string
	}{
		{"standard default", `provider = "standard"` + whsec, ""},
		{"standard on its own header", `provider = "standard"` + whsec + "\nkey = [\"header:X-Custom-Id\"]",
			"source[0].key[0]: header:X-Custom-Id is not covered by standard's signature"},
		{"standard on it, guard off", `provider = "standard"` + whsec + "\nkey = [\"header:X-Custom-Id\"]\nreplay_guard = \"off\"",
			`with replay_guard = "off" such a replay is delivered again`},
		{"standard on the body", `provider = "standard"` + whsec + "\nkey = [\"json:data.id\"]", ""},
		{"standard on the id and the timestamp", `provider = "standard"` + whsec + "\nkey = [\"header:webhook-id\", \"header:webhook-timestamp\"]", ""},
		// The guard a per-delivery header turns on is said, beside the
		// warning that every resend would be a new event.
		{"standard on its signature header", `provider = "standard"` + whsec + "\nkey = [\"header:webhook-signature\"]",
			"source[0].key[0]: header:webhook-signature is not covered by standard's signature: a captured delivery resent with another value there verifies as a new event; the replay guard is on for this source"},
		{"github on its delivery header", `provider = "github"` + "\nkey = [\"header:X-GitHub-Delivery\"]", ""},
		{"shopify on its own header", `provider = "shopify"` + "\nkey = [\"header:X-Shopify-Webhook-Id\"]", ""},
		{"hmac signs no id, keyed on a header", `provider = "hmac"` + "\nkey = [\"header:X-Request-Id\"]\nhmac = { header = \"X-Sig\" }", ""},
		{"hmac signs no id, keyed on a header, guard off", `provider = "hmac"` + "\nkey = [\"header:X-Request-Id\"]\nreplay_guard = \"off\"\nhmac = { header = \"X-Sig\" }",
			`header:X-Request-Id is not covered by hmac's signature: a captured delivery resent with another value there verifies as a new event; hmac signs no event id, so only the replay guard catches such a replay, and with replay_guard = "off" it is delivered again`},
		{"hmac keyed on the body, guard off", `provider = "hmac"` + "\nkey = [\"json:id\"]\nreplay_guard = \"off\"\nhmac = { header = \"X-Sig\" }", ""},
		{"github on its delivery header, guard off", `provider = "github"` + "\nkey = [\"header:X-GitHub-Delivery\"]\nreplay_guard = \"off\"",
			`source[0].key[0]: header:X-GitHub-Delivery is not covered by github's signature: a captured delivery resent with another value there verifies as a new event; github signs no event id, so only the replay guard catches such a replay, and with replay_guard = "off" it is delivered again`},
		{"github by default, guard off", `provider = "github"` + "\nreplay_guard = \"off\"", "github signs no event id"},
		{"gitlab by default, guard off", `provider = "gitlab"` + "\nreplay_guard = \"off\"", "gitlab signs no event id"},
		{"linear by default, guard off", `provider = "linear"` + "\nreplay_guard = \"off\"", "linear signs no event id"},
		{"twilio by default, guard off", `provider = "twilio"` + "\nreplay_guard = \"off\"", "twilio signs no event id"},
		{"github on its own header, guard off", `provider = "github"` + "\nkey = [\"header:X-Custom\"]\nreplay_guard = \"off\"", "github signs no event id"},
		{"hmac signs an id, keyed on another", `provider = "hmac"` + "\nkey = [\"header:X-Other\"]\nhmac = { header = \"X-Sig\", id_header = \"X-Id\", template = \"{id}.{body}\" }",
			"source[0].key[0]: header:X-Other is not covered by hmac's signature"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.source, "")
			c := Default()
			c.Sources = []Source{*s}
			got := unsignedKeys(c)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Errorf("warnings %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("warnings %q, want one with %q", got, tt.want)
			}
		})
	}
}

// TestEmptyKeyList: key = [] is an empty list, not the provider's default;
// the error says how to get the default, and hmac's says it has none.
func TestEmptyKeyList(t *testing.T) {
	loadOneSource(t, "provider = \"standard\"\nsecrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\nkey = []",
		`source[0].key: empty: leave key out for standard's default (header:webhook-id), or name at least one part`)
	loadOneSource(t, "provider = \"hmac\"\nhmac = { header = \"X-Sig\" }\nkey = []", `source[0].key: required for provider "hmac"`)
}

// TestTypeIsNotABodyHash: type reads the event's type; a hash of the body
// would make every event its own type, which no filter can name.
func TestTypeIsNotABodyHash(t *testing.T) {
	loadOneSource(t, "type = \"body:sha256\"", `source[0].type: body:sha256 is a hash of the whole body, not an event type`)
	loadOneSource(t, "type = \"header:X-Type|body:sha256\"", `is a hash of the whole body`)
	if s := loadOneSource(t, "type = \"header:X-Type|json:type\"", ""); s.Type != "header:X-Type|json:type" {
		t.Fatalf("type = %q", s.Type)
	}
}

// TestTwilioBody: a twilio source takes form bodies unless it says
// "json"; the verifier options follow; another value, or the key on
// another provider, is refused.
func TestTwilioBody(t *testing.T) {
	for _, tt := range []struct {
		name, source, want, err string
	}{
		{"default", `provider = "twilio"`, "form", ""},
		{"json", `provider = "twilio"` + "\ntwilio_body = \"JSON\"", "json", ""},
		{"form", `provider = "twilio"` + "\ntwilio_body = \"form\"", "form", ""},
		{"other", `provider = "twilio"` + "\ntwilio_body = \"xml\"", "", `twilio_body: invalid twilio_body "xml"`},
		{"another provider", `provider = "github"` + "\ntwilio_body = \"json\"", "", "twilio_body: for twilio sources only"},
		{"another provider, none", `provider = "github"`, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.source, tt.err)
			if s == nil {
				return
			}
			if s.TwilioBody != tt.want {
				t.Fatalf("twilio_body = %q, want %q", s.TwilioBody, tt.want)
			}
			if got := s.VerifierOptions().TwilioJSON; got != (tt.want == "json") {
				t.Fatalf("verifier options TwilioJSON = %v for twilio_body %q", got, tt.want)
			}
		})
	}
}

// TestTwilioNamesDoNotBeginEachOther: two twilio sources whose names
// begin one another are refused (a callback signed for the longer one's
// URL verifies at the shorter one's); other providers' names may.
func TestTwilioNamesDoNotBeginEachOther(t *testing.T) {
	src := func(name, provider string) string {
		return "[[source]]\nname = \"" + name + "\"\nprovider = \"" + provider + "\"\nsecrets = [\"0123456789abcdef0123456789abcdef\"]\nforward = \"http://127.0.0.1:9000/\"\n"
	}
	for _, tt := range []struct {
		name, text, err string
	}{
		{"a prefix", src("twilio", "twilio") + src("twilio-sms", "twilio"), `source[0].name: twilio source "twilio" begins the name of twilio source "twilio-sms" (source[1])`},
		{"a prefix, listed after", src("twilio-events", "twilio") + src("twilio", "twilio"), `source[1].name: twilio source "twilio" begins the name of twilio source "twilio-events" (source[0])`},
		{"apart", src("twilio-sms", "twilio") + src("twilio-events", "twilio"), ""},
		{"one not twilio", src("hook", "github") + src("hook-twilio", "twilio") + src("tw", "twilio") + src("twx", "github"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeFile(t, t.TempDir(), "oncehook.toml", tt.text, 0o600))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Load: %v, want %q", err, tt.err)
			}
		})
	}
}
