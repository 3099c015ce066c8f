package main

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/config"
	"oncehook/engine"
)

const orderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["id", "type", "data"],
  "properties": {
    "id": {"type": "string", "pattern": "^evt_"},
    "type": {"enum": ["order.created", "order.paid"]},
    "data": {
      "type": "object",
      "required": ["amount"],
      "properties": {
        "amount": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "format": "email"}
      }
    }
  }
}`

const schemaSourceTOML = `
[[source]]
name = "typed"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/typed"
schema_file = "typed.schema.json"
`

func TestSchemaAtIntake(t *testing.T) {
	h := newHandler(t)
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "typed.schema.json"), orderSchema)
	tn := startNodeWithSources(t, dir, h.url, schemaSourceTOML)

	good := []byte(`{"id":"evt_1","type":"order.paid","data":{"amount":5}}`)
	if a := tn.post("typed", good, tn.signed(good, "msg_good")); a.Status != http.StatusAccepted {
		t.Fatalf("valid body: %d %s", a.Status, a.Raw)
	}
	rejected := []struct{ id, body, want string }{
		{"msg_s1", `{"id":"evt_2","type":"order.paid","data":{"amount":"5"}}`, "schema: /data/amount: got string, want integer"},
		{"msg_s2", `{"id":"evt_3","type":"order.paid"}`, "schema: /: missing property 'data'"},
		{"msg_s3", `not json at all`, "body is not valid JSON"},
	}
	for _, r := range rejected {
		a := tn.post("typed", []byte(r.body), tn.signed([]byte(r.body), r.id))
		if a.Status != http.StatusBadRequest || a.Body["status"] != "error" || a.Body["error"] != r.want {
			t.Errorf("%s: %d %s, want 400 with %q", r.body, a.Status, a.Raw, r.want)
		}
	}
	// A bad signature is still 401, before the schema is looked at.
	bad := []byte(`{"id":"evt_4"}`)
	if a := tn.post("typed", bad, signStandard(t, "whsec_"+strings.Repeat("QUFB", 8), bad, "msg_s4", time.Now())); a.Status != http.StatusUnauthorized {
		t.Errorf("bad signature and bad body: %d, want 401", a.Status)
	}
	// Sources without a schema are unchanged: a body this schema refuses
	// (no "type", no "data.amount") is accepted there.
	plain := orderBody("evt_plain", "obj_plain", 1)
	if a := tn.post("orders", plain, tn.signed(plain, "msg_plain")); a.Status != http.StatusAccepted {
		t.Errorf("source without schema: %d %s", a.Status, a.Raw)
	}

	tn.waitState("typed:msg_good", engine.StateDone)
	tn.waitState("orders:msg_plain", engine.StateDone)
	for _, r := range rejected {
		if _, err := tn.event("typed:" + r.id); err == nil {
			t.Errorf("%s was stored", r.id)
		}
	}
	if n := len(h.deliveries("")); n != 2 {
		t.Errorf("handler got %d deliveries, want 2 (the valid typed one and the plain one)", n)
	}
	if m := tn.metricsText(); !strings.Contains(m, `oncehook_schema_failures_total{source="typed"} 3`) {
		t.Errorf("schema failures not counted:\n%s", grepLines(m, "schema"))
	}

	// A reload picks up a changed schema: amounts may now be strings.
	mustWrite(t, filepath.Join(dir, "typed.schema.json"), strings.Replace(orderSchema, `"type": "integer", "minimum": 1`, `"type": ["integer", "string"]`, 1))
	tn.n.reload(tn.cfgPath)
	if a := tn.post("typed", []byte(rejected[0].body), tn.signed([]byte(rejected[0].body), "msg_s1")); a.Status != http.StatusAccepted {
		t.Fatalf("after reload: %d %s", a.Status, a.Raw)
	}
	// The reload line names the schema whose contents changed (its path did
	// not), and a reload of the same files names it no more.
	const changed = "source[typed].schema_file (contents)"
	if n := strings.Count(tn.logs(), changed); n != 1 {
		t.Errorf("the reload line names the changed schema %d times, want 1:\n%s", n, tn.logs())
	}
	tn.n.reload(tn.cfgPath)
	if n := strings.Count(tn.logs(), changed); n != 1 {
		t.Errorf("after a reload of unchanged files the schema is named %d times, want 1", n)
	}
	// A schema that does not compile rejects the reload; the running one stays.
	mustWrite(t, filepath.Join(dir, "typed.schema.json"), `{"type": 12}`)
	tn.n.reload(tn.cfgPath)
	if !strings.Contains(tn.logs(), "reload rejected") {
		t.Fatal("a broken schema did not reject the reload")
	}
	if a := tn.post("typed", []byte(rejected[1].body), tn.signed([]byte(rejected[1].body), "msg_s2")); a.Status != http.StatusBadRequest {
		t.Fatalf("after a rejected reload the old schema should still refuse: %d %s", a.Status, a.Raw)
	}
	if m := tn.metricsText(); !strings.Contains(m, "oncehook_config_last_reload_successful 0") {
		t.Error("rejected reload not reported")
	}

	// And a node does not start with a broken schema.
	tn.stop()
	cfg := testConfig(dir, h.url, schemaSourceTOML)
	mustWrite(t, tn.cfgPath, cfg)
	if err := loadAndStart(tn.cfgPath); err == nil || !strings.Contains(err.Error(), "schema_file") {
		t.Fatalf("start with a broken schema: %v", err)
	}
}

// metricsText scrapes the admin listener's /metrics.
func (tn *testNode) metricsText() string {
	tn.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	return tn.do(req).Raw
}

func grepLines(s, needle string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, needle) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// loadAndStart loads the config at path and starts a node from it, returning
// the error instead of failing the test; a node that starts is shut down.
func loadAndStart(path string) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	n, err := startNode(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), new(slog.LevelVar), io.Discard)
	if err != nil {
		return err
	}
	return errors.Join(errors.New("started"), n.shutdown())
}
