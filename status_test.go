package main

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"oncehook/engine"
)

// TestStatusShowsEveryMember: GET /v1/status keeps its fields and adds each
// member's own role, term, indexes and last contact; `oncehook status` prints
// one row per member with them.
func TestStatusShowsEveryMember(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_status", "obj_status", 1)
	tn.post("orders", body, tn.signed(body, "msg_status"))
	tn.waitState("orders:msg_status", engine.StateDone)

	var st struct {
		NodeID       string `json:"node_id"`
		State        string `json:"state"`
		LeaderID     string `json:"leader_id"`
		CommitIndex  uint64 `json:"commit_index"`
		AppliedIndex uint64 `json:"applied_index"`
		Counts       map[string]int
		Nodes        []struct {
			ID, Address, Suffrage, State, Role, Error string
			Term                                      uint64
			CommitIndex                               uint64 `json:"commit_index"`
			AppliedIndex                              uint64 `json:"applied_index"`
			LastContact                               string `json:"last_contact"`
		}
	}
	// The leader's sweeper may propose meanwhile: read until the applied
	// index has caught up with the commit index, as it must.
	waitUntil(t, "a status with every committed entry applied", func() bool {
		if code := tn.adminGet("/v1/status", &st); code != 200 {
			t.Fatalf("GET /v1/status: %d", code)
		}
		return len(st.Nodes) == 1 && st.Nodes[0].AppliedIndex == st.Nodes[0].CommitIndex
	})
	if st.NodeID != "node1" || st.State != "leader" || st.LeaderID != "node1" || st.CommitIndex == 0 || st.Counts["done"] != 1 || len(st.Nodes) != 1 {
		t.Fatalf("status: %+v", st)
	}
	m := st.Nodes[0]
	// A node without [cluster] has no cluster address (raft's in-memory
	// address would be its id).
	if m.ID != "node1" || m.Address != "" || m.Suffrage != "Voter" || m.State != "leader" || m.Role != "leader" || m.Error != "" ||
		m.Term == 0 || m.CommitIndex == 0 || m.AppliedIndex != m.CommitIndex || m.LastContact != "0s" {
		t.Fatalf("member: %+v", m)
	}

	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(tn.dir, "admin.token"))
	var out, errOut bytes.Buffer
	if err := run(ctxTimeout(t, 30*time.Second), []string{"status", "-addr", tn.admin}, &out, &errOut); err != nil {
		t.Fatalf("status: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(out.String(), "\n")
	header := slices.IndexFunc(lines, func(l string) bool {
		return strings.Join(strings.Fields(l), " ") == "NODE ADDRESS SUFFRAGE ROLE TERM COMMIT APPLIED LAST CONTACT"
	})
	if header < 0 || header+1 >= len(lines) {
		t.Fatalf("no member table:\n%s", out.String())
	}
	f := strings.Fields(lines[header+1])
	if len(f) != 8 || f[0] != "node1" || f[1] != "-" || f[2] != "Voter" || f[3] != "leader" || f[5] == "0" || f[5] != f[6] || f[7] != "0s" {
		t.Fatalf("member row %q:\n%s", lines[header+1], out.String())
	}
}

// TestEventsShowTakesFlagsAnywhere: `events show KEY` reads the client
// flags before show, between show and the key, and after the key.
func TestEventsShowTakesFlagsAnywhere(t *testing.T) {
	h := newHandler(t)
	tn := startTestNode(t, "", h.url)
	body := orderBody("evt_show", "obj_show", 1)
	tn.post("orders", body, tn.signed(body, "msg_show"))
	tn.waitState("orders:msg_show", engine.StateDone)
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(tn.dir, "admin.token"))
	t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1") // only -addr leads to the node
	for _, args := range [][]string{
		{"events", "show", "-addr", tn.admin, "orders:msg_show"},
		{"events", "-addr", tn.admin, "show", "orders:msg_show"},
		{"events", "show", "orders:msg_show", "-addr", tn.admin},
	} {
		var out, errOut bytes.Buffer
		if err := run(ctxTimeout(t, 30*time.Second), args, &out, &errOut); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, errOut.String())
		}
		if !strings.Contains(out.String(), `"key": "orders:msg_show"`) {
			t.Fatalf("%q printed:\n%s", args, out.String())
		}
	}
	var out, errOut bytes.Buffer
	err := run(ctxTimeout(t, 30*time.Second), []string{"events", "show", "-addr", tn.admin, "orders:msg_show", "orders:other"}, &out, &errOut)
	if msg, code := exitStatus(err); code != 2 || !strings.Contains(msg, "needs one KEY") {
		t.Fatalf("two keys: exit %d %q, want 2", code, msg)
	}
}
