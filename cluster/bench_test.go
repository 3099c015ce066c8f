package cluster

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// BenchmarkFSMApply measures the state machine side of a claim: decode the log
// entry and apply it in one bbolt transaction, per claim, for entries of 1 to
// 256 claims with 1 KiB payloads (the engine file unsynced, as in production).
func BenchmarkFSMApply(b *testing.B) {
	for _, per := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("claims=%d", per), func(b *testing.B) {
			eng, err := engine.Open(filepath.Join(b.TempDir(), "fsm.db"), engine.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer eng.Close()
			f := &fsm{eng: eng, fatal: func(err error) { b.Fatal(err) }}
			payload := make([]byte, 1024)
			now := time.Now().UnixNano()
			index := uint64(0)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += per {
				cmds := make([]engine.Command, per)
				for i := range cmds {
					cmds[i] = engine.Command{Op: engine.OpClaim, Now: now, Key: fmt.Sprintf("src:evt_%d_%d", done, i), Source: "src",
						Payload: payload, Retention: int64(time.Hour), LeaseFor: int64(30 * time.Second),
						Headers: []engine.Header{{Name: "Content-Type", Value: "application/json"}}}
				}
				index++
				f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: engine.EncodeEntry(nil, cmds)}})
			}
		})
	}
}
