package main

// The keyset package's wiring: its counters are this process's Prometheus
// collectors, and its key sets verify the intake's compiled sources.

import (
	"oncehook/intake"
	"oncehook/keyset"
	"oncehook/metrics"
)

var _ keyset.Sources = (*intake.Set)(nil)

var _ keyset.Metrics = metrics.Keys{}
