package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// appendRange appends entries from..to of term 1.
func appendRange(s raft.LogStore, from, to uint64) error {
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return s.StoreLogs(logs)
}

// TestSuffixGuard: a failed append stops the node only when it follows a
// cut of the log's newest entries (raft's cached last index then names a
// deleted entry); other failed appends are returned to raft, which retries.
func TestSuffixGuard(t *testing.T) {
	type op struct {
		del  [2]uint64 // DeleteRange(min, max) when max > 0
		app  [2]uint64 // append from..to when to > 0
		fail bool      // the append fails (ENOSPC)
	}
	for _, tc := range []struct {
		name      string
		ops       []op
		wantFatal bool
	}{
		{"append fails after the suffix was cut", []op{{del: [2]uint64{8, 10}}, {app: [2]uint64{8, 9}, fail: true}}, true},
		{"append fails after the whole log was cut", []op{{del: [2]uint64{1, 10}}, {app: [2]uint64{1, 2}, fail: true}}, true},
		{"append fails with no cut before it", []op{{app: [2]uint64{11, 12}, fail: true}}, false},
		{"append fails after compaction (a prefix)", []op{{del: [2]uint64{1, 6}}, {app: [2]uint64{11, 11}, fail: true}}, false},
		{"append fails after the cut was refilled", []op{{del: [2]uint64{9, 10}}, {app: [2]uint64{9, 10}}, {app: [2]uint64{11, 11}, fail: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := &failingLogs{LogStore: raft.NewInmemStore()}
			var fatal []error
			g := &suffixGuard{LogStore: fl, fatal: func(err error) { fatal = append(fatal, err) }}
			if err := appendRange(g, 1, 10); err != nil {
				t.Fatal(err)
			}
			for _, o := range tc.ops {
				if o.del[1] > 0 {
					if err := g.DeleteRange(o.del[0], o.del[1]); err != nil {
						t.Fatal(err)
					}
				}
				if o.app[1] > 0 {
					if o.fail {
						fl.fail.Store(1)
					}
					err := appendRange(g, o.app[0], o.app[1])
					if (err != nil) != o.fail || (o.fail && !errors.Is(err, syscall.ENOSPC)) {
						t.Fatalf("append %v: err %v, want failure %v (ENOSPC)", o.app, err, o.fail)
					}
				}
			}
			switch {
			case tc.wantFatal && len(fatal) != 1:
				t.Fatalf("fatal = %v; want one", fatal)
			case tc.wantFatal && !errors.Is(fatal[0], syscall.ENOSPC):
				t.Fatalf("fatal = %v; want the write's error wrapped", fatal[0])
			case !tc.wantFatal && len(fatal) != 0:
				t.Fatalf("fatal = %v; want none", fatal)
			}
		})
	}
}

// TestStaleLeaderStopsWhenItsRewriteFails: a leader cut off with an entry no
// other node has comes back as a follower; the new leader's entries conflict
// with that entry, raft deletes it, and the append of the replacement fails
// (a full disk). Without the guard the node lives on with raft's last index
// naming the deleted entry and refuses every later append ("failed to get
// log entry"), so it never catches up; with it the node stops, and a restart
// reads its log again.
func TestStaleLeaderStopsWhenItsRewriteFails(t *testing.T) {
	var mu sync.Mutex
	logs := &failingLogSet{}
	fatal := map[string]chan error{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		ch := make(chan error, 4)
		mu.Lock()
		fatal[cfg.ID] = ch
		mu.Unlock()
		logs.wrap(cfg)
		cfg.onFatal = func(err error) { ch <- err }
	})
	l := c.waitLeader(-1)
	old := c.nodes[l]
	c.partition(l)
	before := old.raft.LastIndex()
	var wg sync.WaitGroup
	wg.Go(func() {
		// Never committed: the leader is alone. Its outcome is unknown to the caller.
		old.Claim(ctxT(t, 3*time.Second), claimCmd("src:orphan"))
	})
	waitFor(t, "the orphan entry in the cut-off leader's log", func() bool { return old.raft.LastIndex() > before })
	nl := c.waitLeader(l)
	for i := range 3 {
		if _, err := c.nodes[nl].Claim(ctxT(t, 5*time.Second), claimCmd(fmt.Sprintf("src:new-%d", i))); err != nil {
			t.Fatalf("claim on the new leader: %v", err)
		}
	}
	wg.Wait()
	logs.of(c.ids[l]).fail.Store(1)
	mu.Lock()
	ch := fatal[c.ids[l]]
	mu.Unlock()
	c.heal()
	select {
	case err := <-ch:
		// The process would exit here. Stop the node as that would: a node
		// left running in this state refuses every append, and a leader
		// that needs its vote to commit never does (its Close then waits).
		c.set(l, nil)
		if cerr := old.Close(); cerr != nil {
			t.Logf("close %s: %v", c.ids[l], cerr)
		}
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "deleted") {
			t.Fatalf("fatal error %v; want the failed append after the cut, wrapping ENOSPC", err)
		}
	case <-time.After(15 * time.Second):
		raftLast, logLast := old.raft.LastIndex(), lastLogIndex(t, old)
		c.set(l, nil)
		old.Close()
		t.Fatalf("%s lived on after its rewrite failed (raft last index %d, log last index %d)", c.ids[l], raftLast, logLast)
	}
}

func lastLogIndex(t *testing.T, n *Node) uint64 {
	i, err := n.logStore.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestFollowerThatCannotAppendIsNotReady: a follower whose log appends fail
// (a full disk) stays up, and the leader sends the entries again; its commit
// index stops where its log does, so applied == commit would read as caught
// up. It says it is not ready, naming the error, until an append succeeds
// again, and then catches up without a restart.
func TestFollowerThatCannotAppendIsNotReady(t *testing.T) {
	logs := &failingLogSet{}
	c := newTestCluster(t, 3, logs.wrap)
	l := c.waitLeader(-1)
	f := c.follower(l)
	c.waitKnowsLeader(f, l)
	full := logs.of(c.ids[f])
	full.fail.Store(1 << 30)
	// Before the cluster closes, whatever the outcome: a node whose appends
	// all fail does not shut down.
	t.Cleanup(func() { full.fail.Store(0) })
	for i := range 5 {
		if _, err := c.nodes[l].Claim(ctxT(t, 10*time.Second), claimCmd(fmt.Sprintf("src:while-full-%d", i))); err != nil {
			t.Fatalf("claim with one follower full: %v", err)
		}
	}
	waitFor(t, "the full follower not ready, saying why", func() bool {
		ok, why := c.nodes[f].Ready()
		return !ok && strings.Contains(why, "cannot store what the leader sends") && strings.Contains(why, "no space left on device")
	})
	// Its status says so too, for the metrics and their alert.
	if st := c.nodes[f].Status(); !strings.Contains(st.StoreFailing, "no space left on device") || st.StoreErrors == 0 {
		t.Fatalf("status of the full follower: store_failing %q, store_errors %d", st.StoreFailing, st.StoreErrors)
	}
	full.fail.Store(0)
	commit := c.nodes[l].raft.CommitIndex()
	waitFor(t, "the follower ready and caught up once it can append", func() bool {
		ok, _ := c.nodes[f].Ready()
		return ok && c.nodes[f].raft.AppliedIndex() >= commit
	})
	if _, found, err := c.nodes[f].Lookup("src:while-full-4"); err != nil || !found {
		t.Fatalf("the last claim on the caught-up follower: found %v, %v", found, err)
	}
	if st := c.nodes[f].Status(); st.StoreFailing != "" || st.StoreErrors == 0 {
		t.Fatalf("status once it stores again: store_failing %q, store_errors %d; want none failing, the errors counted", st.StoreFailing, st.StoreErrors)
	}
}

// failingLogSet gives every node of a test cluster a failingLogs log store
// (wrap, as a tune function) and finds it by node id.
type failingLogSet struct {
	mu sync.Mutex
	m  map[string]*failingLogs
}

func (s *failingLogSet) wrap(cfg *Config) {
	id := cfg.ID
	cfg.wrapLogs = func(st raft.LogStore) raft.LogStore {
		fl := &failingLogs{LogStore: st}
		s.mu.Lock()
		if s.m == nil {
			s.m = map[string]*failingLogs{}
		}
		s.m[id] = fl
		s.mu.Unlock()
		return fl
	}
}

func (s *failingLogSet) of(id string) *failingLogs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

// TestLeaderThatCannotCommitStillCloses: a leader elected while nothing
// can commit (one voter stopped, the other's log appends failing, though it
// still votes and answers heartbeats) keeps its leadership, and stopping
// it must not wait for a commit that never comes: the leader work it
// started waits for the state machine without blocking the shutdown.
func TestLeaderThatCannotCommitStillCloses(t *testing.T) {
	logs := &failingLogSet{}
	c := newTestCluster(t, 3, logs.wrap)
	ctx := ctxT(t, 30*time.Second)
	l := c.waitLeader(-1)
	a := c.follower(l)
	b := 3 - l - a
	c.waitKnowsLeader(a, l)
	if err := c.nodes[b].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(b, nil)
	full := logs.of(c.ids[l])
	full.fail.Store(1 << 30)
	t.Cleanup(func() { full.fail.Store(0) })
	if got, err := c.nodes[l].TransferLeadership(ctx, c.ids[a]); err != nil || got != c.ids[a] {
		t.Fatalf("transfer to %s: %q, %v", c.ids[a], got, err)
	}
	waitFor(t, c.ids[a]+" leading", func() bool { return c.nodes[a].IsLeader() })
	closed := make(chan error, 1)
	go func() { closed <- c.nodes[a].Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the leader that cannot commit did not close within a minute")
	}
	c.set(a, nil)
}
