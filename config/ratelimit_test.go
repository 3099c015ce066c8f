package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestMaxRateConfig: max_rate takes an integer or a float, 0 (the default) is
// no limit, max_rate_burst defaults to ceil(max_rate), and negative or absurd
// values are refused.
func TestMaxRateConfig(t *testing.T) {
	tests := []struct {
		name, lines string
		rate        float64
		burst       int
		err         string
	}{
		{"default", "", 0, 0, ""},
		{"integer", "max_rate = 20", 20, 20, ""},
		{"float", "max_rate = 2.5", 2.5, 3, ""},
		{"below one", "max_rate = 0.2", 0.2, 1, ""},
		{"burst", "max_rate = 20\nmax_rate_burst = 5", 20, 5, ""},
		{"zero is unlimited", "max_rate = 0", 0, 0, ""},
		{"negative", "max_rate = -1", 0, 0, "max_rate: must be 0 (no limit) or a positive number"},
		{"nan", "max_rate = nan", 0, 0, "max_rate: must be 0"},
		{"too high", "max_rate = 1e9", 0, 0, "max_rate: must be 0"},
		{"negative burst", "max_rate = 5\nmax_rate_burst = -1", 0, 0, "max_rate_burst: must be from 1"},
		{"string", `max_rate = "20"`, 0, 0, "max_rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err != "" && !strings.Contains(tt.lines, "max_rate_burst") {
				// One mistake, one error: the burst the file never set is
				// not reported besides.
				text := "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nforward = \"http://127.0.0.1:9000/\"\nsecrets = [\"0123456789abcdef0123456789abcdef\"]\n" + tt.lines + "\n"
				if _, err := Load(writeFile(t, t.TempDir(), "oncehook.toml", text, 0o600)); strings.Contains(fmt.Sprint(err), "max_rate_burst") {
					t.Fatalf("Load: %v; max_rate_burst is not set", err)
				}
			}
			s := loadOneSource(t, tt.lines, tt.err)
			if s == nil {
				return
			}
			if s.MaxRate != tt.rate || s.MaxRateBurst != tt.burst {
				t.Fatalf("max_rate %v burst %d, want %v %d", s.MaxRate, s.MaxRateBurst, tt.rate, tt.burst)
			}
		})
	}
}

// TestMaxRateDiff: a changed max_rate or max_rate_burst is applied on reload.
func TestMaxRateDiff(t *testing.T) {
	old := mustLoadTestdata(t, "valid.toml")
	cfg := *old
	cfg.Sources = slices.Clone(old.Sources)
	cfg.Sources[0].MaxRate, cfg.Sources[0].MaxRateBurst = 20, 20
	cfg.Sources[1].MaxRateBurst = 3
	reload, restart := Diff(old, &cfg)
	name0, name1 := old.Sources[0].Name, old.Sources[1].Name
	want := []string{"source[" + name0 + "].max_rate", "source[" + name0 + "].max_rate_burst", "source[" + name1 + "].max_rate_burst"}
	if !slices.Equal(reload, want) || restart != nil {
		t.Errorf("Diff = %q, %q; want %q reloadable, nothing needing a restart", reload, restart, want)
	}
}
