//go:build failpoints

package failpoint

import (
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
