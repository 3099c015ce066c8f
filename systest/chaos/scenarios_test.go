package chaos

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// profile sets the phase lengths.
type profile struct {
	warm, recovery time.Duration // load before the fault, load after the heal
	outage         time.Duration // how long a node stays killed, paused or cut off
	slowDisk       time.Duration // how long a disk stays throttled (S13)
	workers        int
}

var (
	shortProfile = profile{warm: 6 * time.Second, recovery: 8 * time.Second, outage: 6 * time.Second, slowDisk: 20 * time.Second, workers: 12}
	fullProfile  = profile{warm: 15 * time.Second, recovery: 15 * time.Second, outage: 12 * time.Second, slowDisk: 60 * time.Second, workers: 16}
)

// scenario is one row of the scenario tables in RELIABILITY.md.
type scenario struct {
	id, name   string
	short      bool // in the CI profile
	iptables   bool // needs iptables
	failpoints bool // needs a oncehook built with -tags failpoints
	rejects    bool // 401s are expected (the scenario's check judges them)
	opts       clusterOpts
	// fault runs at the fault time: it injects, waits, heals, and calls
	// s.healed() the moment the fault is over.
	fault func(s *srun)
	// extra checks after the common ones.
	check func(s *srun)
}

// srun is one scenario run.
type srun struct {
	t    *testing.T
	sc   *scenario
	prof profile
	c    *cluster
	tp   *topo
	g    *loadGen
	r    *result
	rng  *rand.Rand

	mu        sync.Mutex
	faultAt   int64
	healAt    int64
	victim    *cnode
	oldLeader *cnode

	// For the scenario's own check: the final state and the handler runs.
	final  map[string]finalEvent
	runs   []hrun
	phases []clockPhase // S11
}

func (s *srun) now() int64 { return s.g.now() }

func (s *srun) markFault() {
	s.mu.Lock()
	s.faultAt = s.now()
	s.mu.Unlock()
}

func (s *srun) healed() {
	s.mu.Lock()
	s.healAt = s.now()
	s.mu.Unlock()
}

func (s *srun) sleep(d time.Duration) { time.Sleep(d) }

func (s *srun) restart(n *cnode) { s.c.startNode(n) }

// killAndRestart is the SIGKILL fault: kill n, keep it down for the outage,
// start it again on the same data dir.
func (s *srun) killAndRestart(n *cnode) {
	s.victim = n
	n.p().Signal(syscall.SIGKILL)
	s.markFault()
	<-n.p().Done()
	s.sleep(s.prof.outage)
	s.restart(n)
	s.healed()
}

// leader waits for a leader (the fault code needs one to aim at).
func (s *srun) leader() *cnode { return s.c.waitLeader(30 * time.Second) }

var scenarios = []*scenario{
	{id: "S0", name: "baseline, no fault", short: true, fault: func(s *srun) {
		s.markFault()
		s.sleep(s.prof.outage)
		s.healed()
	}},
	{id: "S1", name: "SIGKILL the leader, restart it", short: true, fault: func(s *srun) {
		s.killAndRestart(s.leader())
	}},
	{id: "S2", name: "SIGKILL a follower, restart it", fault: func(s *srun) {
		s.killAndRestart(s.c.followers(s.leader())[0])
	}},
	{id: "S3", name: "SIGKILL the leader while the handler is mid-run", fault: func(s *srun) {
		// Every run now takes 1.5 s: the kill lands after handlers answered
		// or while they run, before their completion commits.
		if err := s.c.handlerControl(1500 * time.Millisecond); err != nil {
			s.t.Fatal(err)
		}
		l := s.leader()
		s.sleep(time.Second)
		s.victim = l
		l.p().Signal(syscall.SIGKILL)
		s.markFault()
		<-l.p().Done()
		s.sleep(time.Second)
		s.c.handlerControl(0)
		s.sleep(s.prof.outage)
		s.restart(l)
		s.healed()
	}},
	{id: "S4", name: "SIGSTOP the leader 5 s (> election timeout), SIGCONT", short: true, fault: func(s *srun) {
		l := s.leader()
		s.victim = l
		l.p().Signal(syscall.SIGSTOP)
		s.markFault()
		s.sleep(5 * time.Second)
		l.p().Signal(syscall.SIGCONT)
		s.healed()
	}},
	{id: "S4b", name: "SIGSTOP the leader 15 s (> forward timeout), SIGCONT", fault: func(s *srun) {
		l := s.leader()
		s.victim = l
		l.p().Signal(syscall.SIGSTOP)
		s.markFault()
		s.sleep(15 * time.Second)
		l.p().Signal(syscall.SIGCONT)
		s.healed()
	}},
	{id: "S5", name: "SIGSTOP the handler for 2x lease + 1 s", short: true, fault: func(s *srun) {
		s.c.handler.Signal(syscall.SIGSTOP)
		s.markFault()
		s.sleep(2*lease + time.Second)
		s.c.handler.Signal(syscall.SIGCONT)
		s.healed()
	}, check: func(s *srun) {
		// The pause must have made runs late: oncehook gave up on them
		// (forward_timeout), leased them again under newer tokens, and the
		// late ones were fenced by the handler or answered into the void.
		if s.r.LateRuns+s.r.FencedHandler == 0 {
			s.r.violate("S5: no late or fenced run: the handler pause did not exercise fencing")
		}
	}},
	{id: "S5b", name: "SIGSTOP the handler mid-run with the intake quiet: superseded tokens fenced", fault: func(s *srun) {
		// Runs take 1.5 s (< forward_timeout) so the pause lands mid-run; with
		// no new claims, each stuck event is leased again every ~2 s under a
		// newer token, so after SIGCONT the handler holds several tokens per
		// key and must refuse the older ones.
		s.c.handlerControl(1500 * time.Millisecond)
		s.g.pause()
		s.sleep(500 * time.Millisecond)
		s.c.handler.Signal(syscall.SIGSTOP)
		s.markFault()
		s.sleep(2*lease + time.Second)
		s.c.handler.Signal(syscall.SIGCONT)
		s.sleep(2 * time.Second)
		s.c.handlerControl(0)
		s.g.resume()
		s.healed()
	}, check: func(s *srun) {
		if s.r.FencedHandler == 0 {
			s.r.violate("S5b: the handler fenced no superseded token")
		}
		s.r.note("intake paused during the fault: unavailability and during-rate are not meaningful")
	}},
	{id: "S6", name: "partition the leader from both followers (raft port, symmetric)", short: true, iptables: true, fault: func(s *srun) {
		l := s.leader()
		s.victim, s.oldLeader = l, l
		var peers []int
		for _, f := range s.c.followers(l) {
			peers = append(peers, f.i)
		}
		if err := s.tp.isolateRaft(l.i, peers); err != nil {
			s.t.Fatal(err)
		}
		s.markFault()
		s.sleep(s.prof.outage + 4*time.Second)
		if err := s.tp.heal(l.i); err != nil {
			s.t.Fatal(err)
		}
		s.healed()
	}, check: minorityAcks},
	{id: "S7", name: "asymmetric: a follower cannot reach the leader, the leader reaches it", iptables: true, fault: func(s *srun) {
		l := s.leader()
		f := s.c.followers(l)[0]
		s.victim = f
		if err := s.tp.blockInbound(l.i, f.i); err != nil {
			s.t.Fatal(err)
		}
		s.markFault()
		s.sleep(s.prof.outage + 4*time.Second)
		if err := s.tp.heal(l.i); err != nil {
			s.t.Fatal(err)
		}
		s.healed()
	}},
	{id: "S8", name: "follower cut off long enough to need a snapshot", iptables: true, fault: func(s *srun) {
		lagFollower(s, "")
	}},
	{id: "S9", name: "wipe a follower's data dir, restart it with the same id", fault: func(s *srun) {
		f := s.c.followers(s.leader())[0]
		s.victim = f
		f.p().Signal(syscall.SIGKILL)
		s.markFault()
		<-f.p().Done()
		if err := os.RemoveAll(f.dir); err != nil {
			s.t.Fatal(err)
		}
		s.sleep(s.prof.outage / 2)
		s.restart(f)
		s.healed()
	}},
	{id: "S10a", name: "disk full on a follower (tmpfs), then space freed", opts: clusterOpts{tmpfsBytes: 1536 << 20}, check: diskFullCheck, fault: func(s *srun) {
		diskFull(s, s.c.followers(s.leader())[0])
	}},
	{id: "S10b", name: "disk full on the leader (tmpfs), then space freed", opts: clusterOpts{tmpfsBytes: 1536 << 20}, check: diskFullCheck, fault: func(s *srun) {
		diskFull(s, s.leader())
	}},
	{id: "S12", name: "graceful leader restart (SIGTERM hands leadership over)", fault: func(s *srun) {
		l := s.leader()
		s.victim = l
		l.p().Signal(syscall.SIGTERM)
		s.markFault()
		select {
		case <-l.p().Done():
		case <-time.After(30 * time.Second):
			s.r.violate("S12: the leader did not stop within 30 s of SIGTERM")
			l.p().Kill()
		}
		s.sleep(2 * time.Second)
		s.restart(l)
		s.healed()
	}},
	{id: "S15", name: "combined nemesis: a seeded random fault every few seconds", iptables: true, fault: combined},
}

// diskFull fills n's data dir (its own tmpfs) with a ballast file, holds it,
// frees it and restarts n if the storage error made it exit (it must exit
// rather than diverge).
func diskFull(s *srun, n *cnode) {
	s.victim = n
	// Only ever fill a tmpfs of our own: never the machine's disk.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(n.dir, &fs); err != nil || fs.Type != tmpfsMagic {
		s.t.Fatalf("%s's data dir is not a tmpfs (statfs type %#x, %v): refusing to fill it", n.id, fs.Type, err)
	}
	ballast := filepath.Join(n.dir, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		s.t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	written := 0
	for i := 0; i < int(s.sc.opts.tmpfsBytes>>20)+1; i++ {
		k, err := f.Write(buf)
		written += k
		if err != nil {
			break // ENOSPC: full
		}
	}
	f.Close()
	before := countInFile(n.logs, "no space left on device")
	logFrom := fileSize(n.logs)
	s.markFault()
	s.sleep(s.prof.outage)
	exited := !n.p().Running()
	os.Remove(ballast)
	errs := countInFile(n.logs, "no space left on device") - before
	if exited {
		s.r.note("%s (ballast %d MiB) exited on the full disk (%v) after %d ENOSPC log lines; restarted after freeing space; why: %s",
			n.id, written>>20, n.p().Err(), errs, exitReason(n.logs, logFrom))
		s.restart(n)
	} else {
		s.r.note("%s (ballast %d MiB) kept running through the full disk; %d ENOSPC log lines", n.id, written>>20, errs)
	}
	s.healed()
	// The victim must catch up once the space is back: measured in the
	// background (the scenario's recovery phase runs meanwhile) and reported
	// by diskFullCheck.
	res := make(chan time.Duration, 1)
	diskFullCatchUp.Store(s, res)
	go func() { res <- caughtUp(s.c, n, 90*time.Second) }()
}

// diskFullCatchUp holds, per S10 run, the channel on which the victim's
// catch-up time arrives (-1: not within the bound).
var diskFullCatchUp sync.Map // *srun -> chan time.Duration

// caughtUp waits until n has applied every entry the leader had committed
// when it started, and returns how long that took; -1 if not within d.
// Ready (/readyz) is not enough: a follower that the leader stopped
// replicating to is ready at its own stale commit index.
func caughtUp(c *cluster, n *cnode, d time.Duration) time.Duration {
	start := time.Now()
	var target uint64
	for target == 0 {
		if time.Since(start) > d {
			return -1
		}
		if l := c.leader(); l == n {
			return time.Since(start) // it leads again: its log is the reference
		} else if l != nil {
			if st, ok := c.status(l); ok {
				target = st.CommitIndex
				continue
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for time.Since(start) < d {
		if st, ok := c.status(n); ok && st.AppliedIndex >= target {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// diskFullCheck reports how long the S10 victim took to catch up after the
// space was freed (RELIABILITY.md, rows S10a and S10b; the target: recovery
// <= 15 s after the restart).
func diskFullCheck(s *srun) {
	v, ok := diskFullCatchUp.LoadAndDelete(s)
	if !ok {
		return
	}
	var took time.Duration
	select {
	case took = <-v.(chan time.Duration):
	case <-time.After(2 * time.Minute):
		took = -1
	}
	switch {
	case took < 0:
		s.r.violate("%s did not catch up with the leader's commit index within 90 s of the space being freed. Regression of: %s", s.victim.id, raftPipelineStall)
	case took > 15*time.Second:
		s.r.note("%s caught up %.1f s after the space was freed, over the 15 s target", s.victim.id, took.Seconds())
	default:
		s.r.note("%s caught up %.1f s after the space was freed", s.victim.id, took.Seconds())
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// exitReason finds why a node stopped in its log after offset from: the
// storage error it reported, or else the panic line.
func exitReason(path string, from int64) string {
	b, _ := os.ReadFile(path)
	if from > int64(len(b)) {
		from = 0
	}
	var panicLine string
	for _, line := range strings.Split(string(b[from:]), "\n") {
		switch {
		case strings.Contains(line, "fatal storage error"):
			return truncate(line, 300)
		case panicLine == "" && strings.HasPrefix(line, "panic: "):
			panicLine = line
		}
	}
	if panicLine == "" {
		return "no storage error or panic in its log"
	}
	return truncate(panicLine, 300)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

const tmpfsMagic = 0x01021994

func countInFile(path, needle string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), needle)
}

// combined injects a random fault from the catalogue every few seconds.
func combined(s *srun) {
	s.markFault()
	end := time.Now().Add(4 * s.prof.outage)
	for i := 0; time.Now().Before(end) && i < 20; i++ {
		l := s.c.waitLeader(30 * time.Second)
		fs := s.c.followers(l)
		switch k := s.rng.IntN(5); k {
		case 0:
			s.r.note("kill leader %s", l.id)
			l.p().Signal(syscall.SIGKILL)
			<-l.p().Done()
			s.sleep(3 * time.Second)
			s.restart(l)
		case 1:
			f := fs[s.rng.IntN(2)]
			s.r.note("kill follower %s", f.id)
			f.p().Signal(syscall.SIGKILL)
			<-f.p().Done()
			s.sleep(3 * time.Second)
			s.restart(f)
		case 2:
			s.r.note("pause leader %s", l.id)
			l.p().Signal(syscall.SIGSTOP)
			s.sleep(3 * time.Second)
			l.p().Signal(syscall.SIGCONT)
		case 3:
			s.r.note("partition leader %s", l.id)
			if err := s.tp.isolateRaft(l.i, []int{fs[0].i, fs[1].i}); err != nil {
				s.t.Fatal(err)
			}
			s.sleep(4 * time.Second)
			s.tp.heal(l.i)
		case 4:
			s.r.note("pause handler")
			s.c.handler.Signal(syscall.SIGSTOP)
			s.sleep(2*lease + time.Second)
			s.c.handler.Signal(syscall.SIGCONT)
		}
		for _, n := range s.c.nodes {
			s.c.waitReady(n, 60*time.Second)
		}
		s.sleep(time.Duration(1000+s.rng.IntN(2000)) * time.Millisecond)
	}
	s.healed()
}

// minorityAcks: the partitioned old leader must acknowledge no new claim
// sent to it after the partition was in place.
func minorityAcks(s *srun) {
	if s.oldLeader == nil {
		return
	}
	n := 0
	for _, o := range s.g.history() {
		if o.Node == s.oldLeader.i && o.Outcome == outNew && o.Call > s.faultAt && o.Return < s.healAt {
			n++
		}
	}
	s.r.note("new claims acknowledged by the partitioned old leader: %d", n)
	if n > 0 {
		s.r.violate("%d new claims acknowledged by the minority side", n)
	}
}

func selectScenarios(t *testing.T) []*scenario {
	var out []*scenario
	want := map[string]bool{}
	for _, id := range strings.Split(*flagScenarios, ",") {
		if id = strings.TrimSpace(id); id != "" {
			want[strings.ToUpper(id)] = true
		}
	}
	for _, sc := range scenarios {
		switch {
		case len(want) > 0:
			if want[strings.ToUpper(sc.id)] {
				out = append(out, sc)
			}
		case *flagFull || sc.short:
			out = append(out, sc)
		}
	}
	return out
}

// TestChaos runs the fault scenarios against three real nodes in network
// namespaces. Without flags it runs the short CI profile (S0 S1 S4 S5 S6,
// one seed); `make chaos` runs all with -full -seeds N and writes a report.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped in -short mode (spawns 3 nodes in network namespaces)")
	}
	requireNetns(t)
	prof := shortProfile
	if *flagFull {
		prof = fullProfile
	}
	resultsDir := *flagResults
	if resultsDir == "" && *flagFull {
		resultsDir = "results"
	}
	var all []*result
	for _, sc := range selectScenarios(t) {
		for k := 0; k < max(1, *flagSeeds); k++ {
			seed := *flagSeed0 + uint64(k)
			t.Run(fmt.Sprintf("%s/seed%d", sc.id, seed), func(t *testing.T) {
				r := &result{Scenario: sc.id, Seed: seed}
				all = append(all, r)
				if sc.iptables {
					requireIptables(t)
				}
				if sc.failpoints {
					requireFailpoints(t)
				}
				if sc.opts.loopDisk {
					requireSlowDisk(t)
				}
				runScenario(t, sc, prof, seed, r)
			})
		}
	}
	if resultsDir != "" && len(all) > 0 {
		p, err := writeReport(resultsDir, prof, all)
		if err != nil {
			t.Errorf("report: %v", err)
		} else {
			t.Logf("report written to %s", p)
		}
	}
}

func runScenario(t *testing.T, sc *scenario, prof profile, seed uint64, r *result) {
	defer func() {
		if t.Skipped() {
			r.Skipped = "skipped"
		}
	}()
	tp := newTopo(t)
	c := newCluster(t, tp, sc.opts)
	s := &srun{t: t, sc: sc, prof: prof, c: c, tp: tp, r: r, rng: rand.New(rand.NewPCG(seed, 99))}
	s.g = newLoadGen(c, seed, prof.workers, 400000)
	leaderTerms := startLeaderMonitor(c)

	loadStart := s.now()
	s.g.start(prof.warm + 10*time.Minute) // stopped by halt; the cap is a backstop
	time.Sleep(prof.warm)
	sc.fault(s)
	if s.healAt == 0 {
		s.healed()
	}
	healWall := time.Now()
	rec := make(chan time.Duration, 1)
	go func() { rec <- waitRecovered(c, healWall, 90*time.Second) }()
	time.Sleep(prof.recovery)
	s.g.halt()
	loadEnd := s.now()
	r.RecoveryS = (<-rec).Seconds()
	if r.RecoveryS < 0 {
		r.violate("the cluster did not recover (every node ready, one leader) within 90 s of the heal")
	}
	r.LeaderChanges = leaderTerms() - 1

	// Drain: every claim delivered and settled.
	for _, n := range c.nodes {
		if !n.p().Running() {
			r.violate("%s is not running after the heal (exit: %v)", n.id, n.p().Err())
			c.startNode(n)
		}
	}
	for _, n := range c.nodes {
		c.waitReady(n, 60*time.Second)
	}
	l := drain(t, c, r, 120*time.Second)

	// Replica convergence: the same counts at the same applied index, and the
	// same engine content hash at the same applied index.
	convergence(c, r)

	final, err := c.events(l)
	if err != nil {
		t.Fatalf("final state: %v", err)
	}
	for _, n := range c.nodes {
		r.FencedOncehk += c.metric(n, "oncehook_deliveries_total", `outcome="fenced"`)
	}
	runs, err := c.handlerRuns()
	if err != nil {
		t.Fatalf("handler runs: %v", err)
	}
	tl := timeline{loadStart: loadStart, faultAt: s.faultAt, healAt: s.healAt, loadEnd: loadEnd}
	if len(s.phases) > 0 {
		tl.leaderAhead = s.leaderAhead
	}
	if sc.id == "S0" {
		tl.faultAt, tl.healAt = 0, 0
	}
	checkHistory(r, s.g.history(), final, runs, tl, vizDir())
	if r.Rejected > 0 && !sc.rejects {
		r.violate("%d deliveries refused with 401 (a correctly signed delivery must pass)", r.Rejected)
	}
	s.final, s.runs = final, runs
	if os.Getenv("CHAOS_DEBUG_RUNS") != "" {
		by := map[string][]hrun{}
		for _, rn := range runs {
			by[rn.Key] = append(by[rn.Key], rn)
		}
		shown := 0
		for k, rs := range by {
			if len(rs) > 2 && shown < 4 {
				shown++
				t.Logf("key %s final %+v", k, final[k])
				for _, rn := range rs {
					t.Logf("   %+v", rn)
				}
			}
		}
	}
	if sc.id == "S0" && r.LeaderChanges > 0 {
		r.note("S0: %d leader changes without a fault (CPU contention?)", r.LeaderChanges)
	}
	if sc.check != nil {
		sc.check(s)
	}

	if !r.Converged || !r.HashEqual {
		// Keep every node's goroutine dump (Go prints one on SIGQUIT) in its
		// log, which a failed run saves next to the report.
		for _, n := range c.nodes {
			n.p().Signal(syscall.SIGQUIT)
		}
		time.Sleep(time.Second)
	}
	// Stop the nodes, then look for the canary secret in every log and data file.
	for _, n := range c.nodes {
		n.p().Stop(20 * time.Second)
	}
	var dirs []string
	for _, n := range c.nodes {
		dirs = append(dirs, n.dir, n.logs)
	}
	dirs = append(dirs, c.hlog, filepath.Join(c.root, "handler.log"))
	hits, where := grepTree(dirs, canaryNeedles())
	r.CanaryHits = hits
	if hits > 0 {
		r.violate("canary secret found in %v", where)
	}

	t.Logf("%s seed %d: %s", sc.id, seed, r.summary())
	for _, n := range r.Notes {
		t.Logf("  note: %s", n)
	}
	for _, v := range r.Violations {
		t.Errorf("VIOLATION %s: %s", sc.id, v)
	}
	// Liveness: the provisional targets of unavailTarget. Safety violations
	// fail above; a missed target is a note, and only twice the target fails
	// (CI shares two cores with other packages). S4b, S6 and S7 fail sooner:
	// 8 s catches the forward-slot stall (see forwardStall), which measured
	// 10 s, exactly twice their target.
	if tgt, ok := unavailTarget[sc.id]; ok && r.UnavailS > tgt {
		r.note("unavailability %.2f s over the %.0f s target", r.UnavailS, tgt)
		switch {
		case (sc.id == "S4b" || sc.id == "S6" || sc.id == "S7") && r.UnavailS > 8:
			t.Errorf("%s: no new claim acknowledged for %.1f s although a new leader is elected in 1-2 s. Regression of: %s", sc.id, r.UnavailS, forwardStall)
		case r.UnavailS > 2*tgt:
			t.Errorf("%s: unavailable for %.1f s (target %.0f s)", sc.id, r.UnavailS, tgt)
		}
	}
}

// unavailTarget is the provisional unavailability target per scenario,
// in seconds (S4: the pause itself is 5 s).
var unavailTarget = map[string]float64{"S1": 5, "S1fp": 5, "S3": 5, "S3fp": 5, "S4": 6, "S4b": 5, "S6": 5, "S7": 5, "S9": 5, "S10b": 5, "S12": 5}

// forwardStall describes the bug the S4b/S6/S7 liveness check guards against
// (fixed: cluster/rpc.go leaderWatch, proposer.acquire).
const forwardStall = "A follower's forwards to a leader that is paused or cut off hold its forward slots " +
	"(cluster/proposer.go fwdSlots, 4) until Config.ForwardTimeout (10 s) unless the leader change cancels " +
	"them; and the proposer must pick its slot kind again when the leader changes, or a node that wins the " +
	"election keeps waiting for forward slots."

// raftPipelineStall is the bug diskFullCheck guards against (fixed: cluster
// builds its NetworkTransport with MaxRPCsInFlight 1, no pipelining).
const raftPipelineStall = "after a follower's raft log store fails once (ENOSPC), the leader never sends it " +
	"another entry while heartbeats keep it a healthy-looking follower (/readyz 200, applied == its stale commit " +
	"index), even after space is freed or the follower restarts; only a leader change heals it. The leader's " +
	"goroutine dump shows replicate -> pipelineSend -> netPipeline.AppendEntries parked on inprogressCh while " +
	"pipelineDecode has returned on Success=false: hashicorp/raft#612 (open), with pipelined replication " +
	"(NetworkTransportConfig.MaxRPCsInFlight other than 1)"

func canaryNeedles() [][]byte {
	return [][]byte{[]byte(canarySecret), []byte(b64(canaryRaw)), []byte(canaryRaw)}
}

func vizDir() string { return "results" }

// startLeaderMonitor polls the cluster 4 times a second and counts the
// distinct (term, leader) pairs it sees; the returned func stops it.
func startLeaderMonitor(c *cluster) func() int {
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		seen := map[string]bool{}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, st := range c.statuses() {
				if st != nil && st.State == "leader" {
					seen[fmt.Sprintf("%d/%s", st.Term, st.NodeID)] = true
				}
			}
			select {
			case <-stop:
				done <- len(seen)
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { close(stop); return <-done }
}

// waitRecovered returns how long after heal every node was running, ready
// (leader known, commit index applied) and agreeing on one leader; -1 if not
// within d.
func waitRecovered(c *cluster, heal time.Time, d time.Duration) time.Duration {
	for time.Since(heal) < d {
		sts := c.statuses()
		ok := true
		for _, st := range sts {
			if st == nil || sts[0] == nil || !st.Ready || st.LeaderID == "" || st.LeaderID != sts[0].LeaderID {
				ok = false
			}
		}
		if ok {
			return time.Since(heal)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -1
}

// drain waits until the leader has nothing pending or processing and
// returns the leader.
func drain(t *testing.T, c *cluster, r *result, d time.Duration) *cnode {
	deadline := time.Now().Add(d)
	for {
		l := c.leader()
		if l != nil {
			if st, ok := c.status(l); ok && st.Counts["pending"] == 0 && st.Counts["processing"] == 0 {
				return l
			}
		}
		if time.Now().After(deadline) {
			if l == nil {
				t.Fatalf("no leader to drain")
			}
			st, _ := c.status(l)
			r.violate("not drained within %s: %v", d, st.Counts)
			return l
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// convergence compares the replicas: counts at the same applied index from
// /v1/status, and engine hashes at the same applied index from /v1/backup.
// Leader work (lease, reclaim) moves the applied index even when idle, so
// both read all three nodes at once and retry until the indexes line up.
func convergence(c *cluster, r *result) {
	for try := 0; try < 50; try++ {
		sts := c.statuses()
		if sts[0] == nil || sts[1] == nil || sts[2] == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if sts[0].AppliedIndex == sts[1].AppliedIndex && sts[1].AppliedIndex == sts[2].AppliedIndex {
			same := true
			for _, k := range []string{"pending", "processing", "done", "dead", "stale"} {
				if sts[0].Counts[k] != sts[1].Counts[k] || sts[1].Counts[k] != sts[2].Counts[k] {
					same = false
				}
			}
			r.Converged = same
			r.ConvergeNote = fmt.Sprintf("applied %d, counts %v / %v / %v", sts[0].AppliedIndex, sts[0].Counts, sts[1].Counts, sts[2].Counts)
			if !same {
				r.violate("replicas differ at applied index %d: %s", sts[0].AppliedIndex, r.ConvergeNote)
			}
			break
		}
		time.Sleep(37 * time.Millisecond)
	}
	if r.ConvergeNote == "" {
		var idx []string
		sts := c.statuses()
		var top uint64
		for _, st := range sts {
			if st != nil {
				top = max(top, st.AppliedIndex)
			}
		}
		for i, st := range sts {
			if st == nil {
				idx = append(idx, c.nodes[i].id+": no status")
				continue
			}
			idx = append(idx, fmt.Sprintf("%s: %s applied %d commit %d term %d counts %v", st.NodeID, st.State, st.AppliedIndex, st.CommitIndex, st.Term, st.Counts))
		}
		r.violate("replicas did not converge: the three applied indexes never lined up in 50 reads (%s)", strings.Join(idx, "; "))
	}
	for try := 0; try < 15; try++ {
		views := make([]engineView, 3)
		var wg sync.WaitGroup
		for i, n := range c.nodes {
			wg.Add(1)
			go func() { defer wg.Done(); views[i] = c.engineView(n) }()
		}
		wg.Wait()
		bad := false
		for i, v := range views {
			if v.err != nil {
				r.note("backup of %s: %v", c.nodes[i].id, v.err)
				bad = true
			} else if v.check != nil {
				r.violate("engine check of %s failed: %v", c.nodes[i].id, v.check)
			}
		}
		if bad {
			continue
		}
		if views[0].applied == views[1].applied && views[1].applied == views[2].applied {
			r.HashEqual = views[0].hash == views[1].hash && views[1].hash == views[2].hash
			r.HashNote = fmt.Sprintf("applied %d, hash %x", views[0].applied, views[0].hash[:6])
			if !r.HashEqual {
				r.violate("engine hashes differ at applied index %d", views[0].applied)
			}
			return
		}
		// Compare the pairs that did line up.
		for i := 0; i < 3; i++ {
			for j := i + 1; j < 3; j++ {
				if views[i].applied == views[j].applied && views[i].hash != views[j].hash {
					r.violate("engine hashes of %s and %s differ at applied index %d", c.nodes[i].id, c.nodes[j].id, views[i].applied)
					return
				}
			}
		}
	}
	r.violate("replicas did not converge: the applied indexes of three backups never lined up in 15 tries")
}

func (r *result) summary() string {
	return fmt.Sprintf("ops %d acked %d (new %d dup %d) unknown %d (present %d) refused %d | lost %d unfinished %d linearizable %s | runs %d double %d sameToken %d afterDone %d phantom %d fenced(handler) %d late %d fenced(oncehook) %.0f dead %d | converged %v hash %v | leader changes %d unavail %.2fs recovery %.2fs | claims/s %.0f/%.0f/%.0f p99 %s/%s/%s",
		r.Ops, r.Acked, r.AckedNew, r.AckedDup, r.Unknown, r.UnknownPresent, r.Refused,
		r.Lost, r.NotFinished, r.Linearizable,
		r.Runs, r.DoubleRuns, r.SameTokenRuns, r.RunsAfterDone, r.PhantomRuns, r.FencedHandler, r.LateRuns, r.FencedOncehk, r.Dead,
		r.Converged, r.HashEqual, r.LeaderChanges, r.UnavailS, r.RecoveryS,
		r.BeforeRate, r.DuringRate, r.AfterRate, r.P99Before.Round(time.Millisecond), r.P99During.Round(time.Millisecond), r.P99After.Round(time.Millisecond))
}
