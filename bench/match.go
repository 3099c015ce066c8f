package main

import (
	"sync"
	"sync/atomic"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// ackMatcher pairs, by event number, the moment the generator got an event's
// 202 with the moment the sink received its first delivery: the delay a
// provider's event spends between "accepted" and "in the handler's hands"
// (delivery latency after the 2xx). Either side may come first: on loopback
// the forwarder can deliver before the 202 has reached the generator. Each
// event has one slot; the first side stores its time with a compare-and-swap
// (the 2xx as a positive unix ns, the receipt as a negative one) and the
// second side, finding the slot taken, records the pair. So each pair is
// recorded exactly once and the hot path takes a lock only to record.
type ackMatcher struct {
	origin int64 // unix ns of the load's start; per-second buckets count from it
	steady int64 // unix ns from which deliveries also go into the steady histogram

	chunks [maxMatchChunks]atomic.Pointer[matchChunk]
	grow   sync.Mutex // serializes chunk allocation

	mu        sync.Mutex // guards the fields below
	all       *hdrhistogram.Histogram
	steadyH   *hdrhistogram.Histogram // deliveries that arrived from steady on
	perSec    secHists
	beforeAck int64 // deliveries that arrived before the generator saw the 202
}

const (
	matchChunkBits = 16
	maxMatchChunks = (1 << 30) >> matchChunkBits // event numbers below 2^30, as the sink's
)

type matchChunk [1 << matchChunkBits]atomic.Int64

// newAckMatcher pairs the events of a load that started at origin (unix ns);
// deliveries from steady on are also summarized on their own, the load's
// steady state without its warm-up.
func newAckMatcher(origin, steady int64) *ackMatcher {
	return &ackMatcher{origin: origin, steady: steady, all: newHist(), steadyH: newHist()}
}

// slot returns event seq's slot, allocating its chunk on first use; nil when
// seq is out of range.
func (m *ackMatcher) slot(seq int64) *atomic.Int64 {
	if seq < 0 || seq >= maxMatchChunks<<matchChunkBits {
		return nil
	}
	i := seq >> matchChunkBits
	c := m.chunks[i].Load()
	if c == nil {
		m.grow.Lock()
		if c = m.chunks[i].Load(); c == nil {
			c = new(matchChunk)
			m.chunks[i].Store(c)
		}
		m.grow.Unlock()
	}
	return &c[seq&(1<<matchChunkBits-1)]
}

// acked notes that event seq was answered 202 at unix ns at.
func (m *ackMatcher) acked(seq, at int64) {
	s := m.slot(seq)
	if s == nil || s.CompareAndSwap(0, at) {
		return
	}
	if recv := -s.Load(); recv > 0 {
		m.record(recv, recv-at)
	}
}

// received notes the first delivery of event seq at unix ns at.
func (m *ackMatcher) received(seq, at int64) {
	s := m.slot(seq)
	if s == nil || s.CompareAndSwap(0, -at) {
		return
	}
	if ack := s.Load(); ack > 0 {
		m.record(at, at-ack)
	}
}

// record adds one pair: received at recv, lat ns after the 2xx (negative
// when the delivery came first; recorded as the histogram's floor).
func (m *ackMatcher) record(recv, lat int64) {
	us := lat / 1000
	m.mu.Lock()
	if lat < 0 {
		m.beforeAck++
		us = 0
	}
	recordValue(m.all, us)
	if recv >= m.steady {
		recordValue(m.steadyH, us)
	}
	if recv >= m.origin {
		m.perSec.record(int((recv-m.origin)/1e9), us)
	}
	m.mu.Unlock()
}

// snapshot copies the histograms.
func (m *ackMatcher) snapshot() (all *hdrhistogram.Histogram, steady Latency, perSec []Latency, beforeAck int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return hdrhistogram.Import(m.all.Export()), summarize(m.steadyH), m.perSec.summaries(), m.beforeAck
}

// secHists is one histogram per second of the run, at two significant digits
// (1 % resolution, 20 KiB each): enough for a per-second p50 and p99.
type secHists []*hdrhistogram.Histogram

func (s *secHists) record(sec int, us int64) {
	if sec < 0 {
		return
	}
	for len(*s) <= sec {
		*s = append(*s, nil)
	}
	h := (*s)[sec]
	if h == nil {
		h = hdrhistogram.New(histMin, histMax, 2)
		(*s)[sec] = h
	}
	recordValue(h, us)
}

// summaries summarizes each second; a second without samples is zero.
func (s secHists) summaries() []Latency {
	out := make([]Latency, len(s))
	for i, h := range s {
		if h != nil {
			out[i] = summarize(h)
		}
	}
	return out
}
