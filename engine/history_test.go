package engine

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// attemptN is failed attempt i: status 500+i, a body of 300 bytes (cut to
// MaxAttemptBody when stored) and an error of 300 runes of 2 bytes.
func attemptN(i int) *Attempt {
	return &Attempt{At: t0 + int64(i)*sec, Took: int64(i) * 1000, Status: 500 + i,
		Error: strings.Repeat("é", 300), Body: bytes.Repeat([]byte{byte('a' + i)}, 300)}
}

// TestAttemptHistory: a Fail with an Attempt appends it (cut to its limits)
// and the newest maxHistory are kept; a Fail without one, a complete, a
// reclaim and a replay add nothing and keep what is there; expiry deletes it.
func TestAttemptHistory(t *testing.T) {
	h := newHarness(t, Options{NoSync: true})
	h.one(claimCmd("src:a", t0))
	if n := attemptEntries(t, h.e); n != 0 {
		t.Fatalf("%d attempts entries after a claim", n)
	}
	for i := range 12 {
		r := h.one(leaseCmd(t0+int64(i)*sec, 1))
		f := failCmd("src:a", r.Events[0].Token, t0+int64(i)*sec, 0)
		f.RetryIn, f.Attempt = 0, attemptN(i)
		if r := h.one(f); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	hist := h.get("src:a").History
	if len(hist) != maxHistory {
		t.Fatalf("history of %d attempts, want the newest %d", len(hist), maxHistory)
	}
	for j, at := range hist {
		i := j + 2 // the two oldest were dropped
		if at.At != t0+int64(i)*sec || at.Took != int64(i)*1000 || at.Status != 500+i {
			t.Fatalf("attempt %d = %+v, want attempt %d", j, at, i)
		}
		if !bytes.Equal(at.Body, attemptN(i).Body[:MaxAttemptBody]) {
			t.Fatalf("attempt %d body of %d bytes, want the first %d", j, len(at.Body), MaxAttemptBody)
		}
		if at.Error != strings.Repeat("é", maxAttemptErr/2) {
			t.Fatalf("attempt %d error of %d bytes, want %d cut on a rune", j, len(at.Error), maxAttemptErr)
		}
	}

	// A Fail without an Attempt (an older leader's) adds nothing; a reclaim
	// and a replay keep the history; so does the complete that follows.
	r := h.one(leaseCmd(t0+hour, 1))
	h.one(failCmd("src:a", r.Events[0].Token, t0+hour, 1)) // dead
	h.one(Command{Op: OpReplay, Now: t0 + hour, Keys: []string{"src:a"}, Who: "ops"})
	h.one(leaseCmd(t0+hour, 1))
	h.one(Command{Op: OpReclaim, Now: t0 + 2*hour})
	r = h.one(leaseCmd(t0+2*hour, 1))
	h.one(completeCmd("src:a", r.Events[0].Token, t0+2*hour))
	if got := h.get("src:a").History; len(got) != maxHistory || got[maxHistory-1].Status != 511 {
		t.Fatalf("after fail, replay, reclaim and complete: %d attempts, the newest %+v", len(got), got[len(got)-1])
	}

	// A first attempt that succeeds stores nothing.
	h.one(claimCmd("src:ok", t0))
	r = h.one(leaseCmd(t0+2*hour, 1))
	h.one(completeCmd("src:ok", r.Events[0].Token, t0+2*hour))
	if ev := h.get("src:ok"); ev.History != nil {
		t.Fatalf("a successful attempt left a history: %+v", ev.History)
	}
	if n := attemptEntries(t, h.e); n != 1 {
		t.Fatalf("%d attempts entries, want 1", n)
	}
	if r := h.one(Command{Op: OpExpire, Now: t0 + 48*hour}); r.N != 2 {
		t.Fatalf("expire = %d", r.N)
	}
	if n := attemptEntries(t, h.e); n != 0 {
		t.Fatalf("%d attempts entries after expiry", n)
	}
}

func TestFailAttemptRejects(t *testing.T) {
	tests := []struct {
		name string
		at   Attempt
	}{
		{"negative duration", Attempt{At: t0, Took: -1}},
		{"status out of range", Attempt{At: t0, Status: 1000}},
		{"negative status", Attempt{At: t0, Status: -1}},
		{"time out of range", Attempt{At: maxTime}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Options{NoSync: true})
			h.one(claimCmd("src:a", t0))
			r := h.one(leaseCmd(t0, 1))
			f := failCmd("src:a", r.Events[0].Token, t0, 0)
			f.Attempt = &tc.at
			if res := h.one(f); res.Err == nil {
				t.Fatalf("fail with %+v accepted", tc.at)
			}
			if ev := h.get("src:a"); ev.State != StateProcessing || ev.History != nil {
				t.Fatalf("a rejected fail changed the event: %+v", ev)
			}
		})
	}
}

func attemptEntries(tb testing.TB, e *Engine) int {
	tb.Helper()
	n := 0
	err := e.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bAttempts).ForEach(func(k, v []byte) error { n++; return nil })
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// FuzzDecodeHistory: decoding never panics, errors wrap ErrCorrupt, and a
// decoded history re-encodes to the same bytes.
func FuzzDecodeHistory(f *testing.F) {
	f.Add(appendHistory(nil, []Attempt{*attemptN(1), {}}))
	f.Add(appendHistory(nil, []Attempt{{At: -1, Status: 502, Error: "status 502", Body: []byte{0, 0xff}}}))
	f.Add([]byte{historyVersion, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHistory([]byte("k"), b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if again := appendHistory(nil, h); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}
