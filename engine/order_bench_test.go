package engine

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkLeaseOrdered: lease the 100 due heads of 100 objects out of
// 10,000 stored events, with behind each head `blocked` more due events of
// its object that the lease walks past (the price of order at delivery:
// one seek per due ordered event). Between iterations (timer stopped) the
// 100 fail with RetryIn 0: still the heads, due again.
func BenchmarkLeaseOrdered(b *testing.B) {
	for _, blocked := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("blocked=%d", blocked), func(b *testing.B) { benchLeaseOrdered(b, blocked) })
	}
}

func benchLeaseOrdered(b *testing.B, blocked int) {
	const stored, objects = 10_000, 100
	e, err := Open(filepath.Join(b.TempDir(), "e.db"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	idx := uint64(0)
	var cmds []Command
	for i := range stored {
		now := t0 + hour
		c := benchClaim(fixtureKey(i), now, benchPayload)
		if i < objects*(1+blocked) {
			// Object i%objects, in claim order: the first round are the heads.
			c.Now, c.OrderObject, c.OrderTime = t0, fmt.Sprintf("pi_%03d", i%objects), int64(i)
		}
		cmds = append(cmds, c)
	}
	for len(cmds) > 0 {
		n := min(len(cmds), 5_000)
		idx++
		if _, err := e.Apply(idx, cmds[:n]...); err != nil {
			b.Fatal(err)
		}
		cmds = cmds[n:]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		idx++
		rs, err := e.Apply(idx, Command{Op: OpLease, Now: t0, Max: 1000, LeaseFor: 30 * sec})
		if err != nil || rs[0].N != objects {
			b.Fatalf("lease = %d, %v", rs[0].N, err)
		}
		b.StopTimer()
		idx++
		fails := make([]Command, 0, objects)
		for _, ev := range rs[0].Events {
			fails = append(fails, Command{Op: OpFail, Now: t0, Key: ev.Key, Token: ev.Token})
		}
		if _, err := e.Apply(idx, fails...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
