package systest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/internal/testcluster"
	"oncehook/providers"
)

// The lifecycle rules of docs/architecture.md ("Event states", "Expiry",
// "Sync mode"), watched through the binary: what a provider is answered, what
// the admin API and the command line show, what the metrics and the log say.

// switchHandler answers 500 to the keys holding match while failing is set,
// and 200 with handlerOK to everything else; it counts deliveries per key.
type switchHandler struct {
	failing atomic.Bool
	match   string
	mu      sync.Mutex
	runs    map[string]int
	url     string
}

const handlerOK = `{"handled":true}`

func newSwitchHandler(t *testing.T, match string) *switchHandler {
	h := &switchHandler{match: match, runs: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		h.mu.Lock()
		h.runs[key]++
		h.mu.Unlock()
		if h.failing.Load() && strings.Contains(key, h.match) {
			http.Error(w, "handler down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, handlerOK)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.url = "http://" + ln.Addr().String()
	return h
}

func (h *switchHandler) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[key]
}

// post sends body to the orders source signed now under the event id id, as
// the standard provider does on every (re)send; it returns the status and the
// answer (0 when the connection failed).
func (c *testCluster) post(t *testing.T, nd *clusterNode, id string, body []byte) (int, string) {
	t.Helper()
	s, _ := providers.Lookup("standard")
	hs, err := s.Sign(body, []byte(c.Secret), time.Now(), id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+nd.Intake+"/in/orders", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, h := range hs {
		req.Header.Set(h.Name, h.Value)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lifecycleEvent is the part of GET /v1/events/{key} these tests read.
type lifecycleEvent struct {
	Key       string    `json:"key"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Audit     []struct {
		At     time.Time `json:"at"`
		Who    string    `json:"who"`
		Action string    `json:"action"`
		Reason string    `json:"reason"`
		From   string    `json:"from"`
	} `json:"audit"`
}

// event reads key on nd: the status (404: not stored) and the event.
func (c *testCluster) event(t *testing.T, nd *clusterNode, key string) (int, lifecycleEvent) {
	t.Helper()
	var ev lifecycleEvent
	code, b := get("http://"+nd.Admin+"/v1/events/"+key, c.Token)
	if code == 200 {
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatalf("event %s: %v\n%s", key, err, b)
		}
	}
	return code, ev
}

// listed is the keys GET /v1/events?source= lists.
func (c *testCluster) listed(t *testing.T, nd *clusterNode, source string) []string {
	t.Helper()
	code, b := get("http://"+nd.Admin+"/v1/events?source="+source, c.Token)
	var out struct {
		Events []struct {
			Key string `json:"key"`
		} `json:"events"`
	}
	if code != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("list %s: %d %s", source, code, b)
	}
	var keys []string
	for _, e := range out.Events {
		keys = append(keys, e.Key)
	}
	return keys
}

// metric sums the samples of name on nd's /metrics whose labels hold every
// one of labels (e.g. `source="orders"`); 0 when there is none.
func (c *testCluster) metric(t *testing.T, nd *clusterNode, name string, labels ...string) float64 {
	t.Helper()
	code, b := get("http://"+nd.Admin+"/metrics", c.Token)
	if code != 200 {
		t.Fatalf("metrics of %s: %d", nd.ID, code)
	}
	sum := 0.0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

func orderJSON(id string) []byte {
	return []byte(fmt.Sprintf(`{"type":"order.paid","id":%q,"amount":4200}`, id))
}

// TestSyncRetryOfADeadEventIsNever2xx: on a sync source the provider sees
// the handler's failure (502), never a 2xx for an event that went dead. Its
// retry (the same id and body, signed again) re-arms the dead event, with an
// audit entry by "provider", and is 502 again while the handler fails; once
// the handler answers 2xx, the retry gets the handler's answer, and a later
// retry the same answer from the cache without another delivery.
func TestSyncRetryOfADeadEventIsNever2xx(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	h := newSwitchHandler(t, "")
	h.failing.Store(true)
	c := startClusterWith(t, 1, h.url, "mode = \"sync\"\nmax_attempts = 1")
	nd := c.Leader()
	const id, key = "evt_sync_1", "orders:evt_sync_1"
	body := orderJSON(id)

	if code, ans := c.post(t, nd, id, body); code != http.StatusBadGateway {
		t.Fatalf("first post while the handler fails: %d %s, want 502", code, ans)
	}
	testcluster.WaitFor(t, key+" dead", 20*time.Second, func() bool { return c.eventState(nd, key) == "dead" })
	for retry := 1; retry <= 2; retry++ {
		code, ans := c.post(t, nd, id, body)
		if code != http.StatusBadGateway {
			t.Fatalf("retry %d of the dead event while the handler fails: %d %s, want 502", retry, code, ans)
		}
		if got := h.count(key); got != retry+1 {
			t.Fatalf("after retry %d the handler got %d deliveries, want %d: the retry did not re-arm the event", retry, got, retry+1)
		}
		testcluster.WaitFor(t, key+" dead again", 20*time.Second, func() bool { return c.eventState(nd, key) == "dead" })
	}
	_, ev := c.event(t, nd, key)
	rearms := 0
	for _, a := range ev.Audit {
		if a.Who == "provider" && a.Reason == "provider retry" && a.From == "dead" {
			rearms++
		}
	}
	if rearms != 2 {
		t.Fatalf("audit %+v: want 2 re-arms by provider (reason \"provider retry\", from dead)", ev.Audit)
	}

	h.failing.Store(false)
	if code, ans := c.post(t, nd, id, body); code != http.StatusOK || ans != handlerOK {
		t.Fatalf("retry once the handler works: %d %q, want the handler's 200 %q", code, ans, handlerOK)
	}
	testcluster.WaitFor(t, key+" done", 20*time.Second, func() bool { return c.eventState(nd, key) == "done" })
	if code, ans := c.post(t, nd, id, body); code != http.StatusOK || ans != handlerOK || h.count(key) != 4 {
		t.Fatalf("retry of the done event: %d %q after %d deliveries, want the cached 200 %q and 4 deliveries", code, ans, h.count(key), handlerOK)
	}
}

// TestInvalidJSONIsRefusedAndNotStored: on a source whose key reads JSON, a
// validly signed body that is not valid JSON is 400 and leaves nothing: no
// event, no claim counted. A valid body afterwards is claimed (so the source
// and the counters do see what is stored).
func TestInvalidJSONIsRefusedAndNotStored(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	h := newSwitchHandler(t, "")
	c := startClusterWith(t, 1, h.url, `key = ["json:id"]`)
	nd := c.Leader()
	for i, body := range []string{
		`{"type":"order.paid","id":"evt_bad"`,        // truncated
		`{"type":"order.paid","id":"evt_bad"} trail`, // bytes after the value
		`{"type":"order.paid","id":"evt_bad",}`,      // trailing comma
		`id=evt_bad`,                                 // a form
	} {
		if code, ans := c.post(t, nd, fmt.Sprintf("msg_bad_%d", i), []byte(body)); code != http.StatusBadRequest || !strings.Contains(ans, "not valid JSON") {
			t.Fatalf("%q: %d %s, want 400 saying the body is not valid JSON", body, code, ans)
		}
	}
	if keys := c.listed(t, nd, "orders"); len(keys) != 0 {
		t.Fatalf("refused bodies stored events: %v", keys)
	}
	if n := c.metric(t, nd, "oncehook_claims_total", `source="orders"`); n != 0 {
		t.Fatalf("oncehook_claims_total{source=orders} = %v after refused bodies, want 0", n)
	}
	if n := c.metric(t, nd, "oncehook_requests_total", `source="orders"`, `code="400"`); n != 4 {
		t.Fatalf("oncehook_requests_total{source=orders,code=400} = %v, want 4", n)
	}

	if code, ans := c.post(t, nd, "msg_good", orderJSON("evt_good")); code != http.StatusAccepted {
		t.Fatalf("valid body: %d %s, want 202", code, ans)
	}
	if keys := c.listed(t, nd, "orders"); len(keys) != 1 || keys[0] != "orders:evt_good" {
		t.Fatalf("after a valid body the source lists %v, want [orders:evt_good]", keys)
	}
	if n := c.metric(t, nd, "oncehook_claims_total", `source="orders"`); n != 1 {
		t.Fatalf("oncehook_claims_total{source=orders} = %v after one valid body, want 1", n)
	}
}

// TestPurgeThroughTheCommandLine: oncehook purge -dry-run counts the dead
// letters of a source and deletes nothing; without -dry-run it deletes them
// and leaves the done event; purging pending events is refused, saying they
// are in flight.
func TestPurgeThroughTheCommandLine(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	h := newSwitchHandler(t, "dies")
	h.failing.Store(true)
	c := startClusterWith(t, 1, h.url, "max_attempts = 1")
	nd := c.Leader()
	dead := []string{"orders:evt_dies_1", "orders:evt_dies_2"}
	for _, id := range []string{"evt_dies_1", "evt_dies_2", "evt_ok_1"} {
		if code, ans := c.post(t, nd, id, orderJSON(id)); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, code, ans)
		}
	}
	for _, k := range dead {
		testcluster.WaitFor(t, k+" dead", 20*time.Second, func() bool { return c.eventState(nd, k) == "dead" })
	}
	testcluster.WaitFor(t, "orders:evt_ok_1 done", 20*time.Second, func() bool { return c.eventState(nd, "orders:evt_ok_1") == "done" })

	before := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	cli := []string{"purge", "-addr", nd.Admin, "-token-file", filepath.Join(c.Root, "admin.token"), "-before", before}
	out, code := run(t, c.Root, append(cli, "-state", "dead", "-source", "orders", "-reason", "lifecycle test", "-dry-run")...)
	if code != 0 || !strings.Contains(out, `"would_purge": 2`) || !strings.Contains(out, dead[0]) || !strings.Contains(out, dead[1]) {
		t.Fatalf("purge -dry-run (exit %d):\n%s", code, out)
	}
	for _, k := range dead {
		if st := c.eventState(nd, k); st != "dead" {
			t.Fatalf("after the dry run %s is %q, want still dead", k, st)
		}
	}
	out, code = run(t, c.Root, append(cli, "-state", "pending", "-source", "orders", "-reason", "lifecycle test")...)
	if code == 0 || !strings.Contains(out, "in flight") {
		t.Fatalf("purge -state pending (exit %d), want a refusal saying the events are in flight:\n%s", code, out)
	}
	out, code = run(t, c.Root, append(cli, "-state", "dead", "-source", "orders", "-reason", "lifecycle test")...)
	if code != 0 || !strings.Contains(out, `"purged": 2`) {
		t.Fatalf("purge (exit %d):\n%s", code, out)
	}
	for _, k := range dead {
		if code, _ := c.event(t, nd, k); code != http.StatusNotFound {
			t.Fatalf("%s after the purge: %d, want 404", k, code)
		}
	}
	if st := c.eventState(nd, "orders:evt_ok_1"); st != "done" {
		t.Fatalf("the done event after purging the dead: %q, want done", st)
	}
	testcluster.WaitFor(t, "the purge's audit line", 10*time.Second, func() bool {
		return strings.Contains(nd.Proc.Output(), `reason="lifecycle test"`) && strings.Contains(nd.Proc.Output(), "msg=purge")
	})
}

// failpointsBin is oncehook built with -tags failpoints, for the tests that
// need its retention knobs (failpoint/doc.go); built once, on first use.
var failpointsBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(binary), "oncehook-failpoints")
	return bin, testcluster.Build(bin, "oncehook", "failpoints")
})

// The failpoints build's retention knobs (failpoint.EnvBucketWidth and
// failpoint.EnvExpireInterval; systest does not import package failpoint).
const (
	envBucketWidth    = "ONCEHOOK_TEST_BUCKET_WIDTH"
	envExpireInterval = "ONCEHOOK_TEST_EXPIRE_INTERVAL"
)

// TestDeadLetterOutlivesRetention: with one-second retention buckets, a
// dead letter stays while retention passes many times over (done events
// claimed after it come and go), can still be replayed, and is deleted once
// its source's dead_retention passed: counted in
// oncehook_dead_expired_total{source} and logged at warn with its key. The
// replayed one gets a fresh retention window instead of its dead retention.
func TestDeadLetterOutlivesRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	bin, err := failpointsBin()
	if err != nil {
		t.Fatal(err)
	}
	const (
		width         = time.Second
		deadRetention = 12 * time.Second
	)
	t.Setenv(envBucketWidth, width.String())
	t.Setenv(envExpireInterval, "100ms")
	h := newSwitchHandler(t, "dies")
	h.failing.Store(true)
	c := &testCluster{testcluster.Start(t, testcluster.Options{Bin: bin, Nodes: 1, Handler: h.url,
		SourceExtra: fmt.Sprintf("retention = \"1s\"\ndead_retention = %q\nmax_attempts = 1", deadRetention)})}
	nd := c.Leader()
	if out := nd.Proc.Output(); !strings.Contains(out, "failpoint: test bucket width 1s") {
		t.Fatalf("the node did not take the test bucket width:\n%s", out)
	}
	const keyA, keyB = "orders:evt_dies_a", "orders:evt_dies_b"
	for _, id := range []string{"evt_dies_a", "evt_dies_b"} {
		if code, ans := c.post(t, nd, id, orderJSON(id)); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, code, ans)
		}
	}
	for _, k := range []string{keyA, keyB} {
		testcluster.WaitFor(t, k+" dead", 20*time.Second, func() bool { return c.eventState(nd, k) == "dead" })
	}
	_, a := c.event(t, nd, keyA)
	if a.ExpiresAt.Before(a.UpdatedAt.Add(deadRetention)) {
		t.Fatalf("dead letter %s went dead at %s and expires at %s: want at least dead_retention %s later",
			keyA, a.UpdatedAt, a.ExpiresAt, deadRetention)
	}

	// Done events claimed after the dead letters expire with their buckets:
	// each one gone means an expire ran past the dead letters' own
	// retention (1s after their claim, rounded up to a bucket end).
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("evt_ok_%d", i)
		if code, ans := c.post(t, nd, id, orderJSON(id)); code != http.StatusAccepted {
			t.Fatalf("post %s: %d %s", id, code, ans)
		}
		testcluster.WaitFor(t, "orders:"+id+" done and expired", 20*time.Second, func() bool {
			code, _ := c.event(t, nd, "orders:"+id)
			return code == http.StatusNotFound && h.count("orders:"+id) > 0
		})
	}
	for _, k := range []string{keyA, keyB} {
		code, ev := c.event(t, nd, k)
		// Read before the dead retention ended (B went dead after A, so it
		// ends no earlier), the dead letters must be there.
		if now := time.Now(); now.After(a.ExpiresAt) {
			t.Fatalf("the retention rounds outlasted the dead retention (now %s, %s expires at %s): raise deadRetention", now, keyA, a.ExpiresAt)
		}
		if code != http.StatusOK || ev.State != "dead" {
			t.Fatalf("%s after retention passed 3 times: %d %q, want still dead", k, code, ev.State)
		}
	}

	// Replayable: the replay delivers it, and gives it a fresh window (the
	// claim's), not its dead retention.
	h.failing.Store(false)
	out, code := run(t, c.Root, "replay", "-addr", nd.Admin, "-token-file", filepath.Join(c.Root, "admin.token"),
		"-key", keyB, "-reason", "lifecycle test")
	if code != 0 {
		t.Fatalf("replay %s (exit %d):\n%s", keyB, code, out)
	}
	testcluster.WaitFor(t, keyB+" done after the replay", 20*time.Second, func() bool { return c.eventState(nd, keyB) == "done" })
	if code, b := c.event(t, nd, keyB); code == http.StatusOK {
		var replayed time.Time
		for _, e := range b.Audit {
			if e.From == "dead" {
				replayed = e.At
			}
		}
		// The window is the claim's: its expiry minus its creation, so the
		// 1s retention plus up to a bucket, and the new expiry is rounded up
		// to a bucket end again.
		if replayed.IsZero() || b.ExpiresAt.After(replayed.Add(time.Second+2*width)) {
			t.Fatalf("replayed %s expires at %s (replayed at %s): want a fresh window (1s retention plus at most two buckets), not its dead retention", keyB, b.ExpiresAt, replayed)
		}
	}
	testcluster.WaitFor(t, keyB+" expired in its fresh window", 20*time.Second, func() bool {
		code, _ := c.event(t, nd, keyB)
		return code == http.StatusNotFound
	})

	// dead_retention passed: deleted, counted and logged.
	testcluster.WaitFor(t, keyA+" deleted after dead_retention", deadRetention+20*time.Second, func() bool {
		code, _ := c.event(t, nd, keyA)
		return code == http.StatusNotFound
	})
	if n := c.metric(t, nd, "oncehook_dead_expired_total", `source="orders"`); n != 1 {
		t.Fatalf("oncehook_dead_expired_total{source=orders} = %v, want 1 (the replayed one is not a dead letter any more)", n)
	}
	var line string
	for _, l := range strings.Split(nd.Proc.Output(), "\n") {
		if strings.Contains(l, "dead letter expired") {
			if line != "" {
				t.Fatalf("more than one dead letter expired:\n%s\n%s", line, l)
			}
			line = l
		}
	}
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, keyA) {
		t.Fatalf("the expiry's log line %q: want a warning naming %s", line, keyA)
	}
}

// TestOrderFieldsMissing: on an ordered source a delivery without the order
// object, or without a readable time, is 400 and stores nothing; with
// order.missing = "unordered" it is claimed without the guard and delivered.
func TestOrderFieldsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	bodies := []struct{ id, body string }{
		{"evt_no_obj", `{"type":"order.paid","id":"evt_no_obj","created":100}`},
		{"evt_no_time", `{"type":"order.paid","id":"evt_no_time","obj":"X"}`},
		{"evt_bad_time", `{"type":"order.paid","id":"evt_bad_time","obj":"X","created":"yesterday"}`},
	}
	for _, tc := range []struct {
		name, missing string
		want          int
	}{
		{"refused", "", http.StatusBadRequest},
		{"unordered", `, missing = "unordered"`, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSwitchHandler(t, "")
			c := startClusterWith(t, 1, h.url, `order = { object = "json:obj", time = "json:created"`+tc.missing+` }`)
			nd := c.Leader()
			for _, b := range bodies {
				code, ans := c.post(t, nd, b.id, []byte(b.body))
				if code != tc.want || (code == http.StatusBadRequest && !strings.Contains(ans, "order:")) {
					t.Fatalf("%s: %d %s, want %d", b.body, code, ans, tc.want)
				}
			}
			keys := c.listed(t, nd, "orders")
			if tc.want == http.StatusBadRequest {
				if len(keys) != 0 {
					t.Fatalf("refused deliveries stored events: %v", keys)
				}
				return
			}
			if len(keys) != len(bodies) {
				t.Fatalf("stored %v, want the %d deliveries", keys, len(bodies))
			}
			for _, b := range bodies {
				k := "orders:" + b.id
				testcluster.WaitFor(t, k+" delivered", 20*time.Second, func() bool { return c.eventState(nd, k) == "done" })
			}
		})
	}
}

// TestPayloadRetentionDropsDonePayloads: payload_retention after a done
// event completed, its payload is dropped while its key stays: a resend is
// still a duplicate, and a replay is refused with nothing to deliver.
func TestPayloadRetentionDropsDonePayloads(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	bin, err := failpointsBin()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envExpireInterval, "100ms") // the sweeper drops payloads on its expire pass
	h := newSwitchHandler(t, "")
	c := &testCluster{testcluster.Start(t, testcluster.Options{Bin: bin, Nodes: 1, Handler: h.url,
		SourceExtra: "retention = \"1h\"\npayload_retention = \"1s\""})}
	nd := c.Leader()
	const id, key = "evt_paid", "orders:evt_paid"
	if code, ans := c.post(t, nd, id, orderJSON(id)); code != http.StatusAccepted {
		t.Fatalf("post: %d %s", code, ans)
	}
	testcluster.WaitFor(t, key+" done", 20*time.Second, func() bool { return c.eventState(nd, key) == "done" })
	payload := func() (bool, string) {
		code, b := get("http://"+nd.Admin+"/v1/events/"+key+"?body=1", c.Token)
		var ev struct {
			State   string  `json:"state"`
			Payload *string `json:"payload"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &ev) != nil {
			t.Fatalf("event %s: %d %s", key, code, b)
		}
		return ev.Payload != nil, ev.State
	}
	testcluster.WaitFor(t, key+"'s payload dropped", 20*time.Second, func() bool { has, _ := payload(); return !has })
	if _, st := payload(); st != "done" {
		t.Fatalf("after the payload drop %s is %q, want done (the key stays for its retention)", key, st)
	}
	if code, ans := c.post(t, nd, id, orderJSON(id)); code != http.StatusOK || !strings.Contains(ans, "duplicate") {
		t.Fatalf("resend after the payload drop: %d %s, want 200 duplicate", code, ans)
	}
	out, code := run(t, c.Root, "replay", "-addr", nd.Admin, "-token-file", filepath.Join(c.Root, "admin.token"),
		"-key", key, "-reason", "lifecycle test")
	if code == 0 || !strings.Contains(out, "nothing to deliver") {
		t.Fatalf("replay of a dropped payload (exit %d), want a refusal saying there is nothing to deliver:\n%s", code, out)
	}
	if got := h.count(key); got != 1 {
		t.Fatalf("the handler got %s %d times, want once", key, got)
	}
}
