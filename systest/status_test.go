package systest

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"oncehook/internal/testcluster"
)

// TestStatusListsEveryMember: `oncehook status`, asked of a follower, prints
// every member of a three-node cluster with its own role, term, indexes and
// last contact; after a write every member's commit and applied indexes are
// equal.
func TestStatusListsEveryMember(t *testing.T) {
	rec := newRecorder(t)
	c := startCluster(t, 3, rec.url)
	leader := c.Leader()
	follower := c.Other(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code := c.send(ctx, follower, "evt_status"); code != 202 {
		t.Fatalf("send through %s: %d", follower.ID, code)
	}
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(filepath.Dir(follower.Cfg), "admin.token"))
	var out, why string
	defer func() {
		if t.Failed() {
			t.Logf("last status output (%s):\n%s", why, out)
		}
	}()
	testcluster.WaitFor(t, "status listing every member, indexes equal", 20*time.Second, func() bool {
		var code int
		out, code = run(t, follower.Dir, "status", "-addr", follower.Admin)
		why = statusRowsProblem(out, code, leader.ID)
		return why == ""
	})
}

// statusRowsProblem says what is wrong with `oncehook status` output for a
// healthy three-node cluster led by leaderID, or "".
func statusRowsProblem(out string, code int, leaderID string) string {
	if code != 0 {
		return "exit code not 0"
	}
	rows := map[string][]string{}
	header := false
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "NODE":
			header = strings.Join(f, " ") == "NODE ADDRESS SUFFRAGE ROLE TERM COMMIT APPLIED LAST CONTACT"
		case header && len(f) == 8 && strings.HasPrefix(f[0], "node"):
			rows[f[0]] = f
		}
	}
	if !header || len(rows) != 3 {
		return "not three member rows under the header"
	}
	if strings.Contains(out, "no answer from") {
		return "a member did not answer"
	}
	for id, f := range rows {
		role, commit, applied := f[3], f[5], f[6]
		if (id == leaderID) != (role == "leader") || (role != "leader" && role != "follower") {
			return id + " has role " + role
		}
		if commit == "-" || commit == "0" || commit != applied {
			return id + ": commit " + commit + ", applied " + applied
		}
	}
	return ""
}

// TestAMemberDown: with one member stopped, `oncehook status` prints the
// cluster and exits 1 naming the member that did not answer, so a script
// can tell; and `oncehook raft transfer-leader -to` that member says it is
// not running instead of waiting for it to catch up.
func TestAMemberDown(t *testing.T) {
	rec := newRecorder(t)
	c := startCluster(t, 3, rec.url)
	leader := c.Leader()
	down := c.Other(leader)
	t.Setenv("ONCEHOOK_TOKEN_FILE", filepath.Join(filepath.Dir(leader.Cfg), "admin.token"))
	testcluster.WaitFor(t, "status of the healthy cluster exits 0", 20*time.Second, func() bool {
		_, code := run(t, leader.Dir, "status", "-addr", leader.Admin)
		return code == 0
	})
	if err := down.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-down.Proc.Done():
	case <-time.After(testcluster.StopTimeout):
		t.Fatalf("%s did not stop within %s of SIGTERM", down.ID, testcluster.StopTimeout)
	}
	out, code := run(t, leader.Dir, "status", "-addr", leader.Admin)
	if code != 1 || !strings.Contains(out, "not healthy: member "+down.ID+" did not answer") || !strings.Contains(out, leader.ID) {
		t.Errorf("status with %s down: exit %d\n%s", down.ID, code, out)
	}
	out, code = run(t, leader.Dir, "raft", "transfer-leader", "-addr", leader.Admin, "-to", down.ID)
	if code == 0 || !strings.Contains(out, "it is not running") {
		t.Errorf("transfer-leader -to %s, stopped: exit %d\n%s", down.ID, code, out)
	}
	if l := c.Leader(); l != leader {
		t.Errorf("the leader is %s after the refused transfer, want %s", l.ID, leader.ID)
	}
}
