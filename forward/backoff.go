package forward

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Backoff is the delay before the retry that follows failed attempt number
// attempt (1 for the first delivery). With b = min(lo * 2^(attempt-1), hi) it is
// b/2 + u*b/2 ("equal jitter"): never more than b, never less than half of it,
// so retries of many events spread out without any of them coming early by
// more than half. u is a uniform draw from [0, 1). lo <= 0 means
// DefaultBackoffMin; hi < lo means hi = lo.
func Backoff(attempt int, lo, hi time.Duration, u float64) time.Duration {
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	hi = max(hi, lo)
	b := lo
	for i := 1; i < attempt && b < hi; i++ {
		b *= 2
		if b <= 0 { // overflow: only when hi is near the largest Duration
			b = hi
		}
	}
	b = min(b, hi)
	u = min(max(u, 0), 1)
	half := b / 2
	j := min(time.Duration(u*float64(half)), half) // float rounding must not pass b
	return b - half + j
}

// retryAfter parses a Retry-After header, in seconds or as an HTTP-date
// (the wait until that time by this node's clock: the handler is local, so
// the two clocks agree), and clamps it to [lo, hi]. ok is false for junk
// and for a date not in the future, which says nothing about when to come
// back: the usual backoff applies, rather than lo on every retry.
func retryAfter(v string, now time.Time, lo, hi time.Duration) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		at, derr := http.ParseTime(v)
		if derr != nil || !at.After(now) {
			return 0, false
		}
		return min(max(at.Sub(now), lo), hi), true
	}
	if secs < 0 {
		return 0, false
	}
	if secs > int64(hi/time.Second)+1 {
		return hi, true // also keeps the multiplication below from overflowing
	}
	return min(max(time.Duration(secs)*time.Second, lo), hi), true
}
