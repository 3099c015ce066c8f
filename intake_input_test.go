package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// inputSourcesTOML are the sources of TestBodyNotJSONIsRefused and
// TestOrderFieldsRequired, beside the shared test sources.
const inputSourcesTOML = `
[[source]]
name = "jsonkey"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/jsonkey"
key = ["json:id"]

[[source]]
name = "typefilter"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/typefilter"
drop_types = ["noise"]

[[source]]
name = "headerkey"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/headerkey"

[[source]]
name = "loose"
provider = "standard"
secret_files = ["orders.secret"]
forward = "%[1]s/loose"
order = { object = "json:data.object.id", time = "json:created", missing = "unordered" }
`

// TestBodyNotJSONIsRefused: a validly signed body that is not valid JSON is
// 400 and stores nothing on a source whose key, order or type filter reads
// JSON; a source that reads none takes it as it is.
func TestBodyNotJSONIsRefused(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, inputSourcesTOML)
	bad := []struct{ name, body string }{
		{"truncated", `{"id":"evt_trunc","created":1,"data":{"object":{"id":"o1"}`},
		{"trailing bytes", `{"id":"evt_trail","created":1,"data":{"object":{"id":"o1"}}} x`},
		{"not JSON", `id=evt_form&created=1`},
		{"unterminated string", `{"id":"evt_unterminated`},
	}
	for _, src := range []string{"jsonkey", "orders", "typefilter"} {
		for i, b := range bad {
			id := "msg_" + src + "_" + string(rune('a'+i))
			a := tn.post(src, []byte(b.body), tn.signed([]byte(b.body), id))
			if a.Status != http.StatusBadRequest || a.Body["error"] != "body is not valid JSON" {
				t.Errorf("%s, %s: %d %s, want 400 body is not valid JSON", src, b.name, a.Status, a.Raw)
			}
			for _, key := range []string{src + ":" + id, src + ":evt_trunc", src + ":evt_trail", src + ":evt_unterminated"} {
				if _, err := tn.event(key); err == nil {
					t.Errorf("%s, %s: %s was stored", src, b.name, key)
				}
			}
		}
	}
	// A bad signature is still 401: validity is checked after verification.
	if a := tn.post("jsonkey", []byte(bad[0].body), signStandard(t, "whsec_"+strings.Repeat("QUFB", 8), []byte(bad[0].body), "msg_forged", time.Now())); a.Status != http.StatusUnauthorized {
		t.Errorf("forged broken body: %d, want 401", a.Status)
	}
	// A source that reads no JSON (header key, no order, filter or schema)
	// takes any body.
	for i, b := range bad {
		id := "msg_header_" + string(rune('a'+i))
		if a := tn.post("headerkey", []byte(b.body), tn.signed([]byte(b.body), id)); a.Status != http.StatusAccepted {
			t.Errorf("headerkey, %s: %d %s, want 202", b.name, a.Status, a.Raw)
		}
		tn.waitState("headerkey:"+id, engine.StateDone)
	}
	// Valid JSON still passes where JSON is read.
	good := orderBody("evt_good", "obj_good", 1)
	for _, src := range []string{"jsonkey", "orders", "typefilter"} {
		if a := tn.post(src, good, tn.signed(good, "msg_good_"+src)); a.Status != http.StatusAccepted {
			t.Errorf("%s, valid JSON: %d %s, want 202", src, a.Status, a.Raw)
		}
	}
}

// TestOrderFieldsRequired: on an ordered source a delivery without the
// object, without the time or with a time that does not parse is 400 and
// stores nothing; with missing = "unordered" it is claimed, without the
// guard.
func TestOrderFieldsRequired(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, inputSourcesTOML)
	cases := []struct{ name, body, want string }{
		{"no object", `{"id":"e1","created":5,"data":{}}`, "order: object json:data.object.id: missing, empty or not a string or number"},
		{"empty object", `{"id":"e2","created":5,"data":{"object":{"id":""}}}`, "order: object json:data.object.id: missing, empty or not a string or number"},
		{"no time", `{"id":"e3","data":{"object":{"id":"o1"}}}`, "order: time json:created: missing, empty or not a string or number"},
		{"time not a time", `{"id":"e4","created":"yesterday","data":{"object":{"id":"o1"}}}`, "order: time json:created: not a time"},
		{"object not a scalar", `{"id":"e5","created":5,"data":{"object":{"id":{"x":1}}}}`, "order: object json:data.object.id: missing, empty or not a string or number"},
	}
	for i, c := range cases {
		id := "msg_order_" + string(rune('a'+i))
		a := tn.post("orders", []byte(c.body), tn.signed([]byte(c.body), id))
		if a.Status != http.StatusBadRequest || !strings.HasPrefix(a.Raw, `{"status":"error","error":"`+c.want) {
			t.Errorf("orders, %s: %d %s, want 400 %q", c.name, a.Status, a.Raw, c.want)
		}
		if _, err := tn.event("orders:" + id); err == nil {
			t.Errorf("orders, %s: stored", c.name)
		}
		// The same delivery on a source that lets it through unordered.
		a = tn.post("loose", []byte(c.body), tn.signed([]byte(c.body), id))
		if a.Status != http.StatusAccepted || a.Body["state"] != nil {
			t.Errorf("loose, %s: %d %s, want 202 without a state", c.name, a.Status, a.Raw)
		}
		tn.waitState("loose:"+id, engine.StateDone)
	}
	// A complete delivery is guarded on both: an older one after a newer
	// one of the same object is stale.
	for _, src := range []string{"orders", "loose"} {
		newer, older := orderBody("evt_n", "obj_1", 200), orderBody("evt_o", "obj_1", 100)
		if a := tn.post(src, newer, tn.signed(newer, "msg_newer")); a.Status != http.StatusAccepted {
			t.Fatalf("%s newer: %d %s", src, a.Status, a.Raw)
		}
		tn.waitState(src+":msg_newer", engine.StateDone)
		if a := tn.post(src, older, tn.signed(older, "msg_older")); a.Status != http.StatusAccepted || a.Body["state"] != "stale" {
			t.Errorf("%s older: %d %s, want 202 stale", src, a.Status, a.Raw)
		}
	}
}

// TestOrderObjectsAreScopedBySource: the ordering guard compares events of
// one object within one source. Two sources that happen to carry the same
// object id (a live and a test account, two shops) must not order, hold back
// or mark stale each other's events.
func TestOrderObjectsAreScopedBySource(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, inputSourcesTOML)
	newer := orderBody("evt_new", "shared_obj", 2000)
	older := orderBody("evt_old", "shared_obj", 1000)
	if a := tn.post("orders", newer, tn.signed(newer, "scoped_new")); a.Status != http.StatusAccepted || a.Body["state"] == "stale" {
		t.Fatalf("newer on orders: %d %s", a.Status, a.Raw)
	}
	a := tn.post("loose", older, tn.signed(older, "scoped_old"))
	if a.Status != http.StatusAccepted || a.Body["state"] == "stale" {
		t.Fatalf("an older event of the same object id on another source: %d %s, want 202 and not stale", a.Status, a.Raw)
	}
	tn.waitState("loose:scoped_old", engine.StateDone)
	tn.waitState("orders:scoped_new", engine.StateDone)
	// Within one source the guard still holds.
	if a := tn.post("orders", older, tn.signed(older, "scoped_old_orders")); a.Status != http.StatusAccepted || a.Body["state"] != "stale" {
		t.Fatalf("older on the same source: %d %s, want stale", a.Status, a.Raw)
	}
}

// TestRequestsRefusedBeforeTheHandlerAreCounted: the answers the HTTP layer
// gives before a source is known (headers over 16 KiB, a malformed request)
// and the refusals of an Expect: 100-continue head are in
// oncehook_requests_total, so that header floods and such senders show, and
// a configured source's refusal in its latency histogram.
func TestRequestsRefusedBeforeTheHandlerAreCounted(t *testing.T) {
	tn := startTestNode(t, "", newHandler(t).url)
	addr := strings.TrimPrefix(tn.intake, "http://")
	send := func(raw string) string {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	for _, tt := range []struct{ raw, status string }{
		{"POST /in/orders HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\nContent-Length: 0\r\n\r\n", "431"},
		{"POST /in/orders HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\nContent-Length: 0\r\n\r\n", "400"},
		{"POST /in/orders HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 999999999\r\n\r\n", "413"},
	} {
		if line := send(tt.raw); !strings.HasPrefix(line, "HTTP/1.1 "+tt.status) {
			t.Fatalf("answer %q, want %s", line, tt.status)
		}
	}
	m := tn.metricsText()
	for _, want := range []string{
		`oncehook_requests_total{code="431",source=""} 1`,
		`oncehook_requests_total{code="400",source=""} 1`,
		`oncehook_requests_total{code="413",source="orders"} 1`,
		// A configured source's refusal is in the intake latency, as
		// every answer to a configured source is; the two before are not.
		"oncehook_claim_duration_seconds_count 1\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
