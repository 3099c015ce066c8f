package main

// The keyset package's wiring: its counters are this process's Prometheus
// collectors, and its key sets verify the intake's compiled sources.

import (
	"github.com/prometheus/client_golang/prometheus"

	"oncehook/intake"
	"oncehook/keyset"
)

var _ keyset.Sources = (*intake.Set)(nil)

// keysetMetrics is the key sets' view of the metrics (keyset.Metrics).
type keysetMetrics struct{ m *metrics }

var _ keyset.Metrics = keysetMetrics{}

func (k keysetMetrics) FetchFailure(source string)  { k.m.keysFetchFailure(source) }
func (k keysetMetrics) Active(source string, n int) { k.m.keysActive(source, n) }

// keysMetrics are the keys_url collectors.
type keysMetrics struct {
	fetchFailures *prometheus.CounterVec
	active        *prometheus.GaugeVec
}

// initKeysMetrics creates and registers the keys_url collectors; called by
// newMetrics.
func (m *metrics) initKeysMetrics() {
	m.keys = &keysMetrics{
		fetchFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "oncehook_keys_fetch_failures_total", Help: "Failed keys_url fetches (network, status, size, bad document), by source.",
		}, []string{"source"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "oncehook_keys_active", Help: "keys_url keys in force (past nbf, before exp), by source.",
		}, []string{"source"}),
	}
	m.reg.MustRegister(m.keys.fetchFailures, m.keys.active)
}

func (m *metrics) keysFetchFailure(source string) {
	if m == nil {
		return
	}
	m.keys.fetchFailures.WithLabelValues(source).Inc()
}

func (m *metrics) keysActive(source string, n int) {
	if m == nil {
		return
	}
	m.keys.active.WithLabelValues(source).Set(float64(n))
}
