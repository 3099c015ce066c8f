// Command gen writes the format 1 fixtures of engine/testdata/format1 with the
// engine of the first release. It lives under testdata, so the go tool
// ignores it; see ../README.md for how to run it at that commit.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"oncehook/engine"
)

const (
	t0   = int64(1764547200) * int64(time.Second) // 2025-12-01T00:00:00Z
	sec  = int64(time.Second)
	hour = int64(time.Hour)
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func claim(key string, now int64) engine.Command {
	return engine.Command{Op: engine.OpClaim, Now: now, Key: "stripe:" + key, Source: "stripe",
		Payload: []byte(`{"id":"` + key + `"}`), Headers: []engine.Header{{Name: "Stripe-Signature", Value: "t=1,v1=ab"}},
		Retention: 24 * hour, LeaseFor: 30 * sec}
}

// entries is the log: each one is applied at its index and written, encoded,
// to entries.hex.
func entries() [][]engine.Command {
	ordered := claim("ord_new", t0+6*sec)
	ordered.OrderObject, ordered.OrderTime = "pi_1", t0
	stale := claim("ord_old", t0+7*sec)
	stale.OrderObject, stale.OrderTime = "pi_1", t0-sec
	return [][]engine.Command{
		{claim("done", t0), claim("dead", t0), claim("processing", t0+sec)},
		{claim("processing", t0+2*sec)},                                     // duplicate
		{{Op: engine.OpLease, Now: t0 + 3*sec, Max: 2, LeaseFor: 30 * sec}}, // leases done and dead (token 3)
		{{Op: engine.OpComplete, Now: t0 + 4*sec, Key: "stripe:done", Token: 3, Step: "charged",
			Response: &engine.Response{Status: 200, Body: []byte("ok")}}},
		{{Op: engine.OpFail, Now: t0 + 5*sec, Key: "stripe:dead", Token: 3, MaxAttempts: 1, Reason: "status 500", Step: "half"}},
		{ordered, stale},
		{claim("pending", t0+8*sec)},
		{{Op: engine.OpLease, Now: t0 + 9*sec, Max: 1, LeaseFor: 30 * sec}}, // leases processing (token 8)
		{{Op: engine.OpReplay, Now: t0 + 10*sec, State: engine.StateStale, Source: "stripe", Who: "ops", Reason: "fixture"}},
		{{Op: engine.OpNoop}},
	}
}

func run(dir string) error {
	// The fixture is a snapshot of the file (its pages, without the
	// preallocated tail), which Open reads as any engine file.
	tmp, err := os.MkdirTemp("", "gen")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e, err := engine.Open(filepath.Join(tmp, "engine.db"), engine.Options{})
	if err != nil {
		return err
	}
	var hexes []byte
	for i, cmds := range entries() {
		hexes = append(hexes, hex.EncodeToString(engine.EncodeEntry(nil, cmds))...)
		hexes = append(hexes, '\n')
		res, err := e.Apply(uint64(i+1), cmds...)
		if err != nil {
			return err
		}
		for j, r := range res {
			if r.Err != nil {
				return fmt.Errorf("entry %d command %d: %w", i+1, j, r.Err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "entries.hex"), hexes, 0o644); err != nil {
		return err
	}
	var evs []engine.Event
	for _, k := range []string{"done", "dead", "processing", "ord_new", "ord_old", "pending"} {
		ev, err := e.Get("stripe:"+k, true)
		if err != nil {
			return err
		}
		evs = append(evs, ev)
	}
	b, err := json.MarshalIndent(evs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "events.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := e.Check(); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "engine.db"))
	if err != nil {
		return err
	}
	if _, err := e.Snapshot(f); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return e.Close()
}
