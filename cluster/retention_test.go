package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/engine"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPurgeFromAFollower: a purge proposed on a follower deletes every
// matching dead letter in commands of PurgeBatch, the leader logs one audit
// line per command, and the replicas converge.
func TestPurgeFromAFollower(t *testing.T) {
	var logs lockedBuffer
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx := ctxT(t, 30*time.Second)
	const n = PurgeBatch + 200
	applyPer(t, ctx, c, claimAndLease(t, ctx, c, n), func(ev engine.Event) engine.Command {
		return engine.Command{Op: engine.OpFail, Key: ev.Key, Token: ev.Token, MaxAttempts: 1, DeadRetention: int64(48 * time.Hour)}
	})
	follower := c.nodes[c.follower(c.waitLeader(-1))] // a follower of the leader now
	keys, err := follower.Purge(ctx, engine.StateDead, "src", c.clock.now().Add(time.Minute), "ops", "gdpr")
	if err != nil || len(keys) != n {
		t.Fatalf("purge: %d keys, %v", len(keys), err)
	}
	c.waitConverged()
	if s, _, _ := follower.Counts(); s[engine.StateDead] != 0 {
		t.Fatalf("counts after the purge: %v", s)
	}
	waitFor(t, "two audit lines", func() bool { return strings.Count(logs.String(), "msg=purge") == 2 })
	if out := logs.String(); !strings.Contains(out, "who=ops reason=gdpr state=dead source=src") ||
		!strings.Contains(out, fmt.Sprintf("count=%d", PurgeBatch)) || !strings.Contains(out, "count=200") {
		t.Fatalf("audit lines:\n%s", out)
	}
	if _, err := follower.Purge(ctx, engine.StatePending, "", c.clock.now(), "ops", "x"); err == nil {
		t.Fatal("a purge of pending events was accepted")
	}
}

// TestExpireReportsDeadLetters: a dead letter is kept for the dead retention
// its Fail carried; the Expire after it reports it, and the replicas agree.
func TestExpireReportsDeadLetters(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 10*time.Second)
	for _, k := range []string{"src:dies", "src:waits"} {
		if _, err := leader.Claim(ctx, claimCmd(k)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := leader.Lease(ctx, 1, time.Hour)
	if err != nil || len(evs) != 1 {
		t.Fatalf("lease: %v %v", evs, err)
	}
	if err := leader.Fail(ctx, evs[0].Key, evs[0].Token, time.Second, 1, "status 500", "", 3*time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	c.clock.advance(2 * time.Hour) // past the claims' hour: nothing unfinished goes
	if n, dead, err := leader.Expire(ctx); err != nil || n != 0 || len(dead) != 0 {
		t.Fatalf("expire after 2h: %d %v %v", n, dead, err)
	}
	c.clock.advance(3 * time.Hour)
	n, dead, err := leader.Expire(ctx)
	if err != nil || n != 1 || len(dead) != 1 || dead[0].Key != evs[0].Key {
		t.Fatalf("expire after 5h: %d %v %v", n, dead, err)
	}
	c.waitConverged()
	var left []string
	for _, k := range []string{"src:dies", "src:waits"} {
		if _, err := leader.Get(k, false); err == nil {
			left = append(left, k)
		}
	}
	if want := slices.DeleteFunc([]string{"src:dies", "src:waits"}, func(k string) bool { return k == evs[0].Key }); !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v (the pending one)", left, want)
	}
}

// The sweeper asks to drop payloads every second: with none due the leader
// proposes no entry (an idle cluster writes nothing), and one that is due
// is dropped.
func TestDropPayloadsProposesNothingWhenNoneDue(t *testing.T) {
	n := openSolo(t, t.TempDir(), func(cfg *Config) { cfg.NoSync = true })
	defer n.Close()
	ctx := ctxT(t, 10*time.Second)
	deliver := func(key string, keep time.Duration) {
		t.Helper()
		if _, err := n.Claim(ctx, claimCmd(key)); err != nil {
			t.Fatal(err)
		}
		evs, err := n.Lease(ctx, 1, 30*time.Second)
		if err != nil || len(evs) != 1 {
			t.Fatalf("lease: %v, %v", evs, err)
		}
		if err := n.Complete(ctx, key, evs[0].Token, nil, "", keep); err != nil {
			t.Fatal(err)
		}
	}
	deliver("src:kept", time.Hour)
	if err := n.eng.Flush(); err != nil { // the group the sweeper would find committed
		t.Fatal(err)
	}
	last := n.raft.LastIndex()
	for range 3 {
		if got, err := n.DropPayloads(ctx, 0, 100); err != nil || got != 0 {
			t.Fatalf("DropPayloads = %d, %v; want 0", got, err)
		}
	}
	if n.raft.LastIndex() != last {
		t.Fatalf("log grew from %d to %d with no payload due", last, n.raft.LastIndex())
	}
	deliver("src:brief", time.Nanosecond)
	// Seen once its completion is committed (within the FSM's flush delay).
	dropped := 0
	waitFor(t, "the due payload dropped", func() bool {
		got, err := n.DropPayloads(ctx, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		dropped += got
		return dropped > 0
	})
	if dropped != 1 {
		t.Fatalf("dropped %d payloads, want the one due", dropped)
	}
	ev, err := n.Get("src:brief", true)
	if err != nil || ev.Payload != nil {
		t.Fatalf("src:brief after the drop: payload %q, %v", ev.Payload, err)
	}
	if ev, err := n.Get("src:kept", true); err != nil || ev.Payload == nil {
		t.Fatalf("src:kept lost its payload: %v", err)
	}
}

// TestExpireGoesPastOneBatch: the leader's Expire goes through every ended
// bucket, ExpireBatch entries a command, until none is left: a bucket of
// more done events than one batch is gone after one call.
func TestExpireGoesPastOneBatch(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	leader := c.nodes[c.waitLeader(-1)]
	ctx := ctxT(t, 60*time.Second)
	const n = ExpireBatch + 300
	applyPer(t, ctx, c, claimAndLease(t, ctx, c, n), func(ev engine.Event) engine.Command {
		return engine.Command{Op: engine.OpComplete, Key: ev.Key, Token: ev.Token}
	})
	c.clock.advance(1000 * time.Hour)
	if got, _, err := leader.Expire(ctx); err != nil || got != n {
		t.Fatalf("expire: %d events, %v; want %d", got, err, n)
	}
}

// claimAndLease claims n keys (src:k00000 on) through the leader, 500 a
// command, and leases them all.
func claimAndLease(t *testing.T, ctx context.Context, c *testCluster, n int) []engine.Event {
	t.Helper()
	for i := 0; i < n; i += 500 {
		var cmds []engine.Command
		for j := i; j < min(n, i+500); j++ {
			cmds = append(cmds, claimCmd(fmt.Sprintf("src:k%05d", j)))
		}
		onLeader(t, c, func(l *Node) error { _, err := l.Apply(ctx, cmds...); return err })
	}
	var evs []engine.Event
	onLeader(t, c, func(l *Node) (err error) { evs, err = l.Lease(ctx, n, time.Hour); return err })
	if len(evs) != n {
		t.Fatalf("lease: %d events; want %d", len(evs), n)
	}
	return evs
}

// applyPer applies cmd's command for each of evs through the leader, 500 a
// command.
func applyPer(t *testing.T, ctx context.Context, c *testCluster, evs []engine.Event, cmd func(engine.Event) engine.Command) {
	t.Helper()
	for i := 0; i < len(evs); i += 500 {
		var cmds []engine.Command
		for _, ev := range evs[i:min(len(evs), i+500)] {
			cmds = append(cmds, cmd(ev))
		}
		onLeader(t, c, func(l *Node) error { _, err := l.Apply(ctx, cmds...); return err })
	}
}

// onLeader runs op on the node that leads, again on the next leader when
// the one it ran on had lost leadership before it proposed anything
// (ErrNotLeader, ErrNoLeader: nothing was committed). On a loaded machine a
// 300 ms election timeout can move leadership between two of a test's
// commands. An outcome unknown fails the test: op may not be safe to resend.
func onLeader(t *testing.T, c *testCluster, op func(*Node) error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := op(c.nodes[c.waitLeader(-1)])
		if err == nil {
			return
		}
		if errors.Is(err, ErrIndeterminate) || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader)) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
}
