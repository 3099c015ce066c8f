package admin

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestAuthLimiterBacksOff(t *testing.T) {
	clk := newFakeClock()
	l := newAuthLimiter(clk.Now)
	a, b := authKey("192.0.2.1:1234"), authKey("192.0.2.2:1234")

	for i := range authFreeFailures - 1 {
		if d := l.fail(a); d != 0 {
			t.Fatalf("failure %d: wait %v, want none yet", i+1, d)
		}
		if d := l.wait(a); d != 0 {
			t.Fatalf("after failure %d: wait %v", i+1, d)
		}
	}
	// From the fifth failure on: 1s, 2s, 4s, ... capped.
	want := authBackoffBase
	for i := 0; want < 2*authBackoffMax; i++ {
		exp := min(want, authBackoffMax)
		if d := l.fail(a); d != exp {
			t.Fatalf("failure %d: wait %v, want %v", authFreeFailures+i, d, exp)
		}
		if d := l.wait(a); d != exp {
			t.Fatalf("wait right after failure %d: %v, want %v", authFreeFailures+i, d, exp)
		}
		clk.Advance(exp - time.Millisecond)
		if d := l.wait(a); d != time.Millisecond {
			t.Fatalf("wait just before the end: %v", d)
		}
		clk.Advance(time.Millisecond)
		if d := l.wait(a); d != 0 {
			t.Fatalf("wait once the backoff passed: %v", d)
		}
		want *= 2
	}
	// Another client is not affected.
	if d := l.wait(b); d != 0 {
		t.Fatalf("other client waits %v", d)
	}
	// A success resets.
	l.success(a)
	for range authFreeFailures - 1 {
		if d := l.fail(a); d != 0 {
			t.Fatalf("after a success the count did not restart: wait %v", d)
		}
	}
	// Quiet for authForget: forgotten too.
	clk.Advance(authForget)
	if l.wait(a) != 0 || l.fail(a) != 0 {
		t.Fatal("failures not forgotten after a quiet period")
	}
}

func TestAuthLimiterTableIsBounded(t *testing.T) {
	clk := newFakeClock()
	l := newAuthLimiter(clk.Now)
	l.size = 100
	first := authKey("198.51.100.1:1")
	for range authFreeFailures {
		l.fail(first)
	}
	if l.wait(first) == 0 {
		t.Fatal("first client not backing off")
	}
	for i := range 3 * l.size {
		l.fail(authKey(fmt.Sprintf("10.%d.%d.1:1", i/256, i%256)))
		if n := l.len(); n > l.size {
			t.Fatalf("table holds %d clients, bound %d", n, l.size)
		}
	}
	// The client that failed longest ago was evicted.
	if d := l.wait(first); d != 0 {
		t.Fatalf("oldest client still in a full table (wait %v)", d)
	}
	// The most recent ones are kept.
	last := authKey(fmt.Sprintf("10.%d.%d.1:1", (3*l.size-1)/256, (3*l.size-1)%256))
	for range authFreeFailures - 1 {
		l.fail(last)
	}
	if d := l.wait(last); d == 0 {
		t.Fatal("most recent client was evicted")
	}
}

func TestAuthKey(t *testing.T) {
	for _, tt := range []struct{ addr, want string }{
		{"192.0.2.7:5555", "192.0.2.7/32"},
		{"[::ffff:192.0.2.7]:5555", "192.0.2.7/32"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"@", "invalid Prefix"},
	} {
		if got := authKey(tt.addr).String(); got != tt.want {
			t.Errorf("authKey(%q) = %s, want %s", tt.addr, got, tt.want)
		}
	}
	var zero netip.Prefix
	if authKey("not an address") != zero {
		t.Error("an unparsable address has a key of its own")
	}
}

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]int{time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 5 * time.Minute: 300} {
		if got := retryAfter(d); got != want {
			t.Errorf("retryAfter(%v) = %d, want %d", d, got, want)
		}
	}
}
