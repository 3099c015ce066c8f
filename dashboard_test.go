package main

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"oncehook/admin"
	"oncehook/metrics"
)

// grafanaDashboard is the part of docs/grafana-dashboard.json that Grafana
// needs to import it and that this test reads.
type grafanaDashboard struct {
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	SchemaVersion int            `json:"schemaVersion"`
	Inputs        []grafanaInput `json:"__inputs"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaInput struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

var (
	dashMetric = regexp.MustCompile(`oncehook_[a-z0-9_]+`)
	// A selector's label matchers, and a by/without clause's labels.
	dashSelector = regexp.MustCompile(`(oncehook_[a-z0-9_]+)\{([^}]*)\}`)
	dashMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	dashBy       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	descName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels   = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// TestDashboardFile checks docs/grafana-dashboard.json: the fields Grafana
// needs to import it, a Prometheus data source input, panels that do not
// overlap, and that every metric and label its queries read is one the
// binary exports.
func TestDashboardFile(t *testing.T) {
	raw, err := os.ReadFile("docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 || len(d.Panels) == 0 {
		t.Fatalf("dashboard lacks title, uid, schemaVersion or panels: %q %q %d %d panels", d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	if len(d.UID) > 40 {
		t.Errorf("uid %q is longer than Grafana's 40 characters", d.UID)
	}
	// The data source is chosen on import (__inputs) or from a variable.
	hasInput := slices.ContainsFunc(d.Inputs, func(in grafanaInput) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	})
	hasVar := false
	var queries []string // templating queries, checked like targets
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasVar = true
		}
		if v.Type == "query" {
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: query: %v", v.Name, err)
			}
			queries = append(queries, q.Query)
		}
	}
	if !hasInput && !hasVar {
		t.Fatal("dashboard has neither a DS_PROMETHEUS input nor a datasource variable")
	}

	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	var exprs []string
	for i, p := range d.Panels {
		if p.ID == 0 || p.Type == "" || p.Title == "" || p.GridPos == nil {
			t.Fatalf("panel %d (%q) lacks id, type, title or gridPos", i, p.Title)
		}
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside the 24-column grid", p.Title, *g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Fatalf("panel %q overlaps %q at %d,%d", p.Title, other, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q does not read ${DS_PROMETHEUS}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || !dashMetric.MatchString(tg.Expr) {
				t.Errorf("panel %q: target %q has no refId or reads no oncehook metric", p.Title, tg.Expr)
			}
			exprs = append(exprs, tg.Expr)
		}
	}

	// What the binary exports: every oncehook collector a node registers,
	// with its labels (a labelled family only appears in a scrape once a
	// label value was observed, so the collectors' descriptions are the
	// whole list), and the families' types from a running node's registry.
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_dashboard", "obj_dashboard", 1)
	if a := tn.post("orders", body, tn.signed(body, "msg_dashboard")); a.Status/100 != 2 {
		t.Fatalf("post: %d %s", a.Status, a.Raw)
	}
	m := tn.n.metrics
	labels := map[string][]string{}
	for _, c := range append(m.Collectors(),
		metrics.NewRaftCollector(tn.n.cluster, version), admin.NewSourceCollector(tn.n.cluster, tn.n.configuredSourceNames),
		metrics.NewInFlightCollector(tn.n.deliveryInFlight, tn.n.configuredSourceNames),
	) {
		// Registering it again proves the node's registry already holds it.
		var already prometheus.AlreadyRegisteredError
		if err := m.Registry().Register(c); !errors.As(err, &already) {
			t.Fatalf("a collector is not registered on the node's registry (Register: %v)", err)
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for desc := range ch {
			s := desc.String()
			name := descName.FindStringSubmatch(s)[1]
			var ls []string
			if v := descLabels.FindStringSubmatch(s)[1]; v != "" {
				ls = strings.Split(v, ",")
			}
			labels[name] = ls
		}
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{} // family name to its type, as in # TYPE
	for _, f := range families {
		types[f.GetName()] = f.GetType().String()
	}

	used := map[string]bool{}
	for _, e := range append(exprs, queries...) {
		// Labels any query may group by: Prometheus' target labels, and le.
		allowed := map[string]bool{"instance": true, "job": true, "le": true}
		for _, name := range dashMetric.FindAllString(e, -1) {
			base := name
			if b, ok := strings.CutSuffix(name, "_bucket"); ok {
				if types[b] != "HISTOGRAM" {
					t.Errorf("%q reads %s, but %s is not a histogram the node exports", e, name, b)
				}
				base = b
			} else if b, ok := strings.CutSuffix(name, "_sum"); ok && types[b] == "HISTOGRAM" {
				base = b
			} else if b, ok := strings.CutSuffix(name, "_count"); ok && types[b] == "HISTOGRAM" {
				base = b
			}
			ls, ok := labels[base]
			if !ok {
				t.Errorf("%q reads %s, which the binary does not export", e, name)
				continue
			}
			used[base] = true
			for _, l := range ls {
				allowed[l] = true
			}
		}
		var usedLabels []string
		for _, sel := range dashSelector.FindAllStringSubmatch(e, -1) {
			for _, mm := range dashMatcher.FindAllStringSubmatch(sel[2], -1) {
				if l := mm[1]; !slices.Contains(labels[strings.TrimSuffix(sel[1], "_bucket")], l) && l != "instance" && l != "job" && l != "le" {
					t.Errorf("%q selects %s on %s, which has labels %v", e, l, sel[1], labels[strings.TrimSuffix(sel[1], "_bucket")])
				}
			}
		}
		for _, by := range dashBy.FindAllStringSubmatch(e, -1) {
			for l := range strings.SplitSeq(by[1], ",") {
				usedLabels = append(usedLabels, strings.TrimSpace(l))
			}
		}
		for _, l := range usedLabels {
			if l != "" && !allowed[l] {
				t.Errorf("%q groups by %s, a label none of its metrics has", e, l)
			}
		}
	}

	// The panels the operator's manual promises.
	for _, want := range []string{
		"oncehook_claims_total", "oncehook_requests_total", "oncehook_signature_failures_total",
		"oncehook_claim_duration_seconds", "oncehook_delivery_duration_seconds", "oncehook_deliveries_total",
		"oncehook_events", "oncehook_oldest_dead_seconds", "oncehook_replay_suspected_total",
		"oncehook_sync_conflicts_total", "oncehook_duplicate_body_mismatch_total",
		"oncehook_raft_is_leader", "oncehook_raft_has_leader", "oncehook_raft_commit_index",
		"oncehook_raft_applied_index", "oncehook_raft_last_contact_seconds", "oncehook_config_last_reload_successful",
	} {
		if !used[want] {
			t.Errorf("the dashboard has no panel reading %s", want)
		}
	}
	for _, q := range []string{"0.5", "0.99"} {
		for _, h := range []string{"oncehook_claim_duration_seconds_bucket", "oncehook_delivery_duration_seconds_bucket"} {
			if !slices.ContainsFunc(exprs, func(e string) bool {
				return strings.Contains(e, "histogram_quantile("+q+",") && strings.Contains(e, h)
			}) {
				t.Errorf("no histogram_quantile(%s, ...) over %s", q, h)
			}
		}
	}
}
