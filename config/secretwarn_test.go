package config

import (
	"strings"
	"testing"
)

func TestSecretWarnings(t *testing.T) {
	const (
		good  = "0123456789abcdef0123456789abcdef"                  // 32 bytes
		whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"            // 24 bytes decoded
		whpk  = "whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=" // an ed25519 public key
	)
	src := func(name, provider string, secrets ...string) Source {
		s := Source{Name: name, Provider: provider}
		for _, sec := range secrets {
			s.Secrets = append(s.Secrets, Secret(sec))
		}
		return s
	}
	for _, tt := range []struct {
		name    string
		sources []Source
		want    []string // prefixes, in order
	}{
		{"provider secrets", []Source{src("a", "stripe", good), src("b", "standard", whsec), src("c", "standard", whpk)}, nil},
		{"a word", []Source{src("a", "github", "secret")},
			[]string{"source[0].secrets[0]: the key is 6 bytes"}},
		{"a short whsec counts its decoded bytes", []Source{src("a", "svix", "whsec_c2hvcnQ=")},
			[]string{"source[0].secrets[0]: the key is 5 bytes"}},
		{"15 and 16 bytes", []Source{src("a", "slack", good[:15], good[:16])},
			[]string{"source[0].secrets[0]: the key is 15 bytes"}},
		{"listed twice", []Source{src("a", "stripe", good, good)},
			[]string{"source[0].secrets[1]: the same secret is listed twice"}},
		{"shared by two sources", []Source{src("a", "github", good), src("b", "hmac", "x"+good[1:]), src("c", "shopify", good)},
			[]string{`source[2].secrets[0]: the same secret as source "a"`}},
		// whsec_ and plain base64 decode to the same key.
		{"same key written two ways", []Source{src("a", "standard", whsec), src("b", "standard", strings.TrimPrefix(whsec, "whsec_"))},
			[]string{`source[1].secrets[0]: the same secret as source "a"`}},
		{"two sources, one public key", []Source{src("a", "standard", whpk), src("b", "standard", whpk)}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Sources = tt.sources
			var got []string
			for _, w := range c.Warnings() {
				if strings.Contains(w, ".secrets[") || strings.Contains(w, ".secret_files[") {
					got = append(got, w)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("warning %q, want it to start %q", got[i], w)
				}
			}
		})
	}
}

// TestSecretWarningNamesTheFile checks a warning about a secret read from a
// file names the secret_files entry, the key the operator edits.
func TestSecretWarningNamesTheFile(t *testing.T) {
	c := Default()
	c.Sources = []Source{{Name: "a", Provider: "github", SecretFiles: []string{"/etc/oncehook/a.secret"}}}
	c.Sources[0].Secrets = append(c.Sources[0].Secrets, Secret("hunter2"))
	w := weakSecrets(c)
	if len(w) != 1 || !strings.HasPrefix(w[0], "source[0].secret_files[0]: the key is 7 bytes") {
		t.Fatalf("warnings %q", w)
	}
	if strings.Contains(w[0], "hunter2") {
		t.Errorf("the warning quotes the secret: %q", w[0])
	}
}
