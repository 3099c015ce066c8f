package intake

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"oncehook/config"
	"oncehook/engine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp's process-wide Date updater, and its worker-pool cleaner,
		// which notices a stopped server only after its next 10s sleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

// memStore is the intake's Store over a real engine on a temporary bbolt
// file, without Raft: each command is applied at the next index, stamped
// with the wall clock as the leader's proposer would. failClaim, when set,
// is returned by Claim instead of applying it.
type memStore struct {
	eng *engine.Engine

	mu        sync.Mutex
	index     uint64
	changed   chan struct{} // closed and replaced after every apply
	failClaim error
	// holdClaim, when set, holds the next Claim: it closes held, waits
	// for release and fails with err, committing nothing (a claim whose
	// proposal is in flight, then lost). Later claims apply as usual.
	holdClaim *heldClaim
	// notCurrent makes Lookup find nothing, as a node's does until it is
	// current (after a start, during a restore): the claim decides.
	notCurrent bool
}

type heldClaim struct {
	held, release chan struct{}
	err           error
	cmd           engine.Command // the command held, as the intake passed it
}

var _ Store = (*memStore)(nil)

func newMemStore(t testing.TB) *memStore {
	t.Helper()
	eng, err := engine.Open(filepath.Join(t.TempDir(), "engine.db"), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Check(); err != nil {
			t.Errorf("engine check: %v", err)
		}
		eng.Close()
	})
	return &memStore{eng: eng, changed: make(chan struct{})}
}

// apply applies one command and wakes the waiters.
func (m *memStore) apply(c engine.Command) (engine.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.index++
	c.Now = time.Now().UnixNano()
	rs, err := m.eng.Apply(m.index, c)
	close(m.changed)
	m.changed = make(chan struct{})
	if err != nil {
		return engine.Result{}, err
	}
	return rs[0], nil
}

func (m *memStore) Lookup(key string) (engine.State, bool, error) {
	m.mu.Lock()
	stale := m.notCurrent
	m.mu.Unlock()
	if stale {
		return 0, false, nil
	}
	return m.eng.Exists(key)
}

func (m *memStore) Claim(_ context.Context, c engine.Command) (engine.Result, error) {
	m.mu.Lock()
	h := m.holdClaim
	m.holdClaim = nil
	m.mu.Unlock()
	if h != nil {
		h.cmd = c
		close(h.held)
		<-h.release
		return engine.Result{}, fmt.Errorf("claim %s: %w", c.Key, h.err)
	}
	if m.failClaim != nil {
		return engine.Result{}, m.failClaim
	}
	c.Op = engine.OpClaim
	r, err := m.apply(c)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return r, fmt.Errorf("claim %s: %w", c.Key, err)
	}
	return r, nil
}

func (m *memStore) Get(key string, withPayload bool) (engine.Event, error) {
	return m.eng.Get(key, withPayload)
}

func (m *memStore) Wait(ctx context.Context, key string, final func(engine.Event) bool) (engine.Event, error) {
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		ev, err := m.eng.Get(key, false)
		if err == nil && final(ev) {
			return ev, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ev, ctx.Err()
		}
	}
}

func (m *memStore) Ready() (bool, string) { return true, "in memory" }

func (m *memStore) Replay(_ context.Context, c engine.Command) (engine.Result, error) {
	c.Op = engine.OpReplay
	r, err := m.apply(c)
	if err != nil {
		return r, fmt.Errorf("replay: %w", err)
	}
	return r, r.Err
}

// nullStore answers every claim as new at once: BenchmarkIntakeHandler
// measures the intake's own work per request (parse, verify, key, build the
// command, answer), without Raft, the engine or the network.
type nullStore struct{}

var _ Store = nullStore{}

func (nullStore) Lookup(string) (engine.State, bool, error) { return 0, false, nil }
func (nullStore) Claim(_ context.Context, c engine.Command) (engine.Result, error) {
	return engine.Result{Created: true, State: engine.StatePending}, nil
}
func (nullStore) Get(string, bool) (engine.Event, error) { return engine.Event{}, engine.ErrNotFound }
func (nullStore) Wait(context.Context, string, func(engine.Event) bool) (engine.Event, error) {
	return engine.Event{}, engine.ErrNotFound
}
func (nullStore) Ready() (bool, string) { return true, "" }

func (nullStore) Replay(context.Context, engine.Command) (engine.Result, error) {
	return engine.Result{}, engine.ErrNotFound
}

func mustWrite(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadSources writes a config with the given [[source]] tables (secrets in
// files of dir, named by the tables) and compiles its sources.
func loadSources(t testing.TB, dir, sourcesTOML string) *Set {
	t.Helper()
	mustWrite(t, filepath.Join(dir, "admin.token"), "admin-token-for-tests-0123456789abcdef\n")
	cfgPath := filepath.Join(dir, "oncehook.toml")
	mustWrite(t, cfgPath, fmt.Sprintf("[node]\nid = \"node1\"\ndata_dir = %q\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\ntokens = [{ name = \"ops\", token_file = \"admin.token\" }]\n",
		filepath.Join(dir, "data"))+sourcesTOML)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(cfg.Sources)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// rawRequest sends head (request line and headers, without the final
// CRLFs) and body on a new connection to addr and reads the answer.
func rawRequest(t *testing.T, addr, head, body string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "%s\r\n\r\n%s", head, body); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", strings.SplitN(head, "\r\n", 2)[0], err)
	}
	resp.Body.Close()
	return resp
}
