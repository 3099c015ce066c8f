package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/admin"
	"oncehook/engine"
	"oncehook/providers"
)

// adminPost posts v as JSON to the admin API with the node's token.
func (tn *testNode) adminPost(path string, v any) answer {
	tn.t.Helper()
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPost, tn.admin+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tn.token)
	req.Header.Set("Content-Type", "application/json")
	return tn.do(req)
}

// statusSource is one source of GET /v1/status.
type statusSource struct {
	Events           int     `json:"events"`
	Paused           bool    `json:"paused"`
	Since            string  `json:"since"`
	By               string  `json:"by"`
	Reason           string  `json:"reason"`
	Backlog          int     `json:"backlog"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
}

func (tn *testNode) sourceStatus(name string) statusSource {
	tn.t.Helper()
	var st struct {
		Sources map[string]statusSource `json:"sources"`
	}
	if code := tn.adminGet("/v1/status", &st); code != http.StatusOK {
		tn.t.Fatalf("GET /v1/status: %d", code)
	}
	s, ok := st.Sources[name]
	if !ok {
		tn.t.Fatalf("GET /v1/status has no source %q: %+v", name, st.Sources)
	}
	return s
}

// TestPausedSourceHoldsDeliveriesUntilResumed: a paused source keeps
// answering 202; its events are committed and stay pending with no attempt
// while the leader's lease commands run; after the resume each is delivered
// exactly once, oldest first, on its first attempt.
func TestPausedSourceHoldsDeliveriesUntilResumed(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)

	// The API's refusals.
	if a := tn.adminPost("/v1/sources/orders/pause", map[string]string{}); a.Status != http.StatusBadRequest {
		t.Fatalf("pause without a reason: %d %s, want 400", a.Status, a.Raw)
	}
	if a := tn.adminPost("/v1/sources/nope/pause", map[string]string{"reason": "x"}); a.Status != http.StatusNotFound {
		t.Fatalf("pause of an unknown source: %d %s, want 404", a.Status, a.Raw)
	}
	if a := tn.adminPost("/v1/sources/orders/resume", map[string]string{"reason": "x"}); a.Status != http.StatusOK || a.Body["changed"] != false {
		t.Fatalf("resume of a running source: %d %s, want 200 unchanged", a.Status, a.Raw)
	}

	a := tn.adminPost("/v1/sources/orders/pause", map[string]string{"reason": "handler deploy"})
	if a.Status != http.StatusOK || a.Body["source"] != "orders" || a.Body["paused"] != true || a.Body["changed"] != true {
		t.Fatalf("pause: %d %s", a.Status, a.Raw)
	}
	if a := tn.adminPost("/v1/sources/orders/pause", map[string]string{"reason": "again"}); a.Status != http.StatusOK || a.Body["changed"] != false {
		t.Fatalf("second pause: %d %s, want 200 unchanged", a.Status, a.Raw)
	}

	const n = 5
	var keys []string
	for i := range n {
		id := fmt.Sprintf("msg_pause_%d", i)
		body := orderBody(fmt.Sprintf("evt_pause_%d", i), fmt.Sprintf("obj_pause_%d", i), int64(100+i))
		if a := tn.post("orders", body, tn.signed(body, id)); a.Status != http.StatusAccepted {
			t.Fatalf("post %s while paused: %d %s, want 202", id, a.Status, a.Raw)
		}
		keys = append(keys, "orders:"+id)
	}
	// The claims are committed (each answered 202). An event of another
	// source claimed after them is delivered: the forwarder, woken by every
	// claim and leasing oldest first, has passed the paused ones. Then lease
	// once more ourselves: nothing of the paused source goes out. (Waiting
	// for a lease entry instead would wait for nothing: with only paused
	// events pending the leader proposes no lease at all.)
	other := []byte(`{"id":"evt_pause_other","type":"charge.succeeded"}`)
	st, _ := providers.Lookup("stripe")
	otherHeaders, err := st.Sign(other, []byte("whsec_stripe_test_secret"), time.Now(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := tn.post("stripe", other, otherHeaders); a.Status != http.StatusAccepted {
		t.Fatalf("post to stripe: %d %s, want 202", a.Status, a.Raw)
	}
	tn.waitState("stripe:evt_pause_other", engine.StateDone)
	if evs, err := tn.n.cluster.Lease(ctxTimeout(t, 10*time.Second), 100, time.Minute); err != nil || len(evs) != 0 {
		t.Fatalf("lease while paused: %v %v, want nothing", evs, err)
	}
	var pending struct{ Events []admin.Event }
	if code := tn.adminGet("/v1/events?state=pending&source=orders", &pending); code != http.StatusOK || len(pending.Events) != n {
		t.Fatalf("pending events while paused: %d %+v", code, pending.Events)
	}
	for _, ev := range pending.Events {
		if ev.Attempts != 0 {
			t.Fatalf("%s spent an attempt while paused: %+v", ev.Key, ev)
		}
	}
	for _, d := range h.deliveries("") {
		if d.Source == "orders" {
			t.Fatalf("the handler received %s while its source was paused", d.Key)
		}
	}
	s := tn.sourceStatus("orders")
	if !s.Paused || s.By != "ops" || s.Reason != "handler deploy" || s.Since == "" || s.Backlog != n || s.OldestPendingAge < 0 {
		t.Fatalf("status of the paused source: %+v", s)
	}
	if s := tn.sourceStatus("stripe"); s.Paused || s.Backlog != 0 {
		t.Fatalf("status of another source: %+v", s)
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	metrics := tn.do(req).Raw
	for _, want := range []string{`oncehook_source_paused{source="orders"} 1`, `oncehook_source_paused{source="stripe"} 0`,
		fmt.Sprintf(`oncehook_backlog{source="orders"} %d`, n), `oncehook_source_paused_seconds{source="stripe"} 0`,
		`oncehook_oldest_pending_age_seconds{source="orders"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// The CLI prints the paused source.
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(tn.dir, "admin.token"))
	var out, errOut bytes.Buffer
	if err := run(ctxTimeout(t, 30*time.Second), []string{"status", "-addr", tn.admin}, &out, &errOut); err != nil {
		t.Fatalf("status: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "PAUSED") || !strings.Contains(out.String(), "handler deploy") {
		t.Fatalf("oncehook status does not show the paused source:\n%s", out.String())
	}

	out.Reset()
	if err := run(ctxTimeout(t, 30*time.Second), []string{"resume", "-addr", tn.admin, "-source", "orders", "-reason", "deployed"}, &out, &errOut); err != nil {
		t.Fatalf("resume: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `"changed": true`) {
		t.Fatalf("resume printed %s", out.String())
	}
	var tokens []uint64
	for _, k := range keys {
		ev := tn.waitState(k, engine.StateDone)
		if ev.Attempts != 1 {
			t.Errorf("%s: attempts %d, want 1", k, ev.Attempts)
		}
		tokens = append(tokens, ev.Token)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] < tokens[i-1] {
			t.Errorf("%s was leased (token %d) before the older %s (token %d)", keys[i], tokens[i], keys[i-1], tokens[i-1])
		}
	}
	for _, k := range keys {
		if d := h.deliveries(k); len(d) != 1 || d[0].Attempt != "1" {
			t.Errorf("%s delivered %d times (%+v), want once on attempt 1", k, len(d), d)
		}
	}
	if s := tn.sourceStatus("orders"); s.Paused || s.Backlog != 0 || s.Since != "" {
		t.Fatalf("status after resume: %+v", s)
	}
}

// TestUIPausesAndResumesASource: the dead-letter page's pause and resume
// forms need the session's form token and a reason, and record the
// session's token name.
func TestUIPausesAndResumesASource(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	u := newUIClient(t, tn)
	if a := u.login(tn.token); a.status != http.StatusSeeOther {
		t.Fatalf("login: %d", a.status)
	}
	list := u.get("/ui/")
	if !strings.Contains(list.body, `id="pause-orders"`) {
		t.Fatalf("no pause form for orders:\n%s", list.body)
	}
	if a := u.post("/ui/sources/pause", url.Values{"csrf": {"wrong"}, "source": {"orders"}, "reason": {"r"}, "back": {"/ui/"}}); a.status != http.StatusForbidden {
		t.Fatalf("pause with a wrong form token: %d, want 403", a.status)
	}
	a := u.post("/ui/sources/pause", url.Values{"csrf": {u.csrf}, "source": {"orders"}, "reason": {" "}, "back": {"/ui/"}})
	if page := u.get(a.header.Get("Location")); a.status != http.StatusSeeOther || !strings.Contains(page.body, "a reason is required") {
		t.Fatalf("pause without a reason: %d\n%s", a.status, page.body)
	}
	if a := u.post("/ui/sources/pause", url.Values{"csrf": {u.csrf}, "source": {"nope"}, "reason": {"r"}}); a.status != http.StatusNotFound {
		t.Fatalf("pause of an unknown source: %d, want 404", a.status)
	}
	a = u.post("/ui/sources/pause", url.Values{"csrf": {u.csrf}, "source": {"orders"}, "reason": {"maintenance"}, "back": {"/ui/?state=pending"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/?state=pending" {
		t.Fatalf("pause: %d to %q", a.status, a.header.Get("Location"))
	}
	page := u.get("/ui/?state=pending")
	if !strings.Contains(page.body, `id="resume-orders"`) || !strings.Contains(page.body, "maintenance") || !strings.Contains(page.body, "orders is paused") {
		t.Fatalf("page after the pause:\n%s", page.body)
	}
	if s := tn.sourceStatus("orders"); !s.Paused || s.By != "ops" || s.Reason != "maintenance" {
		t.Fatalf("status after the UI pause: %+v", s)
	}
	a = u.post("/ui/sources/resume", url.Values{"csrf": {u.csrf}, "source": {"orders"}, "reason": {"done"}, "back": {"/ui/"}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("resume: %d", a.status)
	}
	if s := tn.sourceStatus("orders"); s.Paused {
		t.Fatalf("status after the UI resume: %+v", s)
	}
}
