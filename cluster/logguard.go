package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// suffixGuard stops the node when an append fails right after raft cut the
// log's suffix. A follower whose log holds entries a new leader overwrites
// deletes them (DeleteRange up to its last index) and then appends the
// leader's; if that append fails (a full disk), hashicorp/raft v1.7.3 keeps
// its cached last index at the deleted entry (raft.go, appendEntries: "TODO:
// leaving r.getLastLog() in the wrong state if there was a truncation
// above"), and every later append fails with "failed to get log entry" for
// that index: the replica stays alive and never catches up, even once space
// is freed. Restarting reads the last index from the file again, so the node
// stops, as it does when the engine cannot write (docs/reliability.md, Disk
// full). An append that fails with no cut before it leaves raft's view
// consistent: the leader sends the entries again, so that one is only
// returned.
type suffixGuard struct {
	raft.LogStore
	fatal func(error)
	// storing hears every append's outcome (Node.storeTrouble: a follower
	// that cannot append is behind and not ready); nil in tests.
	storing func(error)

	mu  sync.Mutex
	cut bool // the suffix was deleted and nothing was appended since
}

func (g *suffixGuard) DeleteRange(min, max uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	last, err := g.LogStore.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log: last index before delete: %w", err)
	}
	if err := g.LogStore.DeleteRange(min, max); err != nil {
		return err
	}
	// Compaction deletes a prefix and keeps the trailing logs; only a
	// conflict removes the newest entry.
	if max >= last && min <= last {
		g.cut = true
	}
	return nil
}

func (g *suffixGuard) StoreLog(l *raft.Log) error {
	return g.StoreLogs([]*raft.Log{l})
}

func (g *suffixGuard) StoreLogs(logs []*raft.Log) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.LogStore.StoreLogs(logs)
	if g.storing != nil {
		g.storing(err)
	}
	switch {
	case err == nil:
		g.cut = false
	case g.cut && len(logs) > 0:
		g.fatal(fmt.Errorf("raft log: append of entries %d.. failed right after entries from %d on were deleted; raft would keep the deleted index as its last and never accept another entry: %w", logs[0].Index, logs[0].Index, err))
	}
	return err
}
