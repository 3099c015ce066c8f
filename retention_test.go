package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// retentionSources adds a source whose payloads are dropped a millisecond
// after completion.
const retentionSources = `
[[source]]
name = "brief"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/brief"
payload_retention = "1ms"
`

// TestPurgeThroughTheAdminAPI: POST /v1/purge deletes dead letters (a dry
// run only lists them), refuses in-flight states, requires a reason and an
// RFC 3339 before, and the leader logs who purged what and why.
func TestPurgeThroughTheAdminAPI(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(d delivery) (int, string) {
		if strings.HasPrefix(d.Key, "orders:dies") {
			return 500, "boom"
		}
		return 200, "ok"
	})
	tn := startTestNode(t, "", h.url)
	for i, id := range []string{"dies_1", "dies_2", "ok_1"} {
		body := orderBody("evt_"+id, "obj_"+id, int64(i))
		if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, a.Status, a.Raw)
		}
	}
	tn.waitState("orders:dies_1", engine.StateDead)
	tn.waitState("orders:dies_2", engine.StateDead)
	tn.waitState("orders:ok_1", engine.StateDone)

	resp, err := http.Get(tn.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`(?m)^oncehook_dead_oldest_age_seconds\{source="orders"\} (\S+)$`).FindStringSubmatch(string(metrics)); m == nil || m[1] == "0" {
		t.Errorf("/metrics: oncehook_dead_oldest_age_seconds of orders = %v, want an age", m)
	}
	if !regexp.MustCompile(`(?m)^oncehook_dead_oldest_age_seconds\{source="stripe"\} 0$`).Match(metrics) {
		t.Errorf("/metrics: oncehook_dead_oldest_age_seconds of stripe (no dead letter) is not 0")
	}

	before := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	for _, tt := range []struct {
		name string
		req  map[string]any
		want string
	}{
		{"pending is in flight", map[string]any{"state": "pending", "before": before, "reason": "x"}, "in flight"},
		{"processing is in flight", map[string]any{"state": "processing", "before": before, "reason": "x"}, "in flight"},
		{"no reason", map[string]any{"state": "dead", "before": before}, "reason is required"},
		{"bad before", map[string]any{"state": "dead", "before": "yesterday", "reason": "x"}, "RFC 3339"},
		{"unknown state", map[string]any{"state": "gone", "before": before, "reason": "x"}, "unknown state"},
	} {
		if a := tn.adminPost("/v1/purge", tt.req); a.Status != http.StatusBadRequest || !strings.Contains(a.Raw, tt.want) {
			t.Errorf("%s: %d %s, want 400 saying %q", tt.name, a.Status, a.Raw, tt.want)
		}
	}

	dry := tn.adminPost("/v1/purge", map[string]any{"state": "dead", "source": "orders", "before": before, "reason": "gdpr", "dry_run": true})
	if dry.Status != http.StatusOK || dry.Body["would_purge"] != 2.0 {
		t.Fatalf("dry run: %d %s", dry.Status, dry.Raw)
	}
	if _, err := tn.event("orders:dies_1"); err != nil {
		t.Fatalf("the dry run deleted: %v", err)
	}

	// The command line is a client of the same endpoint.
	var out, errOut bytes.Buffer
	err = run(ctxTimeout(t, 30*time.Second), []string{"purge", "-addr", tn.admin, "-token-file", filepath.Join(tn.dir, "admin.token"),
		"-state", "dead", "-source", "orders", "-before", before, "-reason", "gdpr request 42", "-dry-run"}, &out, &errOut)
	if err != nil || !strings.Contains(out.String(), `"would_purge": 2`) {
		t.Fatalf("oncehook purge -dry-run: %v %s %s", err, out.String(), errOut.String())
	}
	if err := run(ctxTimeout(t, 30*time.Second), []string{"purge", "-state", "dead"}, &out, &errOut); err == nil {
		t.Fatal("oncehook purge without -before and -reason succeeded")
	}

	a := tn.adminPost("/v1/purge", map[string]any{"state": "dead", "source": "orders", "before": before, "reason": "gdpr request 42"})
	if a.Status != http.StatusOK || a.Body["purged"] != 2.0 {
		t.Fatalf("purge: %d %s", a.Status, a.Raw)
	}
	for _, k := range []string{"orders:dies_1", "orders:dies_2"} {
		if _, err := tn.event(k); err == nil {
			t.Errorf("%s survived the purge", k)
		}
	}
	if ev, err := tn.event("orders:ok_1"); err != nil || ev.State != engine.StateDone {
		t.Errorf("a done event was purged with the dead: %+v %v", ev, err)
	}
	waitUntil(t, "the leader's audit line", func() bool {
		l := tn.logs()
		return strings.Contains(l, "msg=purge") && strings.Contains(l, "who=ops") &&
			strings.Contains(l, `reason="gdpr request 42"`) && strings.Contains(l, "count=2")
	})
	// A purged key is new again.
	body := orderBody("evt_dies_1", "obj_dies_1", 0)
	if a := tn.post("orders", body, tn.signed(body, "dies_1")); a.Status != http.StatusAccepted {
		t.Fatalf("re-post of a purged key: %d %s", a.Status, a.Raw)
	}

	// Which is why a purge of done events still within their retention
	// says so, in the dry run and in the purge: the provider may send them
	// again, and they would be delivered again. A dead letter's purge does
	// not (that is what purging dead letters is for).
	if strings.Contains(a.Raw, "within_retention") {
		t.Errorf("the purge of dead letters warns of retention: %s", a.Raw)
	}
	out.Reset()
	err = run(ctxTimeout(t, 30*time.Second), []string{"purge", "-addr", tn.admin, "-token-file", filepath.Join(tn.dir, "admin.token"),
		"-state", "done", "-source", "orders", "-before", before, "-reason", "cleanup", "-dry-run"}, &out, &errOut)
	if err != nil || !strings.Contains(out.String(), `"within_retention": 1`) || !strings.Contains(out.String(), "would be purged within their source's retention") {
		t.Fatalf("oncehook purge -state done -dry-run of an event within its retention: %v %s %s", err, out.String(), errOut.String())
	}
	done := tn.adminPost("/v1/purge", map[string]any{"state": "done", "source": "orders", "before": before, "reason": "cleanup"})
	if done.Status != http.StatusOK || done.Body["purged"] != 1.0 || done.Body["within_retention"] != 1.0 ||
		!strings.Contains(fmt.Sprint(done.Body["warning"]), "a resend after the purge is a new event, delivered again") {
		t.Fatalf("purge of a done event within its retention: %d %s", done.Status, done.Raw)
	}
}

// TestReplayOfADroppedPayloadIsAConflict: once a done event's payload is
// dropped after payload_retention, its key, state and audit stay, and a
// replay of it answers 409 naming the key.
func TestReplayOfADroppedPayloadIsAConflict(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, retentionSources)
	body := orderBody("evt_b", "obj_b", 1)
	if a := tn.post("brief", body, tn.signed(body, "b_1")); a.Status != http.StatusAccepted {
		t.Fatalf("post: %d %s", a.Status, a.Raw)
	}
	tn.waitState("brief:b_1", engine.StateDone)
	// The sweeper sends this every ExpireInterval; send it now.
	waitUntil(t, "payload dropped", func() bool {
		if _, err := tn.n.cluster.DropPayloads(ctxTimeout(t, 5*time.Second), 0, 0); err != nil {
			t.Fatal(err)
		}
		ev, err := tn.n.cluster.Get("brief:b_1", true)
		return err == nil && ev.Payload == nil
	})
	a := tn.adminPost("/v1/replay", map[string]any{"keys": []string{"brief:b_1"}, "reason": "again"})
	if a.Status != http.StatusConflict || !strings.Contains(a.Raw, "brief:b_1") || !strings.Contains(a.Raw, "payload_retention") {
		t.Fatalf("replay: %d %s, want 409 naming the key and payload_retention", a.Status, a.Raw)
	}
	if ev := tn.waitState("brief:b_1", engine.StateDone); len(h.deliveries("brief:b_1")) != 1 {
		t.Fatalf("after the refused replay: %+v, %d deliveries", ev, len(h.deliveries("brief:b_1")))
	}
}

// TestReloadExportsAnAddedSourcesCounters: a source added by a reload has its
// oncehook_dead_expired_total series at 0, as one configured at start has,
// so that an alert on its increase sees the first dead letter expire.
func TestReloadExportsAnAddedSourcesCounters(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	const want = `oncehook_dead_expired_total{source="added"} 0`
	if strings.Contains(tn.metricsText(), want) {
		t.Fatal("the source is exported before it is configured")
	}
	mustWrite(t, tn.cfgPath, testConfig(tn.dir, "http://127.0.0.1:1",
		"\n[[source]]\nname = \"added\"\nprovider = \"standard\"\nsecret_files = [\"orders.secret\"]\nforward = \"http://127.0.0.1:1/added\"\n"))
	tn.n.reload(tn.cfgPath)
	if m := tn.metricsText(); !strings.Contains(m, want) {
		t.Fatalf("after the reload the metrics lack %s\n%s", want, tn.logs())
	}
}
