package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"oncehook/engine"
)

// skewStore is engineStore as a cluster whose leader's clock runs behind
// this node's (by less than the minute the cluster tolerates,
// maxClockOffset): the leader stamps every command, and its forwarder
// delivers a replayed event at once (lease, and the handler's 2xx).
type skewStore struct {
	*engineStore
	t      *testing.T
	behind time.Duration
}

func (s *skewStore) leaderNow() int64 { return time.Now().Add(-s.behind).UnixNano() }

func (s *skewStore) applyAt(now int64, cmds ...engine.Command) []engine.Result {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	for i := range cmds {
		cmds[i].Now = now
	}
	rs, err := s.eng.Apply(s.index, cmds...)
	if err != nil {
		s.t.Fatal(err)
	}
	return rs
}

// deliver leases up to n due events and completes them, on the leader's clock.
func (s *skewStore) deliver(n int) {
	if n == 0 {
		return
	}
	evs := s.applyAt(s.leaderNow(), engine.Command{Op: engine.OpLease, Max: n, LeaseFor: int64(time.Minute)})[0].Events
	var completes []engine.Command
	for _, ev := range evs {
		completes = append(completes, engine.Command{Op: engine.OpComplete, Key: ev.Key, Token: ev.Token, PayloadRetention: int64(3 * time.Hour)})
	}
	if len(completes) > 0 {
		s.applyAt(s.leaderNow(), completes...)
	}
}

func (s *skewStore) Replay(_ context.Context, c engine.Command) (engine.Result, error) {
	c.Op = engine.OpReplay
	r := s.applyAt(s.leaderNow(), c)[0]
	if r.Err == nil {
		s.deliver(len(r.Keys))
	}
	return r, r.Err
}

// TestReplayByStateOnTheLeadersClock: a replay of done events by state,
// through a node whose clock is 30 s ahead of the leader's, whose forwarder
// delivers each replayed event at once. The batches are bounded by the
// first one's time, the leader's, as every UpdatedAt is: an event the first
// batch replayed that is done again before a later batch runs is not
// replayed again (bounded by this node's clock, each was delivered about 80
// times in one request).
func TestReplayByStateOnTheLeadersClock(t *testing.T) {
	// 0: the control, one clock; 30 s: within maxClockOffset.
	for _, behind := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("leader %v behind", behind), func(t *testing.T) { replayWithLeaderBehind(t, behind) })
	}
}

func replayWithLeaderBehind(t *testing.T, behind time.Duration) {
	var sk *skewStore
	_, url := newTestAPI(t, func(o *Options) {
		sk = &skewStore{engineStore: o.Store.(*engineStore), t: t, behind: behind}
		o.Store = sk
	})
	var keys []string
	for i := range 2*replayBatch + 10 {
		keys = append(keys, fmt.Sprintf("orders:k%05d", i))
	}
	// Done an hour ago, on the leader's clock.
	old := sk.leaderNow() - int64(time.Hour)
	var claims []engine.Command
	for _, k := range keys {
		claims = append(claims, engine.Command{Op: engine.OpClaim, Key: k, Source: "orders",
			Payload: []byte(`{"a":1}`), Retention: int64(4 * time.Hour), LeaseFor: int64(time.Minute)})
	}
	sk.applyAt(old, claims...)
	leased := sk.applyAt(old, engine.Command{Op: engine.OpLease, Max: len(keys), LeaseFor: int64(time.Minute)})[0].Events
	var completes []engine.Command
	for _, ev := range leased {
		completes = append(completes, engine.Command{Op: engine.OpComplete, Key: ev.Key, Token: ev.Token, PayloadRetention: int64(3 * time.Hour)})
	}
	sk.applyAt(old, completes...)

	status, raw := postAdmin(t, url+"/v1/replay", `{"state":"done","source":"orders","reason":"bulk"}`)
	var got replayAnswer
	if err := json.Unmarshal(raw, &got); err != nil || status != 200 {
		t.Fatalf("answer %d %.300s: %v", status, raw, err)
	}
	times := map[string]int{}
	for _, k := range got.Keys {
		times[k]++
	}
	twice := 0
	for _, k := range keys {
		if times[k] > 1 {
			twice++
		}
	}
	if got.Replayed != len(keys) || twice > 0 {
		t.Fatalf("one replay request of %d done events replayed %d (%d of them more than once: delivered again)",
			len(keys), got.Replayed, twice)
	}
}
