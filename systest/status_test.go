package systest

import (
	"context"
	"path/filepath"
	"strings"
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
