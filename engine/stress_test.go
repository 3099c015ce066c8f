package engine

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestStressInvariants applies random commands, with the variants the
// determinism test leaves out (expire with a small Max, refunds, lease
// lengths by source, quotas, frequent pauses, batches of a replay by
// state, an older format's commands among them), and after every entry runs Check and tracks that no unfinished
// event disappears before its time, no token is leased twice, and every
// ordered event keeps its object's orders entry.
func TestStressInvariants(t *testing.T) {
	seeds := uint64(12)
	if testing.Short() || raceEnabled {
		seeds = 4
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { stressInvariants(t, seed, 400) })
	}
}

func stressInvariants(t *testing.T, seed uint64, n int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	e := mustOpen(t, Options{NoSync: true})
	type lease struct {
		key   string
		token uint64
	}
	var leases []lease
	seenTok := map[string]map[uint64]bool{}
	now := t0
	key := func() string { return fmt.Sprintf("s%d:k%03d", rng.IntN(3), rng.IntN(120)) }
	states := map[string]State{}
	type claimInfo struct{ created, retention int64 }
	claims := map[string]claimInfo{}
	newest := map[string]int64{} // object -> newest order time delivered (not replayed)
	for idx := uint64(1); idx <= uint64(n); idx++ {
		var cmds []Command
		for range 1 + rng.IntN(4) {
			now += rng.Int64N(20 * 60 * sec)
			var c Command
			switch p := rng.IntN(100); {
			case p < 30:
				k := key()
				c = Command{Op: OpClaim, Now: now, Key: k, Source: k[:2], Retention: rng.Int64N(3 * hour),
					LeaseFor: rng.Int64N(2) * 20 * sec, Payload: []byte(k + " body")}
				if rng.IntN(3) == 0 {
					c.OrderObject, c.OrderTime = fmt.Sprintf("obj%d", rng.IntN(4)), now/hour-rng.Int64N(3)
				}
				if rng.IntN(3) == 0 {
					c.BodyKey = k[:2] + "#" + fmt.Sprint(rng.IntN(30))
				}
				if rng.IntN(3) == 0 {
					c.LeaseNow = 30 * sec
				}
			case p < 45:
				c = Command{Op: OpLease, Now: now, Max: 1 + rng.IntN(5), LeaseFor: 30 * sec}
				if rng.IntN(3) == 0 {
					c.Leases = []LeaseLength{{Source: "s1", For: 1 + rng.Int64N(hour)}}
				}
				if rng.IntN(3) == 0 {
					c.Quotas = []Quota{{Source: "s0", Max: rng.IntN(2), Hard: rng.IntN(2) == 0}}
					c.Share = rng.IntN(3)
					c.Spare = rng.IntN(c.Max + 1)
				}
			case p < 58 && len(leases) > 0:
				l := leases[rng.IntN(len(leases))]
				c = Command{Op: OpComplete, Now: now, Key: l.key, Token: l.token, PayloadRetention: rng.Int64N(3) * hour}
				if rng.IntN(3) == 0 {
					c.Response = &Response{Status: 200, Body: []byte("r")}
				}
			case p < 72 && len(leases) > 0:
				l := leases[rng.IntN(len(leases))]
				c = Command{Op: OpFail, Now: now, Key: l.key, Token: l.token, RetryIn: rng.Int64N(30 * 60 * sec),
					MaxAttempts: rng.IntN(4), Reason: "x", DeadRetention: rng.Int64N(3) * hour, Refund: rng.IntN(5) == 0}
				if rng.IntN(2) == 0 {
					c.Attempt = &Attempt{At: now - sec, Took: sec, Status: 500, Error: []string{"e", AttemptTimeout}[rng.IntN(2)]}
				}
			case p < 77:
				c = Command{Op: OpReclaim, Now: now, Horizon: rng.Int64N(2) * 10 * 60 * sec}
			case p < 83:
				if rng.IntN(2) == 0 {
					c = Command{Op: OpReplay, Now: now, Keys: []string{key(), key()}, Who: "ops", OnlyFrom: []State{0, StateDead, StateDone}[rng.IntN(3)], LeaseFor: 30 * sec}
				} else {
					c = Command{Op: OpReplay, Now: now, State: []State{StateDone, StateDead, StateStale}[rng.IntN(3)], Who: "ops", Since: now - rng.Int64N(3*hour)}
					if rng.IntN(2) == 0 {
						// A batch of a replay by state, from a cursor.
						c.Max, c.Before = 1+rng.IntN(4), now-rng.Int64N(hour)
						if rng.IntN(2) == 0 {
							c.Key = key()
						}
					}
				}
			case p < 90:
				c = Command{Op: OpExpire, Now: now, Max: rng.IntN(4)}
			case p < 93:
				c = Command{Op: OpDropPayloads, Now: now, Before: now - rng.Int64N(hour), Max: rng.IntN(3)}
			case p < 96:
				c = Command{Op: []Op{OpPause, OpResume}[rng.IntN(2)], Now: now, Source: fmt.Sprintf("s%d", rng.IntN(3)), Who: "ops"}
			default:
				c = Command{Op: OpPurge, Now: now, State: []State{StateDead, StateDone, StateStale}[rng.IntN(3)], Before: now - rng.Int64N(2*hour), Max: 1 + rng.IntN(3), Who: "ops"}
			}
			if rng.IntN(4) == 0 {
				// An older leader's entry, as during a rolling upgrade:
				// its pause moves events to held, its replay by state
				// takes every event at once.
				c.format = formatPauseInPlace - 1
			}
			cmds = append(cmds, c)
		}
		pausedBefore, err := e.Sources()
		if err != nil {
			t.Fatal(err)
		}
		rs, err := e.Apply(idx, cmds...)
		if err != nil {
			t.Fatalf("entry %d: %v", idx, err)
		}
		allowedGone := map[string]bool{}
		pauses := slices.ContainsFunc(cmds, func(c Command) bool { return c.Op == OpPause || c.Op == OpResume })
		for i, r := range rs {
			if cmds[i].Op == OpLease || cmds[i].Op == OpClaim {
				for _, ev := range r.Events {
					if _, paused := pausedBefore[ev.Source]; paused && !pauses {
						t.Fatalf("entry %d: %q leased while its source %q is paused", idx, ev.Key, ev.Source)
					}
				}
			}
			if cmds[i].Op == OpClaim && r.Created {
				claims[cmds[i].Key] = claimInfo{cmds[i].Now, cmds[i].Retention}
			}
			for _, ev := range r.Events {
				if cmds[i].Op == OpExpire || ev.OrderObject == "" || len(ev.Audit) > 0 {
					continue
				}
				if ev.OrderTime < newest[ev.OrderObject] {
					t.Fatalf("entry %d: %q of %q (order time %d) leased after one of order time %d", idx, ev.Key, ev.OrderObject, ev.OrderTime, newest[ev.OrderObject])
				}
				newest[ev.OrderObject] = ev.OrderTime
			}
			for _, ev := range r.Events {
				if cmds[i].Op == OpExpire {
					allowedGone[ev.Key] = true
					continue
				}
				if seenTok[ev.Key] == nil {
					seenTok[ev.Key] = map[uint64]bool{}
				}
				if seenTok[ev.Key][ev.Token] {
					t.Fatalf("entry %d: %q leased twice under token %d", idx, ev.Key, ev.Token)
				}
				seenTok[ev.Key][ev.Token] = true
				leases = append(leases, lease{ev.Key, ev.Token})
			}
			if cmds[i].Op == OpComplete || cmds[i].Op == OpFail {
				allowedGone[cmds[i].Key] = true // finished in this entry, maybe expired after
			}
			if cmds[i].Op == OpPurge {
				for _, k := range r.Keys {
					allowedGone[k] = true
				}
			}
		}
		if len(leases) > 40 {
			leases = leases[len(leases)-40:]
		}
		if err := e.Check(); err != nil {
			t.Fatalf("entry %d (%v): %v", idx, cmds, err)
		}
		if bad, err := orderCover(e); err != nil {
			t.Fatal(err)
		} else if len(bad) > 0 {
			t.Fatalf("entry %d: %v", idx, bad)
		}
		// Unfinished events never vanish.
		for k, st := range states {
			if _, err := e.Get(k, false); err == ErrNotFound {
				if (st == StatePending || st == StateProcessing || st == StateDead) && !allowedGone[k] {
					t.Fatalf("entry %d: %q vanished in state %v", idx, k, st)
				}
				if ci := claims[k]; !allowedGone[k] && now < ci.created+ci.retention {
					t.Fatalf("entry %d: %q gone at %d before its retention %d", idx, k, now, ci.created+ci.retention)
				}
				delete(claims, k)
				delete(states, k)
			}
		}
		evs, err := e.List(ListFilter{Limit: MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			states[ev.Key] = ev.State
		}
	}
}

// orderCover lists the ordered, not stale events whose object's orders
// entry is missing or ends before the event does.
func orderCover(e *Engine) ([]string, error) {
	var bad []string
	err := e.view(func(tx *bolt.Tx) error {
		orders := tx.Bucket(bOrders)
		return tx.Bucket(bEvents).ForEach(func(k, v []byte) error {
			var ev Event
			if _, err := decodeRecord(k, v, &ev); err != nil {
				return err
			}
			if ev.OrderObject == "" || ev.State == StateStale {
				return nil
			}
			ov := orders.Get([]byte(ev.OrderObject))
			if ov == nil {
				bad = append(bad, fmt.Sprintf("%s (%v): no orders entry for %s", k, ev.State, ev.OrderObject))
				return nil
			}
			if exp := int64(binary.BigEndian.Uint64(ov[8:])); exp < ev.ExpiresAt {
				bad = append(bad, fmt.Sprintf("%s (%v): orders entry of %s ends at %d, the event at %d", k, ev.State, ev.OrderObject, exp, ev.ExpiresAt))
			}
			return nil
		})
	})
	return bad, err
}
