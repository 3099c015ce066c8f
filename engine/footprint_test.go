package engine

import (
	"fmt"
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
