package systest

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"oncehook/internal/testcluster"
)

// TestPauseSurvivesALeaderKill: a source paused through a follower's CLI
// stays paused on the leader elected after the old one is killed (SIGKILL):
// claims still get 202 and nothing is delivered; after a resume every event
// is delivered once.
func TestPauseSurvivesALeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns three processes")
	}
	rec := newRecorder(t)
	// A second source, never paused: its deliveries show that the leader's
	// forwarder is running and has leased past the paused events.
	c := startClusterWith(t, 3, rec.url, fmt.Sprintf(`
[[source]]
name = "other"
provider = "standard"
secret_files = ["orders.secret"]
forward = %q
`, rec.url+"/other"))
	leader := c.Leader()
	follower := c.Other(leader)
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(filepath.Dir(follower.Cfg), "admin.token"))
	out, code := run(t, follower.Dir, "pause", "-addr", follower.Admin, "-source", "orders", "-reason", "handler deploy")
	if code != 0 || !strings.Contains(out, `"changed": true`) {
		t.Fatalf("pause through %s: exit %d\n%s", follower.ID, code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var keys []string
	send := func(nd *clusterNode, id string) {
		t.Helper()
		if code := c.send(ctx, nd, id); code != 202 {
			t.Fatalf("send %s through %s while paused: %d, want 202", id, nd.ID, code)
		}
		keys = append(keys, "orders:"+id)
	}
	for i := range 10 {
		send(follower, fmt.Sprintf("p_before_%d", i))
	}
	// held checks, on the leader nd, that every key is pending with no
	// attempt and that the handler has received none of them, once an event
	// of the other source claimed after them was delivered: the forwarder,
	// leasing oldest first, has passed them. (The leader proposes no lease
	// entry at all while only paused events are pending, so waiting for one
	// would wait for nothing.)
	others := 0
	held := func(nd *clusterNode) {
		t.Helper()
		others++
		id := fmt.Sprintf("o_%d", others)
		if code := c.sendTo(ctx, nd, "other", id, []byte(fmt.Sprintf(`{"type":"other","id":%q}`, id))); code != 202 {
			t.Fatalf("send %s to the other source through %s: %d, want 202", id, nd.ID, code)
		}
		testcluster.WaitFor(t, "other:"+id+" delivered", 20*time.Second, func() bool { return rec.count("other:"+id) == 1 })
		for _, k := range keys {
			testcluster.WaitFor(t, k+" committed on "+nd.ID, 20*time.Second, func() bool { return c.eventState(nd, k) != "" })
			code, b := get("http://"+nd.Admin+"/v1/events/"+k, c.Token)
			var ev struct {
				State    string
				Attempts int
			}
			if code != 200 || json.Unmarshal(b, &ev) != nil || ev.State != "pending" || ev.Attempts != 0 {
				t.Fatalf("%s on %s while paused: %d %s", k, nd.ID, code, b)
			}
			if n := rec.count(k); n != 0 {
				t.Fatalf("%s was delivered %d times while paused", k, n)
			}
		}
	}
	held(leader)

	c.KillNode(leader)
	newLeader := c.Leader()
	if newLeader == leader {
		t.Fatal("the killed node is still the leader")
	}
	code2, b := get("http://"+newLeader.Admin+"/v1/status", c.Token)
	var st struct {
		Sources map[string]struct {
			Paused  bool
			By      string
			Reason  string
			Backlog int
		}
	}
	if code2 != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("status of %s: %d %s", newLeader.ID, code2, b)
	}
	if s := st.Sources["orders"]; !s.Paused || s.By != "systest" || s.Reason != "handler deploy" || s.Backlog != len(keys) {
		t.Fatalf("orders on the new leader %s: %+v", newLeader.ID, s)
	}
	for i := range 10 {
		send(newLeader, fmt.Sprintf("p_after_%d", i))
	}
	held(newLeader)

	other := c.Other(leader, newLeader)
	out, code = run(t, other.Dir, "resume", "-addr", other.Admin, "-source", "orders", "-reason", "deployed")
	if code != 0 || !strings.Contains(out, `"changed": true`) {
		t.Fatalf("resume through %s: exit %d\n%s", other.ID, code, out)
	}
	for _, k := range keys {
		testcluster.WaitFor(t, k+" done", 30*time.Second, func() bool { return c.eventState(newLeader, k) == "done" })
	}
	for _, k := range keys {
		if n := rec.count(k); n != 1 {
			t.Errorf("%s delivered %d times, want once", k, n)
		}
	}
}
