//go:build failpoints

package failpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKnob(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		err  bool
	}{
		{"", 0, false},
		{"1s", time.Second, false},
		{"150ms", 150 * time.Millisecond, false},
		{"0s", 0, true},
		{"-1s", 0, true},
		{"soon", 0, true},
	} {
		got, err := knob(EnvBucketWidth, tc.v)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("knob(%q) = %s, %v; want %s, error %v", tc.v, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), EnvBucketWidth) {
			t.Errorf("knob(%q): the error %q does not name the variable", tc.v, err)
		}
	}
}

func TestBootIDFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, want string
		ok               bool
	}{
		{"unset", "", "", false},
		{"missing file", filepath.Join(dir, "none"), "", false},
		{"empty file", write("empty", " \n"), "", false},
		{"an id", write("id", "boot-2\n"), "boot-2", true},
	} {
		if got, ok := bootIDFrom(tc.path); got != tc.want || ok != tc.ok {
			t.Errorf("%s: bootIDFrom = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
