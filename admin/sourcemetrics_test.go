package admin

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/engine"
)

// TestBacklogOfAnUnconfiguredSource: events of a source this node does not
// configure (removed, renamed, or configured on another node only) wait
// like any backlog, so oncehook_backlog and the oldest pending age have a
// series for it, which the backlog alerts need; a configured source without
// events keeps its series at 0.
func TestBacklogOfAnUnconfiguredSource(t *testing.T) {
	store := newEngineStore(t)
	for _, k := range []string{"gone:a", "gone:b", "gone:c"} {
		if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: k, Source: "gone", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewSourceCollector(store, func() []string { return []string{"orders"} }))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" {
					if got[f.GetName()] == nil {
						got[f.GetName()] = map[string]float64{}
					}
					got[f.GetName()][l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if b := got["oncehook_backlog"]; len(b) != 2 || b["gone"] != 3 || b["orders"] != 0 {
		t.Errorf("oncehook_backlog = %v, want gone 3 and orders 0", b)
	}
	if a := got["oncehook_oldest_pending_age_seconds"]; len(a) != 2 {
		t.Errorf("oldest pending age series %v, want one per source", a)
	}
}
