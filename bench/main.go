// Command bench measures oncehook's hot path the way operators measure servers:
// signed deliveries through the whole intake (verify, key, claim on Raft, 202),
// latency into an HDR histogram, a vegeta/wrk-style report, and a JSON result
// plus a PNG plot under bench/results/.
//
// Usage (from the module root):
//
//	go build -o bin/oncehook .
//	go run ./bench -spawn 1 -c 64 -d 10s -size 1KiB -provider standard
//	go run ./bench -spawn 1 -c 1 -d 10s                 # single-client latency
//	go run ./bench -spawn 1 -c 64 -d 10s -dup 0.5       # half the requests resend an acked key
//	go run ./bench -spawn 3 -rate 5000 -d 10s           # open model at 5,000 req/s on 3 nodes
//	go run ./bench -spawn 1 -storm 8 -d 5s              # 8 concurrent copies of every new key
//	go run ./bench -spawn 1 -sustain -rate-min 1000 -rate-max 8000 -rate-step 1000 -c 512
//	go run ./bench -spawn 1 -fill 1000000 -drain 10m    # retained state at a million keys
//	go run ./bench -spawn 1 -rate 2000 -d 15s -handler-delay 200ms   # a slow handler
//	go run ./bench -spawn 3 -rate 1000 -d 20s -neighbour 3000        # another source's slow backlog
//	make soak DURATION=1h                                # steady load with churn, judged for growth (soak.go)
//	go run ./bench -target http://127.0.0.1:8080 -source stripe-live \
//	    -provider stripe -secret-file stripe.secret -d 30s
//
// Targets: -spawn N starts N nodes of -bin (default bin/oncehook under the
// module root) on loopback with temporary data dirs, a generated config and an
// in-process sink as their handler, waits for /readyz on each, and stops them
// (SIGTERM, then SIGKILL) and removes the temporary dir at the end. -target
// takes one or more comma-separated intake URLs of running nodes; then -sink
// ADDR optionally runs the sink at the address their source forwards to.
//
// Load models: closed (-c clients each send, wait, send again) for -n
// operations or -d time; open (-rate R per second, -c is then the most
// requests in flight), where latency is measured from each request's intended
// send time, so a server stall shows up in the percentiles instead of slowing
// the generator down (no coordinated omission).
//
// Traffic: every request is a delivery signed in -provider's own scheme
// (standard, svix, github, stripe) with a -size body and a key unique to this
// run. -dup P makes a fraction P of the operations resend a key already
// answered 202 (expected answer: 200). -storm K sends each new key K times at
// once, spread over the nodes (expected: exactly one 202). Requests go to the
// nodes round-robin.
//
// Measures: status codes, request latency (HDR histogram, 1 µs..60 s, 3
// significant digits; also split into 202 and 200 answers), claims/s (202s),
// duplicates answered (200s), unexpected answers with a sample of their body,
// and, with the sink, delivery latency from the send time (sent_ns in the body)
// to the handler, deliveries per second and repeated deliveries. A 503 is not
// retried: it counts as unexpected, as a provider would see it. CPU: cores
// used by each spawned node and by bench itself during the load, and, when
// every claim was delivered, the CPU time of all of them from the start of
// the load to the end of the drain per claim (cpu_cores.us_per_claim): what
// one event costs the machine from signing to delivery, comparable across
// runs whose delivery lagged differently.
//
// The sustained rate (sustain.go) is the delivered rate, not the claim rate:
// the open model reports every second's claim and delivery p50/p99 (delivery
// timed from the generator's 202 to the handler, paired by key), keys
// delivered and the backlog (claims minus keys delivered; also the node's
// oncehook_backlog from /metrics). -sustain searches the highest rate whose
// backlog stays flat and whose delivery p99 stays under -max-delivery-p99.
// -fill N (fill.go) measures retained state: one node's RSS and data dir per
// key (engine file, raft log and snapshots apart), and the claim p99 of the
// last 100,000 events against the first.
//
// Output: the report on stdout (-json for the JSON result instead), a
// progress bar on stderr when it is a terminal (-q to silence it), and unless
// -no-files, <date>-<commit>-<nodes>n-<model>.{json,png} in -out
// (default bench/results); -replot F.json redraws a PNG. -cpuprofile F saves a
// CPU profile of the run from the node's admin pprof (the leader when
// spawned); -keep keeps the spawned nodes' dir with their configs and logs.
//
// Exit status: 1 when the run broke or could not check oncehook's promise
// (an answer other than 200/202 or a failed request, an exactly-once
// violation, a claim not delivered when the drain ended), after the report;
// 0 otherwise. A key delivered twice is not a failure (at least once to the
// handler).
//
// Every loop is bounded: the load stops at -n or -d (open model: when the
// schedule is done, or -timeout after its end with the rest counted as
// missed), each request at -timeout, the delivery drain at -drain, node start
// at 60s and node stop at 10s after SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the whole program: parse flags, set up the target (spawned nodes or
// given ones), run the load, drain deliveries, report and write files. Every
// resource it starts is stopped before it returns, also on error or ctx done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.replot != "" {
		return replot(o.replot)
	}
	if o.soak.on {
		return runSoak(ctx, o, stdout, stderr) // soak.go
	}
	e, err := setup(ctx, o, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close(stderr)) }()
	if o.sustain {
		return runSustain(ctx, o, e, stdout, stderr)
	}

	var neighbours int64
	if o.neighbour > 0 {
		if neighbours, err = sendNeighbour(ctx, o, e); err != nil {
			return err
		}
	}
	res, profErr, err := measure(ctx, o, e, stderr)
	if err != nil {
		return err
	}
	if o.neighbour > 0 {
		res.NeighbourEvents = neighbours
		res.NeighbourDelayMs = float64(o.neighbourDelay) / float64(time.Millisecond)
		res.NeighbourDelivered = e.neighbour.snapshot().deliveries
	}
	if !o.noFiles {
		jsonPath, pngPath := resultPaths(o, res)
		res.Files = []string{jsonPath, pngPath}
	}
	if err := writeReport(o, res, stdout); err != nil {
		return err
	}
	if err := writeFiles(res); err != nil {
		return err
	}
	if profErr != nil {
		return fmt.Errorf("cpu profile: %w", profErr)
	}
	if o.cpuprofile != "" {
		fmt.Fprintf(stderr, "cpu profile: %s (go tool pprof -top %s)\n", o.cpuprofile, o.cpuprofile)
	}
	return verdict(res)
}

// verdict fails a run that broke what oncehook promises or that could not
// be checked, so that a script sees it in the exit status: an answer other
// than 200 or 202 (or a failed request), an exactly-once violation, or a
// claim the handler had not received when the drain ended. A key delivered
// twice is not a failure: delivery to the handler is at least once.
func verdict(res *Result) error {
	var why []string
	if res.Unexpected > 0 {
		why = append(why, fmt.Sprintf("%d unexpected answers or failed requests", res.Unexpected))
	}
	if res.Violations > 0 {
		why = append(why, fmt.Sprintf("%d exactly-once violations", res.Violations))
	}
	if d := res.Delivery; d != nil && d.Pending > 0 {
		why = append(why, fmt.Sprintf("%d claims not delivered when the drain ended", d.Pending))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("the run failed: %s (the report above has the details)", strings.Join(why, ", "))
}

// measure runs one load against e and drains its deliveries: the whole of a
// plain run, one step of -sustain. profErr is the CPU profile's failure, which
// does not void the result.
func measure(ctx context.Context, o *options, e *env, stderr io.Writer) (res *Result, profErr, err error) {
	g, err := newGenerator(o, e)
	if err != nil {
		return nil, nil, err
	}
	defer g.close()

	// The open model scrapes the leader's backlog; found before the clock
	// starts, so that the lookup does not delay the first requests.
	scrapeAdmin := ""
	if o.rate > 0 && e.sink != nil && e.adminURL != "" {
		scrapeAdmin = e.leaderAdmin()
	}
	prof := startProfile(ctx, o, e)
	before := e.cpuSample()
	g.begin()
	var scr *backlogScraper
	if scrapeAdmin != "" {
		scr = startBacklogScraper(ctx, scrapeAdmin, o.source, g.start)
	}
	var fp *fillProgress
	bar := &progress{}
	if o.fill > 0 {
		fp = startFillProgress(o, e, g, stderr)
	} else {
		bar = startProgress(o, stderr, g)
	}
	lr := g.run(ctx)
	after := e.cpuSample()
	bar.stop()
	profErr = prof.wait()

	drained := e.drain(ctx, o.drain)
	metric := scr.stop()
	if drained != nil {
		drained.metric = metric
	}
	cpu := cpuUsage(before, after)
	if drained != nil && drained.snap.pending() == 0 {
		cpu.perClaim(before, e.cpuSample(), lr.claims())
	}
	res = buildResult(o, e, lr, drained, cpu)
	if fp != nil {
		res.Fill = fp.finish(lr, res)
	}
	return res, profErr, nil
}

// options are the parsed flags. Zero values are documented on each flag.
type options struct {
	// target
	targets        []string // intake base URLs (-target)
	source         string
	provider       string
	replayGuard    string // -spawn: the source's replay_guard; "": the provider's default
	secretFile     string
	adminURL       string
	adminTokenFile string
	spawn          int
	leaderOnly     bool          // -leader-only: every request to the leader
	handlerDelay   time.Duration // -handler-delay: the sink answers each delivery this late
	neighbour      int           // -neighbour: events of a second, slow source sent before the load
	neighbourDelay time.Duration // -neighbour-delay: its handler answers each delivery this late
	bin            string
	sinkAddr       string
	keep           bool

	// load
	clients  int
	total    int64         // operations; 0: bounded by duration
	duration time.Duration // 0 with total > 0: no time bound
	rate     float64       // > 0: open model
	timeout  time.Duration // per request
	drain    time.Duration // wait for deliveries after the load

	// traffic
	size    int
	sizeSet bool // -size was given
	dup     float64
	storm   int

	// -sustain: a search for the highest rate the product sustains
	sustain     bool
	rateMin     float64
	rateMax     float64
	rateStep    float64
	refine      int
	stepD       time.Duration
	maxDelivP99 time.Duration

	// -fill: retained state at scale
	fill             int64
	payloadRetention string // with -spawn: the source's payload_retention; "": not written

	// -soak: a long steady load with churn, judged for growth (soak.go)
	soak soakOptions

	// output
	json       bool
	quiet      bool
	out        string
	noFiles    bool
	cpuprofile string
	replot     string // redraw the PNG of this JSON result and exit

	stderr io.Writer
}

// model names the load model for reports and file names.
func (o *options) model() string {
	if o.rate > 0 {
		return fmt.Sprintf("open-r%g", o.rate)
	}
	return fmt.Sprintf("closed-c%d", o.clients)
}

// nodes is the number of intake endpoints the load is spread over.
func (o *options) nodes() int {
	if o.spawn > 0 {
		return o.spawn
	}
	return len(o.targets)
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{stderr: stderr}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var target, size string
	fs.StringVar(&target, "target", "", "intake URL(s) of running nodes, comma-separated (e.g. http://127.0.0.1:8080)")
	fs.StringVar(&o.source, "source", "bench", "source name (URL /in/{source})")
	fs.StringVar(&o.provider, "provider", "standard", "signature scheme: standard, svix, github, stripe")
	fs.StringVar(&o.replayGuard, "replay-guard", "", "with -spawn: the source's replay_guard (body or off; default: the provider's)")
	fs.StringVar(&o.secretFile, "secret-file", "", "the source's secret (with -target)")
	fs.StringVar(&o.adminURL, "admin", "", "admin URL for -cpuprofile with -target (e.g. http://127.0.0.1:7071)")
	fs.StringVar(&o.adminTokenFile, "admin-token-file", "", "admin bearer token file for -cpuprofile with -target")
	fs.IntVar(&o.spawn, "spawn", 0, "start this many nodes (1 to 9; 1 or 3 as operators run them) on loopback instead of -target")
	fs.DurationVar(&o.handlerDelay, "handler-delay", 0, "the sink answers each delivery this long after it arrived, as a slow handler would (a leader starts with 256 delivery workers and grows the pool up to 1,024 while the handler keeps them busy)")
	fs.IntVar(&o.neighbour, "neighbour", 0, "with -spawn: send this many events to a second source, whose handler answers after -neighbour-delay, just before the load (a noisy neighbour for the leader's delivery workers)")
	fs.DurationVar(&o.neighbourDelay, "neighbour-delay", 2*time.Second, "-neighbour: its handler answers each delivery this long after it arrived")
	fs.BoolVar(&o.leaderOnly, "leader-only", false, "with -spawn: send every request to the leader's intake, as the bare stack's in-process clients propose at the leader (default: round robin over the nodes, as a load balancer would)")
	fs.StringVar(&o.bin, "bin", "", "oncehook binary for -spawn (default bin/oncehook under the module root)")
	fs.StringVar(&o.sinkAddr, "sink", "", "with -target: run the delivery sink on this address (where the source forwards)")
	fs.BoolVar(&o.keep, "keep", false, "with -spawn: keep the temporary dir (configs, data, node logs) and print its path")
	fs.IntVar(&o.clients, "c", 64, "concurrent clients (closed model) or most requests in flight (open model)")
	fs.Int64Var(&o.total, "n", 0, "operations to send (a storm counts as one); 0: run for -d")
	fs.DurationVar(&o.duration, "d", 0, "how long to send (default 10s when -n is 0)")
	fs.Float64Var(&o.rate, "rate", 0, "open model: operations per second, latency from the intended send time")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.DurationVar(&o.drain, "drain", 10*time.Second, "after the load, wait this long at most for the sink to receive every claim")
	fs.StringVar(&size, "size", "1KiB", "request body size (B, KiB, MiB, KB, MB)")
	fs.Float64Var(&o.dup, "dup", 0, "fraction of operations that resend an already-acked key (0..1)")
	fs.IntVar(&o.storm, "storm", 1, "send each new key K times concurrently, spread over nodes")
	fs.BoolVar(&o.json, "json", false, "print the JSON result instead of the text report")
	fs.BoolVar(&o.quiet, "q", false, "no progress bar")
	fs.StringVar(&o.out, "out", "", "directory for the JSON result and PNG (default bench/results under the module root)")
	fs.BoolVar(&o.noFiles, "no-files", false, "do not write the JSON result and PNG")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "save a CPU profile of the node (the leader when spawned) for the run to this file")
	fs.StringVar(&o.replot, "replot", "", "redraw the PNG beside this JSON result file and exit")
	fs.BoolVar(&o.sustain, "sustain", false, "search the sustained rate: open-model steps from -rate-min to -rate-max (see -step-d, -refine)")
	fs.Float64Var(&o.rateMin, "rate-min", 0, "-sustain: the first step's rate")
	fs.Float64Var(&o.rateMax, "rate-max", 0, "-sustain: the highest step's rate")
	fs.Float64Var(&o.rateStep, "rate-step", 0, "-sustain: rate increment between steps (default -rate-min)")
	fs.IntVar(&o.refine, "refine", 2, "-sustain: steps halving the interval between the last passing and the first failing rate (0..5)")
	fs.DurationVar(&o.stepD, "step-d", 30*time.Second, "-sustain: how long each step sends")
	fs.DurationVar(&o.maxDelivP99, "max-delivery-p99", 100*time.Millisecond, "-sustain: a step passes only if delivery p99 after the 202 stays under this")
	fs.Int64Var(&o.fill, "fill", 0, "send this many new events (closed model, -size default 256B) and report retained-state cost; needs -spawn 1")
	fs.StringVar(&o.payloadRetention, "payload-retention", "", "with -spawn: write payload_retention = D into the source (e.g. 1s); only for nodes that know the key")
	o.soak.flags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.sizeSet = o.sizeSet || f.Name == "size" })
	if o.replot != "" {
		return o, nil
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.fill > 0 && !o.sizeSet {
		size = "256B"
	}
	if o.size, err = parseSize(size); err != nil {
		return nil, fmt.Errorf("-size: %w", err)
	}
	for t := range strings.SplitSeq(target, ",") {
		if t = strings.TrimSpace(t); t != "" {
			u, err := targetURL(t)
			if err != nil {
				return nil, err
			}
			o.targets = append(o.targets, u)
		}
	}
	if err := o.normalize(); err != nil {
		return nil, err
	}
	return o, nil
}

// normalize fills defaults that depend on other flags and rejects
// combinations that cannot work, naming the flag.
func (o *options) normalize() error {
	switch {
	case o.spawn == 0 && len(o.targets) == 0:
		return errors.New("need -spawn 1|3 or -target URL")
	case o.spawn != 0 && len(o.targets) > 0:
		return errors.New("-spawn and -target exclude each other")
	case o.leaderOnly && o.spawn == 0:
		return errors.New("-leader-only needs -spawn")
	case o.leaderOnly && o.soak.on:
		return errors.New("-leader-only and -soak exclude each other (the soak moves the leader)")
	case o.neighbour < 0 || o.neighbour > 1_000_000:
		return fmt.Errorf("-neighbour %d: want 0..1000000", o.neighbour)
	case o.neighbour > 0 && (o.spawn == 0 || o.soak.on || o.sustain || o.fill > 0):
		return errors.New("-neighbour needs -spawn, and excludes -soak, -sustain and -fill")
	case o.neighbour > 0 && (o.neighbourDelay < 0 || o.neighbourDelay >= 10*time.Second):
		return fmt.Errorf("-neighbour-delay %v: want 0..10s (the handler timeout)", o.neighbourDelay)
	case o.spawn < 0 || o.spawn > 9:
		return fmt.Errorf("-spawn %d: want 1 to 9 (1 or 3 as operators run them)", o.spawn)
	case o.drain < 0:
		return fmt.Errorf("-drain %v: must not be negative", o.drain)
	case len(o.targets) > 0 && o.secretFile == "":
		return errors.New("-target needs -secret-file")
	case o.clients < 1:
		return errors.New("-c must be at least 1")
	case o.total < 0 || o.duration < 0 || o.rate < 0:
		return errors.New("-n, -d and -rate must not be negative")
	case o.dup < 0 || o.dup > 1:
		return fmt.Errorf("-dup %g: want 0..1", o.dup)
	case o.storm < 1 || o.storm > 1000:
		return fmt.Errorf("-storm %d: want 1..1000", o.storm)
	case o.timeout <= 0:
		return errors.New("-timeout must be positive")
	case o.size > 64<<20:
		return errors.New("-size: at most 64MiB")
	}
	if err := o.normalizeSoak(); err != nil {
		return err
	}
	if err := o.normalizeModes(); err != nil {
		return err
	}
	if _, ok := signers[o.provider]; !ok {
		return fmt.Errorf("-provider %q: want one of %s", o.provider, strings.Join(signerNames(), ", "))
	}
	if o.total == 0 && o.duration == 0 {
		o.duration = 10 * time.Second
	}
	if o.cpuprofile != "" {
		if o.duration < time.Second {
			return errors.New("-cpuprofile needs -d of at least 1s (the profile covers -d)")
		}
		if o.spawn == 0 && (o.adminURL == "" || o.adminTokenFile == "") {
			return errors.New("-cpuprofile with -target needs -admin and -admin-token-file")
		}
	}
	root := moduleRoot()
	if o.bin == "" {
		o.bin = filepath.Join(root, "bin", "oncehook")
	}
	if o.out == "" {
		o.out = filepath.Join(root, "bench", "results")
	}
	return nil
}

// targetURL checks an intake URL and returns it as scheme://host:port.
func targetURL(t string) (string, error) {
	u, err := url.Parse(t)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "", fmt.Errorf("-target %q: want http://host:port or https://host:port", t)
	}
	if u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("-target %q: give the node's address only; bench posts to /in/{source}", t)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port), nil
}

// parseSize reads 1024, 1KiB, 4KB, 1MiB, 512B.
func parseSize(s string) (int, error) {
	units := []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"KB", 1000}, {"MB", 1000 * 1000}, {"B", 1}}
	mult := 1
	num := strings.TrimSpace(s)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	if n > (64<<20)/mult {
		return 0, fmt.Errorf("size %q: at most 64MiB", s)
	}
	return n * mult, nil
}

// moduleRoot is the nearest directory above the working directory whose go.mod
// declares module oncehook; "." when there is none.
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			if strings.TrimSpace(first) == "module oncehook" {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "."
		}
		dir = parent
	}
}
