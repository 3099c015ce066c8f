package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// TestLargeClaimsTravelInFragments: a claim larger than a fragment is
// proposed as several log entries, through the leader and relayed by a
// follower, and every replica ends with the same state holding the whole
// payload, byte for byte.
func TestLargeClaimsTravelInFragments(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.fragment = 1 << 10 })
	defer c.close()
	l := c.waitLeader(-1)
	f := c.follower(l)
	payload := func(seed byte) []byte {
		b := make([]byte, 40<<10)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	before := c.nodes[l].raft.LastIndex()
	for i, via := range []int{l, f} {
		cmd := claimCmd(fmt.Sprintf("src:large-%d", i))
		cmd.Payload = payload(byte(i))
		if _, err := c.nodes[via].Claim(ctxT(t, 20*time.Second), cmd); err != nil {
			t.Fatalf("claim through %s: %v", c.ids[via], err)
		}
	}
	if grew := c.nodes[l].raft.LastIndex() - before; grew < 2*40 {
		t.Fatalf("the log grew by %d entries for two claims of 40 fragments each", grew)
	}
	c.waitConverged()
	for i := range 2 {
		key := fmt.Sprintf("src:large-%d", i)
		for n, node := range c.nodes {
			ev, err := node.eng.Get(key, true)
			if err != nil {
				t.Fatalf("%s on %s: %v", key, c.ids[n], err)
			}
			if !bytes.Equal(ev.Payload, payload(byte(i))) {
				t.Fatalf("%s on %s: payload of %d bytes differs from the claim's", key, c.ids[n], len(ev.Payload))
			}
		}
	}
	// Small claims still go as one entry each.
	before = c.nodes[l].raft.LastIndex()
	c.mustClaim("src:small", -1)
	if grew := c.nodes[l].raft.LastIndex() - before; grew > 3 {
		t.Fatalf("a small claim took %d entries", grew)
	}
}

// TestFSMJoinsFragmentsInLogOrder: the fsm applies an entry at its last
// fragment; fragments cut off by a command (a leader that lost its place
// mid-entry) are dropped on every replica, the rest of such an entry is
// refused, and no snapshot is taken between an entry's fragments.
func TestFSMJoinsFragmentsInLogOrder(t *testing.T) {
	f := bareFSM(t)
	eng := f.eng
	now := time.Now().UnixNano()
	claim := func(key string, size int) []byte {
		return engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim, Key: key, Source: "src",
			Payload: bytes.Repeat([]byte{'p'}, size), Retention: int64(time.Hour), Now: now}})
	}
	var index uint64
	logs := func(data ...[]byte) []*raft.Log {
		var out []*raft.Log
		for _, d := range data {
			index++
			out = append(out, &raft.Log{Index: index, Type: raft.LogCommand, Data: d})
		}
		return out
	}
	result := func(r interface{}) *applied {
		a, ok := r.(*applied)
		if !ok {
			t.Fatalf("fsm answered %T", r)
		}
		return a
	}
	exists := func(key string) bool {
		_, err := eng.Get(key, false)
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Joined across batches, with a no-op entry between two fragments
	// (raft's own entries never reach the fsm as commands).
	a := engine.SplitEntry(claim("src:a", 5000), 1000)
	if len(a) < 5 {
		t.Fatalf("%d fragments", len(a))
	}
	out := f.ApplyBatch(logs(a[:2]...))
	if r := result(out[1]); r.err != nil || r.results != nil {
		t.Fatalf("a fragment answered %+v", r)
	}
	if s, err := f.Snapshot(); !errors.Is(err, errJoining) {
		if err == nil {
			s.Release()
		}
		t.Fatalf("snapshot between fragments: %v; want errJoining", err)
	}
	index++
	f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogNoop}})
	out = f.ApplyBatch(logs(a[2:]...))
	if r := result(out[len(out)-1]); r.err != nil || len(r.results) != 1 || !r.results[0].Created {
		t.Fatalf("the last fragment answered %+v", r)
	}
	if !exists("src:a") {
		t.Fatal("the joined claim was not applied")
	}
	s, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot after the entry: %v", err)
	}
	s.Release()

	// Cut off by a command: the command is applied, the rest refused.
	b := engine.SplitEntry(claim("src:b", 3000), 1000)
	out = f.ApplyBatch(logs(b[0], claim("src:between", 10), b[1], b[2], b[3]))
	if r := result(out[1]); r.err != nil || len(r.results) != 1 || !r.results[0].Created {
		t.Fatalf("the command between fragments answered %+v", r)
	}
	for _, i := range []int{2, 3, 4} {
		if r := result(out[i]); !errors.Is(r.err, errFragment) {
			t.Fatalf("fragment %d after the cut answered %+v; want errFragment", i, r)
		}
	}
	if exists("src:b") || !exists("src:between") {
		t.Fatal("the cut entry was applied, or the command between was not")
	}
	// A new entry starting over a partial one replaces it.
	c := engine.SplitEntry(claim("src:c", 2500), 1000)
	out = f.ApplyBatch(logs(b[0], c[0], c[1], c[2]))
	if r := result(out[3]); r.err != nil || len(r.results) != 1 || !r.results[0].Created {
		t.Fatalf("the entry started over answered %+v", r)
	}
	if exists("src:b") || !exists("src:c") {
		t.Fatal("the replaced entry was applied, or its successor was not")
	}
	// A corrupt fragment is refused like a corrupt entry, and ends the run.
	d := engine.SplitEntry(claim("src:d", 2500), 1000)
	out = f.ApplyBatch(logs(d[0], []byte{d[1][0], 0}, d[2]))
	if r := result(out[1]); !errors.Is(r.err, engine.ErrCorrupt) {
		t.Fatalf("a corrupt fragment answered %+v", r)
	}
	if r := result(out[2]); !errors.Is(r.err, errFragment) {
		t.Fatalf("the fragment after a corrupt one answered %+v", r)
	}
	if exists("src:d") {
		t.Fatal("an entry with a corrupt fragment was applied")
	}
	// The head of one entry and the tail of another of the same length (a
	// leader refused part way through each) never join.
	e1 := engine.SplitEntry(claim("src:e1", 2500), 1000)
	e2 := engine.SplitEntry(claim("src:e2", 2500), 1000)
	out = f.ApplyBatch(logs(e1[0], e2[1], e2[2]))
	if r := result(out[1]); !errors.Is(r.err, errFragment) {
		t.Fatalf("another entry's fragment answered %+v; want errFragment", r)
	}
	if exists("src:e1") || exists("src:e2") {
		t.Fatal("fragments of two entries were joined")
	}

	// A snapshot install that fails leaves the state, and the log after it,
	// as they were: the entry being joined goes on.
	snaps := raft.NewInmemSnapshotStore()
	sink, err := snaps.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("not an engine file")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	f.snaps = snaps
	g := engine.SplitEntry(claim("src:g", 2500), 1000)
	f.ApplyBatch(logs(g[0]))
	if err := f.Restore(io.NopCloser(strings.NewReader("not an engine file"))); err == nil {
		t.Fatal("a restore from garbage succeeded")
	}
	out = f.ApplyBatch(logs(g[1:]...))
	if r := result(out[len(out)-1]); r.err != nil || len(r.results) != 1 || !r.results[0].Created {
		t.Fatalf("the entry after a failed restore answered %+v", r)
	}
}

// TestLeaderEndsAnAbandonedEntry: fragments whose entry never gets its
// last ones (raft refused the rest part way, or the leader proposing them
// lost its place) stay joined on every replica, which then put off their
// snapshots; the leader ends the run with a no-op once no proposer is still
// sending one, even on an idle cluster: the same leader (a refusal during a
// failed leadership transfer) or the next one.
func TestLeaderEndsAnAbandonedEntry(t *testing.T) {
	for _, change := range []bool{false, true} {
		t.Run(fmt.Sprintf("leader change %v", change), func(t *testing.T) {
			c := newTestCluster(t, 3, nil)
			defer c.close()
			l := c.waitLeader(-1)
			frags := engine.SplitEntry(engine.EncodeEntry(nil, []engine.Command{claimCmd("src:abandoned")}), 8)
			// As the proposer would, had raft refused the rest: while its run
			// counts as open, the leader leaves it alone.
			c.nodes[l].prop.openRuns.Add(1)
			for _, fr := range frags[:2] {
				if err := c.nodes[l].raft.Apply(fr, 5*time.Second).Error(); err != nil {
					t.Fatal(err)
				}
			}
			for i := range c.nodes {
				waitFor(t, c.ids[i]+" applies the first fragments", c.nodes[i].fsm.joining)
			}
			nl := l
			if change {
				if err := c.nodes[l].raft.LeadershipTransfer().Error(); err != nil {
					t.Fatal(err)
				}
				nl = c.waitLeader(l)
			}
			c.nodes[l].prop.openRuns.Add(-1) // the run is settled, cut short
			for i := range c.nodes {
				waitFor(t, c.ids[i]+" drops the abandoned fragments", func() bool { return !c.nodes[i].fsm.joining() })
			}
			if _, ok, _ := c.nodes[nl].Lookup("src:abandoned"); ok {
				t.Fatal("an entry of which only the first fragments were proposed was applied")
			}
		})
	}
}

// A replica rebuilt from its snapshot and the log after it (here: the
// engine file distrusted after a machine crash) joins the fragments it
// replays into the same state, and takes new ones afterwards.
func TestFragmentsReplayAfterAMachineCrash(t *testing.T) {
	if bootID() == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id: the engine syncs every commit here")
	}
	dir := t.TempDir()
	small := func(cfg *Config) { cfg.fragment = 1 << 10 }
	n := openSolo(t, dir, small)
	large := func(key string) engine.Command {
		c := claimCmd(key)
		c.Payload = bytes.Repeat([]byte(key), 2000)
		return c
	}
	ctx := ctxT(t, 20*time.Second)
	for i := range 4 {
		if _, err := n.Claim(ctx, large(fmt.Sprintf("src:a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := n.Claim(ctx, large(fmt.Sprintf("src:b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := n.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := writeMarker(dir, "an-earlier-boot", "dirty"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fsm.db"), []byte("torn pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = openSolo(t, dir, small)
	defer n.Close()
	if after, _ := n.Hash(); after != before {
		t.Fatal("the state rebuilt from the snapshot and the fragments in the log differs")
	}
	if _, err := n.Claim(ctx, large("src:c0")); err != nil {
		t.Fatalf("a large claim after the rebuild: %v", err)
	}
	for _, k := range []string{"src:a0", "src:b3", "src:c0"} {
		ev, err := n.eng.Get(k, true)
		if err != nil || !bytes.Equal(ev.Payload, large(k).Payload) {
			t.Fatalf("%s after the rebuild: %v (payload of %d bytes)", k, err, len(ev.Payload))
		}
	}
}
