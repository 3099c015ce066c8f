package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"oncehook/engine"
	"oncehook/forward"
)

// TestLeaseLengthsOfTheTargets: every lease carries the running config's
// lease of each source, as the engine takes them (sorted by source, each
// once, no more than it accepts); a target without one is left out.
func TestLeaseLengthsOfTheTargets(t *testing.T) {
	targets := map[string]forward.Target{
		"stripe": {Lease: 2 * time.Minute},
		"github": {Lease: 30 * time.Second},
		"old":    {},
	}
	got := leaseLengths(targets)
	want := []engine.LeaseLength{{Source: "github", For: int64(30 * time.Second)}, {Source: "stripe", For: int64(2 * time.Minute)}}
	if !slices.Equal(got, want) {
		t.Fatalf("lease lengths %v, want %v", got, want)
	}
	many := map[string]forward.Target{}
	for i := range engine.MaxQuotas + 5 {
		many[fmt.Sprintf("s%05d", i)] = forward.Target{Lease: time.Minute}
	}
	if got := leaseLengths(many); len(got) != engine.MaxQuotas || got[0].Source != "s00000" {
		t.Fatalf("%d sources: %d lengths starting %v, want the first %d", len(many), len(got), got[0], engine.MaxQuotas)
	}
}
