package cluster

import (
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// recentLogs keeps the newest raft log entries in memory, so that the
// leader sends them to followers without reading them back from the log
// file. raft's own LogCache keeps a fixed number of entries whatever
// their size: 512 entries hold 512 bodies of up to max_body each (a
// source taking 64 MiB bodies kept gigabytes alive after the deliveries
// were long done). This one is bounded in bytes too: the oldest entries
// leave as the newest come, and an entry larger than the whole budget is
// not kept at all.
//
// It keeps copies of the entries, never the pointers StoreLogs gets: on the
// leader raft hands it the Log inside each entry's apply future, and a
// pointer kept there keeps the whole future, the state machine's answer
// with it. The answer to a lease holds every leased event's body, so 512
// leases kept their bodies alive: a leader whose handler failed grew by a
// body per attempt (gigabytes of 1 MiB bodies) until 512 more entries came.
type recentLogs struct {
	raft.LogStore
	maxEntries int
	maxBytes   int

	mu    sync.RWMutex
	logs  []raft.Log // consecutive indexes, oldest first
	bytes int        // the Data of logs
}

func newRecentLogs(store raft.LogStore, maxEntries, maxBytes int) *recentLogs {
	return &recentLogs{LogStore: store, maxEntries: maxEntries, maxBytes: maxBytes}
}

// IsMonotonic passes the store's answer on (raft.MonotonicLogStore).
func (c *recentLogs) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (c *recentLogs) GetLog(idx uint64, log *raft.Log) error {
	c.mu.RLock()
	if n := len(c.logs); n > 0 && idx >= c.logs[0].Index && idx <= c.logs[n-1].Index {
		*log = c.logs[idx-c.logs[0].Index]
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.LogStore.GetLog(idx, log)
}

func (c *recentLogs) StoreLog(log *raft.Log) error { return c.StoreLogs([]*raft.Log{log}) }

func (c *recentLogs) StoreLogs(logs []*raft.Log) error {
	if err := c.LogStore.StoreLogs(logs); err != nil {
		return fmt.Errorf("store log entries: %w", err) // the cause stays reachable (errors.Is), as raft's own cache loses it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range logs {
		if n := len(c.logs); n > 0 && c.logs[n-1].Index+1 != l.Index {
			c.dropAll() // not the next index: raft rewrote its tail
		}
		c.logs = append(c.logs, *l)
		c.bytes += len(l.Data)
	}
	for len(c.logs) > 0 && (len(c.logs) > c.maxEntries || c.bytes > c.maxBytes) {
		c.bytes -= len(c.logs[0].Data)
		c.logs[0] = raft.Log{}
		c.logs = c.logs[1:]
	}
	if len(c.logs) == 0 {
		c.logs = nil // let the array go
	}
	return nil
}

// DeleteRange forgets every entry, as raft's LogCache does: raft deletes
// the front after a snapshot and the tail on a conflict, both rare.
func (c *recentLogs) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.dropAll()
	c.mu.Unlock()
	return c.LogStore.DeleteRange(min, max)
}

func (c *recentLogs) dropAll() {
	c.logs, c.bytes = nil, 0
}
