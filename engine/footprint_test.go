package engine

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestRetainedKeyFootprint measures what a done key costs on disk once its
// payload was dropped (payload_retention) and until it expires: 100,000 small
// events (10,000 under -short or -race) are claimed, leased and completed
// through the engine with a payload retention, their payloads dropped, and
// the file's pages in use (bbolt's bucket statistics) and its size after a
// compaction (bbolt.Compact into a fresh file) divided by the keys kept. The
// goal is under 200 bytes a key; the figures are logged (go test -v -run
// TestRetainedKeyFootprint ./engine/).
func TestRetainedKeyFootprint(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000
	}
	dir := t.TempDir()
	e := mustOpenPath(t, filepath.Join(dir, "engine.db"), Options{NoSync: true})
	h := &harness{tb: t, e: e}
	const batch = 2000
	cmds := make([]Command, 0, batch)
	flush := func() {
		if len(cmds) > 0 {
			h.apply(cmds...)
			cmds = cmds[:0]
		}
	}
	for i := range n {
		c := claimCmd(keyN(i), t0+int64(i)*1000)
		c.Payload = []byte(fmt.Sprintf(`{"id":"evt_%08d","type":"invoice.paid","amount":4200}`, i))
		c.Retention = 7 * 24 * hour
		if cmds = append(cmds, c); len(cmds) == batch {
			flush()
		}
	}
	flush()
	for done := 0; done < n; {
		evs := h.one(leaseCmd(t0+hour, batch)).Events
		for _, ev := range evs {
			c := completeCmd(ev.Key, ev.Token, t0+hour)
			c.PayloadRetention = 72 * hour
			cmds = append(cmds, c)
		}
		flush()
		done += len(evs)
	}
	if r := h.one(Command{Op: OpDropPayloads, Now: t0 + 80*hour, Before: t0 + 80*hour}); r.N != n {
		t.Fatalf("dropped %d payloads, want %d", r.N, n)
	}
	if s, _ := mustCounts(t, e); s[StateDone] != n {
		t.Fatalf("counts = %v", s)
	}

	var inUse int
	err := e.view(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			inUse += st.BranchInuse + st.LeafInuse
			if testing.Verbose() {
				t.Logf("bucket %-9s %7d keys, %9d bytes in use", name, st.KeyN, st.BranchInuse+st.LeafInuse)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	compacted := filepath.Join(dir, "compacted.db")
	err = e.viewCommitted(func(tx *bolt.Tx) error {
		dst, err := bolt.Open(compacted, 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			return err
		}
		if err := bolt.Compact(dst, tx.DB(), 64<<20); err != nil {
			dst.Close()
			return err
		}
		return dst.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(compacted)
	if err != nil {
		t.Fatal(err)
	}
	perKeyInUse, perKeyFile := float64(inUse)/float64(n), float64(fi.Size())/float64(n)
	t.Logf("%d done keys without payload: %.0f bytes a key in use, %.0f bytes a key in a compacted file", n, perKeyInUse, perKeyFile)
	if perKeyInUse >= 200 {
		t.Errorf("%.0f bytes a retained key in use, want under 200", perKeyInUse)
	}
}

// TestEventsBucketPacking checks how full the events bucket's pages are
// after events are claimed, leased and completed, a few hundred per commit:
// keys that grow with time are packed (bbolt's default split would leave
// every page half empty), keys in random order keep the default split
// (packing them would leave the pages emptier still). See
// applier.packEvents.
func TestEventsBucketPacking(t *testing.T) {
	n := 30_000
	if testing.Short() || raceEnabled {
		n = 8_000
	}
	cases := []struct {
		name     string
		key      func(i int, r *rand.Rand) string
		overtake int     // requests arrive shuffled in runs of this many
		min, max float64 // bounds of the leaf pages' fill
	}{
		{"growing ids", func(i int, _ *rand.Rand) string { return fmt.Sprintf("src:evt_%012d", i) }, 0, 0.75, 1},
		// 64 clients' requests overtake each other on the way.
		{"growing ids, overtaking", func(i int, _ *rand.Rand) string { return fmt.Sprintf("src:evt_%012d", i) }, 64, 0.75, 1},
		{"random ids", func(_ int, r *rand.Rand) string { return fmt.Sprintf("src:%016x%016x", r.Uint64(), r.Uint64()) }, 0, 0.55, 0.8},
		// Two sources, each with growing ids, interleaved: every new key
		// is the last of its source's, not of the bucket.
		{"two sources growing", func(i int, _ *rand.Rand) string { return fmt.Sprintf("s%d:evt_%012d", i%2, i) }, 16, 0.75, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			r := rand.New(rand.NewPCG(1, 2))
			const batch = 500
			for i := 0; i < n; i += batch {
				cmds := make([]Command, 0, batch)
				for j := i; j < i+batch; j++ {
					c := claimCmd(tc.key(j, r), t0+int64(j)*1000)
					c.Payload = []byte(`{"type":"invoice.paid"}`)
					cmds = append(cmds, c)
				}
				for w := 0; tc.overtake > 0 && w < len(cmds); w += tc.overtake {
					run := cmds[w:min(w+tc.overtake, len(cmds))]
					r.Shuffle(len(run), func(a, b int) { run[a], run[b] = run[b], run[a] })
				}
				h.apply(cmds...)
				evs := h.one(leaseCmd(t0+int64(i+batch)*1000, batch)).Events
				done := make([]Command, 0, len(evs))
				for _, ev := range evs {
					done = append(done, completeCmd(ev.Key, ev.Token, t0+int64(i+batch)*1000))
				}
				h.apply(done...)
			}
			var st bolt.BucketStats
			if err := h.e.view(func(tx *bolt.Tx) error {
				st = tx.Bucket(bEvents).Stats()
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if st.KeyN != n {
				t.Fatalf("%d events, want %d", st.KeyN, n)
			}
			fill := float64(st.LeafInuse) / float64(st.LeafAlloc)
			t.Logf("%d events: %d leaf pages, %.0f%% full, %d bytes a key", n, st.LeafPageN, 100*fill, (st.LeafAlloc+st.BranchAlloc)/n)
			if fill < tc.min || fill > tc.max {
				t.Errorf("leaf pages %.0f%% full, want %.0f%%..%.0f%%", 100*fill, 100*tc.min, 100*tc.max)
			}
		})
	}
}
