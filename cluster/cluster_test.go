package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
	"oncehook/internal/testcluster"
)

func TestClaimOnEveryNodeCreatesOneEventPerKey(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	for i, n := range c.nodes {
		key := fmt.Sprintf("src:evt_%d", i)
		res, err := n.Claim(ctxT(t, 5*time.Second), claimCmd(key))
		if err != nil {
			t.Fatalf("claim on %s (leader %v): %v", c.ids[i], i == leader, err)
		}
		if !res.Created || res.State != engine.StatePending {
			t.Fatalf("claim on %s: got %+v, want created pending", c.ids[i], res)
		}
		// The same key through every node: duplicates, nothing created.
		for j, m := range c.nodes {
			res, err := m.Claim(ctxT(t, 5*time.Second), claimCmd(key))
			if err != nil {
				t.Fatalf("duplicate claim on %s: %v", c.ids[j], err)
			}
			if res.Created {
				t.Fatalf("duplicate of %s on %s was created again", key, c.ids[j])
			}
		}
	}
	c.waitConverged()
	for i, n := range c.nodes {
		byState, _, err := n.Counts()
		if err != nil {
			t.Fatal(err)
		}
		if byState[engine.StatePending] != 3 {
			t.Fatalf("%s: %d pending events, want 3", c.ids[i], byState[engine.StatePending])
		}
	}
}

func TestConcurrentDuplicatesOnThreeNodesCreateOne(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for round := 0; round < 20; round++ {
		key := fmt.Sprintf("src:storm_%d", round)
		var created, dup atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 30; i++ {
			n := c.nodes[i%3]
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := n.Claim(ctxT(t, 5*time.Second), claimCmd(key))
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if res.Created {
					created.Add(1)
				} else {
					dup.Add(1)
				}
			}()
		}
		wg.Wait()
		if created.Load() != 1 || dup.Load() != 29 {
			t.Fatalf("round %d: created %d, duplicates %d; want 1 and 29", round, created.Load(), dup.Load())
		}
	}
	c.waitConverged()
}

func TestPartitionedLeaderAcknowledgesNothingAndConverges(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	old := c.waitLeader(-1)
	if _, err := c.nodes[old].Claim(ctxT(t, 5*time.Second), claimCmd("src:before")); err != nil {
		t.Fatal(err)
	}
	c.partition(old)

	// The cut-off leader cannot commit: every claim fails, none reports success.
	var wg sync.WaitGroup
	var acked atomic.Int32
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.nodes[old].Claim(ctxT(t, 2*time.Second), claimCmd(fmt.Sprintf("src:minority_%d", i)))
			if err == nil {
				acked.Add(1)
				return
			}
			if !errors.Is(err, ErrNoLeader) && !errors.Is(err, ErrIndeterminate) {
				t.Errorf("minority claim: unexpected error %v", err)
			}
		}()
	}

	// The majority elects a new leader and keeps accepting.
	// (Sent again on a second election in the majority, as a provider
	// would: a loaded machine's 300 ms timeout can move leadership again.)
	for i := 0; i < 10; i++ {
		c.mustClaim(fmt.Sprintf("src:majority_%d", i), old)
	}
	wg.Wait()
	if acked.Load() != 0 {
		t.Fatalf("the partitioned leader acknowledged %d claims", acked.Load())
	}

	c.heal()
	deadline := time.Now().Add(10 * time.Second)
	for c.nodes[old].IsLeader() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// One more write makes every node apply up to the same index.
	c.mustClaim("src:after", -1)
	c.waitConverged()
	for i := 0; i < 10; i++ {
		if _, ok, _ := c.nodes[old].Lookup(fmt.Sprintf("src:minority_%d", i)); ok {
			t.Fatalf("an unacknowledged minority claim survived on the old leader")
		}
		if _, ok, _ := c.nodes[old].Lookup(fmt.Sprintf("src:majority_%d", i)); !ok {
			t.Fatalf("the old leader did not catch up with majority claim %d", i)
		}
	}
}

func TestLeaderWorkRunsOnlyOnTheLeaderAndMovesWithIt(t *testing.T) {
	var mu sync.Mutex
	running := map[string]bool{}
	starts := map[string]int{}
	c := &testCluster{}
	_ = c
	tune := func(cfg *Config) {
		id := cfg.ID
		cfg.OnLeader = func(ctx context.Context) {
			mu.Lock()
			running[id] = true
			starts[id]++
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			running[id] = false
			mu.Unlock()
		}
	}
	c = newTestCluster(t, 3, tune)
	leader := c.waitLeader(-1)
	waitFor(t, "leader work on the leader", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running[c.ids[leader]]
	})
	c.partition(leader)
	next := c.waitLeader(leader)
	waitFor(t, "leader work moved to the new leader and stopped on the old", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running[c.ids[next]] && !running[c.ids[leader]]
	})
	mu.Lock()
	for id, r := range running {
		if r && id != c.ids[next] {
			t.Errorf("leader work still running on %s", id)
		}
	}
	mu.Unlock()
	c.heal()
}

func TestLeaderOnlyCommandsAreNotRelayed(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	f := c.follower(leader)
	if _, err := c.nodes[f].Lease(ctxT(t, 5*time.Second), 10, time.Minute); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("lease on a follower: %v, want ErrNotLeader", err)
	}
	if err := c.nodes[f].Complete(ctxT(t, 5*time.Second), "src:x", 1, nil, "", 0); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("complete on a follower: %v, want ErrNotLeader", err)
	}
}

func TestLeaseCompleteFencingThroughRaft(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 10*time.Second)
	if _, err := l.Claim(ctx, claimCmd("src:a")); err != nil {
		t.Fatal(err)
	}
	evs, err := l.Lease(ctx, 10, time.Minute)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	first := evs[0].Token
	// The lease ends (the leader's clock moves on); the sweeper reclaims; a new lease fences the first.
	c.clock.advance(2 * time.Minute)
	if n, err := l.Reclaim(ctx, 0); err != nil || n != 1 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	evs, err = l.Lease(ctx, 10, time.Minute)
	if err != nil || len(evs) != 1 || evs[0].Token <= first {
		t.Fatalf("second lease: %v %v (first token %d)", evs, err, first)
	}
	if err := l.Complete(ctx, "src:a", first, nil, "late", 0); !errors.Is(err, engine.ErrStaleToken) {
		t.Fatalf("late completion under the old token: %v, want ErrStaleToken", err)
	}
	if err := l.Complete(ctx, "src:a", evs[0].Token, nil, "shipped", 0); err != nil {
		t.Fatalf("completion under the live token: %v", err)
	}
	c.waitConverged()
	for _, n := range c.nodes {
		// The handler's step is replicated with the completion; the fenced
		// completion's step is not.
		ev, err := n.Get("src:a", false)
		if err != nil || ev.State != engine.StateDone || ev.Step != "shipped" {
			t.Fatalf("%s: %+v %v", n.cfg.ID, ev, err)
		}
	}
}

// TestReplayByStateInBatchesFromAFollower: a replay by state with a max,
// sent through a follower, comes back with the cursor where the next
// command goes on (relayed results carry it); looped, it replays each done
// event once, and the replicas agree.
func TestReplayByStateInBatchesFromAFollower(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	l, f := c.nodes[leader], c.nodes[c.follower(leader)]
	ctx := ctxT(t, 10*time.Second)
	const n = 7
	for i := range n {
		if _, err := l.Claim(ctx, claimCmd(fmt.Sprintf("src:k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := l.Lease(ctx, n, time.Minute)
	if err != nil || len(evs) != n {
		t.Fatalf("lease: %d %v", len(evs), err)
	}
	for _, ev := range evs {
		if err := l.Complete(ctx, ev.Key, ev.Token, nil, "", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	cmd := engine.Command{State: engine.StateDone, Max: 3, Who: "ops", Reason: "again"}
	replayed := map[string]int{}
	for commands := 1; ; commands++ {
		r, err := f.Replay(ctx, cmd)
		if err != nil {
			t.Fatalf("command %d: %v", commands, err)
		}
		for _, k := range r.Keys {
			replayed[k]++
		}
		if !r.More {
			break
		}
		if commands > n {
			t.Fatalf("no end after %d commands of %d for %d events", commands, cmd.Max, n)
		}
		if r.After == "" {
			t.Fatal("More without a cursor: the relay lost it")
		}
		if r.Before == 0 {
			t.Fatal("More without the replay's bound: the relay lost it")
		}
		cmd.Since, cmd.Key, cmd.Before = r.AfterTime, r.After, r.Before
	}
	for _, ev := range evs {
		if replayed[ev.Key] != 1 {
			t.Errorf("%s replayed %d times, want once", ev.Key, replayed[ev.Key])
		}
	}
	c.waitConverged()
}

func TestRestartKeepsStateAndDoesNotReapply(t *testing.T) {
	dir := t.TempDir()
	open := func() *Node { return openSolo(t, dir, nil) }
	n := open()
	ctx := ctxT(t, 10*time.Second)
	for i := 0; i < 50; i++ {
		if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := n.Lease(ctx, 5, time.Hour)
	if err != nil || len(evs) != 5 {
		t.Fatalf("lease: %d %v", len(evs), err)
	}
	if err := n.Fail(ctx, evs[0].Key, evs[0].Token, time.Hour, 10, "status 500", "charged", 0, nil); err != nil {
		t.Fatal(err)
	}
	// A replay of a done event is not idempotent: applied again, it would
	// move the event (done again since, its payload kept) back to pending,
	// with a second audit entry.
	if err := n.Complete(ctx, evs[1].Key, evs[1].Token, nil, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Replay(ctx, engine.Command{Keys: []string{evs[1].Key}, Who: "ops", Reason: "again"}); err != nil {
		t.Fatal(err)
	}
	again, err := n.Lease(ctx, 100, time.Hour) // the 45 never leased, and the replayed one
	i := slices.IndexFunc(again, func(ev engine.Event) bool { return ev.Key == evs[1].Key })
	if err != nil || len(again) != 46 || i < 0 {
		t.Fatalf("lease after the replay: %d events, %v; want 46 with %s", len(again), err, evs[1].Key)
	}
	if err := n.Complete(ctx, again[i].Key, again[i].Token, nil, "", time.Hour); err != nil {
		t.Fatal(err)
	}
	before, _ := n.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open()
	// Raft replays the log after its last snapshot; the engine must skip what
	// it already applied, or the failure above would be counted twice and
	// the replay run again.
	if err := n.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if after, _ := n.Hash(); before != after {
		t.Fatalf("engine state changed across a restart")
	}
	// Again, with a new claim right away: a replayed batch that ends where
	// the file did is rolled back whole, so only entries committed with it
	// show what it did.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open()
	defer n.Close()
	if _, err := n.Claim(ctx, claimCmd("src:after-restart")); err != nil {
		t.Fatal(err)
	}
	if err := n.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	ev, err := n.Get(evs[0].Key, false)
	if err != nil || ev.Attempts != evs[0].Attempts || ev.State != engine.StatePending || ev.Step != "charged" {
		t.Fatalf("after restart: %+v %v (attempts before %d)", ev, err, evs[0].Attempts)
	}
	byState, _, _ := n.Counts()
	if byState[engine.StatePending] != 2 || byState[engine.StateProcessing] != 48 || byState[engine.StateDone] != 1 {
		t.Fatalf("after restart counts %v", byState)
	}
	if ev, err := n.Get(evs[1].Key, false); err != nil || ev.State != engine.StateDone || len(ev.Audit) != 1 {
		t.Fatalf("the replayed event after restart: %+v %v, want done with one audit entry", ev, err)
	}
}

func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 50 * time.Millisecond
	})
	leader := c.waitLeader(-1)
	lag := c.follower(leader)
	c.partition(lag)
	for i := 0; i < 200; i++ {
		leader = c.mustClaim(fmt.Sprintf("src:s%d", i), lag)
	}
	if err := c.nodes[leader].raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// What the follower installs is the compressed stream, not the file.
	snaps := c.nodes[leader].fsm.snaps
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("leader's snapshots: %v, %v", list, err)
	}
	if size, err := stateSize(snaps, list[0]); err != nil || size <= list[0].Size {
		t.Fatalf("snapshot of %d bytes holds a file of %d bytes (%v): want a compressed stream", list[0].Size, size, err)
	}
	c.heal()
	waitFor(t, "the lagging follower installs the snapshot", func() bool {
		return c.nodes[lag].raft.LastIndex() >= c.nodes[leader].raft.LastIndex()
	})
	// Nothing appended since: its log's end is the snapshot's, as raft's
	// vote compares it (raft.Stats' last_log_* still reads the log's old
	// end), in what it tells a peer guarding its votes (voteguard.go).
	last := c.nodes[lag].raft.LastIndex()
	if own, ms := c.nodes[lag].ownLogEnd(), c.nodes[lag].ownStats(); own.index < last || ms.LastLogIndex < last {
		t.Fatalf("after the snapshot install raft's last index is %d, but ownLogEnd says %+v and memberStats %d/%d",
			last, own, ms.LastLogTerm, ms.LastLogIndex)
	}
	c.mustClaim("src:last", -1)
	c.waitConverged()
	if _, ok, _ := c.nodes[lag].Lookup("src:s0"); !ok {
		t.Fatal("the lagging follower did not install the snapshot")
	}
}

func TestWipedFollowerRejoinsAndServesReads(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 16
		cfg.TrailingLogs = 4
		cfg.SnapshotInterval = 50 * time.Millisecond
	})
	leader := c.waitLeader(-1)
	for i := 0; i < 100; i++ {
		leader = c.mustClaim(fmt.Sprintf("src:w%d", i), -1)
	}
	if err := c.nodes[leader].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	f := c.follower(leader)
	if err := c.nodes[f].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(f, nil)
	if err := os.RemoveAll(c.config(f, nil, nil).Dir); err != nil {
		t.Fatal(err)
	}
	n := c.open(f, c.peers(), nil)
	c.set(f, n)
	leader = c.mustClaim("src:after-wipe", -1)
	c.waitConverged()
	if _, ok, _ := n.Lookup("src:w0"); !ok {
		t.Fatal("the wiped follower did not catch up")
	}
	// It was re-added through the leader, not by bootstrapping a second history.
	cf := c.nodes[leader].raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		t.Fatal(err)
	}
	if got := len(cf.Configuration().Servers); got != 3 {
		t.Fatalf("configuration has %d servers, want 3", got)
	}
}

func TestWaitWakesOnCompletion(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	l := c.nodes[leader]
	f := c.nodes[c.follower(leader)]
	ctx := ctxT(t, 10*time.Second)
	if _, err := f.Claim(ctx, claimCmd("src:sync")); err != nil {
		t.Fatal(err)
	}
	got := make(chan engine.Event, 1)
	go func() {
		ev, err := f.Wait(ctx, "src:sync", func(ev engine.Event) bool { return ev.State == engine.StateDone })
		if err != nil {
			t.Errorf("wait: %v", err)
		}
		got <- ev
	}()
	evs, err := l.Lease(ctx, 1, time.Minute)
	if err != nil || len(evs) != 1 {
		t.Fatal(evs, err)
	}
	if err := l.Complete(ctx, "src:sync", evs[0].Token, &engine.Response{Status: 201, Body: []byte("made")}, "", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		if ev.Response == nil || ev.Response.Status != 201 || string(ev.Response.Body) != "made" {
			t.Fatalf("waiter got %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter on a follower was not woken by the completion")
	}
}

func TestResultsCodecRoundTrip(t *testing.T) {
	in := []engine.Result{
		{Created: true, State: engine.StatePending},
		{State: engine.StateDone, Err: engine.ErrStaleToken},
		{N: 7, Keys: []string{"a:1", "b:2"}},
		{Err: errors.New("something odd")},
		// Sentinels added later go as their text, and come back as
		// themselves: a follower relaying a replay of a dropped payload
		// answers 409, not 500.
		{Err: fmt.Errorf("replay src:k: %w", engine.ErrNoPayload)},
		{Err: engine.ErrNoPayload},
		// A batched replay by state says where the next one goes on.
		{N: 2, Keys: []string{"a:1", "a:2"}, More: true, Before: 1 << 60, AfterTime: -5, After: "b:9"},
	}
	b := appendResults(nil, in)
	if code := b[bytes.Index(b, []byte("replay src:k"))-2]; int(code) != len(resultErrs) {
		t.Fatalf("ErrNoPayload went as code %d, want the 'other error' code %d every version reads", code, len(resultErrs))
	}
	out, err := decodeResults(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d results, want %d", len(out), len(in))
	}
	for i := range in {
		if in[i].Created != out[i].Created || in[i].State != out[i].State || in[i].N != out[i].N || len(in[i].Keys) != len(out[i].Keys) ||
			in[i].More != out[i].More || in[i].After != out[i].After || in[i].AfterTime != out[i].AfterTime || in[i].Before != out[i].Before {
			t.Fatalf("result %d: %+v != %+v", i, out[i], in[i])
		}
		if (in[i].Err == nil) != (out[i].Err == nil) || in[i].Err != nil && in[i].Err.Error() != out[i].Err.Error() {
			t.Fatalf("result %d error: %v != %v", i, out[i].Err, in[i].Err)
		}
	}
	if !errors.Is(out[1].Err, engine.ErrStaleToken) {
		t.Fatal("sentinel lost in transit")
	}
	if !errors.Is(out[4].Err, engine.ErrNoPayload) || !errors.Is(out[5].Err, engine.ErrNoPayload) {
		t.Fatalf("ErrNoPayload lost in transit: %v, %v", out[4].Err, out[5].Err)
	}
}

func FuzzDecodeResults(f *testing.F) {
	f.Add(appendResults(nil, []engine.Result{{Created: true, State: 1}, {N: 3, Keys: []string{"x"}}}))
	f.Add(appendResults(nil, []engine.Result{{N: 1, Keys: []string{"x"}, More: true, AfterTime: 7, After: "y"}}))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := decodeResults(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode back to something that decodes equally.
		again, err := decodeResults(appendResults(nil, res))
		if err != nil || len(again) != len(res) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// waitFor polls cond until it holds; it fails t after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testcluster.WaitFor(t, what, 10*time.Second, cond)
}

func TestRestoreFromBackupReplacesClusterState(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 20*time.Second)
	// Claims are sent again on an election (a loaded machine's 300 ms
	// timeout), as a provider does on a 503; any node relays them.
	for i := 0; i < 20; i++ {
		// Guarded bodies too (replay_guard = "body"): the backup holds them.
		cmd := claimCmd(fmt.Sprintf("src:kept%d", i))
		cmd.BodyKey = fmt.Sprintf("src\x00body-%d", i)
		sendThrough(t, l, cmd)
	}
	c.waitConverged() // the node backed up holds every claim made so far
	backup := saveBackup(t, l)
	for i := 0; i < 20; i++ {
		claimThrough(t, l, fmt.Sprintf("src:later%d", i))
	}
	// A follower refuses; a file that is not a backup is refused and changes nothing.
	ctx = ctxT(t, 20*time.Second)
	leader := c.waitLeader(-1)
	if err := c.nodes[c.follower(leader)].Restore(ctx, backup); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("restore on a follower: %v", err)
	}
	// onLeaderRestore restores path on the leader, again on the next one
	// when leadership moved before the restore began (nothing changed then).
	onLeaderRestore := func(path string) error {
		for {
			leader = c.waitLeader(-1)
			err := c.nodes[leader].Restore(ctx, path)
			if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrRestoreNotBegun) {
				return err
			}
		}
	}
	junk := t.TempDir() + "/junk.db"
	os.WriteFile(junk, []byte("not a bbolt file"), 0o600)
	if err := onLeaderRestore(junk); err == nil {
		t.Fatal("a junk file was restored")
	}
	if err := onLeaderRestore(backup); err != nil {
		t.Fatalf("restore: %v", err)
	}
	l = c.nodes[leader]
	if _, err := os.Stat(filepath.Join(l.cfg.Dir, restorePending)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a confirmed restore left its marker: %v", err)
	}
	// New claims after the restore apply on every node, and the replay
	// guard knows the restored bodies.
	claimThrough(t, l, "src:after")
	replayed := claimCmd("src:captured")
	replayed.BodyKey = "src\x00body-3"
	if r, _ := sendThrough(t, l, replayed); r.Created || !slices.Equal(r.Keys, []string{"src:kept3"}) {
		t.Fatalf("a restored body under a new key: %+v, want a duplicate of src:kept3", r)
	}
	c.waitConverged()
	for _, n := range c.nodes {
		if _, ok, _ := n.Lookup("src:kept0"); !ok {
			t.Fatalf("%s: backed-up claim missing", n.cfg.ID)
		}
		if _, ok, _ := n.Lookup("src:later0"); ok {
			t.Fatalf("%s: a claim made after the backup survived the restore", n.cfg.ID)
		}
		if _, ok, _ := n.Lookup("src:after"); !ok {
			t.Fatalf("%s: claim after the restore missing", n.cfg.ID)
		}
	}
}

// TestRestoreCutShortRejoins: a leader cut off from its followers while it
// restores a backup takes the backup's state alone, a restore the cluster
// never commits. It must not keep it: it reports the restore unconfirmed
// and stops, and at its next start it sets its state aside and rejoins,
// so that every replica holds what the cluster committed (the entries
// written meanwhile by the new leader, no restore) and a key claimed before
// the backup and kept by the cluster is a duplicate on every node.
func TestRestoreCutShortRejoins(t *testing.T) {
	fatal := make(chan error, 4)
	tune := func(cfg *Config) { cfg.onFatal = func(err error) { fatal <- err } }
	c := newTestCluster(t, 3, tune)
	li := c.waitLeader(-1)
	l := c.nodes[li]
	ctx := ctxT(t, 30*time.Second)
	for i := range 10 {
		if _, err := l.Claim(ctx, claimCmd(fmt.Sprintf("src:kept%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	backup := saveBackup(t, l)
	for i := range 10 {
		if _, err := l.Claim(ctx, claimCmd(fmt.Sprintf("src:later%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	c.waitConverged()

	c.partition(li)
	err := l.Restore(ctxT(t, 5*time.Second), backup)
	if errors.Is(err, ErrNotLeader) {
		t.Skip("the leader stepped down before the restore began (a very slow machine)")
	}
	if !errors.Is(err, ErrRestoreUnconfirmed) {
		t.Fatalf("restore cut off from the followers: %v, want ErrRestoreUnconfirmed", err)
	}
	awaitUnconfirmedStop(t, fatal)
	if _, err := os.Stat(filepath.Join(l.cfg.Dir, restorePending)); err != nil {
		t.Fatalf("the restore marker: %v", err)
	}
	// The others go on without the restore.
	others := c.waitLeader(li)
	if _, err := c.nodes[others].Claim(ctx, claimCmd("src:meanwhile")); err != nil {
		t.Fatal(err)
	}

	// The old leader stops (as the process would) and starts again.
	if err := l.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	c.set(li, nil)
	c.heal()
	n := c.open(li, c.peers(), tune)
	c.set(li, n)
	c.mustClaim("src:after", -1)
	c.waitConverged()
	for _, nd := range c.nodes {
		for _, key := range []string{"src:kept0", "src:later0", "src:meanwhile", "src:after"} {
			if _, ok, _ := nd.Lookup(key); !ok {
				t.Errorf("%s: %s missing: it holds a history the cluster did not commit", nd.cfg.ID, key)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(n.cfg.Dir, restorePending)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the restore marker is still there: %v", err)
	}
	aside, _ := filepath.Glob(filepath.Join(n.cfg.Dir, "restore-aborted-*", "fsm.db"))
	if len(aside) != 1 {
		t.Errorf("the old state was not set aside: %v", aside)
	}
	// A key the cluster holds is a duplicate through the rejoined node too.
	if r, err := n.Claim(ctx, claimCmd("src:later3")); err != nil || r.Created {
		t.Errorf("a kept key claimed again through the rejoined node: %+v %v, want a duplicate", r, err)
	}
}

// TestRefusedRestoreKeepsTheLeader: a restore raft refuses before taking
// anything (here a leadership transfer under way; likewise leadership lost
// since the check, or a configuration change not committed yet) leaves the
// leader as it was: the error says the restore did not begin, no marker is
// left for the next start to set the state aside by, the node answers from
// its state, does not stop, and goes on committing.
func TestRefusedRestoreKeepsTheLeader(t *testing.T) {
	fatal := make(chan error, 4)
	c := newTestCluster(t, 3, func(cfg *Config) {
		// raft gives a leadership transfer an election timeout to end:
		// long enough that the restore below surely meets it.
		cfg.ElectionTimeout = 5 * time.Second
		cfg.onFatal = func(err error) { fatal <- err }
	})
	li := c.waitLeader(-1)
	l := c.nodes[li]
	c.mustClaim("src:kept", -1)
	backup := saveBackup(t, l)
	target := c.follower(li)
	c.partition(target) // behind and cut off, it cannot take the leadership
	c.mustClaim("src:later", target)
	hash, err := l.Hash()
	if err != nil {
		t.Fatal(err)
	}
	transfer := make(chan error, 1)
	go func() {
		transfer <- l.raft.LeadershipTransferToServer(raft.ServerID(c.ids[target]), raft.ServerAddress(c.ids[target])).Error()
	}()
	waitFor(t, "the transfer to be under way", func() bool {
		return errors.Is(l.raft.Barrier(time.Second).Error(), raft.ErrLeadershipTransferInProgress)
	})
	err = l.Restore(ctxT(t, 5*time.Second), backup)
	if !errors.Is(err, ErrRestoreNotBegun) || errors.Is(err, ErrRestoreUnconfirmed) {
		t.Fatalf("restore during a leadership transfer: %v, want a restore that did not begin", err)
	}
	if _, err := os.Stat(filepath.Join(l.cfg.Dir, restorePending)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore marker after a refused restore: %v; the next start would set the state aside", err)
	}
	if after, err := l.Hash(); err != nil || after != hash {
		t.Fatalf("state after a refused restore: %x %v, want %x", after, err, hash)
	}
	if _, ok, err := l.Lookup("src:later"); !ok || err != nil {
		t.Fatalf("lookup after a refused restore: %v %v; the node answers from its own state", ok, err)
	}
	c.heal()
	<-transfer // it may end either way once the follower catches up
	c.mustClaim("src:after", -1)
	select {
	case err := <-fatal:
		t.Fatalf("the node stopped after a refused restore: %v", err)
	default:
	}
}

// awaitUnconfirmedStop waits for the node to stop on an unconfirmed
// restore, as the process would (fatal is its onFatal's channel).
func awaitUnconfirmedStop(t *testing.T, fatal <-chan error) {
	t.Helper()
	select {
	case ferr := <-fatal:
		if !errors.Is(ferr, ErrRestoreUnconfirmed) {
			t.Fatalf("the node stopped for %v", ferr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop after an unconfirmed restore")
	}
}

// restoreCluster starts three nodes (tune applied to each, after the
// fatal hook), claims src:kept, saves the leader's backup and claims
// src:later, which the backup does not hold. It returns the cluster, its
// leader, the backup's path and the fatal errors the nodes report.
func restoreCluster(t *testing.T, tune func(*Config)) (c *testCluster, l *Node, backup string, fatal chan error) {
	t.Helper()
	fatal = make(chan error, 4)
	c = newTestCluster(t, 3, func(cfg *Config) {
		cfg.onFatal = func(err error) { fatal <- err }
		if tune != nil {
			tune(cfg)
		}
	})
	li := c.waitLeader(-1)
	l = c.nodes[li]
	c.mustClaim("src:kept", -1)
	backup = saveBackup(t, l)
	c.mustClaim("src:later", -1)
	return c, l, backup, fatal
}

// TestRestoreStoredThenFailedIsUnconfirmed: raft stores the backup as the
// newest snapshot before its sink's last steps (syncing the directory,
// removing older snapshots), which can still fail. The restore is then
// taken as far as the next start goes, whatever the engine holds now: it is
// unconfirmed (marker kept, the node stops and rejoins), never "not begun".
func TestRestoreStoredThenFailedIsUnconfirmed(t *testing.T) {
	var armed atomic.Bool
	_, l, backup, fatal := restoreCluster(t, func(cfg *Config) {
		cfg.sinkClosed = func() error {
			if armed.Load() {
				return errors.New("injected: remove older snapshots")
			}
			return nil
		}
	})
	armed.Store(true)
	err := l.Restore(ctxT(t, 10*time.Second), backup)
	armed.Store(false)
	if errors.Is(err, ErrNotLeader) {
		t.Skip("the leader stepped down before the restore began (a very slow machine)")
	}
	if !errors.Is(err, ErrRestoreUnconfirmed) || errors.Is(err, ErrRestoreNotBegun) {
		t.Fatalf("restore whose snapshot was stored, then failed: %v, want ErrRestoreUnconfirmed", err)
	}
	if _, err := os.Stat(filepath.Join(l.cfg.Dir, restorePending)); err != nil {
		t.Fatalf("the restore marker: %v; the next start would take the stored backup as this node's state", err)
	}
	awaitUnconfirmedStop(t, fatal)
}

// TestConcurrentRestoreRefused: a second restore while one runs on the
// leader is refused at once as not begun; the first is confirmed, and the
// node does not stop (the second used to land inside the first and stop it).
func TestConcurrentRestoreRefused(t *testing.T) {
	var hold atomic.Bool
	inSink, release := make(chan struct{}), make(chan struct{})
	_, l, backup, fatal := restoreCluster(t, func(cfg *Config) {
		cfg.sinkClosed = func() error {
			if hold.CompareAndSwap(true, false) {
				close(inSink)
				<-release
			}
			return nil
		}
	})
	hold.Store(true)
	first := make(chan error, 1)
	go func() { first <- l.Restore(ctxT(t, 30*time.Second), backup) }()
	select {
	case <-inSink:
	case err := <-first:
		t.Fatalf("the first restore ended before raft stored it: %v", err)
	}
	err := l.Restore(ctxT(t, 10*time.Second), backup)
	close(release)
	if !errors.Is(err, ErrRestoreNotBegun) {
		t.Fatalf("a second restore while one runs: %v, want ErrRestoreNotBegun", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first restore: %v", err)
	}
	if _, ok, _ := l.Lookup("src:later"); ok {
		t.Fatal("the leader still holds an event the backup does not")
	}
	select {
	case err := <-fatal:
		t.Fatalf("the node stopped: %v", err)
	default:
	}
}

// TestWaitWakesWhenTheEventIsCreated: Wait for a key this node does not hold
// yet returns once a claim creates it here (a follower's intake waits so
// for the event its relayed duplicate found on the leader), not only once
// the event completes or fails.
func TestWaitWakesWhenTheEventIsCreated(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	f := c.nodes[c.follower(leader)]
	type waited struct {
		ev  engine.Event
		err error
	}
	got := make(chan waited, 1)
	go func() {
		ev, err := f.Wait(ctxT(t, 30*time.Second), "src:later", func(engine.Event) bool { return true })
		got <- waited{ev, err}
	}()
	waitFor(t, "the waiter", func() bool { return f.waitedKeys.Load() > 0 })
	c.mustClaim("src:later", -1)
	w := <-got
	if w.err != nil || w.ev.Key != "src:later" || w.ev.State != engine.StatePending {
		t.Fatalf("Wait: %+v, %v; want the pending event", w.ev, w.err)
	}
	waitFor(t, "the waiter gone", func() bool { return f.waitedKeys.Load() == 0 })
}

// TestUnconfirmedRestoreAnswersNoDuplicate: while a restore is not yet
// confirmed by a majority, the state it put in place is the leader's alone;
// a key found only there is no duplicate (Lookup finds nothing, and the
// claim decides). Answered 200 from it, the provider would stop retrying an
// event the cluster never holds once the restore fails and the node sets
// its state aside.
func TestUnconfirmedRestoreAnswersNoDuplicate(t *testing.T) {
	other := newTestCluster(t, 1, nil)
	ctx := ctxT(t, 30*time.Second)
	if _, err := other.nodes[0].Claim(ctx, claimCmd("src:foreign")); err != nil {
		t.Fatal(err)
	}
	backup := saveBackup(t, other.nodes[0])

	fatal := make(chan error, 4)
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.onFatal = func(err error) { fatal <- err } })
	li := c.mustClaim("src:own", -1)
	l := c.nodes[li]
	c.waitConverged()
	c.partition(li)
	restored := make(chan error, 1)
	go func() { restored <- l.Restore(ctxT(t, 5*time.Second), backup) }()
	seen := false
	for !seen {
		select {
		case err := <-restored:
			if errors.Is(err, ErrNotLeader) || errors.Is(err, ErrRestoreNotBegun) {
				t.Skip("the leader stepped down before the restore began (a very slow machine)")
			}
			t.Fatalf("the restore ended (%v) before its state was seen in place", err)
		default:
		}
		if _, ok, _ := l.eng.Exists("src:foreign"); ok {
			seen = true
			if _, ok, err := l.Lookup("src:foreign"); ok || err != nil {
				t.Errorf("Lookup during the unconfirmed restore: found %v, %v; want nothing (no majority holds it)", ok, err)
			}
		}
		time.Sleep(time.Millisecond)
	}
	if err := <-restored; !errors.Is(err, ErrRestoreUnconfirmed) {
		t.Fatalf("restore cut off from the followers: %v, want ErrRestoreUnconfirmed", err)
	}
	if ferr := <-fatal; !errors.Is(ferr, ErrRestoreUnconfirmed) {
		t.Fatalf("the node stopped for %v", ferr)
	}
}

// TestNodeDownDuringARestoreAnswersNoStaleDuplicate: a follower that was
// down while the cluster restored a backup starts with the state from
// before the restore, holding events the cluster no longer has. Until it
// has caught up with the leader it answers no duplicate from that state
// (a provider's retry of a forgotten event would be acknowledged and lost);
// once caught up it holds the restored state, and answers from it.
func TestNodeDownDuringARestoreAnswersNoStaleDuplicate(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.mustClaim("src:kept", -1)
	l := c.nodes[li]
	backup := saveBackup(t, l)
	c.mustClaim("src:forgotten", -1)
	c.waitConverged()
	fi := c.follower(li)
	if _, ok, _ := c.nodes[fi].Lookup("src:forgotten"); !ok {
		t.Fatal("the follower does not answer a committed key before the restore")
	}
	if err := c.nodes[fi].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(fi, nil)
	li = c.waitLeader(fi)
	if err := c.nodes[li].Restore(ctxT(t, 30*time.Second), backup); err != nil {
		t.Fatalf("restore with one node down: %v", err)
	}
	// Back, but not yet reached by the leader: its file still holds the
	// forgotten event.
	c.partition(fi)
	n := c.open(fi, nil, nil)
	c.set(fi, n)
	if _, ok, _ := n.eng.Exists("src:forgotten"); !ok {
		t.Fatal("the restarted follower's file lost the event before the leader reached it: the test proves nothing")
	}
	if _, ok, err := n.Lookup("src:forgotten"); ok || err != nil {
		t.Fatalf("a node down during the restore answers a forgotten event as a duplicate (%v)", err)
	}
	c.heal()
	waitFor(t, "the follower to catch up with the restored state", func() bool {
		_, kept, _ := n.Lookup("src:kept")
		return kept
	})
	if _, ok, _ := n.Lookup("src:forgotten"); ok {
		t.Fatal("caught up, the follower still answers the forgotten event")
	}
}

// saveBackup writes n's backup (Node.Backup) to a file of the test's and
// returns its path.
func saveBackup(t *testing.T, n *Node) string {
	t.Helper()
	backup := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := n.Backup(f); err != nil {
		t.Fatal(err)
	}
	return backup
}
