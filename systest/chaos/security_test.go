package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestCanarySecretNeverLeaks runs a node whose source secrets are canaries
// through valid, wrongly signed and duplicate deliveries, a reload, every
// admin read route, then stops it and looks for the canaries in its log, every
// admin answer, /metrics, the backup and every file of its data dir
// (docs/architecture.md, Invariants, 7; the chaos scenarios do the same
// for the three-node logs and data dirs).
func TestCanarySecretNeverLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a node")
	}
	s := newSingle(t, true)
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("canary-%d", i)
		b := []byte(fmt.Sprintf(`{"id":%q,"marker":"CANARY-BODY"}`, id))
		s.post("POST", "/in/orders", b, sign(t, s.secret, b, id, time.Now()), nil)
		s.post("POST", "/in/orders", b, sign(t, s.secret, b, id, time.Now()), nil)
		s.post("POST", "/in/orders", b, sign(t, "whsec_"+b64("CANARY-wrong-secret-0123456789"), b, id+"x", time.Now()), nil)
		sb := []byte(fmt.Sprintf(`{"id":"evt_%d"}`, i))
		s.post("POST", "/in/stripe", sb, signStripe(t, sb, time.Now()), nil)
	}
	waitDelivered(t, s, "orders:canary-19", 1)
	s.proc.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	var answers []string
	for _, p := range []string{"/v1/status", "/v1/events?limit=1000", "/v1/events/orders:canary-3?body=1",
		"/v1/events/stripe:evt_3?body=1", "/metrics", "/readyz", "/livez", "/debug/pprof/cmdline", "/v1/backup"} {
		code, b := s.get("http://"+s.admin+p, true)
		if code != 200 {
			t.Errorf("%s: %d", p, code)
		}
		answers = append(answers, string(b))
	}
	stopSingle(s)
	needles := append(canaryNeedles(), []byte(stripeSecret), []byte(b64("CANARY-wrong-secret-0123456789")), []byte(adminToken))
	for i, a := range answers {
		for _, n := range needles {
			if strings.Contains(a, string(n)) {
				t.Errorf("admin answer %d contains a secret", i)
			}
		}
	}
	hits, where := grepTree([]string{s.data, s.logPath}, needles)
	if hits > 0 {
		t.Errorf("secrets found in %v", where)
	}
	// The log is not empty (the test would prove nothing otherwise).
	if fi, err := os.Stat(s.logPath); err != nil || fi.Size() < 1000 {
		t.Fatalf("node log missing or tiny: %v", err)
	}
}

// TestFileModes: the data dir and every directory under it are 0700, every
// file 0600 (bbolt files, raft log, snapshots, markers).
func TestFileModes(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a node")
	}
	s := newSingle(t, true)
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("mode-%d", i)
		b := []byte(fmt.Sprintf(`{"id":%q}`, id))
		s.post("POST", "/in/orders", b, sign(t, s.secret, b, id, time.Now()), nil)
	}
	waitDelivered(t, s, "orders:mode-9", 1)
	stopSingle(s) // a clean close writes its markers too
	seen := checkModes(t, s.data)
	if seen < 3 {
		t.Fatalf("only %d entries under the data dir", seen)
	}
	for _, f := range []string{"fsm.db", filepath.Join("raft", "logs.db")} {
		if _, err := os.Stat(filepath.Join(s.data, f)); err != nil {
			t.Logf("note: %s: %v", f, err)
		}
	}
}

// checkModes walks a data dir: directories must be 0700, files 0600, raft's
// snapshot store included (hashicorp/raft's FileSnapshotStore makes its
// entries 0755/0644; cluster tightens them). It returns how many entries it saw.
func checkModes(t *testing.T, dir string) int {
	seen := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		fi, _ := d.Info()
		mode := fi.Mode().Perm()
		seen++
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if mode != want {
			t.Errorf("%s: mode %#o, want %#o", p, mode, want)
		}
		return nil
	})
	return seen
}

// TestWorldReadableSecretRefused: a secret or token file readable by others
// stops the node at start, naming the file and never its content.
func TestWorldReadableSecretRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a node")
	}
	for _, f := range []string{"orders.secret", "admin.token", "stripe.secret"} {
		t.Run(f, func(t *testing.T) {
			s := newSingle(t, false)
			path := filepath.Join(s.dir, f)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			p, exited := serveExit(t, s.cfg)
			if !exited {
				t.Fatalf("the node started with a world-readable %s", f)
			}
			out, err := p.Output(), p.Err()
			if err == nil {
				t.Fatalf("exit 0 with a world-readable %s: %s", f, out)
			}
			if !strings.Contains(out, f) {
				t.Errorf("the refusal does not name the file: %s", out)
			}
			for _, n := range append(canaryNeedles(), []byte(stripeSecret), []byte(adminToken)) {
				if strings.Contains(out, string(n)) {
					t.Errorf("the refusal prints the secret")
				}
			}
			if _, err := os.Stat(filepath.Join(s.data, "fsm.db")); err == nil {
				t.Errorf("state was created before the refusal")
			}
		})
	}
}

// TestAdminAuthOnEveryRoute: every admin route but /metrics refuses a missing,
// wrong or padded token with 401 (or, once this address has failed several
// times, 429 with Retry-After: the listener backs off repeated failures), and
// none is reachable on the intake port.
func TestAdminAuthOnEveryRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a node")
	}
	s := newSingle(t, true)
	defer stopSingle(s)
	routes := [][2]string{{"GET", "/livez"}, {"GET", "/readyz"}, {"GET", "/v1/status"}, {"GET", "/v1/events"},
		{"GET", "/v1/events/orders:x"}, {"POST", "/v1/replay"}, {"POST", "/v1/cluster/join"},
		{"DELETE", "/v1/cluster/peers/node2"}, {"POST", "/v1/cluster/leader"}, {"GET", "/v1/backup"}, {"GET", "/debug/pprof/"},
		{"GET", "/debug/pprof/cmdline"}, {"GET", "/debug/pprof/symbol"}}
	for _, rt := range routes {
		// (A token with trailing spaces is the same token: HTTP strips
		// optional whitespace around a field value before the server sees it.
		// The scheme is case-insensitive, RFC 9110 11.1: "bearer" is no
		// mistake, and RFC 6750 allows more than one space after it; the
		// admin package's TestBearerSchemeAnyCase checks both.)
		for _, auth := range []string{"", "Bearer wrong-token", "Bearer " + adminToken[:len(adminToken)-1], "Bearer " + adminToken + "x",
			"bearer " + adminToken + "x", adminToken, "Basic " + b64("chaos:"+adminToken)} {
			req, _ := http.NewRequest(rt[0], "http://"+s.admin+rt[1], strings.NewReader(`{"keys":["orders:x"],"reason":"r","id":"n","address":"a:1"}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := plainClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			backoff := resp.StatusCode == 429 && resp.Header.Get("Retry-After") != ""
			if resp.StatusCode != 401 && !backoff {
				t.Errorf("%s %s with %.12q: %d, want 401 (or 429 with Retry-After)", rt[0], rt[1], auth, resp.StatusCode)
			}
		}
		// Not on the intake port.
		req, _ := http.NewRequest(rt[0], "http://"+s.intake+rt[1], nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if resp, err := plainClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if rt[1] != "/livez" && rt[1] != "/readyz" && resp.StatusCode != 404 {
				t.Errorf("intake port answers %s %s: %d", rt[0], rt[1], resp.StatusCode)
			}
		}
	}
	// /metrics is open by design (no secrets in it: see the canary test).
	if code, _ := s.get("http://"+s.admin+"/metrics", false); code != 200 {
		t.Errorf("/metrics: %d", code)
	}
}

// TestAdminListPaging lists more events than one engine page holds (1000),
// following "next" as a client would, by key and by state.
func TestAdminListPaging(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a node")
	}
	s := newSingle(t, true)
	defer stopSingle(s)
	const n = 1300
	var wg sync.WaitGroup
	ids := make(chan int, n)
	for i := 0; i < n; i++ {
		ids <- i
	}
	close(ids)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				id := fmt.Sprintf("page-%04d", i)
				b := []byte(fmt.Sprintf(`{"id":%q}`, id))
				if a := s.post("POST", "/in/orders", b, sign(t, s.secret, b, id, time.Now()), nil); a.status != 202 {
					t.Errorf("%s: %d", id, a.status)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for s.rec.count("") < n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	list := func(query string) (int, int) { // events seen, pages
		seen := map[string]bool{}
		after := ""
		pages := 0
		for ; pages < 10; pages++ {
			code, b := s.get("http://"+s.admin+"/v1/events?"+query+"&after="+url.QueryEscape(after), true)
			if code != 200 {
				t.Fatalf("list %s: %d %s", query, code, b)
			}
			var res struct {
				Events []finalEvent `json:"events"`
				Next   string       `json:"next"`
			}
			json.Unmarshal(b, &res)
			for _, ev := range res.Events {
				seen[ev.Key] = true
			}
			if res.Next == "" {
				return len(seen), pages + 1
			}
			after = res.Next
		}
		return len(seen), pages
	}
	if got, _ := list("limit=500"); got != n {
		t.Errorf("limit=500: paging by next saw %d of %d events", got, n)
	}
	// Over the engine's page size: served in pages of MaxListLimit with "next".
	if got, _ := list("limit=5000"); got != n {
		t.Errorf("limit=5000: paging by next saw %d of %d events", got, n)
	}
	// With a state the cursor carries (updated_at, key); a key-only cursor
	// once restarted every page at the oldest event.
	if got, pages := list("state=done&limit=500"); got != n {
		t.Errorf("state=done&limit=500: paging by next saw %d of %d events in %d pages", got, n, pages)
	}
}
