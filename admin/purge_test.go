package admin

import (
	"strings"
	"testing"
	"time"
)

// TestParseBefore: a purge's bound is an RFC 3339 time or a positive
// duration back from now, as replay's since is.
func TestParseBefore(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"2026-11-01T00:00:00Z", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), ""},
		{"2026-11-01T01:00:00+01:00", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), ""},
		{"720h", now.Add(-720 * time.Hour), ""},
		{"90m", now.Add(-90 * time.Minute), ""},
		{"0s", time.Time{}, "must be positive"},
		{"-1h", time.Time{}, "must be positive"},
		{"yesterday", time.Time{}, "RFC 3339 time or a duration"},
		{"", time.Time{}, "RFC 3339 time or a duration"},
	} {
		got, err := ParseBefore(tt.in, now)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %v, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
