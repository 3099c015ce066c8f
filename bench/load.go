package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// signers are the providers bench can sign for, each with its key where the
// provider's default key rule looks for it (docs/sources.md, "Providers"): the id
// passed to Sign (standard, svix, github headers) or "id" in the body
// (stripe).
var signers = map[string]bool{"standard": true, "svix": true, "github": true, "stripe": true}

func signerNames() []string {
	names := make([]string, 0, len(signers))
	for n := range signers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// kind is what a request is expected to be.
type kind uint8

const (
	kindNew   kind = iota // a key never sent before: 202 expected
	kindDup               // a key already answered 202: 200 expected
	kindStorm             // one of K concurrent copies of a new key: one 202 among them
)

// generator sends the load. Its counters are atomics; each worker records
// into its own recorder, merged when the run ends.
type generator struct {
	o      *options
	env    *env
	scheme providers.Scheme
	body   bodyTemplate
	hosts  []*fasthttp.HostClient // one per node
	uris   []string               // one per node: http://host/in/source
	acked  ackRing
	lat    latRecorder
	match  *ackMatcher // nil: delivery latency after the 2xx not measured
	ledger *keyLedger  // the keys claimed, against the sink's receipts; nil: no sink

	seq     atomic.Int64 // last event sequence number handed out
	tickets atomic.Int64 // operations handed out (including refused tickets)
	started atomic.Int64 // operations started
	done    atomic.Int64 // requests completed, for the progress bar

	start    time.Time
	end      time.Time // zero: no time bound (-n only)
	hardStop time.Time // open model: no request starts after it
}

func newGenerator(o *options, e *env) (*generator, error) {
	scheme, ok := providers.Lookup(o.provider)
	if !ok {
		return nil, errors.New("unknown provider " + o.provider)
	}
	g := &generator{o: o, env: e, scheme: scheme, lat: newLatRecorder()}
	if o.fill > 0 {
		// Millions of operations: per-second histograms and the matcher's
		// slots would grow with them; the fill windows take their place.
		g.lat.noPerSec = true
		g.lat.window = fillWindow(o.fill)
		g.lat.total = o.fill
	}
	g.body = newBodyTemplate(runID(), o.size)
	if _, err := scheme.Sign(g.body.fill(nil, 0, 0), e.secret, time.Now(), g.body.id(0), nil); err != nil {
		return nil, err // a malformed -secret-file shows here, before the clock starts
	}
	conns := o.clients * o.storm
	for _, t := range e.targets {
		host := strings.TrimPrefix(strings.TrimPrefix(t, "http://"), "https://")
		g.hosts = append(g.hosts, &fasthttp.HostClient{
			Addr:                     host,
			IsTLS:                    strings.HasPrefix(t, "https://"),
			MaxConns:                 conns,
			ReadTimeout:              o.timeout,
			WriteTimeout:             o.timeout,
			MaxIdleConnDuration:      time.Second,
			NoDefaultUserAgentHeader: true,
			// A plain dialer: fasthttp's default one starts a process-wide
			// DNS cache goroutine that never ends.
			Dial: func(addr string) (net.Conn, error) {
				return net.DialTimeout("tcp", addr, o.timeout)
			},
		})
		g.uris = append(g.uris, t+"/in/"+o.source)
	}
	return g, nil
}

// close drops idle client connections. fasthttp's per-client cleaner goroutine
// then ends within MaxIdleConnDuration (1s).
func (g *generator) close() {
	for _, h := range g.hosts {
		h.CloseIdleConnections()
	}
}

// runID is the random prefix that makes this run's keys unique.
func runID() string {
	b := make([]byte, 5)
	crand.Read(b)
	return hex.EncodeToString(b)
}

// loadResult is what the load phase measured.
type loadResult struct {
	start   time.Time
	elapsed time.Duration           // from start until the last worker returned
	lat     *hdrhistogram.Histogram // every request
	lat202  *hdrhistogram.Histogram // requests answered 202
	lat200  *hdrhistogram.Histogram // requests answered 200
	rec     recorder                // all workers merged
	ops     int64                   // operations started
	missed  int64                   // open model: operations due before the end but never started

	claimPerSec []Latency   // 202 answers by the second they completed in
	match       *ackMatcher // nil: no delivery latency after the 2xx
	first, last Latency     // -fill: claim latency of the first and last windows
}

func (lr *loadResult) claims() int64 { return lr.rec.accepted }

// begin starts the clock: the run's start, its end and, in the open model,
// its hard stop. Call it once, before run and before anything reads g.start.
func (g *generator) begin() {
	g.start = time.Now()
	if g.o.duration > 0 {
		g.end = g.start.Add(g.o.duration)
	}
	if g.o.rate > 0 {
		g.hardStop = g.start.Add(g.scheduleSpan() + g.o.timeout)
	}
	if g.env.sink != nil {
		if g.o.fill == 0 {
			// Steady state: from the end of the load's first third on.
			g.match = newAckMatcher(g.start.UnixNano(), g.start.Add(g.o.duration/3).UnixNano())
		}
		g.ledger = g.env.sink.begin(g.start, g.body.run, g.match)
	}
}

// run sends the load until -n operations or -d passed (open model: until the
// schedule is done or hardStop), then waits for the workers. Each request is
// bounded by -timeout, so run returns by end + timeout (closed) or by
// hardStop + timeout (open).
func (g *generator) run(ctx context.Context) *loadResult {
	recs := make([]*recorder, g.o.clients)
	var wg sync.WaitGroup
	for i := range recs {
		w := &worker{
			g:    g,
			rec:  &recorder{},
			rng:  rand.New(rand.NewPCG(uint64(i), uint64(g.start.UnixNano()))),
			lats: make([]latSample, 0, latBatch),
		}
		recs[i] = w.rec
		wg.Go(func() {
			if g.o.rate > 0 {
				w.open(ctx)
			} else {
				w.closed(ctx)
			}
			w.flush()
		})
	}
	wg.Wait()
	lr := &loadResult{
		start: g.start, elapsed: time.Since(g.start), ops: g.started.Load(),
		lat: g.lat.all, lat202: g.lat.accepted, lat200: g.lat.dup,
		claimPerSec: g.lat.perSec.summaries(), match: g.match,
	}
	if g.lat.window > 0 {
		lr.first, lr.last = summarize(g.lat.first), summarize(g.lat.last)
	}
	for _, r := range recs {
		lr.rec.merge(r)
	}
	if g.o.rate > 0 {
		lr.missed = max(0, g.scheduled()-lr.ops)
	}
	return lr
}

// scheduled is the number of operations the open model's schedule holds.
func (g *generator) scheduled() int64 {
	n := int64(math.MaxInt64)
	if g.o.duration > 0 {
		n = int64(math.Ceil(g.o.duration.Seconds() * g.o.rate))
	}
	if g.o.total > 0 {
		n = min(n, g.o.total)
	}
	return n
}

// scheduleSpan is how long the open model's schedule lasts.
func (g *generator) scheduleSpan() time.Duration {
	return time.Duration(float64(g.scheduled()) / g.o.rate * float64(time.Second))
}

// due is operation t's intended send time in the open model.
func (g *generator) due(t int64) time.Time {
	return g.start.Add(time.Duration(float64(t) / g.o.rate * float64(time.Second)))
}

// worker is one client: it takes tickets, sends operations and records them.
type worker struct {
	g    *generator
	rec  *recorder
	rng  *rand.Rand
	body []byte
	lats []latSample // latencies not yet flushed into the shared histograms
	t    int64       // the operation being sent (its ticket)

	// One request per node, kept across operations: its URI, method and
	// content type are set once, and each operation sets only the signature
	// headers and the body (the generator's CPU is the machine's too).
	reqs []*fasthttp.Request
	resp fasthttp.Response
}

// closed sends operations back to back until -n or -d is reached.
func (w *worker) closed(ctx context.Context) {
	g := w.g
	for ctx.Err() == nil {
		now := time.Now()
		if !g.end.IsZero() && !now.Before(g.end) {
			return
		}
		t := g.tickets.Add(1) - 1
		if g.o.total > 0 && t >= g.o.total {
			return
		}
		g.started.Add(1)
		w.t = t
		w.op(t, time.Time{})
	}
}

// open takes the next ticket, sleeps until its intended time and sends it;
// latency counts from the intended time, so a late start (every worker busy
// because the server stalled) is charged to the server, as wrk2 does.
func (w *worker) open(ctx context.Context) {
	g := w.g
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	last := g.scheduled()
	for ctx.Err() == nil {
		t := g.tickets.Add(1) - 1
		if t >= last {
			return
		}
		due := g.due(t)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if time.Now().After(g.hardStop) {
			return // the backlog left at hardStop is reported as missed
		}
		g.started.Add(1)
		w.t = t
		w.op(t, due)
	}
}

// op sends operation t: a duplicate of an acked key (-dup), a storm (-storm),
// or one new key. origin is where its latency counts from: the intended send
// time in the open model; zero in the closed model, where the clock starts
// once the request is signed, just before it is sent.
func (w *worker) op(t int64, origin time.Time) {
	g := w.g
	node := int(t % int64(len(g.hosts)))
	if g.o.dup > 0 && w.rng.Float64() < g.o.dup {
		if seq, ok := g.acked.pick(w.rng); ok {
			w.single(kindDup, seq, node, origin)
			return
		}
	}
	seq := g.seq.Add(1)
	if g.o.storm > 1 {
		w.storm(seq, node, origin)
		return
	}
	w.single(kindNew, seq, node, origin)
}

// sign fills w.body for event seq and signs it as the provider would. Signing
// on the fly costs 2-6 µs per request (BenchmarkSign), a few percent of one
// core at 10,000 req/s, and keeps every request's timestamp fresh; the clock
// of the closed model starts after it. It returns the request's origin.
func (w *worker) sign(seq int64, origin time.Time) ([]providers.Header, time.Time, error) {
	g := w.g
	now := time.Now()
	sent := origin
	if sent.IsZero() {
		sent = now
	}
	w.body = g.body.fill(w.body, seq, sent.UnixNano())
	hdrs, err := g.scheme.Sign(w.body, g.env.secret, now, g.body.id(seq), nil)
	if origin.IsZero() {
		origin = time.Now()
	}
	return hdrs, origin, err
}

func (w *worker) single(k kind, seq int64, node int, origin time.Time) {
	hdrs, origin, err := w.sign(seq, origin)
	var out outcome
	if err != nil {
		out = outcome{err: "sign: " + err.Error(), end: time.Now()}
	} else {
		out = w.send(node, hdrs)
	}
	w.record(k, seq, origin, out)
	if k == kindNew && out.code == fasthttp.StatusAccepted {
		w.g.acked.add(seq)
		if w.g.match != nil {
			w.g.match.acked(seq, out.end.UnixNano())
		}
	}
}

// storm sends K copies of one new key at once, to consecutive nodes.
func (w *worker) storm(seq int64, node int, origin time.Time) {
	g := w.g
	hdrs, origin, err := w.sign(seq, origin)
	outs := make([]outcome, g.o.storm)
	if err != nil {
		for i := range outs {
			outs[i] = outcome{err: "sign: " + err.Error(), end: time.Now()}
		}
	} else {
		var wg sync.WaitGroup
		for i := range outs {
			wg.Go(func() { outs[i] = g.send((node+i)%len(g.hosts), w.body, hdrs) })
		}
		wg.Wait()
	}
	accepted := false
	for _, out := range outs {
		w.record(kindStorm, seq, origin, out)
		if out.code == fasthttp.StatusAccepted && !accepted {
			accepted = true
			if g.match != nil {
				g.match.acked(seq, out.end.UnixNano())
			}
		}
	}
	w.rec.storms++
	if stormBad(outs) {
		w.rec.stormBad++
	}
	if accepted {
		g.acked.add(seq)
	}
}

// stormBad reports whether the answers to one storm's copies break
// exactly-once: more than one 202 is a double claim, and every copy answered
// 200 means the key was not new. No 202 among answers some of which failed
// is not a violation: the 202 may be the failed one's (each failure counts
// as unexpected on its own).
func stormBad(outs []outcome) bool {
	accepted, dups := 0, 0
	for _, out := range outs {
		switch out.code {
		case fasthttp.StatusAccepted:
			accepted++
		case fasthttp.StatusOK:
			dups++
		}
	}
	return accepted > 1 || (accepted == 0 && dups == len(outs))
}

// outcome is one request's answer.
type outcome struct {
	code int    // HTTP status; 0 when the request failed
	err  string // transport error class when code is 0
	body string // the start of the body of an answer other than 200/202
	end  time.Time
}

// send POSTs w.body with hdrs to node on the worker's request for that node
// and returns the status. The body is not copied: w.body stays unchanged
// until the answer is in.
func (w *worker) send(node int, hdrs []providers.Header) outcome {
	g := w.g
	if w.reqs == nil {
		w.reqs = make([]*fasthttp.Request, len(g.hosts))
	}
	req := w.reqs[node]
	if req == nil {
		req = new(fasthttp.Request)
		req.SetRequestURI(g.uris[node])
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		w.reqs[node] = req
	}
	for _, h := range hdrs {
		req.Header.Set(h.Name, h.Value)
	}
	req.SetBodyRaw(w.body)
	return g.do(node, req, &w.resp)
}

// send POSTs body with hdrs to node and returns the status.
func (g *generator) send(node int, body []byte, hdrs []providers.Header) outcome {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(g.uris[node])
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	for _, h := range hdrs {
		req.Header.Set(h.Name, h.Value)
	}
	req.SetBody(body)
	return g.do(node, req, resp)
}

// do sends req to node and classifies the answer.
func (g *generator) do(node int, req *fasthttp.Request, resp *fasthttp.Response) outcome {
	err := g.hosts[node].DoTimeout(req, resp, g.o.timeout)
	out := outcome{end: time.Now()}
	if err != nil {
		out.err = errClass(err)
	} else {
		out.code = resp.StatusCode()
		if out.code != fasthttp.StatusOK && out.code != fasthttp.StatusAccepted {
			out.body = answerSample(resp.Body())
		}
	}
	g.done.Add(1)
	return out
}

// errClass shortens a transport error to a few stable classes.
func errClass(err error) string {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout):
		return "timeout"
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return "no free connections"
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "connection closed"
	}
	s := err.Error()
	if strings.Contains(s, "connection refused") {
		return "connection refused"
	}
	if strings.Contains(s, "reset by peer") {
		return "connection reset"
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// record counts one answer to a request for event seq against what its kind
// expected. A 2xx, whatever the kind, says the node holds the key: the key
// is claimed and the sink must receive it.
func (w *worker) record(k kind, seq int64, origin time.Time, out outcome) {
	r := w.rec
	lat := out.end.Sub(origin)
	sec := int(out.end.Sub(w.g.start) / time.Second)
	w.lats = append(w.lats, latSample{us: micros(lat), code: out.code, sec: int32(sec), t: w.t})
	if len(w.lats) >= latBatch {
		w.flush()
	}
	for len(r.perSec) <= sec {
		r.perSec = append(r.perSec, Second{T: len(r.perSec)})
	}
	b := &r.perSec[sec]
	r.requests++
	switch k {
	case kindNew:
		r.newSent++
	case kindDup:
		r.dupSent++
	case kindStorm:
		r.stormSent++
	}
	if out.code == 0 {
		r.failed++
		r.addErr(out.err)
		b.Other++
		return
	}
	r.addCode(out.code)
	switch out.code {
	case fasthttp.StatusAccepted:
		w.g.ledger.claim(seq)
		r.accepted++
		b.Accepted++
		if k == kindDup {
			r.dupAsNew++
		}
	case fasthttp.StatusOK:
		w.g.ledger.claim(seq)
		r.duplicates++
		b.Duplicate++
		switch k {
		case kindDup:
			r.dupOK++
		case kindNew:
			r.newAsDup++
		}
	default:
		b.Other++
		r.addErr(fmt.Sprintf("%d %s", out.code, out.body))
	}
}

// answerSample is the start of an unexpected answer's body, on one line.
func answerSample(body []byte) string {
	s := strings.Join(strings.Fields(string(body[:min(len(body), 100)])), " ")
	return strings.ToValidUTF8(s, "?")
}

// flush moves the worker's buffered latencies into the shared histogram.
func (w *worker) flush() {
	w.g.lat.record(w.lats)
	w.lats = w.lats[:0]
}

// latBatch is how many latencies a worker buffers before it flushes them.
const latBatch = 256

// latSample is one request's latency and answer.
type latSample struct {
	us   int64
	code int
	sec  int32 // second of the run it completed in
	t    int64 // its operation's ticket
}

// latRecorder holds the run's latency histograms; workers flush into it in
// batches so that it is locked a few hundred times per second, not per request.
type latRecorder struct {
	mu       sync.Mutex
	all      *hdrhistogram.Histogram
	accepted *hdrhistogram.Histogram // 202 answers: new claims
	dup      *hdrhistogram.Histogram // 200 answers: duplicates
	perSec   secHists                // 202 answers by the second they completed in

	// -fill: the claim latency of the first and the last window operations,
	// and of the 202s since the last checkpoint, instead of perSec.
	noPerSec         bool
	window, total    int64
	first, last, cur *hdrhistogram.Histogram
}

func newLatRecorder() latRecorder {
	return latRecorder{all: newHist(), accepted: newHist(), dup: newHist(), first: newHist(), last: newHist(), cur: newHist()}
}

func (l *latRecorder) record(samples []latSample) {
	l.mu.Lock()
	for _, s := range samples {
		recordValue(l.all, s.us)
		switch s.code {
		case fasthttp.StatusAccepted:
			recordValue(l.accepted, s.us)
			if !l.noPerSec {
				l.perSec.record(int(s.sec), s.us)
			}
			if l.window > 0 {
				recordValue(l.cur, s.us)
				switch {
				case s.t < l.window:
					recordValue(l.first, s.us)
				case s.t >= l.total-l.window:
					recordValue(l.last, s.us)
				}
			}
		case fasthttp.StatusOK:
			recordValue(l.dup, s.us)
		}
	}
	l.mu.Unlock()
}

// interval returns the claim latency since the previous call and starts a
// new interval (-fill checkpoints).
func (l *latRecorder) interval() Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := summarize(l.cur)
	l.cur.Reset()
	return s
}

// recorder holds one worker's counters; merge adds them up.
type recorder struct {
	requests   int64
	failed     int64 // requests without an answer
	codes      map[int]int64
	errs       map[string]int64 // failures and unexpected answers, by class
	perSec     []Second
	newSent    int64
	dupSent    int64
	stormSent  int64
	accepted   int64 // 202 answers
	duplicates int64 // 200 answers
	dupOK      int64 // duplicates answered 200
	dupAsNew   int64 // duplicates answered 202: a double claim
	newAsDup   int64 // new keys answered 200: a key that was not new
	storms     int64
	stormBad   int64 // storms without exactly one 202
}

func (r *recorder) addCode(c int) {
	if r.codes == nil {
		r.codes = make(map[int]int64)
	}
	r.codes[c]++
}

const maxErrClasses = 20

func (r *recorder) addErr(e string) {
	if r.errs == nil {
		r.errs = make(map[string]int64)
	}
	if _, ok := r.errs[e]; !ok && len(r.errs) >= maxErrClasses {
		e = "other"
	}
	r.errs[e]++
}

func (r *recorder) merge(o *recorder) {
	r.requests += o.requests
	r.failed += o.failed
	for c, n := range o.codes {
		r.addCode(c)
		r.codes[c] += n - 1
	}
	for e, n := range o.errs {
		r.addErr(e)
		r.errs[e] += n - 1
	}
	for i, s := range o.perSec {
		for len(r.perSec) <= i {
			r.perSec = append(r.perSec, Second{T: len(r.perSec)})
		}
		r.perSec[i].Accepted += s.Accepted
		r.perSec[i].Duplicate += s.Duplicate
		r.perSec[i].Other += s.Other
	}
	r.newSent += o.newSent
	r.dupSent += o.dupSent
	r.stormSent += o.stormSent
	r.accepted += o.accepted
	r.duplicates += o.duplicates
	r.dupOK += o.dupOK
	r.dupAsNew += o.dupAsNew
	r.newAsDup += o.newAsDup
	r.storms += o.storms
	r.stormBad += o.stormBad
}

// ackRing remembers recently acked event numbers for -dup to resend.
type ackRing struct {
	mu   sync.Mutex
	seqs []int64
	next int
}

const ackRingSize = 1 << 16

func (a *ackRing) add(seq int64) {
	a.mu.Lock()
	if len(a.seqs) < ackRingSize {
		a.seqs = append(a.seqs, seq)
	} else {
		a.seqs[a.next] = seq
		a.next = (a.next + 1) % ackRingSize
	}
	a.mu.Unlock()
}

func (a *ackRing) pick(rng *rand.Rand) (int64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seqs) == 0 {
		return 0, false
	}
	return a.seqs[rng.IntN(len(a.seqs))], true
}

// bodyTemplate is a JSON body of the requested size with fixed-width slots
// for the event number and the send time, so building a body is a copy and
// two digit writes:
//
//	{"id":"evt_<run>_<12 digits>","type":"bench.event","sent_ns":<19 digits>,"pad":"xx..."}
type bodyTemplate struct {
	run     string
	b       []byte
	seqOff  int
	sentOff int
}

const (
	seqDigits  = 12
	sentDigits = 19
)

func newBodyTemplate(run string, size int) bodyTemplate {
	head := `{"id":"evt_` + run + `_`
	mid := `","type":"bench.event","sent_ns":`
	tail1, tail2 := `,"pad":"`, `"}`
	fixed := len(head) + seqDigits + len(mid) + sentDigits + len(tail1) + len(tail2)
	var b []byte
	b = append(b, head...)
	b = append(b, strings.Repeat("0", seqDigits)...)
	b = append(b, mid...)
	b = append(b, strings.Repeat("0", sentDigits)...)
	b = append(b, tail1...)
	b = append(b, strings.Repeat("x", max(0, size-fixed))...)
	b = append(b, tail2...)
	return bodyTemplate{run: run, b: b, seqOff: len(head), sentOff: len(head) + seqDigits + len(mid)}
}

// fill writes the body of event seq sent at sentNs into dst.
func (t bodyTemplate) fill(dst []byte, seq, sentNs int64) []byte {
	dst = append(dst[:0], t.b...)
	putDigits(dst[t.seqOff:t.seqOff+seqDigits], seq)
	putDigits(dst[t.sentOff:t.sentOff+sentDigits], sentNs)
	return dst
}

// id is event seq's delivery id (and the body's "id").
func (t bodyTemplate) id(seq int64) string {
	b := make([]byte, 0, 4+len(t.run)+1+seqDigits)
	b = append(b, "evt_"...)
	b = append(b, t.run...)
	b = append(b, '_')
	b = append(b, strings.Repeat("0", seqDigits)...)
	putDigits(b[len(b)-seqDigits:], seq)
	return string(b)
}

// putDigits writes v zero-padded into all of dst (v must fit).
func putDigits(dst []byte, v int64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = byte('0' + v%10)
		v /= 10
	}
}
