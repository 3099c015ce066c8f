package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// TestFSMKeepsNoAppliedBatch: the array the FSM reuses between batches
// holds nothing of a batch once it is applied. Its commands share the raft
// log entries' bytes, payloads included: a slot a later, shorter batch does
// not overwrite would keep a large batch in memory indefinitely.
func TestFSMKeepsNoAppliedBatch(t *testing.T) {
	f := bareFSM(t)
	eng := f.eng
	now := time.Now().UnixNano()
	entry := func(idx uint64, key string, size int) *raft.Log {
		return &raft.Log{Index: idx, Type: raft.LogCommand, Data: engine.EncodeEntry(nil, []engine.Command{{Op: engine.OpClaim,
			Key: key, Source: "src", Payload: make([]byte, size), Retention: int64(time.Hour), Now: now}})}
	}
	var big []*raft.Log
	for i := range 16 {
		big = append(big, entry(uint64(i+1), fmt.Sprintf("src:big%d", i), 64<<10))
	}
	f.ApplyBatch(big)
	f.ApplyBatch([]*raft.Log{entry(17, "src:small", 10)})
	if err := eng.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, e := range f.entries[:cap(f.entries)] {
		if e.Cmds != nil {
			t.Fatalf("slot %d of the reused array still holds entry %d's commands", i, e.Index)
		}
	}
	if _, err := eng.Get("src:big15", false); err != nil {
		t.Fatalf("the big batch was not applied: %v", err)
	}
}
