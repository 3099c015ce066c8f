package main

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/admin"
	"oncehook/engine"
)

// A dead letter's failed attempts (status, error, the first bytes of the
// handler's answer) are in GET /v1/events/{key} as attempts_history, in
// `oncehook events show`, and on its UI page; an event list leaves them out.
func TestAttemptHistoryShown(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_hist", "obj_hist", 1)
	h.setAnswer(func(delivery) (int, string) { return 503, `{"error":"db <down>"}` + strings.Repeat(".", 400) })
	if a := tn.post("orders", body, tn.signed(body, "msg_hist")); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	key := "orders:msg_hist"
	ev := tn.waitState(key, engine.StateDead)

	var view struct {
		Attempts uint32 `json:"attempts"`
		History  []struct {
			At         string  `json:"at"`
			DurationMS float64 `json:"duration_ms"`
			Status     int     `json:"status"`
			Error      string  `json:"error"`
			Body       string  `json:"body"`
		} `json:"attempts_history"`
	}
	if st := tn.adminGet("/v1/events/"+key, &view); st != http.StatusOK {
		t.Fatalf("admin event: %d", st)
	}
	if len(view.History) != int(ev.Attempts) || len(view.History) == 0 {
		t.Fatalf("attempts_history has %d entries for %d attempts", len(view.History), ev.Attempts)
	}
	for i, a := range view.History {
		if a.Status != 503 || a.Error != "status 503" || len(a.Body) != 256 || !strings.HasPrefix(a.Body, `{"error":"db <down>"}`) ||
			a.At == "" || a.DurationMS <= 0 {
			t.Fatalf("attempt %d = %+v", i, a)
		}
	}

	var list struct {
		Events []map[string]any `json:"events"`
	}
	tn.adminGet("/v1/events?state=dead", &list)
	if len(list.Events) != 1 {
		t.Fatalf("list: %v", list)
	}
	if _, ok := list.Events[0]["attempts_history"]; ok {
		t.Fatalf("an event list carries attempts_history")
	}

	var out, errOut bytes.Buffer
	args := []string{"-addr", strings.TrimPrefix(tn.admin, "http://"), "-token-file", filepath.Join(tn.dir, "admin.token"), key}
	if err := cmdEventShow(ctxTimeout(t, 10*time.Second), args, &out, &errOut); err != nil {
		t.Fatalf("events show: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `"attempts_history": [`) || !strings.Contains(out.String(), `"status": 503`) {
		t.Fatalf("events show lacks the history:\n%s", out.String())
	}

	u := newUIClient(t, tn)
	u.login(tn.token)
	page := u.get(admin.EventURL(key))
	if page.status != http.StatusOK {
		t.Fatalf("event page: %d", page.status)
	}
	if !strings.Contains(page.body, `id="attempts"`) || strings.Count(page.body, "<td>503</td>") != len(view.History) ||
		!strings.Contains(page.body, "db &lt;down&gt;") {
		t.Fatalf("the event page does not show the failed attempts:\n%s", page.body)
	}
	if strings.Contains(page.body, "<down>") {
		t.Fatalf("the event page prints the handler's answer unescaped")
	}
}

// An event without a failed attempt shows an empty history: [] in the API,
// a note on its page.
func TestAttemptHistoryEmpty(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_ok", "obj_ok", 1)
	if a := tn.post("orders", body, tn.signed(body, "msg_ok")); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	key := "orders:msg_ok"
	tn.waitState(key, engine.StateDone)
	var view map[string]any
	tn.adminGet("/v1/events/"+key, &view)
	if h, ok := view["attempts_history"].([]any); !ok || len(h) != 0 {
		t.Fatalf("admin event without failures: attempts_history = %#v, want []", view["attempts_history"])
	}
	u := newUIClient(t, tn)
	u.login(tn.token)
	if page := u.get(admin.EventURL(key)); !strings.Contains(page.body, `id="no-attempts"`) {
		t.Fatalf("the event page lacks the empty-history note:\n%s", page.body)
	}
}
