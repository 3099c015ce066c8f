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
		// Outside what unix nanoseconds hold, a time wraps: 1026 became 2196
		// and purged every event, 2300 became 1715 and purged none.
		{"1026-12-03T00:00:00Z", time.Time{}, "out of range: a time between 1970 and 2262"},
		{"1677-12-31T23:59:59Z", time.Time{}, "out of range"},
		{"1969-12-31T23:59:59Z", time.Time{}, "out of range"},
		{"2300-01-01T00:00:00Z", time.Time{}, "out of range"},
		{"9999-12-31T23:59:59Z", time.Time{}, "out of range"},
		// Ahead of the node's clock: every event of the state, likely a typo.
		{"2062-12-02T00:00:00Z", time.Time{}, "ahead of this node's clock"},
		{"2026-12-02T12:00:30Z", time.Date(2026, 12, 2, 12, 0, 30, 0, time.UTC), ""}, // within the skew allowed
		{"9999999h", time.Time{}, "not a duration this node can hold"},
		{"2562047h", time.Unix(0, 0), ""}, // back past 1970: older than any event
		{"1970-01-01T00:00:00Z", time.Unix(0, 0), ""},
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

// TestParseSince: a replay's since takes what a purge's before takes, and
// never wraps around; a time ahead of the node's clock is refused like a
// purge's (it would select nothing: a mistyped year, most likely), while
// the client's check leaves that to the node.
func TestParseSince(t *testing.T) {
	ahead := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
	if err := CheckSince(ahead); err != nil {
		t.Errorf("the client's check refused %s, a time for the node's clock to judge: %v", ahead, err)
	}
	for _, tt := range []struct {
		in  string
		err string
	}{
		{"24h", ""},
		{"2026-11-01T00:00:00Z", ""},
		{time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339), ""}, // within the skew allowed
		{"2099-01-01T00:00:00Z", "ahead of this node's clock"},
		{ahead, "ahead of this node's clock"},
		{"-5h", "must be positive"},
		{"0s", "must be positive"},
		{"3026-12-03T00:00:00Z", "out of range"},
		{"1500-01-01T00:00:00Z", "out of range"},
		{"9999999h", "not a duration this node can hold"},
		{"soon", "RFC 3339 time or a duration"},
	} {
		got, err := ParseSince(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: %d, %v; want an error containing %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got < 0 {
			t.Errorf("%q: %d, %v; want a time after 1970", tt.in, got, err)
		}
	}
}

// TestCheckBefore: the client's check of a purge's bound refuses what the
// node would, except a time ahead of the client's clock, which the node
// judges by its own.
func TestCheckBefore(t *testing.T) {
	for _, tt := range []struct {
		in  string
		err string
	}{
		{"720h", ""},
		{"2026-11-01T00:00:00Z", ""},
		{time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339), ""}, // the node's clock decides
		{"1026-12-03T00:00:00Z", "out of range"},
		{"-1h", "must be positive"},
		{"9999999h", "not a duration this node can hold"},
		{"yesterday", "RFC 3339 time or a duration"},
	} {
		err := CheckBefore(tt.in)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("CheckBefore(%q) = %v, want %q", tt.in, err, tt.err)
		}
	}
}
