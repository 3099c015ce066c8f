package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"oncehook/internal/testcluster"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// -soak runs a steady open-model load on spawned nodes for -d (make soak:
// three nodes, 10 minutes; DURATION=1h for the long profile) while the state
// churns: a failpoints build of the node whose retention buckets are
// -soak-bucket-width wide and end every -soak-expire-interval
// (failpoint/doc.go), a source retention of -soak-retention, raft snapshots
// and log compaction at the node's own thresholds (4,096 entries, checked
// every 30 s), and a leader change every -soak-transfer. Every -soak-sample
// it records each node's RSS and open fds (/proc), goroutines (go_goroutines
// of the admin /metrics), data dir size and the snapshots it holds, the
// node's backlog and retained events; afterwards it adds each interval's
// claim p99 and delivery p99 (the generator's 202 to the handler). It writes
// soak.csv, soak.json, resources.svg, latency.svg and summary.md into
// <-out>/soak-<date>-<commit>/ and fails (exit 1) when the verdict
// (soak_verdict.go) finds unbounded growth or latency drift.
//
// A leader change is a SIGTERM to the leader: the admin API has no
// leadership-transfer route, and a node that stops gracefully hands
// leadership to another voter before it exits (cluster.Node.Close). The
// node is started again at once on the same data dir; its log so far is
// kept as <id>.log.<n>. Requests that reach it while it is down fail and are
// counted as unexpected answers of the interval.

// errSoakFailed is the verdict: something grew without bound or drifted.
var errSoakFailed = errors.New("soak failed")

// Bounds of the soak.
const (
	soakMinDuration = 2 * time.Minute  // 12 samples of 10 s: the fewest the growth rule judges
	soakMinDrain    = 60 * time.Second // covers a lease (30 s) lost with a stopped leader
	electTimeout    = 30 * time.Second // from the old leader's exit to a new leader
	scrapeTimeout   = 5 * time.Second
	transferQuiet   = 20 * time.Second // no leader change this close to the load's end, beyond a sample
)

// The failpoints build's retention knobs (failpoint/doc.go); the spawned
// nodes inherit them from this process's environment.
const (
	envBucketWidth    = "ONCEHOOK_TEST_BUCKET_WIDTH"
	envExpireInterval = "ONCEHOOK_TEST_EXPIRE_INTERVAL"
)

// soakOptions are the -soak flags.
type soakOptions struct {
	on             bool
	sample         time.Duration
	transfer       time.Duration // 0: no leader changes
	retention      string        // the source's retention in the spawned nodes' config
	bucketWidth    string
	expireInterval string
}

func (s *soakOptions) flags(fs *flag.FlagSet) {
	fs.BoolVar(&s.on, "soak", false, "soak: a steady open-model load (-rate, default 300/s) on -spawn nodes for -d (default 10m) with expiry churn and leader changes; fails on growth or drift")
	fs.DurationVar(&s.sample, "soak-sample", 10*time.Second, "-soak: sampling interval of the nodes' footprint and of the latency intervals")
	fs.DurationVar(&s.transfer, "soak-transfer", 3*time.Minute, "-soak: a leader change (SIGTERM to the leader, then restart) this often; 0: none")
	fs.StringVar(&s.retention, "soak-retention", "30s", "-soak: the source's retention (keys expire and are deleted all the time)")
	fs.StringVar(&s.bucketWidth, "soak-bucket-width", "2s", "-soak: "+envBucketWidth+" for the nodes (failpoints build)")
	fs.StringVar(&s.expireInterval, "soak-expire-interval", "500ms", "-soak: "+envExpireInterval+" for the nodes (failpoints build)")
}

// normalizeSoak checks -soak against the other flags and fills its defaults;
// it runs before the generic defaults (-d 10s).
func (o *options) normalizeSoak() error {
	s := &o.soak
	if !s.on {
		s.retention = "" // the other modes keep the provider's retention
		return nil
	}
	switch {
	case o.spawn < 1:
		return errors.New("-soak spawns its nodes: needs -spawn (3 for a cluster)")
	case o.sustain || o.fill > 0 || o.total > 0 || o.cpuprofile != "" || o.storm > 1:
		return errors.New("-soak runs one open-model load for -d: drop -sustain, -fill, -n, -storm and -cpuprofile")
	case s.sample < time.Second:
		return errors.New("-soak-sample: at least 1s")
	case s.transfer < 0:
		return errors.New("-soak-transfer must not be negative")
	}
	for name, v := range map[string]string{"-soak-retention": s.retention, "-soak-bucket-width": s.bucketWidth, "-soak-expire-interval": s.expireInterval} {
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			return fmt.Errorf("%s %q: want a positive duration", name, v)
		}
	}
	if o.rate == 0 {
		o.rate = 300
	}
	if o.duration == 0 {
		o.duration = 10 * time.Minute
	}
	if o.duration < soakMinDuration || o.duration < minGrowthSamples*s.sample {
		return fmt.Errorf("-soak -d %s: at least %s and %d samples of -soak-sample", o.duration, soakMinDuration, minGrowthSamples)
	}
	o.drain = max(o.drain, soakMinDrain)
	o.quiet = true // a line per minute instead of the progress bar
	return nil
}

// checkFailpointsBuild refuses a release binary: its retention knobs are
// compiled out (failpoint/doc.go), so keys would live for hours and the soak
// would watch state pile up instead of churn.
func checkFailpointsBuild(bin string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("-bin: %w", err)
	}
	if !bytes.Contains(b, []byte(envBucketWidth)) {
		return fmt.Errorf("-bin %s is not a failpoints build (go build -tags failpoints -o bin/oncehook-failpoints .): the soak needs its retention knobs", bin)
	}
	return nil
}

// runSoak spawns the nodes, runs the soak, writes its files and returns
// errSoakFailed when the verdict fails.
func runSoak(ctx context.Context, o *options, stdout, stderr io.Writer) (err error) {
	if err := checkFailpointsBuild(o.bin); err != nil {
		return err
	}
	for k, v := range map[string]string{envBucketWidth: o.soak.bucketWidth, envExpireInterval: o.soak.expireInterval} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	e, err := setup(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close(stderr)) }()
	sr, err := soak(ctx, o, e, stderr)
	if err != nil {
		return err
	}
	if !o.noFiles {
		sr.Dir = filepath.Join(o.out, fmt.Sprintf("soak-%s-%s", sr.Date.Format("20060102-1504"), sr.Commit))
		if err := writeSoakFiles(sr); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(stdout, soakMarkdown(sr)); err != nil {
		return err
	}
	if !sr.Verdict.Pass {
		return fmt.Errorf("%w: %s", errSoakFailed, strings.Join(sr.Verdict.Reasons, "; "))
	}
	return nil
}

// Soak is the soak's outcome: soak.json, and what the CSV, the plots and
// the summary are drawn from.
type Soak struct {
	Date           time.Time    `json:"date"`
	Commit         string       `json:"commit"`
	Nodes          int          `json:"nodes"`
	Rate           float64      `json:"rate"`
	DurationS      float64      `json:"duration_s"`
	SampleS        float64      `json:"sample_s"`
	TransferS      float64      `json:"transfer_every_s"`
	Retention      string       `json:"retention"`
	BucketWidth    string       `json:"bucket_width"`
	ExpireInterval string       `json:"expire_interval"`
	BodyBytes      int          `json:"body_bytes"`
	Clients        int          `json:"clients"`
	Samples        []SoakSample `json:"samples"`
	Intervals      []Interval   `json:"intervals"`
	Transfers      []Transfer   `json:"transfers"`
	Snapshots      []int        `json:"snapshots_seen"` // per node: distinct snapshots seen in its data dir
	Result         *Result      `json:"result"`         // the load as a plain run reports it (no timeline)
	Verdict        SoakVerdict  `json:"verdict"`
	Dir            string       `json:"-"`
}

// SoakSample is the nodes' footprint at T seconds since the load's start.
type SoakSample struct {
	T       float64      `json:"t_s"`
	Leader  string       `json:"leader,omitempty"`
	Backlog *int64       `json:"backlog,omitempty"` // the leader's oncehook_backlog of the source
	Events  *int64       `json:"events,omitempty"`  // the leader's oncehook_events, all states
	Nodes   []NodeSample `json:"nodes"`
}

// NodeSample is one node's footprint; Up is false while it restarts.
type NodeSample struct {
	ID         string `json:"id"`
	Life       int    `json:"life"` // 0 for the first process, +1 per restart
	Up         bool   `json:"up"`
	RSSBytes   int64  `json:"rss_bytes"`
	FDs        int    `json:"fds"`
	Goroutines int    `json:"goroutines"` // -1: not scraped
	DataBytes  int64  `json:"data_bytes"`
}

// Interval is the load over [From, To) seconds: claims by answer time,
// first deliveries by arrival time.
type Interval struct {
	From        float64 `json:"from_s"`
	To          float64 `json:"to_s"`
	Claims      int64   `json:"claims"`
	Other       int64   `json:"other"` // failed requests and answers other than 200/202
	ClaimP50    int64   `json:"claim_p50_us"`
	ClaimP99    int64   `json:"claim_p99_us"`
	Delivered   int64   `json:"delivered"`
	DeliveryP50 int64   `json:"delivery_p50_us"` // 202 -> handler
	DeliveryP99 int64   `json:"delivery_p99_us"`
	Backlog     int64   `json:"backlog"` // claims minus keys delivered at To (bench's count)
	Transfer    bool    `json:"transfer,omitempty"`
}

// Transfer is one leader change.
type Transfer struct {
	AtS      float64 `json:"at_s"`
	From     string  `json:"from"`
	To       string  `json:"to,omitempty"`
	StopS    float64 `json:"stop_s"`    // SIGTERM to exit
	ElectedS float64 `json:"elected_s"` // SIGTERM to another node leading
	ReadyS   float64 `json:"ready_s"`   // SIGTERM to the restarted node ready
	Err      string  `json:"error,omitempty"`
}

// soaker runs one soak. mu guards pids, lives and transfers: the transfer
// goroutine restarts nodes while the sampler reads their PIDs.
type soaker struct {
	o      *options
	e      *env
	g      *generator
	client *http.Client
	stderr io.Writer

	mu        sync.Mutex
	pids      []int // 0 while the node restarts
	lives     []int
	transfers []Transfer

	samples  []SoakSample      // the sampler's own
	snaps    []map[string]bool // per node: snapshot names seen
	claimH   []*hdrhistogram.Histogram
	delivH   []*hdrhistogram.Histogram
	interval int // seconds per interval
}

func soak(ctx context.Context, o *options, e *env, stderr io.Writer) (*Soak, error) {
	g, err := newGenerator(o, e)
	if err != nil {
		return nil, err
	}
	defer g.close()
	sk := &soaker{o: o, e: e, g: g, client: &http.Client{Timeout: scrapeTimeout}, stderr: stderr,
		interval: int(o.soak.sample / time.Second)}
	defer sk.client.CloseIdleConnections()
	for _, p := range e.nodes {
		sk.pids = append(sk.pids, p.p.Pid())
		sk.lives = append(sk.lives, 0)
		sk.snaps = append(sk.snaps, map[string]bool{})
	}
	fmt.Fprintf(stderr, "soak: %d nodes, %g/s for %s, retention %s, bucket width %s, expiry every %s, a leader change every %s; samples every %s\n",
		len(e.nodes), o.rate, o.duration, o.soak.retention, o.soak.bucketWidth, o.soak.expireInterval, orNone(o.soak.transfer), o.soak.sample)

	before := e.cpuSample()
	g.begin()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { sk.sampleLoop(ctx, stop) })
	wg.Go(func() { sk.transferLoop(ctx, stop) })
	lr := g.run(ctx)
	after := e.cpuSample()
	close(stop)
	wg.Wait()
	drained := e.drain(ctx, o.drain)
	sk.fold(1 << 30)
	res := buildResult(o, e, lr, drained, cpuUsage(before, after))

	sr := &Soak{
		Date: res.Date, Commit: res.Commit, Nodes: len(e.nodes), Rate: o.rate, DurationS: o.duration.Seconds(),
		SampleS: o.soak.sample.Seconds(), TransferS: o.soak.transfer.Seconds(), Retention: o.soak.retention,
		BucketWidth: o.soak.bucketWidth, ExpireInterval: o.soak.expireInterval, BodyBytes: o.size, Clients: o.clients,
		Samples: sk.samples, Transfers: sk.transfers,
	}
	for _, s := range sk.snaps {
		sr.Snapshots = append(sr.Snapshots, len(s))
	}
	sr.Intervals = sk.intervals(res)
	res.Timeline = nil // per interval in sr.Intervals
	sr.Result = res
	sr.Verdict = judgeSoak(sr)
	return sr, nil
}

// sampleLoop samples every -soak-sample until stop, and folds the
// per-second latency histograms of the seconds that ended into intervals.
func (sk *soaker) sampleLoop(ctx context.Context, stop <-chan struct{}) {
	every(ctx, stop, sk.o.soak.sample, func() bool {
		s := sk.sample(ctx)
		sk.samples = append(sk.samples, s)
		sk.fold(int(time.Since(sk.g.start)/time.Second) - 1)
		if n := len(sk.samples); n%max(1, int(time.Minute/sk.o.soak.sample)) == 0 {
			fmt.Fprintln(sk.stderr, "soak: "+sampleLine(s))
		}
		return true
	})
}

// every calls f every d until stop, ctx is done or f returns false.
func every(ctx context.Context, stop <-chan struct{}, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

// sample reads every node's footprint and the leader's backlog.
func (sk *soaker) sample(ctx context.Context) SoakSample {
	s := SoakSample{T: time.Since(sk.g.start).Seconds()}
	for i, p := range sk.e.nodes {
		sk.mu.Lock()
		pid, life := sk.pids[i], sk.lives[i]
		sk.mu.Unlock()
		ns := NodeSample{ID: p.id, Life: life, Goroutines: -1, DataBytes: dirSize(p.dataDir)}
		for _, name := range snapshotNames(p.dataDir) {
			sk.snaps[i][name] = true
		}
		if pid > 0 {
			ns.RSSBytes, ns.FDs = procFootprint(pid)
			ns.Up = ns.RSSBytes > 0
		}
		if m, ok := scrapeMetrics(ctx, sk.client, "http://"+p.admin+"/metrics", sk.o.source); ok && ns.Up {
			ns.Goroutines = int(m.goroutines)
			if m.leader {
				s.Leader = p.id
				s.Backlog, s.Events = m.backlog, m.events
			}
		}
		s.Nodes = append(s.Nodes, ns)
	}
	return s
}

func sampleLine(s SoakSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.0fs leader %-6s backlog %s events %s", s.T, dash(s.Leader), optInt(s.Backlog), optInt(s.Events))
	for _, n := range s.Nodes {
		fmt.Fprintf(&b, " | %s rss %.0fMiB fds %d gor %d data %.1fMiB", n.ID, mib(n.RSSBytes), n.FDs, n.Goroutines, mib(n.DataBytes))
	}
	return b.String()
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

func orNone(d time.Duration) string {
	if d <= 0 {
		return "(none)"
	}
	return d.String()
}

// procFootprint reads pid's resident set (/proc/PID/status VmRSS) and its
// open file descriptors (entries of /proc/PID/fd); zeros when it is gone.
func procFootprint(pid int) (rss int64, fds int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	rss = statusBytes(b, "VmRSS:")
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return rss, 0
	}
	return rss, len(ents)
}

// snapshotNames lists the raft snapshots in a node's data dir (finished
// ones; the node keeps the newest one).
func snapshotNames(dataDir string) []string {
	ents, err := os.ReadDir(filepath.Join(dataDir, "raft", "snapshots"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			out = append(out, e.Name())
		}
	}
	return out
}

// nodeMetrics is what the soak reads from a node's /metrics.
type nodeMetrics struct {
	goroutines float64
	leader     bool
	backlog    *int64 // oncehook_backlog of the source
	events     *int64 // sum of oncehook_events
}

func scrapeMetrics(ctx context.Context, c *http.Client, url, source string) (nodeMetrics, bool) {
	var m nodeMetrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, false
	}
	resp, err := c.Do(req)
	if err != nil {
		return m, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return m, false
	}
	return parseNodeMetrics(resp.Body, source), true
}

// parseNodeMetrics reads go_goroutines, oncehook_raft_is_leader,
// oncehook_backlog{source=...} and the oncehook_events of every state off a
// Prometheus text exposition.
func parseNodeMetrics(r io.Reader, source string) nodeMetrics {
	var m nodeMetrics
	var events int64
	seenEvents := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			m.goroutines = v
		case "oncehook_raft_is_leader":
			m.leader = v == 1
		case "oncehook_backlog":
			if strings.Contains(labels, `source="`+source+`"`) {
				n := int64(v)
				m.backlog = &n
			}
		case "oncehook_events":
			events += int64(v)
			seenEvents = true
		}
	}
	if seenEvents {
		m.events = &events
	}
	return m
}

// fold moves the per-second histograms of seconds before upTo (claims by
// answer second, deliveries by arrival second) into the interval
// histograms, so that an hour's soak holds one histogram per interval, not
// per second. A worker flushes its latencies in batches, so a second may
// fill again after it was folded; the next fold takes the rest.
func (sk *soaker) fold(upTo int) {
	foldSecs(&sk.g.lat.mu, &sk.g.lat.perSec, &sk.claimH, upTo, sk.interval)
	if m := sk.g.match; m != nil {
		foldSecs(&m.mu, &m.perSec, &sk.delivH, upTo, sk.interval)
	}
}

func foldSecs(mu *sync.Mutex, secs *secHists, into *[]*hdrhistogram.Histogram, upTo, width int) {
	mu.Lock()
	defer mu.Unlock()
	for sec := 0; sec < min(upTo, len(*secs)); sec++ {
		h := (*secs)[sec]
		if h == nil {
			continue
		}
		i := sec / width
		for len(*into) <= i {
			*into = append(*into, nil)
		}
		if (*into)[i] == nil {
			(*into)[i] = hdrhistogram.New(histMin, histMax, 2)
		}
		(*into)[i].Merge(h)
		(*secs)[sec] = nil
	}
}

// intervals builds one Interval per sample from the folded histograms and
// the run's per-second counts.
func (sk *soaker) intervals(res *Result) []Interval {
	w := sk.interval
	n := len(sk.samples)
	out := make([]Interval, n)
	for i := range out {
		iv := &out[i]
		iv.From, iv.To = float64(i*w), float64((i+1)*w)
		if i < len(sk.claimH) && sk.claimH[i] != nil {
			l := summarize(sk.claimH[i])
			iv.ClaimP50, iv.ClaimP99 = l.P50, l.P99
		}
		if i < len(sk.delivH) && sk.delivH[i] != nil {
			l := summarize(sk.delivH[i])
			iv.DeliveryP50, iv.DeliveryP99 = l.P50, l.P99
		}
		for sec := i * w; sec < (i+1)*w && sec < len(res.Timeline); sec++ {
			s := res.Timeline[sec]
			iv.Claims += s.Accepted
			iv.Other += s.Other
			iv.Delivered += s.FirstDelivered
			iv.Backlog = s.Backlog
		}
	}
	for _, tr := range sk.transfers {
		if i := int(tr.AtS) / w; i < n {
			out[i].Transfer = true
		}
	}
	return out
}

// transferLoop changes the leader every -soak-transfer until stop. A change
// under way when the load ends is finished first (it is bounded: stop,
// election and readiness each have their timeout).
func (sk *soaker) transferLoop(ctx context.Context, stop <-chan struct{}) {
	if sk.o.soak.transfer <= 0 {
		return
	}
	every(ctx, stop, sk.o.soak.transfer, func() bool {
		if time.Until(sk.g.end) < sk.o.soak.sample+transferQuiet {
			return false // the last samples see every node up
		}
		tr := sk.transfer(ctx)
		sk.mu.Lock()
		sk.transfers = append(sk.transfers, tr)
		sk.mu.Unlock()
		msg := fmt.Sprintf("soak: %6.0fs leader change %s -> %s: stopped in %.1fs, new leader after %.1fs, restarted node ready after %.1fs",
			tr.AtS, tr.From, dash(tr.To), tr.StopS, tr.ElectedS, tr.ReadyS)
		if tr.Err != "" {
			msg += "; " + tr.Err
		}
		fmt.Fprintln(sk.stderr, msg)
		return true
	})
}

// leader returns the index of the node whose /metrics says it leads, or -1.
func (sk *soaker) leader(ctx context.Context, except int) int {
	for i, p := range sk.e.nodes {
		if i == except {
			continue
		}
		if m, ok := scrapeMetrics(ctx, sk.client, "http://"+p.admin+"/metrics", sk.o.source); ok && m.leader {
			return i
		}
	}
	return -1
}

// transfer stops the leader with SIGTERM (it hands leadership over as it
// closes), waits for another node to lead, starts the stopped node again
// and waits until it is ready.
func (sk *soaker) transfer(ctx context.Context) Transfer {
	tr := Transfer{AtS: time.Since(sk.g.start).Seconds()}
	li := sk.leader(ctx, -1)
	if li < 0 {
		tr.Err = "no node reports itself leader: no change"
		return tr
	}
	p := sk.e.nodes[li]
	tr.From = p.id
	sk.mu.Lock()
	sk.pids[li] = 0
	life := sk.lives[li]
	sk.mu.Unlock()
	t0 := time.Now()
	var errs []string
	if err := p.stop(); err != nil {
		errs = append(errs, "stop: "+err.Error())
	}
	tr.StopS = time.Since(t0).Seconds()
	for deadline := t0.Add(electTimeout); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		if ni := sk.leader(ctx, li); ni >= 0 {
			tr.To, tr.ElectedS = sk.e.nodes[ni].id, time.Since(t0).Seconds()
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Sprintf("no new leader within %s", electTimeout))
			break
		}
	}
	if err := os.Rename(p.logPath, fmt.Sprintf("%s.%d", p.logPath, life)); err != nil {
		errs = append(errs, "keep log: "+err.Error())
	}
	if err := p.start(sk.o.bin, filepath.Join(sk.e.dir, p.id+".toml")); err != nil {
		tr.Err = strings.Join(append(errs, "restart: "+err.Error()), "; ")
		return tr
	}
	sk.mu.Lock()
	sk.pids[li], sk.lives[li] = p.p.Pid(), life+1
	sk.mu.Unlock()
	if err := waitNodeReady(ctx, p); err != nil {
		errs = append(errs, err.Error())
	}
	tr.ReadyS = time.Since(t0).Seconds()
	tr.Err = strings.Join(errs, "; ")
	return tr
}

// waitNodeReady polls p's intake /readyz until 200, for readyTimeout at most.
func waitNodeReady(ctx context.Context, p *proc) error {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	return testcluster.AwaitReady(ctx, p.id, p.p, readyTimeout, func() bool {
		return testcluster.Ready(ctx, c, "http://"+p.listen+"/readyz")
	})
}
