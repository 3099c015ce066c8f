package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// Time and duration bounds. Keeping |times| below 2^62 and durations below
// 2^61 makes every sum the engine forms (Now+Retention+bucket width,
// Now+LeaseFor, Now+RetryIn) free of overflow. 2^62 ns is the year 2116.
const (
	maxTime     = 1 << 62
	maxDuration = 1 << 61
)

// signBit flips the sign of a time so that big-endian bytes of signed times
// sort in time order.
const signBit = 1 << 63

// Key prefixes in the counters and expiry buckets.
const (
	counterState  = 's' // 's' state -> number of events in that state
	counterSource = 'c' // 'c' source -> number of events of that source
	// 'p' source -> pending events of that source, due or held (format 9)
	counterPending = 'p'
	expiryEvent    = 'e' // 'e' key: an event expiring with the bucket
	expiryOrder    = 'o' // 'o' object: an order-guard entry expiring with the bucket
)

// empty is the value of pure index entries. It is never modified.
var empty = []byte{}

// arena hands out fresh, never reused memory for the values given to
// bbolt.Put, which keeps references to them until the commit (bbolt issue
// #72). Carving values out of shared chunks makes a claim cost a few bump
// allocations instead of one heap allocation per value. Keys need no arena:
// bbolt v1.5 copies a key on Put (bucket.go, cloneBytes) and Get and Delete do
// not keep it.
type arena struct{ buf []byte }

const arenaChunk = 32 << 10

// make returns an empty slice with capacity n whose memory nothing else uses.
func (a *arena) make(n int) []byte {
	if n > arenaChunk/8 {
		return make([]byte, 0, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, arenaChunk)
	}
	s := len(a.buf)
	a.buf = a.buf[:s+n]
	return a.buf[s : s : s+n]
}

// appendFill is the FillPercent of buckets whose keys start with a time that
// mostly grows: bbolt then splits full pages 90/10 rather than in halves.
const appendFill = 0.9

// packedShare is the share of a transaction's new event keys that must land
// at the end of their source's keys for the events bucket to be packed like
// the time-ordered ones (packEvents).
const packedShare = 0.9

// applier applies commands inside one write transaction.
type applier struct {
	tx                                          *bolt.Tx
	meta, events, payloads, responses, counters *bolt.Bucket
	due, leases, states, expiry, done, orders   *bolt.Bucket
	bodies, sources, held                       *bolt.Bucket
	objects, attempts                           *bolt.Bucket // order.go, history.go: opened on first use
	pieces                                      *bolt.Bucket // pieces.go: opened on first use
	// noteDue, when set, is told of every due entry this transaction puts
	// (LeaseDue reads it while the transaction is open).
	noteDue func(source string, t int64)

	width int64  // retention bucket width
	index uint64 // index of the entry being applied (the lease token, plus base)
	pos   uint32 // position of the command being applied in its entry
	// base is added to the index to make a lease's token (meta
	// "tokenbase", set by PrepareRestore; 0 in a file never restored).
	base uint64

	arena arena
	kbuf  []byte  // scratch for index keys given to Get/Delete/Put
	pbuf  []byte  // scratch for piece keys (pieces.go): a payload key, then the piece's number
	pbase int     // length of the payload key in pbuf
	nbuf  [8]byte // scratch for expiry bucket names

	// Kept cursors for the point reads and deletes of the hot path (see point).
	evp, payp, duep, leasep, statep, donep, bodyp, srcp point
	objp, histp                                         point // made on first use (objPoint, histPoint)

	// written, when set, is told every event record stored or deleted (key,
	// state; 0 for deleted): Exists answers from it until the commit.
	written func(key string, st State)

	// The replay guard's index (bodyindex.go): the committed one, read-only
	// here, and this transaction's changes, merged in after its commit.
	bodyIdx  bodyIndex
	bodyPend map[bodyHash]int64

	// Event keys this transaction created, and how many of them landed at
	// the end of their source's keys (packEvents); recent is the engine's
	// memory of the keys created last.
	newKeys, tailKeys int
	recent            *recentKeys

	// Counter changes of the batch, written once by finish.
	stateDelta   [StateStale + 1]int64
	sourceDelta  map[string]int64
	pendingDelta map[string]int64 // by source
}

func newApplier(tx *bolt.Tx, width int64) *applier {
	a := &applier{
		tx:        tx,
		width:     width,
		meta:      tx.Bucket(bMeta),
		events:    tx.Bucket(bEvents),
		payloads:  tx.Bucket(bPayloads),
		responses: tx.Bucket(bResponses),
		counters:  tx.Bucket(bCounters),
		due:       tx.Bucket(bDue),
		leases:    tx.Bucket(bLeases),
		states:    tx.Bucket(bStates),
		expiry:    tx.Bucket(bExpiry),
		done:      tx.Bucket(bDone),
		orders:    tx.Bucket(bOrders),
		bodies:    tx.Bucket(bBodies),
		sources:   tx.Bucket(bSources),
		held:      tx.Bucket(bHeld),
		kbuf:      make([]byte, 0, 2*MaxKeyLen+10),
	}
	// Time-ordered buckets grow at their end (or at the end of a state's
	// range): pack their pages instead of splitting them in halves.
	for _, b := range []*bolt.Bucket{a.payloads, a.responses, a.due, a.leases, a.done, a.states} {
		b.FillPercent = appendFill
	}
	a.evp, a.payp, a.duep = point{a.events.Cursor()}, point{a.payloads.Cursor()}, point{a.due.Cursor()}
	a.leasep, a.statep, a.donep = point{a.leases.Cursor()}, point{a.states.Cursor()}, point{a.done.Cursor()}
	a.bodyp, a.srcp = point{a.bodies.Cursor()}, point{a.sources.Cursor()}
	a.base = tokenBase(a.meta)
	return a
}

// point does the point reads and deletes of one bucket through one kept
// cursor. bbolt's Bucket.Get and Bucket.Delete make a new Cursor on every
// call and grow its search stack from empty, a few allocations each time; a
// kept cursor's Seek starts again from the root and reuses its stack. Each
// call repositions the cursor, so the writes between calls do not matter.
type point struct{ c *bolt.Cursor }

// get returns the value stored under key, or nil (absent, or a nested
// bucket), like Bucket.Get.
func (p point) get(key []byte) []byte {
	v, _ := p.seek(key)
	return v
}

// seek returns the value of key when it is present; else nil and the first
// key after it (nil when none).
func (p point) seek(key []byte) (v, next []byte) {
	k, v := p.c.Seek(key)
	if bytes.Equal(k, key) {
		return v, nil
	}
	return nil, k
}

// del deletes key when it is present, like Bucket.Delete.
func (p point) del(key []byte) error {
	if k, _ := p.c.Seek(key); !bytes.Equal(k, key) {
		return nil
	}
	return p.c.Delete()
}

func (a *applier) lastApplied() uint64 {
	if v := a.meta.Get(metaApplied); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// sourcePrefix returns the "source:" that starts an event key (the whole
// key when it has no colon).
func sourcePrefix(key []byte) []byte {
	if i := bytes.IndexByte(key, ':'); i >= 0 {
		return key[:i+1]
	}
	return key
}

// packEvents sets how the events bucket's pages split at this
// transaction's commit, and returns the choice; packed is the previous
// commit's, kept when this one created no event.
//
// When event ids grow with time (counters, KSUIDs, the bench's), new keys
// land at the end of their source's keys, give or take the few requests
// that overtake each other on the way, so every new key goes into the last
// pages of its source's range; bbolt's default split in halves then leaves
// every page of the bucket half empty for good. A key lands at the end when
// the key after it is another source's, none, or one of the keys created
// last (recentKeys: those the late requests overtook). When nearly all of a
// transaction's new keys do, the bucket is packed like the time-ordered
// ones. Keys in random order (UUIDs) keep the default, under which a B-tree
// fills to about two thirds; packing them would split a page each time a
// key lands in a full one and leave the bucket emptier than the default
// does. docs/performance.md has the measurements. Only the file's layout
// depends on the choice, never what the state holds.
func (a *applier) packEvents(packed bool) bool {
	if a.newKeys > 0 {
		packed = float64(a.tailKeys) >= packedShare*float64(a.newKeys)
	}
	a.events.FillPercent = bolt.DefaultFillPercent
	if packed {
		a.events.FillPercent = appendFill
	}
	return packed
}

// recentKeys remembers the last event keys created, by a 64-bit FNV-1a hash
// (a collision only misjudges one key for packEvents).
type recentKeys struct {
	ring [256]uint64
	next int
	n    map[uint64]int // hash -> times in ring
}

func keyHash(k []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range k {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

func (r *recentKeys) has(k []byte) bool {
	return r.n[keyHash(k)] > 0
}

func (r *recentKeys) add(k []byte) {
	if r.n == nil {
		r.n = make(map[uint64]int, len(r.ring))
	}
	if old := r.ring[r.next]; r.n[old] > 1 {
		r.n[old]--
	} else {
		delete(r.n, old)
	}
	h := keyHash(k)
	r.ring[r.next] = h
	r.next = (r.next + 1) % len(r.ring)
	r.n[h]++
}

// finish writes the batch's counter changes (in a fixed order) and the last
// applied index.
func (a *applier) finish(applied uint64) error {
	var kb [2]byte
	for s := StatePending; s <= StateStale; s++ {
		if d := a.stateDelta[s]; d != 0 {
			kb = [2]byte{counterState, byte(s)}
			if err := a.addCounter(kb[:], d); err != nil {
				return err
			}
		}
	}
	for _, by := range []struct {
		prefix byte
		delta  map[string]int64
	}{{counterSource, a.sourceDelta}, {counterPending, a.pendingDelta}} {
		for _, src := range sortedKeys(by.delta) {
			if d := by.delta[src]; d != 0 {
				a.kbuf = append(append(a.kbuf[:0], by.prefix), src...)
				if err := a.addCounter(a.kbuf, d); err != nil {
					return err
				}
			}
		}
	}
	return a.meta.Put(metaApplied, binary.BigEndian.AppendUint64(a.arena.make(8), applied))
}

func (a *applier) addCounter(key []byte, d int64) error {
	var n int64
	if v := a.counters.Get(key); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("%w: counter %q", ErrCorrupt, key)
		}
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += d
	switch {
	case n < 0:
		return fmt.Errorf("%w: counter %q would be %d", ErrCorrupt, key, n)
	case n == 0:
		return a.counters.Delete(key)
	default:
		return a.counters.Put(key, binary.BigEndian.AppendUint64(a.arena.make(8), uint64(n)))
	}
}

// count records an event entering state to (from 0: created) and leaving
// state from (to 0: deleted).
func (a *applier) count(source string, from, to State) {
	a.stateDelta[from]--
	a.stateDelta[to]++
	if from == 0 || to == 0 {
		if a.sourceDelta == nil {
			a.sourceDelta = make(map[string]int64)
		}
		if from == 0 {
			a.sourceDelta[source]++
		} else {
			a.sourceDelta[source]--
		}
	}
	if (from == StatePending) != (to == StatePending) {
		if a.pendingDelta == nil {
			a.pendingDelta = make(map[string]int64)
		}
		if to == StatePending {
			a.pendingDelta[source]++
		} else {
			a.pendingDelta[source]--
		}
	}
}

// ---- keys ---------------------------------------------------------------

func appendTime(dst []byte, t int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t)^signBit)
}

func timeOf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b) ^ signBit) }

// tk returns the scratch key time|key: the due, leases and done indexes, and
// the payloads and responses buckets (with the event's CreatedAt).
func (a *applier) tk(t int64, key string) []byte {
	a.kbuf = append(appendTime(a.kbuf[:0], t), key...)
	return a.kbuf
}

// ptk returns the scratch key prefix|time|key: the states index (state,
// UpdatedAt) and the events listed in an expiry bucket ('e', CreatedAt).
func (a *applier) ptk(prefix byte, t int64, key string) []byte {
	a.kbuf = append(appendTime(append(a.kbuf[:0], prefix), t), key...)
	return a.kbuf
}

// hk returns the scratch key source|0x00|time|key of the held index. A
// paused source never contains 0x00 (pause refuses it), so the entries of one
// source are exactly the keys that start with source|0x00.
func (a *applier) hk(source string, t int64, key string) []byte {
	a.kbuf = append(appendTime(append(append(a.kbuf[:0], source...), 0), t), key...)
	return a.kbuf
}

// paused reports whether source is paused (has a sources record).
func (a *applier) paused(source string) bool {
	return a.srcp.get(strBytes(source)) != nil
}

// putPending indexes a pending event due at t: in due, or, for a command
// older than formatPauseInPlace, in held when its source is paused (pause.go).
// Every transition into pending goes through it.
func (a *applier) putPending(c *Command, source string, t int64, key string) error {
	if c.semantics() < formatPauseInPlace && a.paused(source) {
		return a.held.Put(a.hk(source, t, key), empty)
	}
	// Noted for LeaseDue while the transaction is open, also for an ordered
	// event behind its object's head (Result.Held): the head may end in the
	// same transaction. Not for a paused source, which no lease takes: its
	// resume notes it.
	if a.noteDue != nil && !a.paused(source) {
		a.noteDue(source, t)
	}
	return a.due.Put(a.dk(source, t, key), empty)
}

// delPending removes a pending event's due or held entry. An event of a
// paused source may have either: held from a pause or a transition of an
// older format, due from one of formatPauseInPlace.
func (a *applier) delPending(source string, t int64, key string) error {
	if a.paused(source) {
		if err := a.held.Delete(a.hk(source, t, key)); err != nil {
			return err
		}
	}
	return a.duep.del(a.dk(source, t, key))
}

// pk returns the scratch key prefix|key (order entries in expiry buckets).
func (a *applier) pk(prefix byte, key string) []byte {
	a.kbuf = append(append(a.kbuf[:0], prefix), key...)
	return a.kbuf
}

// bytesStr views b as a string without copying; only for bytes that stay
// unmodified while the string is used (keys read in this transaction).
func bytesStr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// bucketEnd returns the end of the retention bucket holding t: the first
// multiple of width strictly after t.
func bucketEnd(t, width int64) int64 {
	q := t / width
	if t%width != 0 && t < 0 {
		q--
	}
	return (q + 1) * width
}

// expiryBucket returns the expiry bucket that ends at end, creating it when
// create is set (else nil when absent).
func (a *applier) expiryBucket(end int64, create bool) (*bolt.Bucket, error) {
	name := appendTime(a.nbuf[:0], end)
	b := a.expiry.Bucket(name)
	if b == nil && create {
		var err error
		if b, err = a.expiry.CreateBucket(name); err != nil {
			return nil, err
		}
	}
	if b != nil {
		b.FillPercent = appendFill
	}
	return b, nil
}

// ---- records ------------------------------------------------------------

// load reads and decodes the record of key. found is false when there is none.
func (a *applier) load(key string, ev *Event) (flags byte, found bool, err error) {
	k := strBytes(key)
	v := a.evp.get(k)
	if v == nil {
		return 0, false, nil
	}
	if flags, err = decodeRecord(k, v, ev); err != nil {
		return 0, false, err
	}
	ev.Key = key
	return flags, true, nil
}

func (a *applier) store(ev *Event, flags byte) error {
	v := appendRecord(a.arena.make(recordSize(ev)), ev, flags)
	if a.written != nil {
		a.written(ev.Key, ev.State)
	}
	return a.events.Put(strBytes(ev.Key), v)
}

// setState moves ev's states-index entry from (from, fromUpdated) to
// (ev.State, ev.UpdatedAt) and the counters from state from to ev.State.
func (a *applier) setState(ev *Event, from State, fromUpdated int64) error {
	if from == ev.State && fromUpdated == ev.UpdatedAt {
		return nil
	}
	if err := a.statep.del(a.ptk(byte(from), fromUpdated, ev.Key)); err != nil {
		return err
	}
	src := append(a.arena.make(len(ev.Source)), ev.Source...)
	if err := a.states.Put(a.ptk(byte(ev.State), ev.UpdatedAt, ev.Key), src); err != nil {
		return err
	}
	if from != ev.State {
		a.count(ev.Source, from, ev.State)
	}
	return nil
}

// keyOrder returns 0..n-1 ordered by key(i). A command that moves many
// events moves them in key order: bbolt grows a node without splitting it until
// the commit, so inserting thousands of index keys that share a time prefix in
// random key order would shift a huge node on every insert (quadratic); in key
// order each insert lands at the end of the run it builds.
func keyOrder(n int, key func(i int) string) []int {
	ord := make([]int, n)
	for i := range ord {
		ord[i] = i
	}
	slices.SortFunc(ord, func(x, y int) int { return strings.Compare(key(x), key(y)) })
	return ord
}

// ---- commands -----------------------------------------------------------

func bad(format string, args ...any) (Result, error) {
	return Result{Err: badCommand(format, args...)}, nil
}

// badCommand is an error wrapping ErrBadCommand.
func badCommand(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadCommand}, args...)...)
}

func validKey(k string) bool { return len(k) > 0 && len(k) <= MaxKeyLen }

func validDuration(d int64) bool { return d >= 0 && d <= maxDuration }

// clipText cuts s to MaxTextLen bytes on a rune boundary.
func clipText(s string) string {
	if len(s) <= MaxTextLen {
		return s
	}
	n := MaxTextLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// apply applies one command. A rejection is returned in Result.Err; the error
// is a storage failure that aborts the batch.
func (a *applier) apply(c *Command) (Result, error) {
	if c.Now <= -maxTime || c.Now >= maxTime {
		return bad("now %d out of range", c.Now)
	}
	switch c.Op {
	case OpClaim:
		return a.claim(c)
	case OpLease:
		return a.lease(c)
	case OpComplete:
		return a.complete(c)
	case OpFail:
		return a.fail(c)
	case OpReclaim:
		return a.reclaim(c)
	case OpReplay:
		return a.replay(c)
	case OpExpire:
		return a.expire(c)
	case OpDropPayloads:
		return a.dropPayloads(c)
	case OpNoop:
		return Result{}, nil
	case OpPause:
		return a.pause(c)
	case OpResume:
		return a.resume(c)
	case OpPurge:
		return a.purge(c)
	case OpIdentify:
		return a.identify(c)
	default:
		return bad("unknown op %d", c.Op)
	}
}

// claimLimits refuses a claim outside the engine's limits (key, source and
// body key lengths, durations, payload and header sizes).
func claimLimits(c *Command) error {
	switch {
	case !validKey(c.Key):
		return badCommand("claim key length %d", len(c.Key))
	case !validKey(c.Source):
		return badCommand("claim source length %d", len(c.Source))
	case !validDuration(c.Retention):
		return badCommand("claim retention %d", c.Retention)
	case !validDuration(c.LeaseFor):
		return badCommand("claim lease %d", c.LeaseFor)
	case len(c.OrderObject) > MaxKeyLen:
		return badCommand("claim order object length %d", len(c.OrderObject))
	case len(c.BodyKey) > MaxKeyLen:
		return badCommand("claim body key length %d", len(c.BodyKey))
	case len(c.Payload) > MaxPayloadLen:
		return badCommand("claim payload length %d", len(c.Payload))
	case len(c.Headers) > MaxHeaders:
		return badCommand("claim has %d headers", len(c.Headers))
	case !validDuration(c.LeaseNow):
		return badCommand("claim lease now %d", c.LeaseNow)
	}
	for i := range c.Headers {
		if len(c.Headers[i].Name) > MaxHeaderLen || len(c.Headers[i].Value) > MaxHeaderLen {
			return badCommand("claim header %d too long", i)
		}
	}
	return nil
}

func (a *applier) claim(c *Command) (Result, error) {
	if err := claimLimits(c); err != nil {
		return Result{Err: err}, nil
	}
	k := strBytes(c.Key)
	v, next := a.evp.seek(k)
	if v != nil {
		st, err := recordState(k, v)
		if err != nil {
			return Result{}, err
		}
		return Result{State: st}, nil
	}
	tail := next == nil || !bytes.HasPrefix(next, sourcePrefix(k)) || a.recent.has(next)
	if c.BodyKey != "" {
		if orig := a.bodyHolder(c.BodyKey); orig != nil {
			return a.bodyDuplicate(c, orig)
		}
	}

	expires := bucketEnd(c.Now+c.Retention, a.width)
	st := StatePending
	if c.OrderObject != "" {
		stale, err := a.orderGuard(c, expires)
		if err != nil {
			return Result{}, err
		}
		if stale {
			st = StateStale
		}
	}
	ev := Event{
		Key:       c.Key,
		Source:    c.Source,
		State:     st,
		CreatedAt: c.Now,
		UpdatedAt: c.Now,
		ExpiresAt: expires,
		LeaseFor:  c.LeaseFor,
	}
	if c.OrderObject != "" && c.semantics() >= formatOrderedObjects {
		ev.OrderObject, ev.OrderTime, ev.OrderIndex, ev.OrderPos = c.OrderObject, c.OrderTime, a.index, a.pos
	}
	leased, held := false, false
	if st == StatePending {
		ev.NextAttemptAt = c.Now
		if ev.OrderObject != "" {
			if err := a.append(&ev); err != nil {
				return Result{}, err
			}
		}
		var err error
		if leased, err = a.leaseClaimed(c, &ev); err != nil {
			return Result{}, err
		}
		st = ev.State
		if !leased {
			if err := a.putPending(c, c.Source, c.Now, c.Key); err != nil {
				return Result{}, err
			}
			held = a.paused(c.Source) || ev.OrderObject != "" && !a.isHead(&ev)
		}
	}
	var flags byte
	if c.BodyKey != "" {
		flags = flagBody
	}
	if err := a.store(&ev, flags); err != nil {
		return Result{}, err
	}
	a.newKeys++
	if tail {
		a.tailKeys++
	}
	a.recent.add(k)
	if err := a.putPayload(c); err != nil {
		return Result{}, err
	}
	src := append(a.arena.make(len(c.Source)), c.Source...)
	if err := a.states.Put(a.ptk(byte(st), c.Now, c.Key), src); err != nil {
		return Result{}, err
	}
	eb, err := a.expiryBucket(expires, true)
	if err != nil {
		return Result{}, err
	}
	if err := eb.Put(a.ptk(expiryEvent, c.Now, c.Key), empty); err != nil {
		return Result{}, err
	}
	if c.BodyKey != "" {
		// deleteEvent removes the entry with the event (flagBody).
		if err := a.holdBody(c.Key, c.BodyKey, c.Now); err != nil {
			return Result{}, err
		}
	}
	a.count(c.Source, 0, st)
	if leased {
		return claimLeaseResult(c, &ev), nil
	}
	return Result{Created: true, State: st, Held: held}, nil
}

// bodyDuplicate answers a claim whose body another event already holds: a
// duplicate of that event, in that event's state.
func (a *applier) bodyDuplicate(c *Command, orig []byte) (Result, error) {
	v := a.evp.get(orig)
	if v == nil {
		return Result{}, fmt.Errorf("%w: body entry of %q names no event", ErrCorrupt, clip(orig))
	}
	st, err := recordState(orig, v)
	if err != nil {
		return Result{}, err
	}
	return Result{State: st, Keys: []string{string(orig)}}, nil
}

// orderGuard applies the ordering guard of a new claim. It reports whether the
// claim is stale (older than the newest time applied for its object); if not,
// it records the claim's time for the object. An order entry lives as long as
// the longest-lived event that advanced it, through the expiry buckets.
//
// Order entry: object -> 8 bytes order time, 8 bytes expiry, and from
// format 15 the claim that set it: 8 bytes entry index, 4 bytes position
// (big endian; superseded reads it).
func (a *applier) orderGuard(c *Command, expires int64) (bool, error) {
	k := strBytes(c.OrderObject)
	var oldT, oldExp int64
	found := false
	if v := a.orders.Get(k); v != nil {
		if !orderEntryLen(len(v)) {
			return false, fmt.Errorf("%w: order entry %q", ErrCorrupt, clip(k))
		}
		oldT, oldExp = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
		found = true
		if c.OrderTime < oldT {
			return true, nil
		}
	}
	newExp := expires
	if found && oldExp > newExp {
		newExp = oldExp
	}
	v := a.arena.make(orderEntryClaimed)
	v = binary.BigEndian.AppendUint64(v, uint64(c.OrderTime))
	v = binary.BigEndian.AppendUint64(v, uint64(newExp))
	if c.semantics() >= formatRearmOrder {
		v = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(v, a.index), a.pos)
	}
	if err := a.orders.Put(k, v); err != nil {
		return false, err
	}
	if found && oldExp == newExp {
		return false, nil
	}
	if found {
		ob, err := a.expiryBucket(oldExp, false)
		if err != nil {
			return false, err
		}
		if ob != nil {
			if err := ob.Delete(a.pk(expiryOrder, c.OrderObject)); err != nil {
				return false, err
			}
		}
	}
	nb, err := a.expiryBucket(newExp, true)
	if err != nil {
		return false, err
	}
	return false, nb.Put(a.pk(expiryOrder, c.OrderObject), empty)
}

// lease moves up to c.Max due pending events to processing under the entry's
// token (its index plus the token base: token). Attempts counts delivery
// attempts started, so it is incremented here (and Fail compares it with
// MaxAttempts). It merges the due
// index's runs, one per source, from their starts (due.go), so its cost
// depends on the events it leases and the sources with due events, not on
// the events stored; c.Quotas limit some sources' share. An event already
// leased under this index (reclaimed within the same entry) is left for a
// later entry, so that no two leases of one event share a token.
func (a *applier) lease(c *Command) (Result, error) {
	switch {
	case c.Max <= 0:
		return bad("lease max %d", c.Max)
	case c.LeaseFor <= 0 || c.LeaseFor > maxDuration:
		return bad("lease for %d", c.LeaseFor)
	case !validQuotas(c.Quotas) || c.Share < 0 || c.Share > maxQuota || c.Spare < 0 || c.Spare > c.Max:
		return bad("lease quotas")
	case !validLeases(c.Leases):
		return bad("lease lengths")
	}
	// The picked events are decoded straight into the result (out); picks
	// holds what else the moves need.
	type pick struct {
		flags byte
		due   int64
	}
	var out []Event
	var picks []pick
	waiting, err := dueMerge(a.due, c.Now, leaseLimits{max: c.Max, share: c.Share, spare: c.Spare, quotas: c.Quotas, paused: a.sources}, func(src []byte, t int64, key []byte) (bool, error) {
		v := a.evp.get(key)
		if v == nil {
			return false, fmt.Errorf("%w: due index names missing event %q", ErrCorrupt, clip(key))
		}
		if out == nil {
			// Sized on the first due event: a lease with nothing due allocates nothing.
			out, picks = make([]Event, 0, min(c.Max, 16)), make([]pick, 0, min(c.Max, 16))
		}
		out = append(out, Event{})
		ev := &out[len(out)-1]
		flags, err := decodeRecord(key, v, ev)
		if err != nil {
			return false, err
		}
		if ev.State != StatePending || ev.NextAttemptAt != t || ev.Source != bytesStr(src) {
			return false, fmt.Errorf("%w: due index entry %q does not match its event", ErrCorrupt, clip(key))
		}
		skip := ev.Token >= a.token(c) // leased earlier in this entry
		if !skip && flags&flagOrder != 0 {
			ev.Key = bytesStr(key)
			skip = !a.isHead(ev) // another event of its object goes first (order.go)
		}
		if skip {
			out = out[:len(out)-1]
			return false, nil
		}
		ev.Key = string(key)
		picks = append(picks, pick{flags, t})
		return true, nil
	})
	if err != nil {
		return Result{}, err
	}
	if len(out) == 0 {
		return Result{Waiting: waiting}, nil
	}
	for _, i := range keyOrder(len(out), func(i int) string { return out[i].Key }) {
		p := &picks[i]
		ev := &out[i]
		if err := a.duep.del(a.dk(ev.Source, p.due, ev.Key)); err != nil {
			return Result{}, err
		}
		if l, ok := leaseLengthOf(c.Leases, ev.Source); ok {
			ev.LeaseFor = l // the running config's, kept for the next lease too
		}
		lf := ev.LeaseFor
		if lf == 0 {
			lf = c.LeaseFor
		}
		oldUpdated := ev.UpdatedAt
		ev.State = StateProcessing
		ev.Token = a.token(c)
		if ev.Attempts < math.MaxUint32 {
			ev.Attempts++
		}
		ev.NextAttemptAt = 0
		ev.LeaseUntil = c.Now + lf
		ev.UpdatedAt = c.Now
		if err := a.leases.Put(a.tk(ev.LeaseUntil, ev.Key), empty); err != nil {
			return Result{}, err
		}
		if err := a.setState(ev, StatePending, oldUpdated); err != nil {
			return Result{}, err
		}
		if err := a.store(ev, p.flags); err != nil {
			return Result{}, err
		}
		var err error
		if ev.Headers, ev.Payload, _, err = a.getPayload(a.tk(ev.CreatedAt, ev.Key)); err != nil {
			return Result{}, err
		}
	}
	return Result{Events: out, N: len(out), Waiting: waiting}, nil
}

// token is the fencing token of a lease applied by c: the entry's index
// plus the file's token base. A restore raises the base above every token
// the cluster has issued and every token the backup holds (PrepareRestore),
// so tokens only grow, also when the backup comes from another cluster
// whose log was longer, or from this cluster's past. Entries of binaries
// before formatTokenBase use the index alone, as those binaries do.
func (a *applier) token(c *Command) uint64 {
	if c.semantics() < formatTokenBase {
		return a.index
	}
	return a.index + a.base
}

// checkToken applies the fencing rules shared by complete and fail: a token
// older than the event's current lease is stale whatever the state; otherwise
// the event must be processing and the token must be the current one.
func checkToken(ev *Event, token uint64) error {
	switch {
	case token < ev.Token:
		return ErrStaleToken
	case ev.State != StateProcessing:
		return ErrWrongState
	case token != ev.Token:
		return ErrStaleToken
	}
	return nil
}

// validStep reports whether s can be stored as a step: at most MaxStepLen
// bytes of printable ASCII ("" means no step).
func validStep(s string) bool {
	if len(s) > MaxStepLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (a *applier) complete(c *Command) (Result, error) {
	switch {
	case !validKey(c.Key):
		return bad("complete key length %d", len(c.Key))
	case c.Response != nil && len(c.Response.Body) > MaxPayloadLen:
		return bad("complete response length %d", len(c.Response.Body))
	case !validStep(c.Step):
		return bad("complete step: want at most %d printable ASCII bytes", MaxStepLen)
	case !validDuration(c.PayloadRetention):
		return bad("complete payload retention %d", c.PayloadRetention)
	}
	var ev Event
	flags, found, err := a.load(c.Key, &ev)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return Result{Err: ErrNotFound}, nil
	}
	if err := checkToken(&ev, c.Token); err != nil {
		return Result{State: ev.State, Err: err}, nil
	}
	if err := a.leasep.del(a.tk(ev.LeaseUntil, ev.Key)); err != nil {
		return Result{}, err
	}
	if err := a.dequeue(&ev, ev.State); err != nil {
		return Result{}, err
	}
	oldUpdated := ev.UpdatedAt
	ev.State = StateDone
	ev.LeaseUntil = 0
	ev.UpdatedAt = c.Now
	if c.Step != "" {
		ev.Step = c.Step
	}
	if c.PayloadRetention > 0 {
		ev.PayloadDropAt = c.Now + c.PayloadRetention
	}
	if err := a.done.Put(a.tk(doneTime(&ev), ev.Key), empty); err != nil {
		return Result{}, err
	}
	if c.Response != nil {
		rv := appendResponse(a.arena.make(1+2*binary.MaxVarintLen64+len(c.Response.ContentType)+len(c.Response.Body)), c.Response)
		if err := a.responses.Put(a.tk(ev.CreatedAt, ev.Key), rv); err != nil {
			return Result{}, err
		}
		flags |= flagResponse
	}
	if err := a.setState(&ev, StateProcessing, oldUpdated); err != nil {
		return Result{}, err
	}
	if err := a.store(&ev, flags); err != nil {
		return Result{}, err
	}
	return Result{State: StateDone}, nil
}

// fail records a failed delivery: pending again at Now+RetryIn, or dead when
// the attempts started (counted by lease) reached MaxAttempts. MaxAttempts <= 0
// means no limit.
func (a *applier) fail(c *Command) (Result, error) {
	switch {
	case !validKey(c.Key):
		return bad("fail key length %d", len(c.Key))
	case !validDuration(c.RetryIn):
		return bad("fail retry in %d", c.RetryIn)
	case !validStep(c.Step):
		return bad("fail step: want at most %d printable ASCII bytes", MaxStepLen)
	case c.Attempt != nil && !validAttempt(c.Attempt):
		return bad("fail attempt out of range")
	case !validDuration(c.DeadRetention):
		return bad("fail dead retention %d", c.DeadRetention)
	}
	var ev Event
	flags, found, err := a.load(c.Key, &ev)
	if err != nil {
		return Result{}, err
	}
	if !found {
		return Result{Err: ErrNotFound}, nil
	}
	if err := checkToken(&ev, c.Token); err != nil {
		return Result{State: ev.State, Err: err}, nil
	}
	if err := a.leasep.del(a.tk(ev.LeaseUntil, ev.Key)); err != nil {
		return Result{}, err
	}
	oldUpdated := ev.UpdatedAt
	ev.LeaseUntil = 0
	ev.UpdatedAt = c.Now
	ev.LastError = clipText(c.Reason)
	if c.Step != "" {
		ev.Step = c.Step
	}
	if c.Attempt != nil {
		if flags, err = a.recordAttempt(&ev, flags, c.Attempt); err != nil {
			return Result{}, err
		}
	}
	if c.Refund && ev.Attempts > 0 {
		ev.Attempts--
	}
	if !c.Refund && c.MaxAttempts > 0 && int64(ev.Attempts) >= int64(c.MaxAttempts) {
		ev.State = StateDead
		if err := a.dequeue(&ev, StateProcessing); err != nil { // the next event of its object may go
			return Result{}, err
		}
		if c.DeadRetention > 0 {
			if flags, err = a.keepDead(&ev, flags, c.Now, c.DeadRetention, false, c); err != nil {
				return Result{}, err
			}
		}
	} else {
		ev.State = StatePending
		ev.NextAttemptAt = c.Now + c.RetryIn
		if err := a.putPending(c, ev.Source, ev.NextAttemptAt, ev.Key); err != nil {
			return Result{}, err
		}
	}
	if err := a.setState(&ev, StateProcessing, oldUpdated); err != nil {
		return Result{}, err
	}
	if err := a.store(&ev, flags); err != nil {
		return Result{}, err
	}
	return Result{State: ev.State}, nil
}

// reclaimReason is the LastError of an event whose lease ended unanswered.
const reclaimReason = "lease expired"

// reclaim returns every processing event whose lease ended by Now to pending,
// due at Now. The attempt stays counted; the token stays until the next lease.
// It walks the lease index up to Now only.
func (a *applier) reclaim(c *Command) (Result, error) {
	if !validDuration(c.Horizon) {
		return bad("reclaim horizon %d", c.Horizon)
	}
	if c.Horizon > 0 {
		if err := a.rescheduleAhead(c, c.Horizon); err != nil {
			return Result{}, err
		}
	}
	type item struct {
		t   int64
		key string
	}
	var items []item
	cur := a.leases.Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
		if len(k) < 9 {
			return Result{}, fmt.Errorf("%w: lease index key %x", ErrCorrupt, k)
		}
		t := timeOf(k)
		if t > c.Now {
			break
		}
		items = append(items, item{t, string(k[8:])})
	}
	slices.SortFunc(items, func(x, y item) int { return strings.Compare(x.key, y.key) }) // see keyOrder
	for _, it := range items {
		var ev Event
		flags, found, err := a.load(it.key, &ev)
		if err != nil {
			return Result{}, err
		}
		if !found || ev.State != StateProcessing || ev.LeaseUntil != it.t {
			return Result{}, fmt.Errorf("%w: lease index entry %q does not match its event", ErrCorrupt, clip([]byte(it.key)))
		}
		if err := a.leasep.del(a.tk(it.t, it.key)); err != nil {
			return Result{}, err
		}
		oldUpdated := ev.UpdatedAt
		ev.State = StatePending
		ev.LeaseUntil = 0
		ev.NextAttemptAt = c.Now
		ev.UpdatedAt = c.Now
		ev.LastError = reclaimReason
		if err := a.putPending(c, ev.Source, c.Now, it.key); err != nil {
			return Result{}, err
		}
		if err := a.setState(&ev, StateProcessing, oldUpdated); err != nil {
			return Result{}, err
		}
		if err := a.store(&ev, flags); err != nil {
			return Result{}, err
		}
	}
	return Result{N: len(items)}, nil
}

// replayable reports whether replay moves an event in state s.
func replayable(s State) bool { return s == StateDone || s == StateDead || s == StateStale }

// replay moves done, dead and stale events back to pending (due at Now,
// attempts 0) with an audit entry. With Keys, each key is tried in turn; with
// one key a miss is reported in Err (ErrNotFound, ErrWrongState), with several
// the misses are skipped. Without Keys, State (done, dead or stale) selects
// through the states index, narrowed by Source and UpdatedAt >= Since.
func (a *applier) replay(c *Command) (Result, error) {
	switch {
	case len(c.Keys) > 0 && c.State != 0:
		return bad("replay takes keys or a state, not both")
	case len(c.Keys) == 0 && !replayable(c.State):
		return bad("replay state %d", c.State)
	case c.OnlyFrom != 0 && (len(c.Keys) == 0 || !replayable(c.OnlyFrom)):
		return bad("replay only from %d", c.OnlyFrom)
	case c.semantics() >= formatRearmWait && !validDuration(c.LeaseFor):
		return bad("replay lease %d", c.LeaseFor)
	case len(c.Who) > MaxKeyLen:
		return bad("replay who length %d", len(c.Who))
	case len(c.Source) > MaxKeyLen:
		return bad("replay source length %d", len(c.Source))
	}
	for _, k := range c.Keys {
		if !validKey(k) {
			return bad("replay key length %d", len(k))
		}
	}
	if c.semantics() >= formatReplayBatched && len(c.Keys) == 0 {
		switch {
		case c.Max < 0 || c.Max > MaxReplayBatch:
			return bad("replay max %d", c.Max)
		case c.Max == 0 && (c.Key != "" || c.Before != 0):
			return bad("replay cursor or before without a max")
		case c.Key != "" && !validKey(c.Key):
			return bad("replay cursor key length %d", len(c.Key))
		case c.Before < 0:
			return bad("replay before %d", c.Before)
		}
	}
	var res Result
	keys := c.Keys
	if len(keys) == 0 {
		var err error
		if keys, err = a.replaySelect(c, &res); err != nil {
			return Result{}, err
		}
	}
	for _, key := range keys {
		var ev Event
		flags, found, err := a.load(key, &ev)
		if err != nil {
			return Result{}, err
		}
		if !found || !replayable(ev.State) || c.OnlyFrom != 0 && ev.State != c.OnlyFrom {
			if len(c.Keys) == 1 {
				res.Err = ErrNotFound
				if found {
					res.Err, res.State = ErrWrongState, ev.State
				}
			}
			continue
		}
		if a.payp.get(a.tk(ev.CreatedAt, key)) == nil {
			// Dropped after its payload retention: nothing to deliver.
			if len(c.Keys) == 1 {
				res.Err, res.State = ErrNoPayload, ev.State
			}
			continue
		}
		if c.OnlyFrom != 0 && ev.OrderObject != "" && c.semantics() >= formatRearmOrder && a.superseded(&ev) {
			// A provider's re-arm must not deliver it after a newer event
			// of its object; an operator's replay may (order.go).
			if len(c.Keys) == 1 {
				res.Err, res.State = ErrSuperseded, ev.State
			}
			continue
		}
		if c.OnlyFrom != 0 && flags&flagHistory != 0 && c.semantics() >= formatRearmWait {
			// A provider's re-arm must not start an attempt beside one the
			// handler may still be running; an operator's replay may (the
			// fencing token guards its result).
			running, err := a.lastAttemptRunning(&ev, c)
			if err != nil {
				return Result{}, err
			}
			if running {
				if len(c.Keys) == 1 {
					res.Err, res.State = ErrLastAttemptRunning, ev.State
				}
				continue
			}
		}
		from, oldUpdated := ev.State, ev.UpdatedAt
		if from == StateDone {
			if err := a.donep.del(a.tk(doneTime(&ev), key)); err != nil {
				return Result{}, err
			}
		}
		// A fresh retention window from now (and no dead retention); an
		// older writer's replay kept the expiry.
		ev.PayloadDropAt = 0
		flags &^= flagDeadKept
		if c.semantics() >= formatRetentionRules {
			if err := a.moveExpiry(&ev, bucketEnd(c.Now+max(ev.RetentionWindow(), 1), a.width), false, c); err != nil {
				return Result{}, err
			}
		}
		ev.State = StatePending
		ev.Attempts = 0
		ev.NextAttemptAt = c.Now
		ev.LeaseUntil = 0
		ev.UpdatedAt = c.Now
		if len(ev.Audit) >= maxAudit {
			ev.Audit = ev.Audit[len(ev.Audit)-maxAudit+1:]
		}
		ev.Audit = append(ev.Audit, AuditEntry{At: c.Now, Who: c.Who, Action: "replay", Reason: clipText(c.Reason), From: from})
		if err := a.putPending(c, ev.Source, c.Now, key); err != nil {
			return Result{}, err
		}
		if ev.OrderObject != "" {
			if err := a.append(&ev); err != nil {
				return Result{}, err
			}
		}
		if err := a.setState(&ev, from, oldUpdated); err != nil {
			return Result{}, err
		}
		if err := a.store(&ev, flags); err != nil {
			return Result{}, err
		}
		res.Keys = append(res.Keys, key)
	}
	res.N = len(res.Keys)
	if res.N > 0 {
		res.State = StatePending
	}
	return res, nil
}

// replaySelect is the keys of the events a replay by state selects: in
// state c.State, updated at c.Since or later, of c.Source when it is set; in
// key order (see keyOrder).
//
// From formatReplayBatched, a Max visits at most that many entries of the
// state's index (every source's: the bound is the command's cost), in
// (UpdatedAt, key) order from (Since, Key) exclusive when Key is set, and
// only those updated before Before, or, when it is 0 (the first command of
// a replay), before Now; res.Before is that bound, for the next commands,
// and res.More and the cursor (res.After, res.AfterTime: the last entry
// visited) tell the caller where the next command goes on. So a replay of
// millions of dead letters is many short entries, not one that holds every
// replica's apply loop for as long as it takes; an event replayed (its
// UpdatedAt now) or one that died again since is past the bound and not
// visited twice. The bound is the leader's time, as every UpdatedAt is: a
// caller's own clock, ahead of it, would take those events again.
func (a *applier) replaySelect(c *Command, res *Result) ([]string, error) {
	var keys []string
	limit := 0
	if c.Max > 0 && c.semantics() >= formatReplayBatched {
		limit = c.Max
	}
	// The states index is ordered by UpdatedAt within a state: seek to Since.
	seek := []byte{byte(c.State)}
	cursor := limit > 0 && c.Key != ""
	switch {
	case cursor:
		seek = bytes.Clone(a.ptk(byte(c.State), c.Since, c.Key))
	case c.Since != 0:
		seek = a.ptk(byte(c.State), c.Since, "")
	}
	before := c.Before
	if limit > 0 {
		if before == 0 {
			before = c.Now
		}
		res.Before = before
	}
	visited := 0
	cur := a.states.Cursor()
	for k, src := cur.Seek(seek); k != nil && k[0] == byte(c.State); k, src = cur.Next() {
		if len(k) < 10 {
			return nil, fmt.Errorf("%w: states index key %x", ErrCorrupt, k)
		}
		if cursor && bytes.Equal(k, seek) {
			continue // the cursor: visited by the command before
		}
		if limit > 0 && timeOf(k[1:9]) >= before {
			break
		}
		if limit > 0 && visited == limit {
			res.More = true
			break
		}
		visited++
		if limit > 0 {
			res.AfterTime, res.After = timeOf(k[1:9]), string(k[9:])
		}
		if c.Source != "" && string(src) != c.Source {
			continue
		}
		keys = append(keys, string(k[9:]))
	}
	slices.Sort(keys) // see keyOrder
	return keys, nil
}

// expire ends every retention bucket that ended by Now: each done or stale
// event it lists is deleted with its record, payload, response and index
// entries, and so is each dead letter already kept for its dead retention
// (reported in Result.Events); pending, processing and other dead events
// move to a later bucket (expireEvent), so nothing unfinished is forgotten.
// Each order entry it lists is deleted. Its cost is the number of entries
// in the ended buckets (plus one seek), whatever the number of keys kept.
//
// From formatExpireBatched, a Max visits at most that many entries, oldest
// bucket first, and deletes each one visited (a bucket once empty), so that
// an hour's bucket of millions of keys is many short entries, not one that
// holds every replica's apply loop for minutes; Result.More tells that
// entries of ended buckets remain.
func (a *applier) expire(c *Command) (Result, error) {
	limit := 0
	if c.Max > 0 && c.semantics() >= formatExpireBatched {
		limit = c.Max
	}
	var names [][]byte
	cur := a.expiry.Cursor()
	for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
		if len(k) != 8 {
			return Result{}, fmt.Errorf("%w: expiry bucket name %x", ErrCorrupt, k)
		}
		if timeOf(k) > c.Now {
			break
		}
		names = append(names, append([]byte(nil), k...))
	}
	visited := 0
	var res Result
	for _, name := range names {
		end := timeOf(name)
		b := a.expiry.Bucket(name)
		if b == nil {
			return Result{}, fmt.Errorf("%w: expiry entry %x is not a bucket", ErrCorrupt, name)
		}
		// The bucket's keys are copied first: an event that moves to a later
		// bucket writes the expiry bucket while this one is read (its entry
		// here goes with the bucket).
		// One buffer for all of them, not one allocation per key.
		var buf []byte
		var ends []int
		bc := b.Cursor()
		whole := true // every entry of the bucket is visited in this command
		for k, _ := bc.First(); k != nil; k, _ = bc.Next() {
			if limit > 0 && visited == limit {
				whole = false
				break
			}
			buf = append(buf, k...)
			ends = append(ends, len(buf))
			visited++
		}
		for i, e := range ends {
			k := buf[:e:e]
			if i > 0 {
				k = buf[ends[i-1]:e:e]
			}
			if len(k) < 2 {
				return Result{}, fmt.Errorf("%w: expiry key %x", ErrCorrupt, k)
			}
			switch k[0] {
			case expiryEvent:
				if len(k) < 10 {
					return Result{}, fmt.Errorf("%w: expiry key %x", ErrCorrupt, k)
				}
				if err := a.expireEvent(bytesStr(k[9:]), timeOf(k[1:]), end, c, &res); err != nil {
					return Result{}, err
				}
			case expiryOrder:
				ok := k[1:]
				v := a.orders.Get(ok)
				if !orderEntryLen(len(v)) || int64(binary.BigEndian.Uint64(v[8:])) < end {
					return Result{}, fmt.Errorf("%w: expiry lists order entry %q it does not hold", ErrCorrupt, clip(ok))
				}
				if int64(binary.BigEndian.Uint64(v[8:])) == end {
					if err := a.orders.Delete(ok); err != nil {
						return Result{}, err
					}
				} // else kept later, with an event of its object (keepOrder)
			default:
				return Result{}, fmt.Errorf("%w: expiry key %x", ErrCorrupt, k)
			}
			if !whole {
				// Visited: off its bucket, which outlives this command.
				if err := a.expiry.Bucket(name).Delete(k); err != nil {
					return Result{}, err
				}
			}
		}
		if !whole {
			res.More = true
			break
		}
		if err := a.expiry.DeleteBucket(name); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// deleteEvent removes an expiring event and everything that refers to it.
func (a *applier) deleteEvent(key string, created, end int64) error {
	var ev Event
	flags, found, err := a.load(key, &ev)
	if err != nil {
		return err
	}
	if !found || ev.ExpiresAt != end || ev.CreatedAt != created {
		return fmt.Errorf("%w: expiry lists event %q it does not hold", ErrCorrupt, clip(strBytes(key)))
	}
	if a.written != nil {
		a.written(strings.Clone(key), 0) // key points into a page that the deletes may change
	}
	if err := a.evp.del(strBytes(key)); err != nil {
		return err
	}
	if _, err := a.delPayload(a.tk(ev.CreatedAt, key)); err != nil {
		return err
	}
	if flags&flagResponse != 0 {
		if err := a.responses.Delete(a.tk(ev.CreatedAt, key)); err != nil {
			return err
		}
	}
	if err := a.statep.del(a.ptk(byte(ev.State), ev.UpdatedAt, key)); err != nil {
		return err
	}
	if flags&flagBody != 0 {
		if err := a.releaseBody(key, ev.CreatedAt); err != nil {
			return err
		}
	}
	if flags&flagHistory != 0 {
		if err := a.histPoint().del(a.tk(ev.CreatedAt, key)); err != nil {
			return err
		}
	}
	if err := a.dequeue(&ev, ev.State); err != nil {
		return err
	}
	switch ev.State {
	case StatePending:
		err = a.delPending(ev.Source, ev.NextAttemptAt, key)
	case StateProcessing:
		err = a.leasep.del(a.tk(ev.LeaseUntil, key))
	case StateDone:
		err = a.donep.del(a.tk(doneTime(&ev), key))
	}
	if err != nil {
		return err
	}
	a.count(ev.Source, ev.State, 0)
	return nil
}

// dropPayloads deletes the payloads (and headers) of done events whose drop
// time (PayloadDropAt, the done index time) is before c.Before, at most c.Max
// of them (0: no bound), walking the done index up to Before only; each
// dropped entry leaves the index. An event completed without a drop time is
// indexed at its completion: with Since set it is dropped only when completed
// before Since. N counts the payloads deleted.
func (a *applier) dropPayloads(c *Command) (Result, error) {
	if c.Max < 0 {
		return bad("drop payloads max %d", c.Max)
	}
	var keys [][]byte
	cur := a.done.Cursor()
	for k, _ := cur.First(); k != nil && (c.Max == 0 || len(keys) < c.Max); k, _ = cur.Next() {
		if len(k) < 9 {
			return Result{}, fmt.Errorf("%w: done index key %x", ErrCorrupt, k)
		}
		t := timeOf(k)
		if t >= c.Before {
			break
		}
		if c.Since != 0 && t >= c.Since {
			// Maybe completed without a drop time (indexed at its
			// completion) and not yet old enough: read its record.
			v := a.evp.get(k[8:])
			if v == nil {
				return Result{}, fmt.Errorf("%w: done index names missing event %q", ErrCorrupt, clip(k[8:]))
			}
			var ev Event
			if _, err := decodeRecord(k[8:], v, &ev); err != nil {
				return Result{}, err
			}
			if ev.PayloadDropAt == 0 {
				continue
			}
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	n := 0
	for _, k := range keys {
		var ev Event
		key := bytesStr(k[8:])
		flags, found, err := a.load(key, &ev)
		if err != nil {
			return Result{}, err
		}
		if !found || ev.State != StateDone || doneTime(&ev) != timeOf(k) {
			return Result{}, fmt.Errorf("%w: done index entry %q does not match its event", ErrCorrupt, clip(k[8:]))
		}
		if err := a.donep.del(k); err != nil {
			return Result{}, err
		}
		if ev.PayloadDropAt != 0 {
			ev.PayloadDropAt = 0
			if err := a.store(&ev, flags); err != nil {
				return Result{}, err
			}
		}
		dropped, err := a.delPayload(a.tk(ev.CreatedAt, key))
		if err != nil {
			return Result{}, err
		}
		if dropped {
			n++
		}
	}
	return Result{N: n}, nil
}
