package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// recordingDrainer stands for the leader's forwarder: it notes each Drain
// and Undrain and whether its node still led when drained.
type recordingDrainer struct {
	n        *Node
	mu       sync.Mutex
	drains   int
	leading  bool // at the last Drain
	undrains int
}

func (d *recordingDrainer) Drain(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drains++
	d.leading = d.n.raft.State() == raft.Leader
	return nil
}

func (d *recordingDrainer) Undrain() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.undrains++
}

func (d *recordingDrainer) counts() (drains, undrains int, leading bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drains, d.undrains, d.leading
}

// TestTransferLeadership: an operator's hand-over drains the leader's
// deliveries while it still leads, then moves leadership to another voter
// (any, or the one named); a follower, an unknown target and a cluster of
// one are refused without draining anything.
func TestTransferLeadership(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30e9)
	li := c.waitLeader(-1)
	leader := c.nodes[li]
	d := &recordingDrainer{n: leader}
	leader.SetDrainer(d)

	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	if _, err := c.nodes[fi].TransferLeadership(ctx, ""); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "leader, "+leader.cfg.ID+" ") {
		t.Errorf("transfer on a follower: %v, want ErrNotLeader naming %s", err, leader.cfg.ID)
	}
	for _, to := range []string{"nobody", leader.cfg.ID} {
		if _, err := leader.TransferLeadership(ctx, to); err == nil {
			t.Errorf("transfer to %q succeeded", to)
		}
	}
	if drains, _, _ := d.counts(); drains != 0 {
		t.Fatalf("refused transfers drained %d times", drains)
	}

	to := c.nodes[fi].cfg.ID
	got, err := leader.TransferLeadership(ctx, to)
	if err != nil {
		t.Fatalf("transfer to %s: %v", to, err)
	}
	if got != to {
		t.Errorf("transfer to %s reports %s", to, got)
	}
	if ni := c.waitLeader(li); ni != fi {
		t.Errorf("leader after the transfer is %s, want %s", c.nodes[ni].cfg.ID, to)
	}
	drains, undrains, leading := d.counts()
	if drains != 1 || !leading || undrains != 0 {
		t.Errorf("drains %d (while leading: %v), undrains %d; want one drain before the hand-over and no undrain", drains, leading, undrains)
	}

	// The new leader hands over to whichever voter is most up to date.
	newLeader := c.nodes[fi]
	if got, err := newLeader.TransferLeadership(ctx, ""); err != nil || got == "" || got == to {
		t.Errorf("transfer to any voter: %q, %v", got, err)
	}
}

func TestTransferLeadershipAlone(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.nodes[c.waitLeader(-1)]
	d := &recordingDrainer{n: leader}
	leader.SetDrainer(d)
	if _, err := leader.TransferLeadership(ctxT(t, 30e9), ""); !errors.Is(err, ErrSingleVoter) {
		t.Errorf("transfer in a cluster of one: %v, want ErrSingleVoter", err)
	}
	if drains, _, _ := d.counts(); drains != 0 {
		t.Errorf("a refused transfer drained")
	}
}

// deadlineDrainer records the deadline a drain is given; limitedDrainer
// adds a DrainLimit.
type deadlineDrainer struct {
	got time.Time
}

func (d *deadlineDrainer) Drain(ctx context.Context) error { d.got, _ = ctx.Deadline(); return nil }
func (d *deadlineDrainer) Undrain()                        {}

type limitedDrainer struct {
	deadlineDrainer
	limit time.Duration
}

func (d *limitedDrainer) DrainLimit() time.Duration { return d.limit }

// TestDrainWaitsForTheSlowestHandler: a drain before a hand-over waits
// drainTimeout, or as long as the Drainer's DrainLimit (the longest
// forward_timeout) when that is longer, so that a delivery its handler may
// still finish is not cut off and sent again after its lease.
func TestDrainWaitsForTheSlowestHandler(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	n := c.nodes[c.waitLeader(-1)]
	plain := &deadlineDrainer{}
	short := &limitedDrainer{limit: time.Second}
	long := &limitedDrainer{limit: 45 * time.Second}
	for _, tc := range []struct {
		name string
		d    Drainer
		got  *time.Time
		want time.Duration
	}{
		{"no limit", plain, &plain.got, drainTimeout},
		{"a limit below drainTimeout", short, &short.got, drainTimeout},
		{"a longer limit", long, &long.got, 45 * time.Second},
	} {
		n.SetDrainer(tc.d)
		before := time.Now()
		n.drainDeliveries(context.Background())
		after := time.Now()
		if tc.got.Before(before.Add(tc.want)) || tc.got.After(after.Add(tc.want)) {
			t.Errorf("%s: drain deadline %v after the start, want %v", tc.name, tc.got.Sub(before), tc.want)
		}
	}
	n.SetDrainer(nil)
}

// TestRemovePeerRefusesAnUnknownID: removing an id the cluster does not
// have is ErrNotMember and changes nothing (raft itself would report
// success); removing a member removes it.
func TestRemovePeerRefusesAnUnknownID(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	l := c.nodes[li]
	ctx := ctxT(t, 30*time.Second)
	members := func() int {
		f := l.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		return len(f.Configuration().Servers)
	}
	if err := l.RemovePeer(ctx, "node9"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("remove of an unknown id: %v, want ErrNotMember", err)
	}
	if n := members(); n != 3 {
		t.Fatalf("%d members after a refused removal, want 3", n)
	}
	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	// The refusal names the leader: the operator runs it there.
	if err := c.nodes[fi].RemovePeer(ctx, c.nodes[fi].cfg.ID); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "leader, "+l.cfg.ID+" ") {
		t.Fatalf("remove on a follower: %v, want ErrNotLeader naming %s", err, l.cfg.ID)
	}
	if err := l.RemovePeer(ctx, c.nodes[fi].cfg.ID); err != nil {
		t.Fatalf("remove of a member: %v", err)
	}
	if n := members(); n != 2 {
		t.Fatalf("%d members after the removal, want 2", n)
	}
	// The removed node, still running, says so in its readiness.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, why := c.nodes[fi].Ready()
		if !ok && strings.Contains(why, "removed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed node's readiness: %v %q, want not ready, removed", ok, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNotLeaderNamesTheLeadersAdmin: a leader-only operation on a follower
// names the leader's admin API, which the leader reports, so the operator
// knows where to run it; a leader that reports none (a binary before the
// field) is named by its cluster address. ClusterStatus shows every
// member's admin API.
func TestNotLeaderNamesTheLeadersAdmin(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.AdminURL = "http://" + cfg.ID + ".example:7071" })
	ctx := ctxT(t, 30e9)
	li := c.waitLeader(-1)
	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	leader := c.ids[li]
	want := "run it on the leader, " + leader + " (admin http://" + leader + ".example:7071)"
	for name, op := range map[string]func() error{
		"remove":   func() error { return c.nodes[fi].RemovePeer(ctx, c.ids[fi]) },
		"transfer": func() error { _, err := c.nodes[fi].TransferLeadership(ctx, ""); return err },
	} {
		if err := op(); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on a follower: %v, want ErrNotLeader saying %q", name, err, want)
		}
	}
	st := c.nodes[fi].ClusterStatus(ctx)
	for _, s := range st.Nodes {
		if w := "http://" + s.ID + ".example:7071"; s.Admin != w {
			t.Errorf("status: member %s admin %q, want %q", s.ID, s.Admin, w)
		}
	}

	// Members that report no admin API (a binary before the field) are
	// named by their cluster address.
	c2 := newTestCluster(t, 3, nil)
	li = c2.waitLeader(-1)
	fi = c2.follower(li)
	c2.waitKnowsLeader(fi, li)
	want = "run it on the leader, " + c2.ids[li] + " (cluster address " + c2.ids[li] + ")"
	if err := c2.nodes[fi].RemovePeer(ctx, c2.ids[fi]); !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), want) {
		t.Errorf("remove on a follower, leader without admin URL: %v, want %q", err, want)
	}
}

// TestTransferWaitsForTheTargetToCatchUp: a hand-over to a named node that
// is behind the log waits for it to catch up, and one that cannot catch up
// is refused with ErrBehind before anything is drained (raft's own transfer
// would hold every claim for an election timeout, then fail with a bare
// timeout).
func TestTransferWaitsForTheTargetToCatchUp(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	to := c.nodes[fi].cfg.ID

	c.partition(fi)
	const n = 50
	for i := range n {
		c.mustClaim(fmt.Sprintf("k%d", i), fi)
	}
	li = c.waitLeader(fi)
	leader := c.nodes[li]
	d := &recordingDrainer{n: leader}
	leader.SetDrainer(d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := leader.TransferLeadership(ctx, to)
	cancel()
	if !errors.Is(err, ErrBehind) || !strings.Contains(err.Error(), to) {
		t.Fatalf("transfer to %s, cut off and behind: %v, want ErrBehind naming it", to, err)
	}
	if drains, _, _ := d.counts(); drains != 0 || !leader.IsLeader() {
		t.Fatalf("a refused transfer drained %d times (leader still: %v)", drains, leader.IsLeader())
	}

	// Back in touch, it catches up and takes over.
	c.heal()
	for {
		li = c.waitLeader(-1)
		if li == fi {
			break
		}
		got, err := c.nodes[li].TransferLeadership(ctxT(t, 30e9), to)
		if errors.Is(err, ErrNotLeader) {
			continue // leadership moved meanwhile: ask the new leader
		}
		if err != nil || got != to {
			t.Fatalf("transfer to %s once reachable: %q, %v", to, got, err)
		}
	}
	for i := range n {
		if _, err := c.nodes[fi].Get(fmt.Sprintf("k%d", i), false); err != nil {
			t.Fatalf("the new leader lacks k%d: %v", i, err)
		}
	}
}

// TestTransferRefusesANewerFormat: a hand-over to a voter whose binary
// writes a newer data format than another voter's is refused before
// anything is drained (as leader, its entries would halt that voter);
// between voters of one format it goes ahead.
func TestTransferRefusesANewerFormat(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		if cfg.ID == "n3" {
			cfg.format = engine.FormatVersion + 1 // upgraded first
		}
	})
	ctx := ctxT(t, 30*time.Second)
	li := c.waitLeader(-1)
	if c.ids[li] == "n3" {
		if _, err := c.nodes[li].TransferLeadership(ctx, "n1"); err != nil {
			t.Fatalf("transfer from the newer node to an older one: %v", err)
		}
		li = c.waitLeader(li)
	}
	leader := c.nodes[li]
	d := &recordingDrainer{n: leader}
	leader.SetDrainer(d)
	_, err := leader.TransferLeadership(ctx, "n3")
	// The advice names the older follower to upgrade first, never this
	// leader: upgrades go followers first, the leader last.
	n3 := slices.Index(c.ids, "n3")
	follower := c.ids[3-li-n3]
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "upgrade "+follower+" first, the leader last") ||
		!strings.Contains(err.Error(), fmt.Sprintf("%s (format %d, this leader)", c.ids[li], engine.FormatVersion)) {
		t.Fatalf("transfer to the newer node: %v, want ErrNewerFormat naming %s to upgrade first and %s as this leader", err, follower, c.ids[li])
	}
	if drains, _, _ := d.counts(); drains != 0 || !leader.IsLeader() {
		t.Fatalf("a refused transfer drained %d times (leader still: %v)", drains, leader.IsLeader())
	}
	other := "n1"
	if c.ids[li] == "n1" {
		other = "n2"
	}
	if got, err := leader.TransferLeadership(ctx, other); err != nil || got != other {
		t.Fatalf("transfer between voters of one format: %q, %v", got, err)
	}
}

// TestHandOverKeepsOlderVotersRunning: during a rolling upgrade a hand-over
// without a named target, an operator's or a leader's on shutdown, goes to
// a voter whose data format halts no other voter. Here one follower was
// upgraded first and the leader is n1: as leader the upgraded follower
// would halt the other, which must lead instead.
//
// Both ways round (n3 upgraded, n2 must lead), so that raft's own choice,
// which knows nothing of formats, fails one of them.
func TestHandOverKeepsOlderVotersRunning(t *testing.T) {
	for _, tt := range []struct{ how, newer, want string }{
		{"transfer", "n2", "n3"}, {"transfer", "n3", "n2"},
		{"shutdown", "n2", "n3"}, {"shutdown", "n3", "n2"},
	} {
		how := tt.how
		t.Run(how+" "+tt.newer+" upgraded", func(t *testing.T) {
			var n1log lockedBuffer
			c := newTestCluster(t, 3, func(cfg *Config) {
				if cfg.ID == tt.newer {
					cfg.format = engine.FormatVersion + 1
				}
				if cfg.ID == "n1" {
					cfg.noTransfer = false // the shutdown's hand-over is the subject
					cfg.Logger = slog.New(slog.NewTextHandler(&n1log, nil))
				}
			})
			ctx := ctxT(t, 30*time.Second)
			li := c.leadFrom(ctx, "n1")
			c.mustClaim("src:before", -1)
			switch how {
			case "transfer":
				got, err := c.nodes[li].TransferLeadership(ctx, "")
				if err != nil || got != tt.want {
					t.Fatalf("transfer without a target went to %q (%v), want %s", got, err, tt.want)
				}
			case "shutdown":
				if err := c.nodes[li].Close(); err != nil {
					t.Fatal(err)
				}
				c.set(li, nil)
				if nl := c.waitLeader(li); c.ids[nl] != tt.want {
					t.Fatalf("the shutdown handed leadership to %s, want %s", c.ids[nl], tt.want)
				}
				// The operator reading the stopped leader's log learns where
				// leadership went.
				if line := "leadership handed over on shutdown\" to=" + tt.want; !strings.Contains(n1log.String(), line) {
					t.Errorf("n1's log lacks %q:\n%s", line, n1log.String())
				}
			}
		})
	}
}

// TestFormatSafeTarget: which voter a hand-over without a target may pick,
// by the formats the voters report (the leader is n1).
func TestFormatSafeTarget(t *testing.T) {
	const f = engine.FormatVersion
	for _, tt := range []struct {
		name             string
		formats          map[string]uint64
		leaving, staying string // want; "!" an error
	}{
		{"one format", map[string]uint64{}, "", ""},
		{"a follower upgraded", map[string]uint64{"n2": f + 1}, "n3", "n3"},
		{"both followers upgraded, the leader last", map[string]uint64{"n2": f + 1, "n3": f + 1}, "n2|n3", "!"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCluster(t, 3, func(cfg *Config) { cfg.format = tt.formats[cfg.ID] })
			ctx := ctxT(t, 30*time.Second)
			li := c.leadFrom(ctx, "n1")
			for _, leaving := range []bool{true, false} {
				want := map[bool]string{true: tt.leaving, false: tt.staying}[leaving]
				got, err := c.nodes[li].formatSafeTarget(ctx, leaving)
				switch {
				case want == "!":
					if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "upgrade n1 first") {
						t.Errorf("leaving %v: %q, %v; want ErrNewerFormat naming n1", leaving, got, err)
					}
				case err != nil || !slices.Contains(strings.Split(want, "|"), got):
					t.Errorf("leaving %v: %q, %v; want %s", leaving, got, err, want)
				}
			}
		})
	}
}

// leadFrom makes node id the leader, moving leadership there if another
// node leads, and returns its position.
func (c *testCluster) leadFrom(ctx context.Context, id string) int {
	c.t.Helper()
	li := c.waitLeader(-1)
	if c.ids[li] != id {
		if _, err := c.nodes[li].TransferLeadership(ctx, id); err != nil {
			c.t.Fatalf("transfer to %s: %v", id, err)
		}
		li = c.waitLeader(li)
	}
	if c.ids[li] != id {
		c.t.Fatalf("leader %s, want %s", c.ids[li], id)
	}
	return li
}

// TestRemovePeerKeepsAQuorum: with one voter of three down, removing
// another (a mistyped id, or the leader itself) would leave two voters of
// which one answers: raft takes the new configuration as it appends it,
// the leader steps down and nothing commits until the lost voter is back.
// It is refused (ErrNoQuorumLeft) and changes nothing, as is removing the
// last voter; removing the voter that is down works.
func TestRemovePeerKeepsAQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	l := c.nodes[li]
	ctx := ctxT(t, 30*time.Second)
	down := c.follower(li)
	other := 3 - li - down
	c.partition(down)
	for _, victim := range []int{other, li} {
		if err := l.RemovePeer(ctx, c.nodes[victim].cfg.ID); !errors.Is(err, ErrNoQuorumLeft) {
			t.Fatalf("remove %s while %s is down: %v, want ErrNoQuorumLeft", c.nodes[victim].cfg.ID, c.nodes[down].cfg.ID, err)
		}
	}
	if !l.IsLeader() {
		t.Fatal("the leader stepped down after a refused removal")
	}
	if _, err := l.Claim(ctx, claimCmd("src:after-refusal")); err != nil {
		t.Fatalf("claim after the refused removals: %v", err)
	}
	if err := l.RemovePeer(ctx, c.nodes[down].cfg.ID); err != nil {
		t.Fatalf("remove the member that is down: %v", err)
	}
	if _, err := l.Claim(ctx, claimCmd("src:after-removal")); err != nil {
		t.Fatalf("claim after the removal: %v", err)
	}

	solo := newTestCluster(t, 1, nil)
	s := solo.nodes[solo.waitLeader(-1)]
	if err := s.RemovePeer(ctx, s.cfg.ID); !errors.Is(err, ErrNoQuorumLeft) {
		t.Fatalf("remove the last voter: %v, want ErrNoQuorumLeft", err)
	}
}
