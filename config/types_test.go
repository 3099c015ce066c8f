package config

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		str  string
		ok   bool
	}{
		{"5m", 5 * time.Minute, "5m", true},
		{"720h", 720 * time.Hour, "720h", true},
		{"1h30m", 90 * time.Minute, "1h30m", true},
		{"1h0m30s", time.Hour + 30*time.Second, "1h0m30s", true},
		{"1.5s", 1500 * time.Millisecond, "1.5s", true},
		{"250ms", 250 * time.Millisecond, "250ms", true},
		{"0", 0, "0s", true},
		{"-1m", -time.Minute, "-1m", true},
		{"5 minutes", 0, "", false},
		{"300", 0, "", false},
		{"", 0, "", false},
		{"5d", 0, "", false},
		{"m", 0, "", false},
	} {
		var d Duration
		err := d.UnmarshalText([]byte(tt.in))
		if !tt.ok {
			if want := fmt.Sprintf("invalid duration %q (a number and a unit", tt.in); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("UnmarshalText(%q) = %v, want %q", tt.in, err, want)
			}
			continue
		}
		if err != nil || time.Duration(d) != tt.want || d.String() != tt.str {
			t.Errorf("UnmarshalText(%q) = %v, %v (%q); want %v (%q)", tt.in, time.Duration(d), err, d.String(), tt.want, tt.str)
		}
	}
	// Every value prints in a form that parses back, extremes included.
	for _, n := range []int64{0, 1, -1, 999, 1e9, 36e11, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		var d Duration
		if err := d.UnmarshalText([]byte(Duration(n).String())); err != nil || int64(d) != n {
			t.Errorf("round trip of %d via %q = %d, %v", n, Duration(n), int64(d), err)
		}
	}
}

func TestSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		str  string
		ok   bool
	}{
		{"1MiB", 1 << 20, "1MiB", true},
		{"512KiB", 512 << 10, "512KiB", true},
		{"1MB", 1_000_000, "1MB", true},
		{"1048576", 1 << 20, "1MiB", true},
		{"2 GiB", 2 << 30, "2GiB", true},
		{"1mib", 1 << 20, "1MiB", true},
		{"64MiB", 64 << 20, "64MiB", true},
		{"10kb", 10_000, "10KB", true},
		{"100B", 100, "100", true},
		{"1536", 1536, "1536", true},
		{"0", 0, "0", true},
		{" 1KiB ", 1024, "1KiB", true},
		{"", 0, "", false},
		{"1.5MiB", 0, "", false},
		{"-1", 0, "", false},
		{"+1", 0, "", false},
		{"1 parsec", 0, "", false},
		{"MiB", 0, "", false},
		{"1M", 0, "", false},
		{"1_000", 0, "", false},
		{"99999999999999999999", 0, "", false},
		{"9223372036854775807KiB", 0, "", false},
		{"9223372036854775807", math.MaxInt64, "9223372036854775807", true},
	} {
		var s Size
		err := s.UnmarshalText([]byte(tt.in))
		if !tt.ok {
			if want := fmt.Sprintf("invalid size %q", tt.in); err == nil || err.Error() != want {
				t.Errorf("UnmarshalText(%q) = %v, want %q", tt.in, err, want)
			}
			continue
		}
		if err != nil || int64(s) != tt.want || s.String() != tt.str {
			t.Errorf("UnmarshalText(%q) = %d, %v (%q); want %d (%q)", tt.in, int64(s), err, s.String(), tt.want, tt.str)
		}
	}
}

// FuzzSize: ParseSize never panics, never returns a negative size, and what
// String prints parses back to the same size.
func FuzzSize(f *testing.F) {
	for _, s := range []string{"1MiB", "512KiB", "1MB", "1048576", "2 GiB", "0", "-1", "1.5MiB", "9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSize(in)
		if err != nil {
			if s != 0 {
				t.Fatalf("ParseSize(%q) = %d with error", in, s)
			}
			return
		}
		if s < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", in, s)
		}
		text, _ := s.MarshalText()
		var back Size
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Fatalf("ParseSize(%q) = %d, printed %q, parsed back %d, %v", in, s, text, back, err)
		}
	})
}

// FuzzDuration: UnmarshalText never panics, its errors quote the input, and
// what String prints parses back to the same duration.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{"5m", "720h", "1h30m", "0", "1.5s", "5 minutes", "300", "-2562047h47m16.854775808s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var d Duration
		if err := d.UnmarshalText([]byte(in)); err != nil {
			if !strings.HasPrefix(err.Error(), "invalid duration ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if d.String() != time.Duration(d).String() && !strings.HasSuffix(time.Duration(d).String(), "0s") {
			t.Fatalf("String %q for %v", d.String(), time.Duration(d))
		}
		text, _ := d.MarshalText()
		var back Duration
		if err := back.UnmarshalText(text); err != nil || back != d {
			t.Fatalf("%q = %d, printed %q, parsed back %d, %v", in, int64(d), text, int64(back), err)
		}
	})
}

// secretForms returns the ways a secret could leak: as is, in hex, base64,
// and, for a whsec_ secret, the decoded key in those forms too.
func secretForms(secrets ...string) []string {
	var out []string
	add := func(b []byte) {
		out = append(out, string(b), hex.EncodeToString(b), base64.StdEncoding.EncodeToString(b))
		out = append(out, fmt.Sprint(b)) // [119 104 ...]
	}
	for _, s := range secrets {
		add([]byte(s))
		if k, ok := strings.CutPrefix(s, "whsec_"); ok {
			if raw, err := base64.StdEncoding.DecodeString(k); err == nil {
				add(raw)
			}
		}
	}
	return out
}

// TestSecretRedaction: no printed form of a Config (fmt verbs, JSON, slog)
// contains any secret, in any encoding.
func TestSecretRedaction(t *testing.T) {
	c := mustLoadTestdata(t, "valid.toml")
	forms := secretForms(stripeSecret, githubSecret, standardSecret, adminToken, clusterToken,
		"ci-inline-token-value", "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24=")

	var outs = map[string]string{}
	values := map[string]any{
		"config": c, "*config": *c, "cluster": *c.Cluster, "admin": c.Admin,
		"sources": c.Sources, "source": c.Sources[0], "hmac source": c.Sources[2],
		"secret": c.Sources[0].Secrets[0], "secrets": c.Sources[1].Secrets,
		"*cluster slice": []*Cluster{c.Cluster}, "*token slice": []*AdminToken{&c.Admin.Tokens[0]},
		"*source slice": []*Source{&c.Sources[1]}, "*config slice": []*Config{c},
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
			outs[name+" "+verb] = fmt.Sprintf(verb, v)
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json %s: %v", name, err)
		}
		outs[name+" json"] = string(j)
		var text, js bytes.Buffer
		slog.New(slog.NewTextHandler(&text, nil)).Info("x", "v", v)
		slog.New(slog.NewJSONHandler(&js, nil)).Info("x", "v", v)
		outs[name+" slog text"], outs[name+" slog json"] = text.String(), js.String()
	}
	s := c.Sources[0].Secrets[0]
	outs["String"], outs["GoString"] = s.String(), s.GoString()
	for name, out := range outs {
		for _, f := range forms {
			if strings.Contains(out, f) {
				t.Errorf("%s shows a secret (%q):\n%s", name, f, out)
			}
		}
	}
	if !strings.Contains(outs["secret %x"], "<redacted>") || !strings.Contains(outs["config json"], `"token":"\u003credacted\u003e"`) {
		t.Errorf("redaction marker missing: %s / %s", outs["secret %x"], outs["config json"])
	}

	// Errors name secrets by key and path, never by value.
	_, _, err := loadTestdata(t, "sources_invalid.toml")
	for _, f := range secretForms("whsec_!!!not-base64!!!", "world-readable-secret", stripeSecret) {
		if strings.Contains(err.Error(), f) {
			t.Errorf("error shows a secret (%q):\n%v", f, err)
		}
	}
}
