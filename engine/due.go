package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The due index, by source (format 9). A key is
//
//	len(source) (2 bytes) source time(NextAttemptAt) key
//
// so each source's due events are one run of the bucket, oldest first, and
// a lease can take from each source separately: it merges the runs by
// (time, key), which is the order the single time-ordered index of older
// formats gave, and stops taking from a source when the lease's quota for it
// is spent (Command.Quotas). The forwarder uses that to keep one source's
// backlog from holding every worker, and a throttled source from holding up
// the others (docs/architecture.md, Delivery).
//
// Files written by format 8 and older hold due keys without the source; Open
// rewrites them (migrateDue) before it stamps the file.

// formatDueBySource is the first format with the due index by source.
const formatDueBySource = 9

// appendDueKey appends the due index key of an event of source due at t.
func appendDueKey(dst []byte, source string, t int64, key []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(source)))
	dst = append(dst, source...)
	return append(appendTime(dst, t), key...)
}

// dk returns the scratch due key of an event of source due at t.
func (a *applier) dk(source string, t int64, key string) []byte {
	a.kbuf = appendDueKey(a.kbuf[:0], source, t, strBytes(key))
	return a.kbuf
}

// splitDueKey parses a due index key; ok is false for a malformed one.
func splitDueKey(k []byte) (source []byte, t int64, key []byte, ok bool) {
	if len(k) < 2 {
		return nil, 0, nil, false
	}
	n := int(binary.BigEndian.Uint16(k))
	if n == 0 || len(k) < 2+n+9 {
		return nil, 0, nil, false
	}
	rest := k[2+n:]
	return k[2 : 2+n], timeOf(rest), rest[8:], true
}

// dueRunPrefix returns the prefix shared by the due keys of source.
func dueRunPrefix(source []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(source))), source...)
}

// afterPrefix returns the smallest key greater than every key that starts
// with p, or nil when there is none (p is all 0xff).
func afterPrefix(p []byte) []byte {
	q := bytes.Clone(p)
	for i := len(q) - 1; i >= 0; i-- {
		if q[i] < 0xff {
			q[i]++
			return q[:i+1]
		}
	}
	return nil
}

// dueRuns calls fn with the first key of each source's run in the due
// index, in key order; fn may move c within the run. A malformed key ends
// the walk with ErrCorrupt.
func dueRuns(c *bolt.Cursor, fn func(first []byte) error) error {
	for k, _ := c.First(); k != nil; {
		src, _, _, ok := splitDueKey(k)
		if !ok {
			return fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(k))
		}
		next := afterPrefix(dueRunPrefix(src))
		if err := fn(k); err != nil {
			return err
		}
		if next == nil {
			return nil
		}
		k, _ = c.Seek(next)
	}
	return nil
}

// dueRun is one source's run of the due index during a lease.
type dueRun struct {
	c      *bolt.Cursor
	prefix []byte
	k      []byte // current entry; its time and event key below
	t      int64
	key    []byte
	quota  int // events this lease may still take from it; -1: no quota
	hard   bool
}

// next moves to the run's next entry; false at the run's end.
func (r *dueRun) next() (bool, error) {
	k, _ := r.c.Next()
	if k == nil || !bytes.HasPrefix(k, r.prefix) {
		return false, nil
	}
	return r.set(k)
}

func (r *dueRun) set(k []byte) (bool, error) {
	_, t, key, ok := splitDueKey(k)
	if !ok {
		return false, fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(k))
	}
	r.k, r.t, r.key = k, t, key
	return true, nil
}

// before orders runs by their current entry: time, then key.
func (r *dueRun) before(o *dueRun) bool {
	if r.t != o.t {
		return r.t < o.t
	}
	return bytes.Compare(r.key, o.key) < 0
}

// runHeap is a min-heap of runs by their current entry.
type runHeap []*dueRun

func (h *runHeap) push(r *dueRun) {
	*h = append(*h, r)
	s := *h
	for i := len(s) - 1; i > 0; {
		j := (i - 1) / 2
		if !s[i].before(s[j]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}

func (h *runHeap) pop() *dueRun {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = nil
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].before(s[m]) {
			m = l
		}
		if r := l + 1; r < n && s[r].before(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// leaseLimits are what a lease may take: max events in all, quotas by
// source and share for the sources without one (Command.Quotas, Share), and
// spare of max that only events within their quotas may take
// (Command.Spare).
type leaseLimits struct {
	max, share, spare int
	quotas            []Quota
	// paused holds a record for each paused source, whose run is passed
	// over (pause.go); nil: none is.
	paused *bolt.Bucket
}

// dueMerge walks the due index's runs oldest first, by (time, key), up to
// now: the order of a lease. Quotas limit each source's share (validQuotas
// has checked them; share is the quota of a source without one): a run
// whose quota is spent is set aside, and the runs set aside that are not
// hard come back, oldest first again, once the other runs are spent, up to
// max - spare events in all. take reports whether it took the entry (which
// then counts against its source's quota and max).
//
// It returns the sources with entries due by now that it did not take: those
// left when it reached its limit, and those set aside as hard.
func dueMerge(b *bolt.Bucket, now int64, l leaseLimits, take func(src []byte, t int64, key []byte) (took bool, err error)) ([]string, error) {
	quotas, share := l.quotas, l.share
	var h, aside, hard runHeap
	err := dueRuns(b.Cursor(), func(first []byte) error {
		src, _, _, _ := splitDueKey(first)
		if l.paused != nil && l.paused.Get(src) != nil {
			return nil // a paused source's events wait in its run
		}
		r := &dueRun{c: b.Cursor(), prefix: dueRunPrefix(src), quota: -1}
		if share > 0 {
			r.quota = share
		}
		r.c.Seek(first)
		if _, err := r.set(first); err != nil {
			return err
		}
		if r.t > now {
			return nil
		}
		if q, ok := quotaOf(quotas, src); ok {
			r.quota, r.hard = q.Max, q.Hard
		}
		switch {
		case r.quota == 0 && r.hard:
			hard = append(hard, r)
		case r.quota == 0:
			aside.push(r)
		default:
			h.push(r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	taken, limit := 0, l.max
	for pass := 0; pass < 2; pass++ {
		if taken >= limit {
			return waiting(now, h, aside, hard), nil
		}
		for len(h) > 0 {
			r := h.pop()
			if r.t > now {
				continue // the rest of this run is later still
			}
			src, _, _, _ := splitDueKey(r.k)
			took, err := take(src, r.t, r.key)
			if err != nil {
				return nil, err
			}
			if took {
				taken++
			}
			ok, err := r.next()
			if err != nil {
				return nil, err
			}
			switch {
			case !ok:
			case took && r.quota == 1 && r.hard:
				hard = append(hard, r)
			case took && r.quota == 1:
				aside.push(r)
			default:
				if took && r.quota > 0 {
					r.quota--
				}
				h.push(r)
			}
			if taken >= limit {
				return waiting(now, h, aside, hard), nil
			}
		}
		// Every run with quota left is spent: the soft ones set aside take
		// what is left, without a quota, but for the spare workers.
		limit = l.max - l.spare
		h, aside = aside, nil
		for _, r := range h {
			r.quota = -1
		}
	}
	return waiting(now, hard), nil
}

// waiting returns the sources, sorted, of the runs whose current entry is
// due by now.
func waiting(now int64, hs ...runHeap) []string {
	var out []string
	for _, h := range hs {
		for _, r := range h {
			if r.t <= now {
				src, _, _, _ := splitDueKey(r.k)
				out = append(out, string(src))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// quotaOf returns the quota of source in quotas (sorted by source).
func quotaOf(quotas []Quota, source []byte) (Quota, bool) {
	i, ok := slices.BinarySearchFunc(quotas, source, func(q Quota, s []byte) int { return strings.Compare(q.Source, bytesStr(s)) })
	if !ok {
		return Quota{}, false
	}
	return quotas[i], true
}

// validLeases checks a lease's lengths by source: sorted by source, each
// once, each a valid name with a length a lease may have.
func validLeases(ls []LeaseLength) bool {
	if len(ls) > MaxQuotas {
		return false
	}
	for i, l := range ls {
		if !validKey(l.Source) || l.For <= 0 || l.For > maxDuration {
			return false
		}
		if i > 0 && ls[i-1].Source >= l.Source {
			return false
		}
	}
	return true
}

// leaseLengthOf finds source's length in ls (sorted by source).
func leaseLengthOf(ls []LeaseLength, source string) (int64, bool) {
	i, ok := slices.BinarySearchFunc(ls, source, func(l LeaseLength, s string) int { return strings.Compare(l.Source, s) })
	if !ok {
		return 0, false
	}
	return ls[i].For, true
}

// validQuotas checks a lease's quotas: sorted by source, each once, each a
// valid name with a quota of at least 0.
func validQuotas(qs []Quota) bool {
	if len(qs) > MaxQuotas {
		return false
	}
	for i, q := range qs {
		if !validKey(q.Source) || q.Max < 0 || q.Max > maxQuota {
			return false
		}
		if i > 0 && qs[i-1].Source >= q.Source {
			return false
		}
	}
	return true
}

// firstDue returns the time of the oldest due entry of the sources not
// skipped (hard quotas of 0, and those with a record in paused), and whether
// there is one. A malformed key counts as due at the earliest time: the
// lease reports it.
func firstDue(b, paused *bolt.Bucket, skip []Quota) (int64, bool) {
	var first int64
	found := false
	err := dueRuns(b.Cursor(), func(k []byte) error {
		src, t, _, _ := splitDueKey(k)
		if q, ok := quotaOf(skip, src); ok && q.Hard && q.Max == 0 {
			return nil
		}
		if paused != nil && paused.Get(src) != nil {
			return nil
		}
		if !found || t < first {
			first, found = t, true
		}
		return nil
	})
	if err != nil {
		return -maxTime, true
	}
	return first, found
}

// runLast moves c to the last key of the run that starts with prefix (the
// run is not empty) and returns it.
func runLast(c *bolt.Cursor, prefix []byte) []byte {
	var k []byte
	if end := afterPrefix(prefix); end == nil {
		k, _ = lastKey(c)
	} else {
		k, _ = seekBefore(c, end)
	}
	return k
}

// lastDue returns the time of the latest due entry, and whether there is
// one; a malformed key counts as the latest possible.
func lastDue(b *bolt.Bucket) (int64, bool) {
	var last int64
	found := false
	c := b.Cursor()
	err := dueRuns(c, func(k []byte) error {
		src, _, _, _ := splitDueKey(k)
		lk := runLast(c, dueRunPrefix(src))
		_, t, _, ok := splitDueKey(lk)
		if !ok {
			return fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(lk))
		}
		if !found || t > last {
			last, found = t, true
		}
		return nil
	})
	if err != nil {
		return maxTime, true
	}
	return last, found
}

// dueItem is one due entry: its source, time and event key.
type dueItem struct {
	src string
	t   int64
	key string
}

// dueBeyond returns the due entries later than limit, walking each source's
// run from its end backwards, so its cost is the entries it returns.
func dueBeyond(b *bolt.Bucket, limit int64) ([]dueItem, error) {
	var items []dueItem
	c := b.Cursor()
	err := dueRuns(c, func(first []byte) error {
		src, _, _, _ := splitDueKey(first)
		prefix := dueRunPrefix(src)
		for k := runLast(c, prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = prevKey(c, k) {
			_, t, key, ok := splitDueKey(k)
			if !ok {
				return fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(k))
			}
			if t <= limit {
				break
			}
			items = append(items, dueItem{string(src), t, string(key)})
		}
		return nil
	})
	return items, err
}

// countPending writes the pending counters ('p' source) of a file of
// format 8 or older, which has none: one walk of the pending range of the
// states index (whose values are the sources). It runs with migrateDue.
func countPending(tx *bolt.Tx) error {
	n := map[string]int64{}
	c := tx.Bucket(bStates).Cursor()
	for k, src := c.Seek([]byte{byte(StatePending)}); k != nil && k[0] == byte(StatePending); k, src = c.Next() {
		n[string(src)]++
	}
	counters := tx.Bucket(bCounters)
	for _, src := range sortedKeys(n) {
		k := append([]byte{counterPending}, src...)
		if err := counters.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n[src]))); err != nil {
			return err
		}
	}
	return nil
}

// migrateDue rewrites a due index of format 8 or older (time key, no
// source) in the per-source layout. Every entry's source is its event's. It
// runs once, when a binary of format 9 or newer first opens the file, in the
// transaction that stamps it.
func migrateDue(tx *bolt.Tx) error {
	due, events := tx.Bucket(bDue), tx.Bucket(bEvents)
	if due == nil || events == nil {
		return nil
	}
	type old struct {
		k   []byte
		src string
	}
	var olds []old
	c := due.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) < 9 {
			return fmt.Errorf("%w: due index key %x", ErrCorrupt, clip(k))
		}
		v := events.Get(k[8:])
		if v == nil {
			return fmt.Errorf("%w: due index names missing event %q", ErrCorrupt, clip(k[8:]))
		}
		var ev Event
		if _, err := decodeRecord(k[8:], v, &ev); err != nil {
			return err
		}
		olds = append(olds, old{bytes.Clone(k), ev.Source})
	}
	if len(olds) == 0 {
		return nil
	}
	for _, o := range olds {
		if err := due.Delete(o.k); err != nil {
			return err
		}
	}
	news := make([][]byte, len(olds))
	for i, o := range olds {
		news[i] = appendDueKey(nil, o.src, timeOf(o.k), o.k[8:])
	}
	slices.SortFunc(news, bytes.Compare) // appended in key order (see keyOrder)
	due.FillPercent = appendFill
	for _, k := range news {
		if err := due.Put(k, empty); err != nil {
			return err
		}
	}
	return nil
}
