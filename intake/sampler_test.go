package intake

import (
	"testing"
	"time"
)

// TestSampler: a line a second gets through, with the number held back
// since the last one; a clock that steps back lets the next one through.
func TestSampler(t *testing.T) {
	var s sampler
	t0 := time.Unix(1_800_000_000, 0)
	if n, ok := s.allow(t0); !ok || n != 0 {
		t.Fatalf("first: %d %v", n, ok)
	}
	for i := 1; i < 10; i++ {
		if _, ok := s.allow(t0.Add(time.Duration(i) * 100 * time.Millisecond)); ok {
			t.Fatalf("line %d within the second got through", i)
		}
	}
	if n, ok := s.allow(t0.Add(time.Second)); !ok || n != 9 {
		t.Fatalf("after a second: %d held, %v; want 9, true", n, ok)
	}
	if _, ok := s.allow(t0); !ok {
		t.Fatal("a clock stepped back held the line")
	}
}
