package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"oncehook/cluster"
	"oncehook/config"
	"oncehook/engine"
)

// engineStore is the admin API's Store over a real engine on a temporary
// bbolt file, without Raft: commands are applied at the next index with the
// wall clock, as the leader's proposer would stamp them. Membership, backup
// and restore are the cluster's and are refused here.
type engineStore struct {
	eng      *engine.Engine
	follower bool // LeaderOnly answers as a follower would
	// transferErr is what TransferLeadership returns (nil: errNotHere).
	transferErr error
	// joinErr is what Join returns (nil: errNotHere, unless joined is
	// set); joined is Join's added when it succeeds.
	joinErr error
	joined  *bool
	// purged is what Purge reports deleted (nil: errNotHere).
	purged []string
	// replayErr, when set, fails the replay of one key with its error.
	replayErr func(key string) error
	// replayCalls counts Replay's calls; from the replayCutAt-th (> 0) on,
	// Replay fails with cluster.ErrNoLeader, as when the leader is lost.
	replayCalls atomic.Int64
	replayCutAt int64

	mu    sync.Mutex
	index uint64
}

var _ Store = (*engineStore)(nil)

var errNotHere = errors.New("not in this test store")

func newEngineStore(t *testing.T) *engineStore {
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
	return &engineStore{eng: eng}
}

func (s *engineStore) apply(c engine.Command) (engine.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	c.Now = time.Now().UnixNano()
	rs, err := s.eng.Apply(s.index, c)
	if err != nil {
		return engine.Result{}, err
	}
	return rs[0], rs[0].Err
}

func (s *engineStore) Ready() (bool, string)                        { return true, "in memory" }
func (s *engineStore) ClusterStatus(context.Context) cluster.Status { return cluster.Status{} }
func (s *engineStore) Counts() (map[engine.State]int, map[string]int, error) {
	return s.eng.Counts()
}
func (s *engineStore) List(f engine.ListFilter) ([]engine.Event, error) { return s.eng.List(f) }
func (s *engineStore) Get(key string, withPayload bool) (engine.Event, error) {
	return s.eng.Get(key, withPayload)
}
func (s *engineStore) Replay(_ context.Context, c engine.Command) (engine.Result, error) {
	c.Op = engine.OpReplay
	if n := s.replayCalls.Add(1); s.replayCutAt > 0 && n >= s.replayCutAt {
		return engine.Result{}, fmt.Errorf("replay: %w", cluster.ErrNoLeader)
	}
	if len(c.Keys) == 1 && s.replayErr != nil {
		if err := s.replayErr(c.Keys[0]); err != nil {
			return engine.Result{}, err
		}
	}
	return s.apply(c)
}
func (s *engineStore) Pause(_ context.Context, source, who, reason string) (bool, error) {
	r, err := s.apply(engine.Command{Op: engine.OpPause, Source: source, Who: who, Reason: reason})
	return r.N > 0, err
}
func (s *engineStore) Resume(_ context.Context, source, who, reason string) (bool, error) {
	r, err := s.apply(engine.Command{Op: engine.OpResume, Source: source, Who: who, Reason: reason})
	return r.N > 0, err
}
func (s *engineStore) Sources() (map[string]engine.SourceState, error) { return s.eng.Sources() }
func (s *engineStore) Backlog() (map[string]engine.Backlog, error)     { return s.eng.Backlog() }
func (s *engineStore) PurgePreview(st engine.State, source string, before time.Time, max int) ([]string, int, error) {
	return s.eng.PurgePreview(st, source, before.UnixNano(), max)
}
func (s *engineStore) PurgeRetained(st engine.State, source string, before, now time.Time) (int, error) {
	return s.eng.PurgeRetained(st, source, before.UnixNano(), now.UnixNano())
}
func (s *engineStore) Purge(context.Context, engine.State, string, time.Time, string, string) ([]string, error) {
	if s.purged != nil {
		return s.purged, nil
	}
	return nil, errNotHere
}
func (s *engineStore) Join(context.Context, string, string) (bool, error) {
	switch {
	case s.joinErr != nil:
		return false, s.joinErr
	case s.joined != nil:
		return *s.joined, nil
	}
	return false, errNotHere
}
func (s *engineStore) RemovePeer(context.Context, string) error { return errNotHere }
func (s *engineStore) TransferLeadership(context.Context, string) (string, error) {
	if s.transferErr != nil {
		return "", s.transferErr
	}
	return "", errNotHere
}
func (s *engineStore) Backup(io.Writer) (int64, error)       { return 0, errNotHere }
func (s *engineStore) Restore(context.Context, string) error { return errNotHere }
func (s *engineStore) LeaderOnly(_ context.Context, op string) error {
	if s.follower {
		return fmt.Errorf("%s: %w; run it on the leader, node2 (admin http://127.0.0.2:7071)", op, cluster.ErrNotLeader)
	}
	return nil
}

const testToken = "admin-token-for-tests-0123456789abcdef"

// newTestAPI is an admin server over a fresh engineStore, with one source
// ("orders") and one token (named "ops"), served by httptest.
func newTestAPI(t *testing.T, tune ...func(*Options)) (*engineStore, string) {
	t.Helper()
	store, s := newTestServer(t, tune...)
	srv := httptest.NewServer(s.srv.Handler)
	t.Cleanup(srv.Close)
	return store, srv.URL
}

// newTestServer is newTestAPI's admin server, not yet serving.
func newTestServer(t *testing.T, tune ...func(*Options)) (*engineStore, *Server) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("admin.token", testToken+"\n")
	write("orders.secret", "whsec_"+strings.Repeat("QUFB", 8)+"\n")
	write("oncehook.toml", `[node]
id = "node1"
data_dir = "`+filepath.Join(dir, "data")+`"
listen = "127.0.0.1:0"

[admin]
listen = "127.0.0.1:0"
tokens = [{ name = "ops", token_file = "admin.token" }]

[[source]]
name = "orders"
provider = "standard"
secret_files = ["orders.secret"]
forward = "http://127.0.0.1:1/orders"
`)
	cfg, err := config.Load(filepath.Join(dir, "oncehook.toml"))
	if err != nil {
		t.Fatal(err)
	}
	store := newEngineStore(t)
	o := Options{Config: func() *config.Config { return cfg }, Store: store, Version: "test"}
	for _, f := range tune {
		f(&o)
	}
	s, err := New(o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return store, s
}

// TestAPIAnswers: the /v1 API's answers over a bare engine, without a node
// (docs/reference.md, "Admin API").
func TestAPIAnswers(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		path     string
		token    string // "": testToken; "-": none
		body     string
		status   int
		contains string
	}{
		{"no token", "GET", "/v1/status", "-", "", 401, `"error": "missing bearer token"`},
		{"wrong token", "GET", "/v1/status", "nope", "", 401, `"error": "invalid bearer token"`},
		{"metrics without a token", "GET", "/metrics", "-", "", 404, ""},
		{"status", "GET", "/v1/status", "", "", 200, `"orders": {`},
		{"event", "GET", "/v1/events/orders:msg_1", "", "", 200, `"state": "pending"`},
		{"event with body", "GET", "/v1/events/orders:msg_1?body=1", "", "", 200, `"payload": "{\"a\":1}"`},
		// A payload that is not UTF-8 comes whole, in base64, not with its
		// bytes replaced by U+FFFD in a JSON string.
		{"event with a binary body", "GET", "/v1/events/orders:x_bin?body=1", "", "", 200, `"payload_base64": "/wDAAQ=="`},
		{"unknown event", "GET", "/v1/events/orders:nope", "", "", 404, `no event with key \"orders:nope\"`},
		{"a key without its source", "GET", "/v1/events/msg_1", "", "", 404, `keys are scoped by their source, SOURCE:ID (e.g. \"orders:msg_1\")`},
		{"events by state", "GET", "/v1/events?state=pending", "", "", 200, `"key": "orders:msg_1"`},
		{"unknown state", "GET", "/v1/events?state=lost", "", "", 400, `unknown state \"lost\"`},
		{"events of a configured source", "GET", "/v1/events?source=orders", "", "", 200, `"key": "orders:msg_1"`},
		{"events of a source neither configured nor stored", "GET", "/v1/events?source=ordres", "", "", 404, `unknown source ordres`},
		// A bad limit is refused with what a good one is: any whole number
		// from 1, a larger one than a page holds served as a full page
		// with "next" (not refused, as "1..1000" said).
		{"limit zero", "GET", "/v1/events?limit=0", "", "", 400, `limit must be a whole number from 1 (a page holds at most 1000 events; a larger limit is served as 1000, with \"next\")`},
		{"limit negative", "GET", "/v1/events?limit=-1", "", "", 400, "limit must be a whole number from 1 (a page holds at most 1000"},
		{"limit not a number", "GET", "/v1/events?limit=abc", "", "", 400, "limit must be a whole number from 1 (a page holds at most 1000"},
		{"limit fractional", "GET", "/v1/events?limit=1.5", "", "", 400, "limit must be a whole number from 1 (a page holds at most 1000"},
		{"limit 1", "GET", "/v1/events?limit=1", "", "", 200, `"key": "orders:msg_1"`},
		{"limit over a page", "GET", "/v1/events?limit=5000", "", "", 200, `"key": "orders:msg_1"`},
		{"limit beyond any integer", "GET", "/v1/events?limit=99999999999999999999", "", "", 200, `"key": "orders:msg_1"`},
		{"negative limit beyond any integer", "GET", "/v1/events?limit=-99999999999999999999", "", "", 400, `limit must be a whole number from 1`},
		{"replay without a reason", "POST", "/v1/replay", "", `{"keys":["orders:msg_1"]}`, 400, "reason is required"},
		{"replay of a pending event", "POST", "/v1/replay", "", `{"keys":["orders:msg_1"],"reason":"test"}`, 409, `event orders:msg_1: event is pending: only dead, done and stale events are replayed`},
		{"replay of an unknown key", "POST", "/v1/replay", "", `{"keys":["orders:nope"],"reason":"test"}`, 404, `event orders:nope: not found`},
		{"replay of a key without its source", "POST", "/v1/replay", "", `{"keys":["msg_1"],"reason":"test"}`, 404, `event msg_1: not found: keys are scoped by their source, SOURCE:ID (e.g. \"orders:msg_1\")`},
		{"replay of keys with a source", "POST", "/v1/replay", "", `{"keys":["orders:msg_1"],"source":"other","reason":"test"}`, 400, "source and since go with state"},
		{"replay of keys with a since", "POST", "/v1/replay", "", `{"keys":["orders:msg_1"],"since":"1h","reason":"test"}`, 400, "source and since go with state"},
		{"replay of a state in flight", "POST", "/v1/replay", "", `{"state":"pending","reason":"test"}`, 400, "state must be dead, done or stale"},
		{"pause", "POST", "/v1/sources/orders/pause", "", `{"reason":"maintenance"}`, 200, `"paused": true`},
		{"pause of an unknown source", "POST", "/v1/sources/nope/pause", "", `{"reason":"maintenance"}`, 404, "unknown source nope"},
		{"purge of events in flight", "POST", "/v1/purge", "", `{"state":"pending","before":"1s","reason":"x"}`, 400, "in flight"},
		{"purge before a time that wraps around", "POST", "/v1/purge", "", `{"state":"dead","before":"1026-12-03T00:00:00Z","reason":"x"}`, 400, "out of range: a time between 1970 and 2262"},
		{"purge before a time ahead of the clock", "POST", "/v1/purge", "", `{"state":"dead","before":"2062-12-03T00:00:00Z","reason":"x"}`, 400, "ahead of this node's clock"},
		{"replay since a time that wraps around", "POST", "/v1/replay", "", `{"state":"done","since":"3026-12-03T00:00:00Z","reason":"x"}`, 400, "out of range"},
		{"purge dry run", "POST", "/v1/purge", "", `{"state":"dead","before":"1s","reason":"x","dry_run":true}`, 200, `"would_purge": 0`},
		{"purge dry run of a source", "POST", "/v1/purge", "", `{"state":"dead","source":"orders","before":"1s","reason":"x","dry_run":true}`, 200, `"would_purge": 0`},
		{"purge of a source neither configured nor stored", "POST", "/v1/purge", "", `{"state":"dead","source":"ordres","before":"1s","reason":"x","dry_run":true}`, 404, `unknown source ordres`},
		{"replay of a source neither configured nor stored", "POST", "/v1/replay", "", `{"state":"dead","source":"ordres","reason":"x"}`, 404, `unknown source ordres`},
		{"replay dry run of a source neither configured nor stored", "POST", "/v1/replay", "", `{"state":"dead","source":"ordres","reason":"x","dry_run":true}`, 404, `unknown source ordres`},
		{"replay dry run of a source", "POST", "/v1/replay", "", `{"state":"dead","source":"orders","reason":"x","dry_run":true}`, 200, `"would_replay": 0`},
		// A body that reads as a dry run to a person but not to
		// encoding/json (a key in another case, a key twice, a second
		// object) is refused, not run.
		{"purge dry run, a key in capitals", "POST", "/v1/purge", "", `{"state":"dead","before":"1s","reason":"x","dry_run":true,"DRY_RUN":false}`, 400, `unknown key \"DRY_RUN\" (keys are exact, lower case)`},
		{"purge dry run, a key twice", "POST", "/v1/purge", "", `{"state":"dead","before":"1s","reason":"x","dry_run":true,"dry_run":false}`, 400, `key \"dry_run\" given twice`},
		{"purge dry run, a second object", "POST", "/v1/purge", "", `{"state":"dead","before":"1s","reason":"x","dry_run":true}{"dry_run":false}`, 400, "data after the JSON object"},
		{"purge, trailing junk", "POST", "/v1/purge", "", `{"state":"dead","before":"1s","reason":"x","dry_run":true} x`, 400, "data after the JSON object"},
		{"replay, a key in capitals", "POST", "/v1/replay", "", `{"KEYS":["orders:msg_1"],"reason":"test"}`, 400, `unknown key \"KEYS\"`},
		{"pause, a key in capitals", "POST", "/v1/sources/orders/pause", "", `{"Reason":"maintenance"}`, 400, `unknown key \"Reason\"`},
		{"pause without a body", "POST", "/v1/sources/orders/pause", "", ``, 400, "empty body"},
		{"pause, a reason too long", "POST", "/v1/sources/orders/pause", "", `{"reason":"` + strings.Repeat("r", engine.MaxTextLen+1) + `"}`, 400, fmt.Sprintf("reason is %d bytes; at most %d are kept", engine.MaxTextLen+1, engine.MaxTextLen)},
		{"pause, the longest reason", "POST", "/v1/sources/orders/pause", "", `{"reason":"` + strings.Repeat("r", engine.MaxTextLen) + `"}`, 200, `"paused": true`},
		{"replay, a reason too long", "POST", "/v1/replay", "", `{"keys":["orders:msg_1"],"reason":"` + strings.Repeat("r", engine.MaxTextLen+1) + `"}`, 400, "at most"},
		{"purge, a reason too long", "POST", "/v1/purge", "", `{"state":"dead","before":"1h","reason":"` + strings.Repeat("r", engine.MaxTextLen+1) + `"}`, 400, "at most"},
		{"purge, not an object", "POST", "/v1/purge", "", `["dry_run"]`, 400, "bad purge request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, url := newTestAPI(t)
			if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: "orders:msg_1", Source: "orders",
				Payload: []byte(`{"a":1}`), Retention: int64(time.Hour), LeaseFor: int64(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: "orders:x_bin", Source: "orders",
				Payload: []byte{0xff, 0x00, 0xc0, 0x01}, Retention: int64(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
			switch c.token {
			case "":
				req.Header.Set("Authorization", "Bearer "+testToken)
			case "-":
			default:
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(raw), c.contains) {
				t.Fatalf("answer %d %s, want %d containing %s", resp.StatusCode, raw, c.status, c.contains)
			}
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff on every answer", got)
			}
			if resp.StatusCode == 200 && strings.HasPrefix(c.path, "/v1/") && !json.Valid(raw) {
				t.Fatalf("answer is not JSON: %s", raw)
			}
		})
	}
}

// TestReplayKeysSaysWhatWasSkipped: POST /v1/replay with several keys
// replays those it can and names every other one with its reason, instead
// of dropping them silently; the same key twice is replayed once.
func TestReplayKeysSaysWhatWasSkipped(t *testing.T) {
	store, url := newTestAPI(t)
	for _, k := range []string{"orders:done1", "orders:done2", "orders:pending"} {
		if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: k, Source: "orders",
			Payload: []byte(`{"a":1}`), Retention: int64(time.Hour), LeaseFor: int64(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		r, err := store.apply(engine.Command{Op: engine.OpLease, Max: 1, LeaseFor: int64(time.Minute)})
		if err != nil || len(r.Events) != 1 {
			t.Fatalf("lease: %v %+v", err, r)
		}
		if _, err := store.apply(engine.Command{Op: engine.OpComplete, Key: r.Events[0].Key, Token: r.Events[0].Token}); err != nil {
			t.Fatal(err)
		}
	}
	body := `{"keys":["orders:done1","orders:nope","orders:pending","orders:done2","orders:done1"],"reason":"test"}`
	req, _ := http.NewRequest("POST", url+"/v1/replay", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Replayed int          `json:"replayed"`
		Keys     []string     `json:"keys"`
		Skipped  []ReplaySkip `json:"skipped"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("answer %d, %v", resp.StatusCode, err)
	}
	wantSkipped := []ReplaySkip{
		{"orders:nope", "not found"},
		{"orders:pending", "event is pending: only dead, done and stale events are replayed"},
	}
	if got.Replayed != 2 || !slices.Equal(got.Keys, []string{"orders:done1", "orders:done2"}) || !slices.Equal(got.Skipped, wantSkipped) {
		t.Fatalf("answer %+v, want done1 and done2 replayed, %+v skipped", got, wantSkipped)
	}
	for _, k := range []string{"orders:done1", "orders:done2"} {
		if ev, err := store.Get(k, false); err != nil || ev.State != engine.StatePending {
			t.Fatalf("%s: %v %v, want pending again", k, ev.State, err)
		}
	}
}

// TestBearerSchemeAnyCase: the auth scheme is case-insensitive, and more
// than one space may follow it (RFC 6750); the token itself is as it is.
func TestBearerSchemeAnyCase(t *testing.T) {
	_, url := newTestAPI(t)
	for _, c := range []struct {
		header string
		status int
	}{
		{"Bearer " + testToken, 200},
		{"bearer " + testToken, 200},
		{"BEARER " + testToken, 200},
		{"Bearer  " + testToken, 200},
		{"Bearer \t" + testToken, 200},
		{"Bearer   ", 401},
		{"Bearer " + strings.ToUpper(testToken), 401},
		{"Basic " + testToken, 401},
		{testToken, 401},
	} {
		req, _ := http.NewRequest("GET", url+"/v1/status", nil)
		req.Header.Set("Authorization", c.header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("Authorization %.12q...: %d, want %d", c.header, resp.StatusCode, c.status)
		}
	}
}

// applyAll applies cmds as one entry at the next index, stamped with the
// wall clock like apply, and fails the test on any rejection.
func (s *engineStore) applyAll(t *testing.T, cmds []engine.Command) []engine.Result {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	now := time.Now().UnixNano()
	for i := range cmds {
		cmds[i].Now = now
	}
	rs, err := s.eng.Apply(s.index, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("command %d (op %d): %v", i, cmds[i].Op, r.Err)
		}
	}
	return rs
}

// doneEvents claims, leases and completes keys (of source orders), their
// payloads kept for payloadKeep from completion.
func doneEvents(t *testing.T, store *engineStore, payloadKeep time.Duration, keys ...string) {
	t.Helper()
	var claims []engine.Command
	for _, k := range keys {
		claims = append(claims, engine.Command{Op: engine.OpClaim, Key: k, Source: "orders",
			Payload: []byte(`{"a":1}`), Retention: int64(time.Hour), LeaseFor: int64(time.Minute)})
	}
	store.applyAll(t, claims)
	leased := store.applyAll(t, []engine.Command{{Op: engine.OpLease, Max: len(keys), LeaseFor: int64(time.Minute)}})[0].Events
	if len(leased) != len(keys) {
		t.Fatalf("leased %d events, want %d", len(leased), len(keys))
	}
	var completes []engine.Command
	for _, ev := range leased {
		completes = append(completes, engine.Command{Op: engine.OpComplete, Key: ev.Key, Token: ev.Token, PayloadRetention: int64(payloadKeep)})
	}
	store.applyAll(t, completes)
}

// replayAnswer is an answer of POST /v1/replay, dry run or not.
type replayAnswer struct {
	DryRun       bool         `json:"dry_run"`
	WouldReplay  int          `json:"would_replay"`
	Replayed     int          `json:"replayed"`
	Keys         []string     `json:"keys"`
	Skipped      []ReplaySkip `json:"skipped"`
	SkippedCount int          `json:"skipped_count"`
}

// TestReplayKeysOutcomeUnknown: a key whose replay ended with the outcome
// unknown (the leader changed while it committed) is not called "not
// committed": it may have been replayed, and the answer says to look before
// replaying it again; a key refused for want of a leader is not committed.
func TestReplayKeysOutcomeUnknown(t *testing.T) {
	store, url := newTestAPI(t)
	store.replayErr = func(key string) error {
		switch key {
		case "orders:unknown":
			return fmt.Errorf("replay: relay to leader: EOF: %w", cluster.ErrIndeterminate)
		case "orders:noleader":
			return fmt.Errorf("replay: %w", cluster.ErrNoLeader)
		}
		return nil
	}
	// The key without a leader first: the answer's error still names the
	// unknown outcome, which a plain "no leader" would hide.
	status, raw := postAdmin(t, url+"/v1/replay", `{"keys":["orders:noleader","orders:unknown"],"reason":"test"}`)
	var got struct {
		Error   string       `json:"error"`
		Skipped []ReplaySkip `json:"skipped"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || status != http.StatusServiceUnavailable || len(got.Skipped) != 2 {
		t.Fatalf("answer %d %s: %v", status, raw, err)
	}
	if !strings.Contains(got.Error, cluster.ErrIndeterminate.Error()) {
		t.Errorf("answer's error %q, want the unknown outcome named", got.Error)
	}
	for _, sk := range got.Skipped {
		switch sk.Key {
		case "orders:unknown":
			if strings.Contains(sk.Error, "not committed") || !strings.Contains(sk.Error, "may have been replayed") {
				t.Errorf("%s: %q, want an outcome unknown that may have replayed it", sk.Key, sk.Error)
			}
		case "orders:noleader":
			if !strings.HasPrefix(sk.Error, "not committed") {
				t.Errorf("%s: %q, want not committed", sk.Key, sk.Error)
			}
		}
	}
}

// TestReplayNamesEventsWithoutPayload: done events whose payload was
// dropped after payload_retention cannot be replayed. A replay by state
// names them in "skipped" (the first 1000 by key, all counted in
// "skipped_count") instead of leaving them out without a word, and a dry
// run, of keys or by state, leaves them out of what it would replay and
// names them the same way: its count is what the replay does.
func TestReplayNamesEventsWithoutPayload(t *testing.T) {
	gone := func(n int) []string {
		var keys []string
		for i := 1; i <= n; i++ {
			keys = append(keys, fmt.Sprintf("orders:gone_%04d", i))
		}
		return keys
	}
	noPayload := func(keys ...string) []ReplaySkip {
		var s []ReplaySkip
		for _, k := range keys {
			s = append(s, ReplaySkip{k, skipNoPayload})
		}
		return s
	}
	two := gone(2)
	many := gone(maxReplaySkipped + 2)
	keysSkipped := []ReplaySkip{{two[0], skipNoPayload}, {"orders:nope", skipNotFound},
		{"orders:pending", "event is pending: only dead, done and stale events are replayed"}}
	keysBody := `{"keys":["orders:gone_0001","orders:kept","orders:nope","orders:pending","orders:gone_0001"],"reason":"bulk"`
	cases := []struct {
		name    string
		gone    []string // done, payload dropped
		body    string
		want    replayAnswer
		pending []string // replayed: pending after the request
	}{
		{"dry run by state", two, `{"state":"done","source":"orders","reason":"bulk","dry_run":true}`,
			replayAnswer{DryRun: true, WouldReplay: 1, Keys: []string{"orders:kept"}, Skipped: noPayload(two...), SkippedCount: 2}, nil},
		{"replay by state", two, `{"state":"done","source":"orders","reason":"bulk"}`,
			replayAnswer{Replayed: 1, Keys: []string{"orders:kept"}, Skipped: noPayload(two...), SkippedCount: 2}, []string{"orders:kept"}},
		{"replay by state, more skipped than listed", many, `{"state":"done","reason":"bulk"}`,
			replayAnswer{Replayed: 1, Keys: []string{"orders:kept"}, Skipped: noPayload(many[:maxReplaySkipped]...), SkippedCount: len(many)}, []string{"orders:kept"}},
		{"dry run by state, more skipped than listed", many, `{"state":"done","reason":"bulk","dry_run":true}`,
			replayAnswer{DryRun: true, WouldReplay: 1, Keys: []string{"orders:kept"}, Skipped: noPayload(many[:maxReplaySkipped]...), SkippedCount: len(many)}, nil},
		{"dry run of keys", two, keysBody + `,"dry_run":true}`,
			replayAnswer{DryRun: true, WouldReplay: 1, Keys: []string{"orders:kept"}, Skipped: keysSkipped, SkippedCount: 3}, nil},
		{"replay of keys", two, keysBody + `}`,
			replayAnswer{Replayed: 1, Keys: []string{"orders:kept"}, Skipped: keysSkipped, SkippedCount: 3}, []string{"orders:kept"}},
		{"replay by state since an hour ago", two, `{"state":"done","source":"orders","since":"1h","reason":"bulk","dry_run":false}`,
			replayAnswer{Replayed: 1, Keys: []string{"orders:kept"}, Skipped: noPayload(two...), SkippedCount: 2}, []string{"orders:kept"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store, url := newTestAPI(t)
			if len(c.gone) > 0 {
				doneEvents(t, store, time.Nanosecond, c.gone...)
				// The sweeper's drop, due for them and not for orders:kept.
				if r := store.applyAll(t, []engine.Command{{Op: engine.OpDropPayloads, Before: time.Now().Add(time.Minute).UnixNano()}}); r[0].N != len(c.gone) {
					t.Fatalf("dropped %d payloads, want %d", r[0].N, len(c.gone))
				}
			}
			doneEvents(t, store, time.Hour, "orders:kept")
			store.applyAll(t, []engine.Command{{Op: engine.OpClaim, Key: "orders:pending", Source: "orders",
				Payload: []byte(`{"a":1}`), Retention: int64(time.Hour), LeaseFor: int64(time.Minute)}})

			status, raw := postAdmin(t, url+"/v1/replay", c.body)
			var got replayAnswer
			if err := json.Unmarshal(raw, &got); err != nil || status != 200 {
				t.Fatalf("answer %d %s: %v", status, raw, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("answer %s\nwant %+v", raw, c.want)
			}
			for _, k := range append(append([]string{"orders:kept"}, c.gone...), "orders:pending") {
				want := engine.StateDone
				if k == "orders:pending" || slices.Contains(c.pending, k) {
					want = engine.StatePending
				}
				if ev, err := store.Get(k, false); err != nil || ev.State != want {
					t.Fatalf("%s after the request: %v %v, want %v", k, ev.State, err, want)
				}
			}
		})
	}
}

// TestReplayByStateGoesOnInBatches: a replay by state goes to the cluster
// as commands of replayBatch entries each (a replay of millions must not be
// one entry that holds every replica's apply loop); the answer is the
// whole replay's. Cut short (the leader lost after the first command), the
// answer says how many were replayed, and the same request replays the
// rest, not those again.
func TestReplayByStateGoesOnInBatches(t *testing.T) {
	var keys []string
	for i := range 2*replayBatch + 10 {
		keys = append(keys, fmt.Sprintf("orders:k%05d", i))
	}
	pending := func(store *engineStore) int {
		n := 0
		for _, k := range keys {
			if ev, err := store.Get(k, false); err == nil && ev.State == engine.StatePending {
				n++
			}
		}
		return n
	}
	const body = `{"state":"done","source":"orders","reason":"bulk"}`

	store, url := newTestAPI(t)
	doneEvents(t, store, time.Hour, keys...)
	status, raw := postAdmin(t, url+"/v1/replay", body)
	var got replayAnswer
	if err := json.Unmarshal(raw, &got); err != nil || status != 200 {
		t.Fatalf("answer %d %.300s: %v", status, raw, err)
	}
	if got.Replayed != len(keys) || !slices.Equal(got.Keys, keys) || len(got.Skipped) != 0 {
		t.Fatalf("replayed %d (%d keys, %d skipped), want all %d", got.Replayed, len(got.Keys), len(got.Skipped), len(keys))
	}
	if n := store.replayCalls.Load(); n != 3 {
		t.Errorf("%d replay commands for %d events at %d a command, want 3", n, len(keys), replayBatch)
	}
	if n := pending(store); n != len(keys) {
		t.Errorf("%d pending after the replay, want %d", n, len(keys))
	}

	store, url = newTestAPI(t)
	doneEvents(t, store, time.Hour, keys...)
	store.replayCutAt = 2
	status, raw = postAdmin(t, url+"/v1/replay", body)
	if want := fmt.Sprintf("cut short after %d events were replayed", replayBatch); status != http.StatusServiceUnavailable || !strings.Contains(string(raw), want) {
		t.Fatalf("cut short: %d %s, want 503 saying %q", status, raw, want)
	}
	if n := pending(store); n != replayBatch {
		t.Fatalf("%d pending after the cut, want %d", n, replayBatch)
	}
	store.replayCutAt = 0
	status, raw = postAdmin(t, url+"/v1/replay", body)
	got = replayAnswer{}
	if err := json.Unmarshal(raw, &got); err != nil || status != 200 || got.Replayed != len(keys)-replayBatch {
		t.Fatalf("the same request again: %d %.300s (%v), want the other %d replayed", status, raw, err, len(keys)-replayBatch)
	}
	if n := pending(store); n != len(keys) {
		t.Errorf("%d pending after the second request, want %d", n, len(keys))
	}
}

// TestRestoreOnAFollowerSpoolsNothing: a follower refuses a restore with
// 421 naming the leader before it reads the upload, so nothing is written
// to its data dir (here one that does not exist: spooling would fail 500).
func TestRestoreOnAFollowerSpoolsNothing(t *testing.T) {
	store, url := newTestAPI(t)
	store.follower = true
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/restore", strings.NewReader(strings.Repeat("x", 1<<20)))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(string(body), "admin http://127.0.0.2:7071") {
		t.Fatalf("restore on a follower: %d %s, want 421 naming the leader", resp.StatusCode, body)
	}
}

// FuzzCheckKeys: any body is either passed to the decoder or refused with
// a message; a body checkKeys passes has no key twice and none outside the
// fields.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{`{"state":"dead","dry_run":true}`, `{"dry_run":true,"DRY_RUN":false}`, `{"a":{"b":1},"a":2}`, `[1,2]`, `{"keys":["x"]}{}`, `{`, `{"reason":"\u0041"}`} {
		f.Add([]byte(s))
	}
	names := jsonFields(&PurgeRequest{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := checkKeys(raw, names); err != nil {
			if err.Error() == "" {
				t.Fatal("a refusal without a message")
			}
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(raw, &top) != nil {
			return
		}
		for k := range top {
			if !names[k] {
				t.Fatalf("checkKeys passed %q with key %q", raw, k)
			}
		}
	})
}

// refusalAnswers posts body to route on a test API whose store's cluster
// operation fails with each case's error (set by fail), and checks the
// status a client branches on and that the answer carries the reason.
func refusalAnswers(t *testing.T, route, body string, fail func(*engineStore, error), cases []refusal) {
	t.Helper()
	for _, c := range cases {
		store, url := newTestAPI(t)
		fail(store, c.err)
		status, raw := postAdmin(t, url+route, body)
		if status != c.status || !strings.Contains(string(raw), c.err.Error()[:20]) {
			t.Errorf("%v: %d %s, want %d with the reason", c.err, status, raw, c.status)
		}
	}
}

type refusal struct {
	err    error
	status int
}

// TestTransferAnswers: a transfer the cluster refuses says why, with the
// status a client branches on: a target not caught up with the log or no
// other voter is 409, a follower asked is 421.
func TestTransferAnswers(t *testing.T) {
	refusalAnswers(t, "/v1/cluster/leader", `{"to":"node3"}`, func(s *engineStore, err error) { s.transferErr = err }, []refusal{
		{fmt.Errorf("transfer leadership to \"node3\": %w: it has committed entry 5, the leader 900", cluster.ErrBehind), http.StatusConflict},
		{fmt.Errorf("transfer leadership: %w", cluster.ErrSingleVoter), http.StatusConflict},
		{fmt.Errorf("transfer leadership: %w", cluster.ErrNotLeader), http.StatusMisdirectedRequest},
	})
}

// TestJoinAnswers: a join the cluster refuses says why: a member that
// cannot be (bad id or address, nothing answering there as that id) is 400,
// a node without [cluster] 409, a join without a leader or to a node that
// took the connection but did not answer in time 503.
func TestJoinAnswers(t *testing.T) {
	refusalAnswers(t, "/v1/cluster/join", `{"id":"node5","address":"10.0.0.5:7070"}`, func(s *engineStore, err error) { s.joinErr = err }, []refusal{
		{fmt.Errorf("join node5: %w: no answer on its cluster port at 10.0.0.5:7070 (start it first)", cluster.ErrBadMember), http.StatusBadRequest},
		{fmt.Errorf("join node5: %w: its cluster port at 10.0.0.5:7070 took the connection but gave no answer in 2s; ask again", cluster.ErrMemberSlow), http.StatusServiceUnavailable},
		{fmt.Errorf("join node5: %w", cluster.ErrStandalone), http.StatusConflict},
		{fmt.Errorf("join node5: %w", cluster.ErrNoLeader), http.StatusServiceUnavailable},
	})
	// A join that changed nothing (id a voter at that address already)
	// says so; a voter added is a plain "joined".
	for _, c := range []struct {
		added bool
		want  string
	}{
		{true, `{"joined":"node5"}`},
		{false, `{"already_member":true,"joined":"node5"}`},
	} {
		store, url := newTestAPI(t)
		store.joined = &c.added
		status, raw := postAdmin(t, url+"/v1/cluster/join", `{"id":"node5","address":"10.0.0.5:7070"}`)
		var got, want map[string]any
		json.Unmarshal(raw, &got)
		json.Unmarshal([]byte(c.want), &want)
		if status != http.StatusOK || !reflect.DeepEqual(got, want) {
			t.Errorf("join, added %v: %d %s; want 200 %s", c.added, status, raw, c.want)
		}
	}
}

// TestMetricsRefusedToPageScripts: /metrics, the one route without a token,
// is refused to any request a web page made (DNS rebinding would let a page
// read it as its own origin, by a script or through a frame it opened), and
// served to scrapers (no Sec-Fetch headers) and to a URL an operator typed
// (Sec-Fetch-Site none).
func TestMetricsRefusedToPageScripts(t *testing.T) {
	_, url := newTestAPI(t, func(o *Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "oncehook_up 1\n") })
	})
	for _, c := range []struct {
		site, mode string
		status     int
	}{
		{"", "", http.StatusOK},
		{"none", "navigate", http.StatusOK},
		{"same-origin", "cors", http.StatusForbidden},
		{"same-origin", "navigate", http.StatusForbidden}, // a frame or window the rebound page opened
		{"same-site", "navigate", http.StatusForbidden},
		{"cross-site", "no-cors", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("GET", url+"/metrics", nil)
		if c.site != "" {
			req.Header.Set("Sec-Fetch-Site", c.site)
			req.Header.Set("Sec-Fetch-Mode", c.mode)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status == http.StatusOK) != strings.Contains(string(raw), "oncehook_up") {
			t.Errorf("Sec-Fetch-Site %q, Mode %q: %d %s, want %d", c.site, c.mode, resp.StatusCode, raw, c.status)
		}
	}
}

// TestPurgeOfARemovedSource: a source removed from the config keeps its
// events purgeable; one neither configured nor stored is a 404 (a typo).
func TestPurgeOfARemovedSource(t *testing.T) {
	store, url := newTestAPI(t)
	if _, err := store.apply(engine.Command{Op: engine.OpClaim, Key: "gone:msg_1", Source: "gone",
		Payload: []byte(`{"a":1}`), Retention: int64(time.Hour), LeaseFor: int64(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for source, want := range map[string]int{"gone": http.StatusOK, "gnoe": http.StatusNotFound} {
		body := `{"state":"dead","source":"` + source + `","before":"1s","reason":"x","dry_run":true}`
		status, raw := postAdmin(t, url+"/v1/purge", body)
		if status != want {
			t.Errorf("purge of %s: %d %s, want %d", source, status, raw, want)
		}
	}
}

// TestEventShapeHasTheContractFields: every field the contract names for an
// event is in its JSON whatever its state (a script reading
// next_attempt_at of a done or dead event finds it, empty).
func TestEventShapeHasTheContractFields(t *testing.T) {
	for _, st := range []engine.State{engine.StatePending, engine.StateProcessing, engine.StateDone, engine.StateDead, engine.StateStale} {
		ev := engine.Event{Key: "orders:e1", Source: "orders", State: st, CreatedAt: 1, UpdatedAt: 2, NextAttemptAt: 3, LeaseUntil: 4, ExpiresAt: 5}
		raw, err := json.Marshal(toEventJSON(ev, false))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"key", "source", "state", "attempts", "token", "created_at", "updated_at", "next_attempt_at", "last_error", "audit"} {
			if _, ok := got[k]; !ok {
				t.Errorf("%s event: no %q in %s", st, k, raw)
			}
		}
	}
}

// TestPurgeAnswerIsBounded: a purge answers how many it deleted and names
// the first 1,000 keys, as a dry run does, however many it deleted.
func TestPurgeAnswerIsBounded(t *testing.T) {
	store, url := newTestAPI(t)
	for i := range 1500 {
		store.purged = append(store.purged, fmt.Sprintf("orders:e%04d", i))
	}
	req, _ := http.NewRequest("POST", url+"/v1/purge", strings.NewReader(`{"state":"done","source":"orders","before":"1s","reason":"x"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Purged int      `json:"purged"`
		Keys   []string `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%d, %v", resp.StatusCode, err)
	}
	if ans.Purged != 1500 || len(ans.Keys) != maxPurgePreview || ans.Keys[0] != "orders:e0000" {
		t.Fatalf("purged %d, %d keys from %q; want 1500, %d from the first", ans.Purged, len(ans.Keys), ans.Keys[0], maxPurgePreview)
	}
}

// TestEventSaysItsPayloadWasDropped: asked for the body of an event whose
// payload was dropped (payload_retention), the answer says so rather than
// leaving the fields out as if none were asked for.
func TestEventSaysItsPayloadWasDropped(t *testing.T) {
	ev := engine.Event{Key: "orders:e1", Source: "orders", State: engine.StateDone}
	for _, tc := range []struct {
		payload  []byte
		withBody bool
		dropped  bool
	}{{nil, true, true}, {[]byte("{}"), true, false}, {nil, false, false}} {
		ev.Payload = tc.payload
		raw, _ := json.Marshal(toEventJSON(ev, tc.withBody))
		if got := strings.Contains(string(raw), `"payload_dropped":true`); got != tc.dropped {
			t.Errorf("payload %q, body %v: %s", tc.payload, tc.withBody, raw)
		}
	}
}

// TestClusterStatus: each cluster outcome a client branches on gets its
// status: a follower asked is 421; no leader, an outcome not known, a
// restore unconfirmed or one raft refused before it began are 503 (try
// again); anything else is 500.
func TestClusterStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", cluster.ErrNotLeader), http.StatusMisdirectedRequest},
		{fmt.Errorf("x: %w", cluster.ErrNoLeader), http.StatusServiceUnavailable},
		{fmt.Errorf("x: %w", cluster.ErrIndeterminate), http.StatusServiceUnavailable},
		{fmt.Errorf("restore: %w", cluster.ErrRestoreUnconfirmed), http.StatusServiceUnavailable},
		{fmt.Errorf("restore: %w: leadership transfer in progress", cluster.ErrRestoreNotBegun), http.StatusServiceUnavailable},
		{errors.New("disk on fire"), http.StatusInternalServerError},
	} {
		if got := clusterStatus(c.err); got != c.want {
			t.Errorf("clusterStatus(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// postAdmin posts body to url with the test token and returns the answer's
// status and body.
func postAdmin(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// TestReplayIsLogged: a replay is logged on the node that took it, with
// who asked, why and how many it moved (the audit record is inside each
// event only).
func TestReplayIsLogged(t *testing.T) {
	var logs syncLog
	store, url := newTestAPI(t, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	doneEvents(t, store, time.Hour, "orders:a")
	if status, raw := postAdmin(t, url+"/v1/replay", `{"keys":["orders:a"],"reason":"handler fixed"}`); status != http.StatusOK {
		t.Fatalf("replay: %d %s", status, raw)
	}
	if status, raw := postAdmin(t, url+"/v1/replay", `{"state":"dead","reason":"nothing dead"}`); status != http.StatusOK {
		t.Fatalf("replay by state: %d %s", status, raw)
	}
	out := logs.String()
	for _, want := range []string{`msg=replay keys=1 replayed=1 skipped=0 who=ops reason="handler fixed"`, `msg=replay state=dead source="" replayed=0 skipped=0 who=ops reason="nothing dead"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log without %q:\n%s", want, out)
		}
	}
}

// TestLoopbackListenerRefusesOtherNames: the admin listener on loopback
// without TLS answers requests that name an address or localhost, and
// refuses one naming anything else (a web page that rebound its name to
// this host) before anything else: no metrics, and no failed sign-in
// counted against the operator.
func TestLoopbackListenerRefusesOtherNames(t *testing.T) {
	_, url := newTestAPI(t, func(o *Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "oncehook_up 1\n") })
	})
	do := func(host, path, token string) int {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{"rebind.example:7071", "rebind.example", "127.0.0.1.nip.io:7071", "LOCALHOST.evil.example"} {
		if got := do(host, "/metrics", ""); got != http.StatusMisdirectedRequest {
			t.Errorf("/metrics for Host %q: %d, want 421", host, got)
		}
	}
	for range 10 {
		if got := do("rebind.example:7071", "/v1/status", "wrong"); got != http.StatusMisdirectedRequest {
			t.Fatalf("a wrong token for Host rebind.example: %d, want 421", got)
		}
	}
	for _, host := range []string{"127.0.0.1:7071", "localhost:7071", "[::1]:7071", "LocalHost", "admin.localhost:7071"} {
		if got := do(host, "/metrics", ""); got != http.StatusOK {
			t.Errorf("/metrics for Host %q: %d, want 200", host, got)
		}
	}
	// The refusals above spent no sign-in attempt: the right token works.
	if got := do("127.0.0.1:7071", "/v1/status", testToken); got != http.StatusOK {
		t.Fatalf("status with the right token after the refusals: %d, want 200", got)
	}
}

// TestReplayAnswerKeepsKeysAsSent: a key holding &, < or > is answered as
// it was sent (and as the intake answered it), not \u0026-escaped, so a key
// copied from the answer finds the event; and a request body over the
// route's limit is answered 413, not 400.
func TestReplayAnswerKeepsKeysAsSent(t *testing.T) {
	_, url := newTestAPI(t)
	const key = "orders:a?q=1&b=<2>"
	status, body := postAdmin(t, url+"/v1/replay", `{"keys":["`+key+`"],"reason":"test"}`)
	if status != http.StatusNotFound || !strings.Contains(string(body), key) {
		t.Fatalf("replay of %s: %d %s, want the key as sent", key, status, body)
	}
	keys := strings.Repeat(`"orders:k",`, 1<<20/10)
	status, body = postAdmin(t, url+"/v1/replay", `{"keys":[`+keys+`"orders:k"],"reason":"test"}`)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "over 1048576 bytes") {
		t.Fatalf("a 1 MiB replay request: %d %s, want 413", status, body)
	}
}
