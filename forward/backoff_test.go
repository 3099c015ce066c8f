package forward

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const maxDur = time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		attempt int
		lo, hi  time.Duration
		u       float64
		want    time.Duration
	}{
		{1, time.Second, 10 * time.Minute, 0, 500 * time.Millisecond},
		{1, time.Second, 10 * time.Minute, 1, time.Second},
		{1, time.Second, 10 * time.Minute, 0.5, 750 * time.Millisecond},
		{0, time.Second, 10 * time.Minute, 1, time.Second}, // below 1 counts as 1
		{2, time.Second, 10 * time.Minute, 1, 2 * time.Second},
		{2, time.Second, 10 * time.Minute, 0.5, 1500 * time.Millisecond},
		{3, time.Second, 10 * time.Minute, 1, 4 * time.Second},
		{3, time.Second, 10 * time.Minute, 0, 2 * time.Second},
		{10, time.Second, 10 * time.Minute, 1, 512 * time.Second},
		{11, time.Second, 10 * time.Minute, 1, 10 * time.Minute}, // capped
		{11, time.Second, 10 * time.Minute, 0, 5 * time.Minute},
		{1000, time.Second, 10 * time.Minute, 1, 10 * time.Minute},
		{64, time.Nanosecond, maxDur, 1, maxDur}, // doubling overflows: cap
		{5, 0, 0, 1, DefaultBackoffMin},          // lo defaults; hi raised to lo
		{3, 2 * time.Second, time.Second, 1, 2 * time.Second},
		{1, time.Second, time.Minute, -3, 500 * time.Millisecond}, // u clamped
		{1, time.Second, time.Minute, 7, time.Second},
	} {
		if got := Backoff(tc.attempt, tc.lo, tc.hi, tc.u); got != tc.want {
			t.Errorf("Backoff(%d, %v, %v, %v) = %v, want %v", tc.attempt, tc.lo, tc.hi, tc.u, got, tc.want)
		}
	}
}

// With a seeded source, every draw stays within [b/2, b] and the draws
// actually spread over that range.
func TestBackoffJitterBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	lo, hi := 100*time.Millisecond, 30*time.Second
	for attempt := 1; attempt <= 12; attempt++ {
		b := min(lo<<(attempt-1), hi)
		least, most := b, time.Duration(0)
		for range 1000 {
			d := Backoff(attempt, lo, hi, r.Float64())
			if d < b/2 || d > b {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, b/2, b)
			}
			least, most = min(least, d), max(most, d)
		}
		if least > b/2+b/20 || most < b-b/20 {
			t.Errorf("attempt %d: draws only span [%v, %v] of [%v, %v]", attempt, least, most, b/2, b)
		}
	}
}

func TestRetryAfterParse(t *testing.T) {
	lo, hi := time.Second, time.Minute
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"5", 5 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0", time.Second, true},
		{"60", time.Minute, true},
		{"61", time.Minute, true},
		{"99999999999999999", time.Minute, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"", 0, false},
		// The HTTP-date forms, against now = 2015-10-21 07:28:00 UTC.
		{"Wed, 21 Oct 2015 07:28:30 GMT", 30 * time.Second, true},
		{"Wednesday, 21-Oct-15 07:28:30 GMT", 30 * time.Second, true},
		{"Wed Oct 21 07:28:30 2015", 30 * time.Second, true},
		{"Wed, 21 Oct 2015 07:28:00 GMT", 0, false}, // now, or past: the usual backoff
		{"Wed, 21 Oct 2015 07:00:00 GMT", 0, false},
		{"Thu, 22 Oct 2015 07:28:00 GMT", time.Minute, true}, // capped
		{"Wed, 21 Oct 2015 25:28:00 GMT", 0, false},
		{"tomorrow", 0, false},
	} {
		now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
		got, ok := retryAfter(tc.in, now, lo, hi)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzRetryAfter: any header value either is refused or gives a wait
// within [lo, hi]; none panics.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"5", " 120 ", "-1", "1e3", "99999999999999999999", "Wed, 21 Oct 2015 07:28:30 GMT",
		"Wednesday, 21-Oct-15 07:28:30 GMT", "Wed Oct 21 07:28:30 2015", "Sat, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(s)
	}
	now := time.Date(2015, 10, 21, 7, 28, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		lo, hi := time.Second, time.Hour
		d, ok := retryAfter(v, now, lo, hi)
		if ok && (d < lo || d > hi) {
			t.Fatalf("retryAfter(%q) = %v, outside [%v, %v]", v, d, lo, hi)
		}
		if !ok && d != 0 {
			t.Fatalf("retryAfter(%q) refused with %v", v, d)
		}
	})
}
