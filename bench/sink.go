package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// sink is the nodes' handler during a run: it answers 200 at once and records,
// per delivery, the latency from the request's send time (sent_ns in the body,
// written by the generator) to its arrival, and how often each key arrived.
type sink struct {
	ln     net.Listener
	delay  time.Duration // each answer waits this long: a slow handler (-handler-delay)
	srv    *fasthttp.Server
	served chan error
	origin atomic.Int64 // unix ns of the load's start; buckets count from it

	mu         sync.Mutex // guards the fields below
	lat        *hdrhistogram.Histogram
	match      *ackMatcher       // nil: no pairing with the generator's 2xx
	runKey     []byte            // "evt_<run>_": keys of this run are counted in ledger
	oldRuns    [][]byte          // runKeys of earlier runs (-sustain steps): their late deliveries are stale
	stale      int64             // deliveries of an earlier run's keys
	ledger     *keyLedger        // this run's keys: claimed by the generator, received here
	uniqSeqs   int64             // distinct keys of this run received, claimed or not
	keys       map[string]uint32 // any other Idempotency-Key -> times received
	deliveries int64
	repeats    int64 // deliveries of a key already received
	noSentNs   int64 // bodies without a readable sent_ns
	perSec     []int64
	perSecNew  []int64 // first deliveries of this run's keys, by second
}

// sinkSnapshot is a copy of the sink's counters.
type sinkSnapshot struct {
	lat        *hdrhistogram.Histogram
	unique     int64 // distinct keys received, claimed or not, of this run or of none
	claimed    int64 // keys of this run the node claimed (keyLedger)
	delivered  int64 // of them, the keys received
	deliveries int64
	repeats    int64
	noSentNs   int64
	perSec     []int64
	perSecNew  []int64
	stale      int64
}

func startSink(addr string, delay time.Duration) (*sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sink listen %s: %w", addr, err)
	}
	s := &sink{ln: ln, delay: delay, served: make(chan error, 1), lat: newHist(), keys: make(map[string]uint32)}
	s.srv = &fasthttp.Server{
		Handler:         s.handle,
		Name:            "oncehook-bench-sink",
		ReadTimeout:     30 * time.Second,
		IdleTimeout:     30 * time.Second,
		CloseOnShutdown: true,
		// A delivery is as large as the body the generator sent, up to
		// the 64 MiB max_body allows; fasthttp's default (4 MiB) would
		// refuse larger ones and turn a -size run into a retry storm.
		MaxRequestBodySize: 65 << 20,
		// Idle workers, and after Shutdown the pool's cleaner, end within 1s.
		MaxIdleWorkerDuration: time.Second,
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() }

// begin sets the time the per-second buckets count from and the run whose
// keys ("<source>:evt_<run>_<seq>") the sink counts by event number, in the
// run's keyLedger: two bits per event instead of a map of strings, which
// would cost this process (the machine the nodes run on) an allocation per
// delivery and a growing map for its garbage collector to scan. It starts
// every count afresh (a -sustain step is a run of its own); deliveries of an
// earlier run's keys that arrive later are counted as stale only. match,
// when not nil, is told of each key's first delivery. It returns the run's
// ledger, where the generator notes the keys the node claimed.
func (s *sink) begin(t time.Time, run string, match *ackMatcher) *keyLedger {
	l := newKeyLedger()
	s.mu.Lock()
	if len(s.runKey) > 0 {
		s.oldRuns = append(s.oldRuns, s.runKey)
	}
	s.runKey = []byte("evt_" + run + "_")
	s.match = match
	s.lat = newHist()
	s.ledger, s.uniqSeqs, s.keys = l, 0, make(map[string]uint32)
	s.deliveries, s.repeats, s.noSentNs, s.stale = 0, 0, 0, 0
	s.perSec, s.perSecNew = nil, nil
	s.origin.Store(t.UnixNano())
	s.mu.Unlock()
	return l
}

// staleKey reports whether key belongs to an earlier run.
func (s *sink) staleKey(key []byte) bool {
	for _, k := range s.oldRuns {
		if bytes.Contains(key, k) {
			return true
		}
	}
	return false
}

// runSeq returns the event number of a key of this run, or false.
func (s *sink) runSeq(key []byte) (int, bool) {
	if len(s.runKey) == 0 || len(key) < len(s.runKey)+seqDigits {
		return 0, false
	}
	digits := key[len(key)-seqDigits:]
	if !bytes.HasSuffix(key[:len(key)-seqDigits], s.runKey) {
		return 0, false
	}
	v := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, v < maxSeq
}

var sentNsField = []byte(`"sent_ns":`)

func (s *sink) handle(ctx *fasthttp.RequestCtx) {
	now := time.Now().UnixNano()
	sent, ok := parseSentNs(ctx.PostBody())
	key := ctx.Request.Header.Peek("Idempotency-Key")
	origin := s.origin.Load()

	s.mu.Lock()
	if len(s.oldRuns) > 0 && s.staleKey(key) {
		s.stale++
		s.mu.Unlock()
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	s.deliveries++
	if seq, ok := s.runSeq(key); ok {
		if s.ledger.receive(int64(seq)) {
			s.uniqSeqs++
			if s.match != nil {
				s.match.received(int64(seq), now)
			}
			if origin > 0 && now >= origin {
				sec := int((now - origin) / int64(time.Second))
				for len(s.perSecNew) <= sec {
					s.perSecNew = append(s.perSecNew, 0)
				}
				s.perSecNew[sec]++
			}
		} else {
			s.repeats++
		}
	} else if n := s.keys[string(key)]; n > 0 {
		s.repeats++
		s.keys[string(key)] = n + 1
	} else {
		s.keys[string(key)] = 1
	}
	if ok {
		recordMicros(s.lat, time.Duration(now-sent))
	} else {
		s.noSentNs++
	}
	if origin > 0 && now >= origin {
		sec := int((now - origin) / int64(time.Second))
		for len(s.perSec) <= sec {
			s.perSec = append(s.perSec, 0)
		}
		s.perSec[sec]++
	}
	s.mu.Unlock()
	if s.delay > 0 {
		// The arrival is recorded above; the answer comes as late as a slow
		// handler's would, holding the node's worker meanwhile.
		time.Sleep(s.delay)
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// parseSentNs finds "sent_ns":<digits> in a body.
func parseSentNs(body []byte) (int64, bool) {
	i := bytes.Index(body, sentNsField)
	if i < 0 {
		return 0, false
	}
	var v int64
	n := 0
	for _, c := range body[i+len(sentNsField):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
		n++
	}
	return v, n > 0 && n <= 19
}

// pending is the number of keys the node claimed in this run that the sink
// has not received.
func (s *sink) pending() int64 {
	s.mu.Lock()
	l := s.ledger
	s.mu.Unlock()
	return l.pending()
}

func (s *sink) snapshot() sinkSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	claimed, delivered := s.ledger.counts()
	return sinkSnapshot{
		lat:        hdrhistogram.Import(s.lat.Export()),
		unique:     s.uniqSeqs + int64(len(s.keys)),
		claimed:    claimed,
		delivered:  delivered,
		deliveries: s.deliveries,
		repeats:    s.repeats,
		noSentNs:   s.noSentNs,
		perSec:     append([]int64(nil), s.perSec...),
		perSecNew:  append([]int64(nil), s.perSecNew...),
		stale:      s.stale,
	}
}

// pending is the number of claimed keys not received when s was taken.
func (s sinkSnapshot) pending() int64 { return max(0, s.claimed-s.delivered) }

func (s *sink) close() error {
	err := s.srv.Shutdown()
	// Shutdown closes the listeners Serve has registered; one closed right
	// after start may not be yet, so close it here as well.
	if cerr := s.ln.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	if serr := <-s.served; serr != nil && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
