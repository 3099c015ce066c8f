package cluster

import (
	"fmt"
	"testing"
	"time"
)

func TestNextSnapshotThreshold(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name      string
		base      uint64
		snapBytes int64
		avgEntry  float64
		floor     int64
		want      uint64
	}{
		{"small state keeps the base", 4096, 100 * mib, 10_000, 256 * mib, 4096},
		{"no entries measured yet", 4096, 4096 * mib, 0, 256 * mib, 4096},
		{"entries under a byte", 4096, 4096 * mib, 0.5, 256 * mib, 4096},
		{"large state: half its bytes of log", 4096, 4096 * mib, 16 * 1024, 256 * mib, 131072},
		{"at the floor", 4096, 256 * mib, 1024, 256 * mib, 131072},
		{"never below the base", 4096, 300 * mib, 1 * mib, 256 * mib, 4096},
		{"a large configured base stays", 1 << 20, 4096 * mib, 16 * 1024, 256 * mib, 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nextSnapshotThreshold(tt.base, tt.snapBytes, tt.avgEntry, tt.floor)
			if got != tt.want {
				t.Fatalf("nextSnapshotThreshold(%d, %d, %v, %d) = %d, want %d", tt.base, tt.snapBytes, tt.avgEntry, tt.floor, got, tt.want)
			}
		})
	}
}

// floorCases run a snapshot test once with every state past the snapshot
// floor (the policy applies) and once with none.
var floorCases = []struct {
	name  string
	floor int64
	grows bool
}{
	{"state past the floor", 1, true},
	{"state under the floor", 1 << 40, false},
}

// A snapshot of a state past the floor moves raft's threshold to half the
// snapshot's bytes in entries of the measured average size; a state under
// the floor leaves the configured one. Only one snapshot stays on disk.
func TestSnapshotThresholdFollowsTheState(t *testing.T) {
	for _, tc := range floorCases {
		t.Run(tc.name, func(t *testing.T) {
			const base = 8
			c := newTestCluster(t, 1, func(cfg *Config) {
				cfg.SnapshotThreshold = base
				cfg.snapshotFloor = tc.floor
			})
			n := c.nodes[0]
			for i := range 40 {
				c.mustClaim(fmt.Sprintf("src:p%d", i), -1)
			}
			for i := range 2 {
				if err := n.raft.Snapshot().Error(); err != nil {
					t.Fatalf("snapshot: %v", err)
				}
				c.mustClaim(fmt.Sprintf("src:after%d", i), -1)
			}
			list, err := n.fsm.snaps.List()
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 {
				t.Fatalf("%d snapshots on disk, want 1", len(list))
			}
			p := n.fsm.policy
			avg := float64(p.bytes.Load()) / float64(p.entries.Load())
			got := n.raft.ReloadableConfig().SnapshotThreshold
			if !tc.grows {
				if got != base {
					t.Fatalf("threshold %d, want the configured %d", got, base)
				}
				return
			}
			// The policy ran after the snapshot, before the claim that
			// followed it: its average is within one entry of this one.
			// The state's size, not the compressed snapshot's.
			size, err := stateSize(n.fsm.snaps, list[0])
			if err != nil {
				t.Fatal(err)
			}
			if size <= list[0].Size {
				t.Fatalf("snapshot of %d bytes holds a %d-byte file: not compressed", list[0].Size, size)
			}
			want := uint64(float64(size) / snapshotShare / avg)
			if got <= base || got > want+want/10 || got < want-want/10 {
				t.Fatalf("threshold %d after a snapshot of a %d-byte file (entries of %.0f B on average): want about %d", got, size, avg, want)
			}
		})
	}
}

// A restarted node starts raft with the threshold its newest snapshot calls
// for (the entry size measured on the end of its log), not the configured
// one: otherwise each restart of a large node would cost one extra full
// copy of the state. Under the floor it starts with the configured one.
func TestSnapshotThresholdResumesAfterRestart(t *testing.T) {
	for _, tc := range floorCases {
		t.Run(tc.name, func(t *testing.T) {
			const base = 8
			dir := t.TempDir()
			open := func() *Node {
				return openSolo(t, dir, func(cfg *Config) {
					cfg.NoSync = true
					cfg.SnapshotThreshold, cfg.snapshotFloor = base, tc.floor
				})
			}
			n := open()
			ctx := ctxT(t, 10*time.Second)
			for i := range 40 {
				if _, err := n.Claim(ctx, claimCmd(fmt.Sprintf("src:k%d", i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			before := n.raft.ReloadableConfig().SnapshotThreshold
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}

			n = open()
			defer n.Close()
			got := n.raft.ReloadableConfig().SnapshotThreshold
			if !tc.grows {
				if got != base || before != base {
					t.Fatalf("threshold %d before the restart, %d after: want the configured %d", before, got, base)
				}
				return
			}
			// The same claims fill the sample as the entries measured before
			// the restart, so the two thresholds agree within a tenth.
			if before <= base || got <= base || got > before+before/10 || got < before-before/10 {
				t.Fatalf("threshold %d after the restart, %d before it (configured %d): want about the same, above the configured", got, before, base)
			}
		})
	}
}

// TestRaftTimingReachesRaft: the heartbeat and election timeouts of Config
// are raft's.
func TestRaftTimingReachesRaft(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 700*time.Millisecond, 900*time.Millisecond, 350*time.Millisecond
	})
	rc := c.nodes[0].raft.ReloadableConfig()
	if rc.HeartbeatTimeout != 700*time.Millisecond || rc.ElectionTimeout != 900*time.Millisecond {
		t.Fatalf("raft runs with heartbeat %v election %v, want 700ms 900ms", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
}
