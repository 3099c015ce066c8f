package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"oncehook/admin"
	"oncehook/cluster"
	"oncehook/engine"
	"oncehook/providers"
)

func orderBody(id, object string, created int64) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"created":%d,"data":{"object":{"id":%q}}}`, id, created, object))
}

func TestSequentialDuplicateIsAnsweredAndDeliveredOnce(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_1", "obj_1", 100)
	first := tn.post("orders", body, tn.signed(body, "msg_1"))
	if first.Status != http.StatusAccepted || first.Body["status"] != "accepted" || first.Body["key"] != "orders:msg_1" {
		t.Fatalf("first delivery: %d %s", first.Status, first.Raw)
	}
	tn.waitState("orders:msg_1", engine.StateDone)
	second := tn.post("orders", body, tn.signed(body, "msg_1"))
	if second.Status != http.StatusOK || second.Body["status"] != "duplicate" || second.Body["state"] != "done" {
		t.Fatalf("duplicate: %d %s", second.Status, second.Raw)
	}
	// A different body under the same id is still a duplicate, never a second event.
	other := orderBody("evt_other", "obj_1", 100)
	third := tn.post("orders", other, tn.signed(other, "msg_1"))
	if third.Status != http.StatusOK || third.Body["status"] != "duplicate" {
		t.Fatalf("same id, other body: %d %s", third.Status, third.Raw)
	}
	var metricsText string
	{
		req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
		metricsText = tn.do(req).Raw
	}
	if !strings.Contains(metricsText, `oncehook_duplicate_body_mismatch_total{source="orders"} 1`) {
		t.Fatal("a duplicate with a different body was not counted")
	}
	time.Sleep(200 * time.Millisecond)
	got := h.deliveries("orders:msg_1")
	if len(got) != 1 {
		t.Fatalf("handler ran %d times, want 1", len(got))
	}
	d := got[0]
	if !bytes.Equal(d.Body, body) || d.Source != "orders" || d.Attempt != "1" || d.Token == "" || d.ContentType != "application/json" {
		t.Fatalf("delivery: %+v", d)
	}
	if d.Header.Get("Oncehook-Event-Key") != "orders:msg_1" {
		t.Fatalf("Oncehook-Event-Key = %q", d.Header.Get("Oncehook-Event-Key"))
	}
}

func TestConcurrentDuplicatesCreateOneEvent(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_c", "obj_c", 1)
	headers := tn.signed(body, "msg_concurrent")
	var wg sync.WaitGroup
	codes := make(chan int, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- tn.post("orders", body, headers).Status
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusAccepted] != 1 || count[http.StatusOK] != 63 {
		t.Fatalf("status counts %v, want one 202 and 63 200", count)
	}
	tn.waitState("orders:msg_concurrent", engine.StateDone)
	time.Sleep(200 * time.Millisecond)
	if n := len(h.deliveries("orders:msg_concurrent")); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestStopMidProcessingDeliversAfterRestart: a node stopped while its
// handler hangs on an event (a graceful stop: the attempt is recorded on the
// way out) delivers the event again after its restart. A crash, which
// records nothing, is systest's TestKillMidDeliveryDeliversAfterRestart.
func TestStopMidProcessingDeliversAfterRestart(t *testing.T) {
	h := newHandler(t)
	release := make(chan struct{})
	h.setAnswer(func(delivery) (int, string) {
		<-release // the handler hangs: the node stops before the event completes
		return 200, "ok"
	})
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_crash", "obj_crash", 1)
	if a := tn.post("orders", body, tn.signed(body, "msg_crash")); a.Status != http.StatusAccepted {
		t.Fatalf("claim: %d %s", a.Status, a.Raw)
	}
	tn.waitState("orders:msg_crash", engine.StateProcessing)
	dir := tn.dir
	tn.stop()
	close(release)
	h.setAnswer(func(delivery) (int, string) { return 200, "ok" })

	again := startTestNode(t, dir, h.url)
	ev := again.waitState("orders:msg_crash", engine.StateDone)
	if ev.Attempts < 2 {
		t.Fatalf("attempts %d: the event was not delivered again after the restart", ev.Attempts)
	}
	found := false
	for _, d := range h.deliveries("orders:msg_crash") {
		if d.Attempt != "1" {
			found = true
		}
	}
	if !found {
		t.Fatal("no delivery after the restart")
	}
}

func TestOlderEventForTheSameObjectIsStale(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	newer := orderBody("evt_payment_failed", "pi_1", 2000)
	older := orderBody("evt_processing", "pi_1", 1000)
	if a := tn.post("orders", newer, tn.signed(newer, "msg_new")); a.Status != http.StatusAccepted {
		t.Fatalf("newer: %d %s", a.Status, a.Raw)
	}
	a := tn.post("orders", older, tn.signed(older, "msg_old"))
	if a.Status != http.StatusAccepted || a.Body["state"] != "stale" {
		t.Fatalf("older: %d %s, want 202 with state stale", a.Status, a.Raw)
	}
	tn.waitState("orders:msg_new", engine.StateDone)
	time.Sleep(300 * time.Millisecond)
	if n := len(h.deliveries("orders:msg_old")); n != 0 {
		t.Fatalf("the stale event was forwarded %d times", n)
	}
	if ev, _ := tn.event("orders:msg_old"); ev.State != engine.StateStale {
		t.Fatalf("older event state %s", ev.State.String())
	}
	// The admin API shows why: its object and its order time.
	var shown struct {
		OrderObject string `json:"order_object"`
		OrderTime   string `json:"order_time"`
	}
	if code := tn.adminGet("/v1/events/orders:msg_old", &shown); code != http.StatusOK ||
		shown.OrderObject != "orders:pi_1" || shown.OrderTime != "1970-01-01T00:16:40Z" {
		t.Fatalf("events show of the stale event: %d %+v, want its object and order time", code, shown)
	}
}

func TestBadInputGetsAClearErrorAndStoresNothing(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_b", "obj_b", 1)
	good := tn.signed(body, "msg_bad_input")
	wrongSecret := signStandard(t, "whsec_"+strings.Repeat("QUFB", 8), body, "msg_bad_input", time.Now())
	stale := signStandard(t, tn.secret, body, "msg_bad_input", time.Now().Add(-10*time.Minute))
	future := signStandard(t, tn.secret, body, "msg_bad_input", time.Now().Add(10*time.Minute))
	without := func(name string) []providers.Header {
		var out []providers.Header
		for _, h := range good {
			if !strings.EqualFold(h.Name, name) {
				out = append(out, h)
			}
		}
		return out
	}
	big := bytes.Repeat([]byte("a"), 65<<10)
	bigSigned := tn.signed(big, "msg_bad_input")
	// Over the server-wide limit fasthttp refuses the body before our handler
	// runs; its ErrorHandler must still say 413, not "malformed" (400).
	huge := bytes.Repeat([]byte("a"), 1<<20+1)
	hugeSigned := tn.signed(huge, "msg_bad_input")
	// Its key is readable: only the JSON check refuses it.
	notJSON := []byte(`{"id":"evt_not_json",`)
	stripeSign := func(b []byte) []providers.Header {
		s, _ := providers.Lookup("stripe")
		hs, _ := s.Sign(b, []byte("whsec_stripe_test_secret"), time.Now(), "", nil)
		return hs
	}
	longID := strings.Repeat("k", 600)
	longBody := []byte(fmt.Sprintf(`{"id":%q}`, longID))

	cases := []struct {
		name    string
		method  string
		source  string
		body    []byte
		headers []providers.Header
		extra   map[string]string
		status  int
		want    string // in the error, when set: the refusal's own reason
	}{
		{"wrong signature", "POST", "orders", body, wrongSecret, nil, 401, ""},
		{"missing signature header", "POST", "orders", body, without("webhook-signature"), nil, 401, ""},
		{"missing id header", "POST", "orders", body, without("webhook-id"), nil, 401, ""},
		{"stale timestamp", "POST", "orders", body, stale, nil, 401, ""},
		{"future timestamp", "POST", "orders", body, future, nil, 401, ""},
		{"body changed after signing", "POST", "orders", append([]byte(nil), append(body, ' ')...), good, nil, 401, ""},
		{"body over max_body", "POST", "orders", big, bigSigned, nil, 413, ""},
		{"body over the server limit", "POST", "orders", huge, hugeSigned, nil, 413, ""},
		{"unknown source", "POST", "nope", body, good, nil, 404, ""},
		{"GET", "GET", "orders", nil, good, nil, 405, ""},
		{"PUT", "PUT", "orders", body, good, nil, 405, ""},
		{"empty body", "POST", "orders", []byte{}, tn.signed([]byte{}, "msg_bad_input"), nil, 400, "empty body"},
		{"invalid JSON for a json-keyed source", "POST", "stripe", notJSON, stripeSign(notJSON), nil, 400, "not valid JSON"},
		{"key over 512 bytes", "POST", "stripe", longBody, stripeSign(longBody), nil, 400, "512"},
		{"gzip content encoding", "POST", "orders", body, good, map[string]string{"Content-Encoding": "gzip"}, 415, ""},
		{"64 KiB header", "POST", "orders", body, good, map[string]string{"X-Huge": strings.Repeat("h", 64<<10)}, 431, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tn.intake+"/in/"+tc.source, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			for _, h := range tc.headers {
				req.Header.Set(h.Name, h.Value)
			}
			for k, v := range tc.extra {
				req.Header.Set(k, v)
			}
			if tc.status == http.StatusRequestHeaderFieldsTooLarge || len(tc.body) > 1<<20 {
				// fasthttp answers 431/413 and closes while the client may still
				// be writing the rest of the request; the kernel then resets the
				// connection and the answer can be lost. Either outcome refuses
				// the request; "nothing stored" is checked below.
				resp, err := tn.client.Do(req)
				if err != nil {
					t.Logf("connection reset before the 431 was read: %v", err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
				}
				return
			}
			a := tn.do(req)
			if a.Status != tc.status {
				t.Fatalf("status %d (%s), want %d", a.Status, strings.TrimSpace(a.Raw), tc.status)
			}
			if a.Status != 431 && !strings.Contains(a.Raw, `"error"`) {
				t.Fatalf("answer without an error message: %q", a.Raw)
			}
			if !strings.Contains(a.Raw, tc.want) {
				t.Fatalf("answer %q does not say %q", a.Raw, tc.want)
			}
		})
	}
	// Nothing was stored: no event under the key, no event at all, no delivery.
	if _, err := tn.event("orders:msg_bad_input"); err == nil {
		t.Fatal("a rejected delivery was stored")
	}
	byState, _, _ := tn.n.cluster.Counts()
	total := 0
	for _, n := range byState {
		total += n
	}
	if total != 0 {
		t.Fatalf("%d events stored by bad input", total)
	}
	if n := len(h.deliveries("")); n != 0 {
		t.Fatalf("handler got %d deliveries from bad input", n)
	}
	// And the node still serves.
	if a := tn.post("orders", body, good); a.Status != http.StatusAccepted {
		t.Fatalf("good delivery after the bad ones: %d %s", a.Status, a.Raw)
	}
}

func TestRetriesDeadLetterAndReplay(t *testing.T) {
	h := newHandler(t)
	h.setAnswer(func(delivery) (int, string) { return 500, "boom" })
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_r", "obj_r", 1)
	if a := tn.post("orders", body, tn.signed(body, "msg_retry")); a.Status != http.StatusAccepted {
		t.Fatal(a.Raw)
	}
	ev := tn.waitState("orders:msg_retry", engine.StateDead)
	if ev.Attempts != 3 || !strings.Contains(ev.LastError, "500") {
		t.Fatalf("dead event: attempts %d, last error %q", ev.Attempts, ev.LastError)
	}
	got := h.deliveries("orders:msg_retry")
	if len(got) != 3 {
		t.Fatalf("%d attempts reached the handler, want 3", len(got))
	}
	for i, d := range got {
		if d.Attempt != fmt.Sprint(i+1) {
			t.Fatalf("attempt %d carried Oncehook-Attempt %q", i+1, d.Attempt)
		}
		if i > 0 && d.Token <= got[i-1].Token && len(d.Token) <= len(got[i-1].Token) {
			t.Fatalf("fencing token did not grow: %s after %s", d.Token, got[i-1].Token)
		}
	}

	// An operator fixes the handler and replays the dead event.
	h.setAnswer(func(delivery) (int, string) { return 200, "ok" })
	req, _ := http.NewRequest(http.MethodPost, tn.admin+"/v1/replay", strings.NewReader(`{"keys":["orders:msg_retry"],"reason":"handler fixed"}`))
	req.Header.Set("Authorization", "Bearer "+tn.token)
	if a := tn.do(req); a.Status != http.StatusOK || a.Body["replayed"] != float64(1) {
		t.Fatalf("replay: %d %s", a.Status, a.Raw)
	}
	tn.waitState("orders:msg_retry", engine.StateDone)
	var view admin.Event
	if st := tn.adminGet("/v1/events/orders:msg_retry", &view); st != http.StatusOK {
		t.Fatalf("admin event: %d", st)
	}
	if len(view.Audit) != 1 || view.Audit[0].Who != "ops" || view.Audit[0].Reason != "handler fixed" || view.Audit[0].From != "dead" {
		t.Fatalf("audit trail %+v", view.Audit)
	}
	// Replay needs a reason and a scope.
	for _, bad := range []string{`{"keys":["orders:msg_retry"]}`, `{"reason":"x"}`} {
		req, _ := http.NewRequest(http.MethodPost, tn.admin+"/v1/replay", strings.NewReader(bad))
		req.Header.Set("Authorization", "Bearer "+tn.token)
		if a := tn.do(req); a.Status != http.StatusBadRequest {
			t.Fatalf("replay %s: %d, want 400", bad, a.Status)
		}
	}
}

func TestSyncModeRelaysTheHandlersAnswer(t *testing.T) {
	h := newHandler(t)
	slow := make(chan struct{})
	h.setAnswer(func(d delivery) (int, string) {
		if strings.Contains(string(d.Body), "slow") {
			<-slow
		}
		return 201, `{"made":true}`
	})
	// The handler's Content-Type goes with its answer: a Slack command's
	// JSON answer sent as text/plain would show as text.
	const ctype = "application/json; charset=utf-8"
	h.ctype = ctype
	tn := startTestNode(t, "", h.url)
	body := []byte(`{"id":"s1"}`)
	a := tn.post("sync", body, tn.signed(body, "msg_sync"))
	if a.Status != 201 || a.Raw != `{"made":true}` || a.Header.Get("Content-Type") != ctype {
		t.Fatalf("sync answer: %d %q %q", a.Status, a.Raw, a.Header.Get("Content-Type"))
	}
	// A duplicate of a done sync event replays the cached answer.
	a = tn.post("sync", body, tn.signed(body, "msg_sync"))
	if a.Status != 201 || a.Raw != `{"made":true}` || a.Header.Get("Content-Type") != ctype {
		t.Fatalf("cached answer: %d %q %q", a.Status, a.Raw, a.Header.Get("Content-Type"))
	}
	// A duplicate while the handler still works gets 409.
	slowBody := []byte(`{"id":"slow"}`)
	done := make(chan answer, 1)
	go func() { done <- tn.post("sync", slowBody, tn.signed(slowBody, "msg_slow")) }()
	tn.waitState("sync:msg_slow", engine.StateProcessing)
	if a := tn.post("sync", slowBody, tn.signed(slowBody, "msg_slow")); a.Status != http.StatusConflict {
		t.Fatalf("duplicate while processing: %d %s, want 409", a.Status, a.Raw)
	}
	close(slow)
	if a := <-done; a.Status != 201 {
		t.Fatalf("slow sync answer %d %s", a.Status, a.Raw)
	}
}

func TestHealthEndpoints(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	for _, p := range []string{"/livez", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, tn.intake+p, nil)
		// The public listener says ok and no more: the reason names the
		// cluster's members (the admin listener's /readyz gives it).
		if a := tn.do(req); a.Status != 200 || a.Raw != "ok\n" {
			t.Fatalf("%s: %d %q, want 200 \"ok\"", p, a.Status, a.Raw)
		}
	}
}

func TestAdminNeedsAToken(t *testing.T) {
	clk := newFakeClock()
	tn, _ := startAdminNode(t, "", withAuthClock(clk.Now))
	routes := []struct{ method, path string }{
		{"GET", "/v1/status"}, {"GET", "/v1/events"}, {"GET", "/v1/events/orders:x"}, {"POST", "/v1/replay"},
		{"POST", "/v1/cluster/join"}, {"DELETE", "/v1/cluster/peers/x"}, {"GET", "/v1/backup"},
		{"GET", "/debug/pprof/"}, {"GET", "/livez"}, {"GET", "/readyz"},
	}
	for _, r := range routes {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + tn.token + "x", "Bearer " + tn.token[:len(tn.token)-1], "Basic " + tn.token} {
			// Each wrong token on its own: the backoff after several is
			// TestAdminAuthBacksOff's. An hour on, the client is forgotten.
			clk.Advance(time.Hour)
			req, _ := http.NewRequest(r.method, tn.admin+r.path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			if a := tn.do(req); a.Status != http.StatusUnauthorized {
				t.Fatalf("%s %s with %q: %d, want 401", r.method, r.path, auth, a.Status)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, tn.admin+"/metrics", nil)
	if a := tn.do(req); a.Status != 200 || !strings.Contains(a.Raw, "oncehook_config_last_reload_successful 1") {
		t.Fatalf("metrics: %d", a.Status)
	}
	// The admin API is not reachable through the intake port.
	req, _ = http.NewRequest(http.MethodGet, tn.intake+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+tn.token)
	if a := tn.do(req); a.Status != http.StatusNotFound {
		t.Fatalf("admin route on the intake port: %d", a.Status)
	}
}

// TestSecretsNeverLeak: no output of the node (its answers to forged
// deliveries and to wrong admin tokens, the admin API, the metrics and its
// log) holds any 8 bytes of a secret, of an admin token (the current one or
// the one a reload replaced), of the hex of the secret's key, or of the
// signature the secret makes for a forged delivery (which would let the
// forger send it signed).
func TestSecretsNeverLeak(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	var seen []string
	body := orderBody("evt_leak", "obj_leak", 1)
	seen = append(seen, tn.post("orders", body, tn.signed(body, "msg_leak")).Raw)
	forgedAt := time.Now()
	seen = append(seen, tn.post("orders", body, signStandard(t, "whsec_"+strings.Repeat("QkJC", 8), body, "msg_leak2", forgedAt)).Raw)
	tn.waitState("orders:msg_leak", engine.StateDone)
	// A random admin token, so that any 8 bytes of it in the output are a
	// leak and not a word the output uses anyway; the one it replaces is
	// presented after the reload, and so are near misses of the new one.
	oldToken := tn.token
	tn.token = rand.Text() + rand.Text()
	mustWrite(t, filepath.Join(tn.dir, "admin.token"), tn.token+"\n")
	tn.n.reload(tn.cfgPath)
	near := []byte(tn.token)
	near[len(near)-1] ^= 1
	for _, wrong := range []string{oldToken, string(near), tn.token[:len(tn.token)-1]} {
		req, _ := http.NewRequest(http.MethodGet, tn.admin+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+wrong)
		a := tn.do(req)
		if a.Status != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d %s", a.Status, a.Raw)
		}
		seen = append(seen, a.Raw)
	}
	for _, p := range []string{"/v1/status", "/v1/events", "/v1/events/orders:msg_leak?body=1", "/metrics", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, tn.admin+p, nil)
		req.Header.Set("Authorization", "Bearer "+tn.token)
		a := tn.do(req)
		if a.Status != http.StatusOK {
			t.Fatalf("%s with the new token: %d %s", p, a.Status, a.Raw)
		}
		seen = append(seen, a.Raw)
	}
	seen = append(seen, tn.logs())
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(tn.secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	// Any 8 bytes of the random secret or token, as written or as the hex
	// of the secret's key: a prefix logged "to tell tokens apart" leaks too.
	var realSig string
	for _, hd := range signStandard(t, tn.secret, body, "msg_leak2", forgedAt) {
		if hd.Name == "webhook-signature" {
			realSig = strings.TrimPrefix(hd.Value, "v1,")
		}
	}
	if realSig == "" {
		t.Fatal("no webhook-signature from the signer")
	}
	realSum, err := base64.StdEncoding.DecodeString(realSig)
	if err != nil {
		t.Fatal(err)
	}
	var needles []string
	for _, s := range []string{tn.secret, tn.token, oldToken, hex.EncodeToString(raw), realSig, hex.EncodeToString(realSum)} {
		for i := 0; i+8 <= len(s); i++ {
			// The tests' fixed token holds "0123456789": its windows of
			// digits alone are any number's, not the token's.
			if w := s[i : i+8]; s != oldToken || strings.ContainsFunc(w, unicode.IsLetter) {
				needles = append(needles, w)
			}
		}
	}
	needles = append(needles, "whsec_stripe_test_secret")
	for i, s := range seen {
		for _, needle := range needles {
			if strings.Contains(s, needle) {
				t.Fatalf("output %d contains %q, part of a secret", i, needle)
			}
		}
	}
}

// TestClaimNotCommittedNamesTheReason: the sender's 503 says which kind of
// "not committed" it met, and an unknown outcome is not called a loss of
// quorum (the command may still commit).
func TestClaimNotCommittedNamesTheReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("wait for commit: deadline: %w", cluster.ErrIndeterminate), "commit outcome unknown"},
		{fmt.Errorf("queue command: %w", cluster.ErrNoLeader), "no leader (election in progress or no quorum)"},
		{fmt.Errorf("claim: %w", cluster.ErrRemoved), "this node was removed from the cluster (send to another node)"},
		{fmt.Errorf("dial leader: %w: %w", cluster.ErrPeerUnproven, cluster.ErrNoLeader), "the leader refused this node's cluster handshake"},
		{fmt.Errorf("dial leader: %w: %w: %w", cluster.ErrPeerUnproven, cluster.ErrPeerBusy, cluster.ErrNoLeader), "the leader takes no more cluster connections from this node's address"},
		{fmt.Errorf("relay: %w", cluster.ErrNotLeader), "leadership moved"},
		{fmt.Errorf("claim: %w", cluster.ErrShutdown), "node shutting down"},
		{errors.New("disk on fire"), ""},
	} {
		got := claimNotCommitted(c.err)
		if c.want == "" {
			if got != "" {
				t.Errorf("%v: %q, want none (logged as a failure)", c.err, got)
			}
			continue
		}
		if !strings.HasPrefix(got, c.want) || !strings.HasSuffix(got, "retry") {
			t.Errorf("%v: %q, want %q... retry", c.err, got, c.want)
		}
	}
}
