package adminclient

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"oncehook/admin"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/client/*.golden from the current output")

// The admin answers the client commands below read: a current node (three
// members, one unreachable, a paused source, counts past a million) and an
// older one (members without their own role, sources as bare counts).
const (
	statusNow = `{"node_id":"node1","state":"leader","leader_id":"node1","leader_address":"127.0.0.1:7000",
"term":7,"commit_index":1234567,"applied_index":1234567,"last_contact":"0s","leader_changes":2,"peers_not_storing":["node2"],"cluster_id":"5f0c2a9e8d7b4c31a2e6f9b0d1c3e5a7",
"nodes":[{"id":"node1","address":"127.0.0.1:7000","suffrage":"Voter","state":"leader","role":"leader","term":7,"commit_index":1234567,"applied_index":1234567,"last_contact":"0s"},
{"id":"node2","address":"127.0.0.1:7001","suffrage":"Voter","state":"follower","role":"follower","term":7,"commit_index":1234560,"applied_index":1234555,"last_contact":"12ms"},
{"id":"node3","address":"127.0.0.1:7002","suffrage":"Nonvoter","state":"follower","role":"unknown","error":"dial tcp 127.0.0.1:7012: connect: connection refused"}],
"proposed":{"batches":10,"commands":55},"relayed":{"batches":0,"commands":0},"claim_leases":{"offered":3,"leased":2},
"counts":{"dead":2,"done":1500000,"pending":3,"processing":1,"stale":0},
"sources":{"stripe":{"events":1500004,"paused":false,"backlog":3,"oldest_pending_age_seconds":75.4},
"orders":{"events":2,"paused":true,"since":"2026-11-30T10:00:00Z","by":"ops","reason":"handler deploy","backlog":0,"oldest_pending_age_seconds":0},
"quiet":{"events":0,"paused":false,"backlog":0,"oldest_pending_age_seconds":0},
"renamed":{"events":4,"paused":false,"backlog":4,"oldest_pending_age_seconds":30,"unconfigured":true}},
"version":"1.4.0","ready":true,"ready_reason":"caught up"}`
	statusOld = `{"node_id":"node2","state":"follower","leader_id":"node1","leader_address":"127.0.0.1:7000",
"term":3,"commit_index":42,"applied_index":40,"last_contact":"35ms",
"nodes":[{"id":"node1","address":"127.0.0.1:7000","suffrage":"Voter","state":"leader"},
{"id":"node2","address":"127.0.0.1:7001","suffrage":"Voter","state":"follower"}],
"counts":{"dead":0,"done":40,"pending":0,"processing":0,"stale":1},
"sources":{"stripe":41},"version":"1.0.0","ready":false,"ready_reason":"applying the log"}`
	statusUpgrading = `{"node_id":"node1","state":"follower","leader_id":"node2","leader_address":"127.0.0.1:7001",
"term":5,"commit_index":90,"applied_index":90,"last_contact":"8ms",
"nodes":[{"id":"node1","address":"127.0.0.1:7000","suffrage":"Voter","state":"follower","role":"follower","term":5,"commit_index":90,"applied_index":90,"last_contact":"8ms","format":10},
{"id":"node2","address":"127.0.0.1:7001","suffrage":"Voter","state":"leader","role":"leader","term":5,"commit_index":90,"applied_index":90,"last_contact":"0s"},
{"id":"node3","address":"127.0.0.1:7002","suffrage":"Voter","state":"follower","role":"follower","term":5,"commit_index":90,"applied_index":90,"last_contact":"5ms","format":10}],
"counts":{"dead":0,"done":90,"pending":0,"processing":0,"stale":0},
"sources":{},"version":"1.5.0","ready":true,"ready_reason":"leader node2"}`
	statusRemoved = `{"node_id":"node4","state":"follower","leader_id":"","leader_address":"",
"term":2,"commit_index":4,"applied_index":4,"last_contact":"3.129s",
"nodes":[{"id":"node1","address":"127.0.0.1:7000","suffrage":"Voter","state":"unknown","role":"leader","term":2,"commit_index":9,"applied_index":9,"last_contact":"0s"}],
"counts":{"dead":0,"done":0,"pending":0,"processing":0,"stale":0},
"sources":{},"version":"1.4.0","ready":false,"ready_reason":"not a member of the cluster configuration (removed): it takes no part in commits"}`
	eventAnswer = `{"key":"stripe:evt_1","source":"stripe","state":"dead","attempts":5,"token":9007199254740993,
"created_at":"2026-11-30T10:00:00Z","updated_at":"2026-11-30T10:05:00.123456789Z","expires_at":"2026-12-07T10:00:00Z",
"last_error":"status 500","step":"charge","audit":[{"at":"2026-11-30T10:05:00Z","who":"ops","action":"replay","reason":"fixed","from":"dead"}],
"attempts_history":[{"at":"2026-11-30T10:01:00Z","duration_ms":12.5,"status":500,"error":"status 500","body":"no"}],
"future_field":{"z":1,"a":[true,null]}}`
	replayAnswer        = `{"replayed":1,"keys":["stripe:evt_1"]}`
	replaySkippedAnswer = `{"replayed":1,"keys":["stripe:evt_1"],"skipped":[{"key":"stripe:evt_2","error":"not found"}]}`
	pauseAnswer         = `{"source":"orders","paused":true,"changed":true}`
	// A replay by state lists the first skipped events and counts them all.
	replayStateSkippedAnswer  = `{"replayed":1,"keys":["pr:evt_pr3"],"skipped":[{"key":"pr:evt_pr1","error":"its payload was dropped after its source's payload_retention; there is nothing to deliver again"}],"skipped_count":1001}`
	replayDryRunSkippedAnswer = `{"dry_run":true,"would_replay":0,"keys":[],"skipped":[{"key":"pr:evt_pr1","error":"its payload was dropped after its source's payload_retention; there is nothing to deliver again"},{"key":"pr:evt_pr2","error":"its payload was dropped after its source's payload_retention; there is nothing to deliver again"}],"skipped_count":2}`
)

// TestClientAnswersPrint: the client prints the admin API's answers exactly
// as testdata/client/*.golden records (the table of `status`, and
// the JSON of `status -json`, `events show`, `replay` and `pause`).
// answering returns a client of a test server that answers "METHOD /path"
// with the JSON answers holds (404 for any other), as the node would.
func answering(t *testing.T, answers map[string]string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	t.Setenv("ONCEHOOK_TOKEN_FILE", "")
	t.Setenv("ONCEHOOK_TOKEN", "test-token")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	mk := Flags(fs)
	if err := fs.Parse([]string{"-addr", srv.URL}); err != nil {
		t.Fatal(err)
	}
	c, err := mk()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClientAnswersPrint(t *testing.T) {
	answers := map[string]string{}
	c := answering(t, answers)
	ctx := t.Context()

	tests := []struct {
		golden string
		route  string
		answer string
		call   func(w io.Writer) error
	}{
		// Printed, then an error when the answer is not a healthy
		// cluster's: the command exits 1.
		{"status", "GET /v1/status", statusNow, notHealthyAfter("member node3 did not answer", func(w io.Writer) error { return c.Status(ctx, w, false) })},
		{"status_json", "GET /v1/status", statusNow, notHealthyAfter("member node3 did not answer", func(w io.Writer) error { return c.Status(ctx, w, true) })},
		{"status_upgrading", "GET /v1/status", statusUpgrading, func(w io.Writer) error { return c.Status(ctx, w, false) }},
		{"status_removed_node", "GET /v1/status", statusRemoved, notHealthyAfter("this node is not ready (not a member", func(w io.Writer) error { return c.Status(ctx, w, false) })},
		{"status_older_node", "GET /v1/status", statusOld, notHealthyAfter("this node is not ready (applying the log)", func(w io.Writer) error { return c.Status(ctx, w, false) })},
		{"status_older_node_json", "GET /v1/status", statusOld, notHealthyAfter("this node is not ready (applying the log)", func(w io.Writer) error { return c.Status(ctx, w, true) })},
		{"events_show", "GET /v1/events/stripe:evt_1", eventAnswer, func(w io.Writer) error { return c.ShowEvent(ctx, w, "stripe:evt_1", false) }},
		{"replay", "POST /v1/replay", replayAnswer, func(w io.Writer) error {
			return c.Replay(ctx, w, admin.ReplayRequest{Keys: []string{"stripe:evt_1"}, Reason: "fixed"})
		}},
		{"pause", "POST /v1/sources/orders/pause", pauseAnswer, func(w io.Writer) error { return c.Pause(ctx, w, "orders", "deploy", true) }},
		{"list_peers", "GET /v1/status", statusNow, func(w io.Writer) error { return c.ListPeers(ctx, w) }},
		{"list_peers_removed_node", "GET /v1/status", statusRemoved, func(w io.Writer) error { return c.ListPeers(ctx, w) }},
		{"replay_skipped", "POST /v1/replay", replaySkippedAnswer, func(w io.Writer) error {
			// Printed, then an error: the command exits 1.
			err := c.Replay(ctx, w, admin.ReplayRequest{Keys: []string{"stripe:evt_1", "stripe:evt_2"}, Reason: "fixed"})
			if err == nil || !strings.Contains(err.Error(), "1 of the keys not replayed") {
				return fmt.Errorf("replay with a skipped key: %v, want an error", err)
			}
			return nil
		}},
		{"replay_state_skipped", "POST /v1/replay", replayStateSkippedAnswer, func(w io.Writer) error {
			// Printed, then an error counting every skipped event, not the
			// listed ones only: the command exits 1.
			err := c.Replay(ctx, w, admin.ReplayRequest{State: "done", Source: "pr", Reason: "bulk"})
			if err == nil || err.Error() != "1001 of the keys not replayed (see skipped)" {
				return fmt.Errorf("replay by state with skipped events: %v, want an error counting 1001", err)
			}
			return nil
		}},
		{"replay_dry_run_skipped", "POST /v1/replay", replayDryRunSkippedAnswer, func(w io.Writer) error {
			// A dry run that finds events the replay would skip exits 1
			// too, as the replay would.
			err := c.Replay(ctx, w, admin.ReplayRequest{State: "done", Source: "pr", Reason: "bulk", DryRun: true})
			if err == nil || err.Error() != "2 of the keys would not be replayed (see skipped)" {
				return fmt.Errorf("dry run with skipped events: %v, want an error", err)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			clear(answers)
			answers[tc.route] = tc.answer
			var out bytes.Buffer
			if err := tc.call(&out); err != nil {
				t.Fatalf("%s: %v", tc.golden, err)
			}
			path := filepath.Join("testdata", "client", tc.golden+".golden")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("%s printed\n%s\nwant (%s)\n%s", tc.golden, out.String(), path, want)
			}
		})
	}
}

// notHealthyAfter wraps a status call that must print its answer and then
// fail with ErrNotHealthy saying why.
func notHealthyAfter(why string, call func(io.Writer) error) func(io.Writer) error {
	return func(w io.Writer) error {
		var nh ErrNotHealthy
		if err := call(w); !errors.As(err, &nh) || !strings.Contains(nh.Why, why) {
			return fmt.Errorf("status: %v, want it not healthy: %s", err, why)
		}
		return nil
	}
}

// TestCellEscapesControlCharacters: text others wrote reaches a terminal
// table with its control and format characters escaped, so an escape sequence in a
// pause reason cannot clear the screen or rewrite the table; plain text is
// printed as it is.
func TestCellEscapesControlCharacters(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"handler deploy", "handler deploy"},
		{`status 500 "quoted"`, `status 500 "quoted"`},
		{"café ✓", "café ✓"},
		{"\x1b[2J\x1b[Hall good", `\x1b[2J\x1b[Hall good`},
		{"two\tcolumns\nand a line", `two\tcolumns\nand a line`},
		{"bell\a and \u0085", `bell\a and \u0085`},
		{"bad \xff byte", `bad \xff byte`},
		{"ok \u202egnp.exe", `ok \u202egnp.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
	} {
		if got := cell(c.in); got != c.want {
			t.Errorf("cell(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestStatusTableEscapesAPauseReason: the status table prints a pause's
// "by" and "reason" through cell.
func TestStatusTableEscapesAPauseReason(t *testing.T) {
	answer := strings.Replace(statusNow, `"by":"ops","reason":"handler deploy"`, `"by":"ops\u0007","reason":"\u001b[2Jall good"`, 1)
	if answer == statusNow {
		t.Fatal("the test answer did not change")
	}
	c := answering(t, map[string]string{"GET /v1/status": answer})
	var out bytes.Buffer
	if err := c.Status(t.Context(), &out, false); err != nil && !errors.As(err, new(ErrNotHealthy)) {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "\x1b\a") || !strings.Contains(out.String(), `ops\a`) || !strings.Contains(out.String(), `\x1b[2Jall good`) {
		t.Fatalf("status table:\n%s", out.String())
	}
}

// TestPurgeCutShortPrintsWhatWent: a purge whose last command's outcome is
// unknown (the leader lost) answers 503 with the keys it did delete; the
// client prints them before it reports the error, so the operator learns
// which dead letters are gone. A plain refusal prints nothing.
func TestPurgeCutShortPrintsWhatWent(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		printed      string // "" for nothing
	}{
		{"cut short", `{"error":"commit outcome unknown (leader changed or commit timed out): not acknowledged, retry","purged":2,"keys":["gh:a","gh:b"]}`, `"purged": 2`},
		{"refused", `{"error":"no leader (election in progress or no quorum): not committed, retry","purged":0,"keys":[]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, answeringAlways(t, http.StatusServiceUnavailable, tc.answer), "test-token")
			var out bytes.Buffer
			err := c.Purge(t.Context(), &out, admin.PurgeRequest{State: "dead", Before: "1h", Reason: "r"})
			if err == nil || !strings.Contains(err.Error(), ": 503: ") {
				t.Fatalf("Purge = %v, want the 503 as an error", err)
			}
			switch {
			case tc.printed == "" && out.Len() != 0:
				t.Fatalf("printed %q for a refusal", out.String())
			case tc.printed != "" && (!strings.Contains(out.String(), tc.printed) || !strings.Contains(out.String(), "gh:b")):
				t.Fatalf("printed %q, want the keys deleted", out.String())
			}
		})
	}
}
