package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { cleanupBenchFixtures() }))
}

// Times used by the tests: t0 is the start of an hour bucket.
const (
	t0   = int64(1_700_002_800) * int64(time.Second) // 2023-11-14T23:00:00Z, a whole hour
	sec  = int64(time.Second)
	hour = int64(time.Hour)
)

// mustOpen opens a fresh engine in a test directory (NoSync unless opts says
// otherwise is irrelevant here: tests use NoSync for speed where durability is
// not the point) and checks its consistency when the test ends.
func mustOpen(tb testing.TB, opts ...Options) *Engine {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "engine.db"), o)
}

// mustOpenPath opens the engine at path and, at cleanup, runs Check (bbolt's
// page check plus the engine's index check) and closes it.
func mustOpenPath(tb testing.TB, path string, o Options) *Engine {
	tb.Helper()
	e, err := Open(path, o)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	tb.Cleanup(func() {
		if err := e.Check(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("consistency check of %s: %v", path, err)
		}
		if err := e.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return e
}

// harness applies commands under increasing indexes.
type harness struct {
	tb  testing.TB
	e   *Engine
	idx uint64
	// format, when set, is the writer's format of every command applied
	// that names none: the meanings of an older leader's entries.
	format uint8
}

func newHarness(tb testing.TB, opts ...Options) *harness {
	tb.Helper()
	return &harness{tb: tb, e: mustOpen(tb, opts...)}
}

// apply applies cmds as the next entry and returns its results.
func (h *harness) apply(cmds ...Command) []Result {
	h.tb.Helper()
	h.idx++
	if h.format != 0 {
		cmds = slices.Clone(cmds)
		for i := range cmds {
			if cmds[i].format == 0 {
				cmds[i].format = h.format
			}
		}
	}
	rs, err := h.e.Apply(h.idx, cmds...)
	if err != nil {
		h.tb.Fatalf("Apply(%d): %v", h.idx, err)
	}
	if len(rs) != len(cmds) {
		h.tb.Fatalf("Apply(%d): %d results for %d commands", h.idx, len(rs), len(cmds))
	}
	return rs
}

// one applies one command and returns its result.
func (h *harness) one(c Command) Result {
	h.tb.Helper()
	return h.apply(c)[0]
}

// get returns key's event (with payload) or fails the test.
func (h *harness) get(key string) Event {
	h.tb.Helper()
	ev, err := h.e.Get(key, true)
	if err != nil {
		h.tb.Fatalf("Get(%q): %v", key, err)
	}
	return ev
}

func claimCmd(key string, now int64) Command {
	return Command{
		Op: OpClaim, Now: now, Key: key, Source: "src",
		Payload:   []byte("payload of " + key),
		Headers:   []Header{{Name: "Content-Type", Value: "application/json"}},
		Retention: 24 * hour,
	}
}

// withLeaseFor gives a claim the event's own lease length, as the leader's
// leases by source do.
func withLeaseFor(c Command, d int64) Command {
	c.LeaseFor = d
	return c
}

func leaseCmd(now int64, max int) Command {
	return Command{Op: OpLease, Now: now, Max: max, LeaseFor: 30 * sec}
}

func completeCmd(key string, token uint64, now int64) Command {
	return Command{Op: OpComplete, Now: now, Key: key, Token: token}
}

func failCmd(key string, token uint64, now int64, maxAttempts int) Command {
	return Command{Op: OpFail, Now: now, Key: key, Token: token, RetryIn: 10 * sec, MaxAttempts: maxAttempts, Reason: "handler 500"}
}

// refundCmd is a forwarder's hand-back: the attempt never started.
func refundCmd(key string, now int64, maxAttempts int) Command {
	c := failCmd(key, 0, now, maxAttempts)
	c.Reason, c.Refund = "rate limited", true
	return c
}

func keyN(i int) string { return fmt.Sprintf("src:evt_%08d", i) }

func mustCounts(tb testing.TB, e *Engine) (map[State]int, map[string]int) {
	tb.Helper()
	s, src, err := e.Counts()
	if err != nil {
		tb.Fatalf("Counts: %v", err)
	}
	return s, src
}

func mustHash(tb testing.TB, e *Engine) [32]byte {
	tb.Helper()
	h, err := e.Hash()
	if err != nil {
		tb.Fatalf("Hash: %v", err)
	}
	return h
}

func removeAllQuiet(dir string) { _ = os.RemoveAll(dir) }

// pausedPending counts the pending events a pause holds: the held index's
// entries and the due entries of paused sources (pause.go).
func pausedPending(e *Engine) (int, error) {
	n := 0
	err := e.view(func(tx *bolt.Tx) error {
		sources := tx.Bucket(bSources)
		if err := tx.Bucket(bHeld).ForEach(func(k, v []byte) error { n++; return nil }); err != nil {
			return err
		}
		return tx.Bucket(bDue).ForEach(func(k, v []byte) error {
			if src, _, _, ok := splitDueKey(k); ok && sources.Get(src) != nil {
				n++
			}
			return nil
		})
	})
	return n, err
}

// heldEntries counts the entries of the held index.
func heldEntries(e *Engine) (int, error) {
	n := 0
	err := e.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bHeld).ForEach(func(k, v []byte) error { n++; return nil })
	})
	return n, err
}
