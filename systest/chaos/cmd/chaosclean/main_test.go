package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestNothingToClean: run twice, the second run finds nothing (the first
// removed whatever dead runs had left on this machine), says so and exits 0.
func TestNothingToClean(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(&out, &errOut); code != 0 {
		t.Fatalf("first run: exit %d: %s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(&out, &errOut); code != 0 || strings.TrimSpace(out.String()) != "nothing to clean" {
		t.Fatalf("second run: exit %d, %q, %q", code, out.String(), errOut.String())
	}
}
