package engine

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Benchmarks run with NoSync: they measure the engine's CPU per command; the
// fsync of a commit is the disk's business and is paid once per batch.

// benchKey spreads keys over the key space like provider event ids do.
func benchKey(i int) string {
	x := uint64(i)*0x9E3779B97F4A7C15 ^ 0xdeadbeef
	return fmt.Sprintf("stripe-live:evt_%016x", x)
}

func benchClaim(key string, now int64, payload []byte) Command {
	return Command{
		Op: OpClaim, Now: now, Key: key, Source: "stripe-live", Payload: payload,
		Headers:   []Header{{Name: "Stripe-Signature", Value: "t=1700000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"}},
		Retention: 168 * hour, LeaseFor: 30 * sec,
	}
}

var benchPayload = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2022-11-15","created":1686089970,` +
	`"data":{"object":{"id":"pi_3NG8Du2eZvKYlo2C0lXpO7nd","object":"payment_intent","amount":2000,"currency":"usd",` +
	`"status":"succeeded"}},"livemode":false,"pending_webhooks":1,"type":"payment_intent.succeeded"}`)

// BenchmarkClaim: one claim per ApplyBatch (one transaction, one commit).
func BenchmarkClaim(b *testing.B) {
	e := mustOpen(b, Options{NoSync: true})
	b.ReportAllocs()
	cpu := startCPU(b)
	i := 0
	for b.Loop() {
		i++
		if _, err := e.Apply(uint64(i), benchClaim(benchKey(i), t0+int64(i), benchPayload)); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// cpuMeter reports the process CPU time per op ("cpu-ns/op"), which stays
// meaningful when other processes share the machine.
type cpuMeter struct{ start int64 }

func startCPU(b *testing.B) cpuMeter { return cpuMeter{processCPU()} }

func (m cpuMeter) report(b *testing.B) {
	if d := processCPU() - m.start; d > 0 && b.N > 0 {
		b.ReportMetric(float64(d)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkClaimBatch: n entries of one claim each per ApplyBatch, as the
// cluster applies them; ns/op and allocs/op are per claim.
func BenchmarkClaimBatch(b *testing.B) {
	for _, n := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchClaimBatches(b, n, false) })
	}
}

// BenchmarkClaimGuarded: BenchmarkClaimBatch/256 with and without the replay
// guard's body key (a random 32-byte hash, like the intake's SHA-256), so
// that benchstat shows what the guard adds to a claim.
func BenchmarkClaimGuarded(b *testing.B) {
	for _, guard := range []bool{false, true} {
		b.Run(fmt.Sprintf("guard=%v", guard), func(b *testing.B) { benchClaimBatches(b, 256, guard) })
	}
}

// benchClaimBatches applies b.N claims of distinct keys in batches of n
// entries, each claim with a body key when guard is set.
func benchClaimBatches(b *testing.B, n int, guard bool) {
	e := mustOpen(b, Options{NoSync: true})
	keys := make([]string, b.N)
	bodies := make([]string, b.N)
	for i := range keys {
		keys[i] = benchKey(i)
		if guard {
			sum := sha256.Sum256([]byte(keys[i]))
			bodies[i] = "stripe-live\x00" + string(sum[:])
		}
	}
	entries := make([]Entry, n)
	cmds := make([]Command, n)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	defer cpu.report(b)
	for i := 0; i < b.N; i += n {
		m := min(n, b.N-i)
		for j := range m {
			cmds[j] = benchClaim(keys[i+j], t0+int64(i+j), benchPayload)
			cmds[j].BodyKey = bodies[i+j]
			entries[j] = Entry{Index: uint64(i + j + 1), Cmds: cmds[j : j+1]}
		}
		if _, err := e.ApplyBatch(entries[:m]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExists: the intake's duplicate check against 100,000 stored keys.
func BenchmarkExists(b *testing.B) {
	const n = 100_000
	e := benchFixture(b, n, 0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fixtureKey(i * (n / len(keys)))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, ok, err := e.Exists(keys[i%len(keys)]); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkLease: lease the 100 due events out of 10,000 and 1,000,000 stored
// (the rest are due an hour later): the cost must not depend on the number
// stored. Between iterations (timer stopped) the 100 fail with RetryIn 0 to be
// due again.
func BenchmarkLease(b *testing.B) {
	sizes := []int{10_000, 1_000_000}
	if testing.Short() || raceEnabled {
		sizes = []int{10_000, 50_000}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("stored=%d", n), func(b *testing.B) { benchLease(b, n) })
	}
}

func benchLease(b *testing.B, n int) {
	e := benchFixture(b, n, 100)
	idx := e.LastApplied()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		idx++
		rs, err := e.Apply(idx, Command{Op: OpLease, Now: t0, Max: 1000, LeaseFor: 30 * sec})
		if err != nil || rs[0].N != 100 {
			b.Fatalf("lease = %d, %v", rs[0].N, err)
		}
		b.StopTimer()
		idx++
		fails := make([]Command, 0, 100)
		for _, ev := range rs[0].Events {
			fails = append(fails, Command{Op: OpFail, Now: t0, Key: ev.Key, Token: ev.Token})
		}
		if _, err := e.Apply(idx, fails...); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkExpire: expire one bucket of 100,000 done keys (goal < 1 s per
// op). Unfinished keys are never expired (they move on: see
// BenchmarkExpireMoves).
func BenchmarkExpire(b *testing.B) { benchExpire(b, true) }

// BenchmarkExpireMoves: end one bucket of 100,000 pending keys, which all
// move to a later bucket.
func BenchmarkExpireMoves(b *testing.B) { benchExpire(b, false) }

func benchExpire(b *testing.B, done bool) {
	const n = 100_000
	want := 0
	if done {
		want = n
	}
	e := mustOpen(b, Options{NoSync: true})
	idx := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for it := range b.N {
		b.StopTimer()
		base := t0 + int64(it)*2*hour
		for i := 0; i < n; i += 5000 {
			cmds := make([]Command, 0, 5000)
			for j := i; j < i+5000; j++ {
				c := benchClaim(benchKey(it*n+j), base, benchPayload)
				c.Retention = 0
				cmds = append(cmds, c)
			}
			idx++
			if _, err := e.Apply(idx, cmds...); err != nil {
				b.Fatal(err)
			}
		}
		if done {
			idx++
			rs, err := e.Apply(idx, Command{Op: OpLease, Now: base, Max: n, LeaseFor: 30 * sec})
			if err != nil || rs[0].N != n {
				b.Fatalf("lease = %d, %v", rs[0].N, err)
			}
			for i := 0; i < n; i += 5000 {
				cmds := make([]Command, 0, 5000)
				for _, ev := range rs[0].Events[i : i+5000] {
					cmds = append(cmds, Command{Op: OpComplete, Now: base, Key: ev.Key, Token: ev.Token})
				}
				idx++
				if _, err := e.Apply(idx, cmds...); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
		idx++
		rs, err := e.Apply(idx, Command{Op: OpExpire, Now: base + hour})
		if err != nil || rs[0].N != want {
			b.Fatalf("expire = %d, %v", rs[0].N, err)
		}
	}
}

func BenchmarkEncodeEntry(b *testing.B) {
	cmds := []Command{benchClaim(benchKey(1), t0, benchPayload)}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = EncodeEntry(buf[:0], cmds)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeEntry(b *testing.B) {
	buf := EncodeEntry(nil, []Command{benchClaim(benchKey(1), t0, benchPayload)})
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEntry(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// Fixtures shared by the benchmarks of one process: built once, removed by
// TestMain.
var (
	fixtureMu   sync.Mutex
	fixtureDir  string
	fixtureEngs = map[string]*Engine{}
)

// fixtureKey is the key of fixture event i. Fixture keys ascend so that the
// million-event fixture builds by appending, in seconds.
func fixtureKey(i int) string { return fmt.Sprintf("stripe-live:evt_%016x", i) }

// benchFixture returns an engine holding n claimed events, of which due are
// due at t0 and the others an hour later (their claim time: Now stamps when a
// claim is due). Built once per process.
func benchFixture(b *testing.B, n, due int) *Engine {
	b.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	name := fmt.Sprintf("fixture-%d-%d", n, due)
	if e := fixtureEngs[name]; e != nil {
		return e
	}
	if fixtureDir == "" {
		d, err := os.MkdirTemp("", "engine-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fixtureDir = d
	}
	e, err := Open(filepath.Join(fixtureDir, name+".db"), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 10_000
	idx := uint64(0)
	cmds := make([]Command, 0, batch)
	for i := range n {
		now := t0 + hour
		if i < due {
			now = t0
		}
		cmds = append(cmds, benchClaim(fixtureKey(i), now, benchPayload))
		if len(cmds) == batch || i == n-1 {
			idx++
			if _, err := e.Apply(idx, cmds...); err != nil {
				b.Fatal(err)
			}
			cmds = cmds[:0]
		}
	}
	fixtureEngs[name] = e
	return e
}

func cleanupBenchFixtures() {
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	for _, e := range fixtureEngs {
		e.Close()
	}
	if fixtureDir != "" {
		removeAllQuiet(fixtureDir)
	}
}

// BenchmarkLifecycle: the engine's share of one delivered event as the
// cluster applies it under load: entries of `per` commands mixing new claims,
// one lease of the due events and the completions of the events leased one
// entry earlier. An op is one event claimed, leased and completed; the store
// holds 20,000 delivered events before the clock starts. Keys are spread
// (benchKey, like provider event ids) or ascending (fixtureKey, like bench/'s
// generated ids). commit=entry commits every entry (Apply); commit=N applies
// entries with ApplyBatchDeferred and commits every Nth, as the cluster's
// FSM groups them.
func BenchmarkLifecycle(b *testing.B) {
	for _, per := range []int{4, 16, 64} {
		for _, keys := range []string{"spread", "ascending"} {
			for _, group := range []int{1, 4, 16} {
				commit := "entry"
				if group > 1 {
					commit = fmt.Sprint(group)
				}
				b.Run(fmt.Sprintf("per=%d/keys=%s/commit=%s", per, keys, commit), func(b *testing.B) {
					key := benchKey
					if keys == "ascending" {
						key = fixtureKey
					}
					benchLifecycle(b, per, group, key)
				})
			}
		}
	}
}

func benchLifecycle(b *testing.B, per, group int, key func(int) string) {
	e := mustOpen(b, Options{NoSync: true})
	l := lifecycle{e: e, per: per, group: group, now: t0, key: key}
	for l.events < 20_000 {
		l.step(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	start := l.events
	for l.events-start < b.N {
		l.step(b)
	}
	if err := e.Flush(); err != nil {
		b.Fatal(err)
	}
	cpu.report(b)
}

type lifecycle struct {
	e      *Engine
	key    func(int) string
	per    int
	group  int // entries per commit
	idx    uint64
	now    int64
	seq    int
	events int // completed
	leased []Event
	cmds   []Command
}

// step applies one entry: completions of the events leased by the previous
// entry, as many new claims, and one lease.
func (l *lifecycle) step(b *testing.B) {
	l.cmds = l.cmds[:0]
	for _, ev := range l.leased {
		l.cmds = append(l.cmds, Command{Op: OpComplete, Now: l.now, Key: ev.Key, Token: ev.Token})
	}
	for range l.per {
		l.seq++
		c := benchClaim(l.key(l.seq), l.now, benchPayload)
		c.Now = 0
		l.cmds = append(l.cmds, c)
	}
	l.cmds = append(l.cmds, Command{Op: OpLease, Max: l.per, LeaseFor: 30 * sec})
	l.now += 100_000 // 100 µs
	for i := range l.cmds {
		l.cmds[i].Now = l.now
	}
	l.idx++
	var rs []Result
	if l.group <= 1 {
		var err error
		if rs, err = l.e.Apply(l.idx, l.cmds...); err != nil {
			b.Fatal(err)
		}
	} else {
		rss, err := l.e.ApplyBatchDeferred([]Entry{{Index: l.idx, Cmds: l.cmds}})
		if err != nil {
			b.Fatal(err)
		}
		rs = rss[0]
		if l.idx%uint64(l.group) == 0 {
			if err := l.e.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, r := range rs {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	l.events += len(l.leased)
	l.leased = append(l.leased[:0], rs[len(rs)-1].Events...)
}

// BenchmarkBacklog: the per-source backlog (what every metrics scrape and
// status call reads) with 100,000 pending events of four sources.
func BenchmarkBacklog(b *testing.B) {
	e := mustOpen(b, Options{NoSync: true})
	const n, batch = 100_000, 1_000
	for i := 0; i < n; i += batch {
		cmds := make([]Command, 0, batch)
		for j := i; j < i+batch; j++ {
			src := fmt.Sprintf("src%d", j%4)
			cmds = append(cmds, Command{Op: OpClaim, Now: t0 + int64(j), Key: fmt.Sprintf("%s:evt_%07d", src, j), Source: src,
				Payload: []byte("x"), Retention: 24 * hour})
		}
		if _, err := e.Apply(uint64(i/batch+1), cmds...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		bl, err := e.Backlog()
		if err != nil || len(bl) != 4 || bl["src1"].Pending != n/4 {
			b.Fatalf("backlog %+v, %v", bl, err)
		}
	}
}

// BenchmarkEncodeEntry64: an entry of 64 claims of 1 KiB into a new
// buffer, as the proposer encodes one.
func BenchmarkEncodeEntry64(b *testing.B) {
	cmds := make([]Command, 64)
	for i := range cmds {
		cmds[i] = benchClaim(benchKey(i), t0, make([]byte, 1024))
	}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		n = len(EncodeEntry(nil, cmds))
	}
	b.SetBytes(int64(n))
}

// BenchmarkLargePayload: a claim with a large payload, each followed by
// three small claims in entries of their own (each a commit), as payloads
// arrive under load. "written-B/op" is what the process wrote to files per
// large claim (Linux only): a payload stored whole was written again with
// each commit that added a payload to its leaf (pieces.go).
func BenchmarkLargePayload(b *testing.B) {
	for _, size := range []int{256 << 10, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
			e := mustOpen(b, Options{NoSync: true})
			large := bytes.Repeat([]byte("p"), size)
			cpu, written := startCPU(b), bytesWritten()
			i := 0
			for b.Loop() {
				for j := range 4 {
					i++
					p := benchPayload
					if j == 0 {
						p = large
					}
					if _, err := e.Apply(uint64(i), benchClaim(benchKey(i), t0+int64(i), p)); err != nil {
						b.Fatal(err)
					}
				}
			}
			cpu.report(b)
			if w := bytesWritten(); written >= 0 && w >= written {
				b.ReportMetric(float64(w-written)/float64(b.N), "written-B/op")
			}
		})
	}
}

// bytesWritten is the bytes this process has passed to write system calls
// (wchar in /proc/self/io), or -1 where that is not known.
func bytesWritten() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
