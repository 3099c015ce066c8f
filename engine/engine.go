package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// Bucket names (see doc.go for what each holds).
var (
	bMeta      = []byte("meta")
	bEvents    = []byte("events")
	bPayloads  = []byte("payloads")
	bResponses = []byte("responses")
	bDue       = []byte("due")
	bLeases    = []byte("leases")
	bStates    = []byte("states")
	bExpiry    = []byte("expiry")
	bDone      = []byte("done")
	bOrders    = []byte("orders")
	bCounters  = []byte("counters")
	bBodies    = []byte("bodies")
	bSources   = []byte("sources")
	bHeld      = []byte("held")
	bObjects   = []byte("objects")
	bAttempts  = []byte("attempts")

	allBuckets = [][]byte{bMeta, bEvents, bPayloads, bResponses, bDue, bLeases, bStates,
		bExpiry, bDone, bOrders, bCounters, bBodies, bSources, bHeld, bObjects, bAttempts, bPieces}
)

// addedBucket reports whether name was added to layout version 1 after files
// of that version were written: a file or snapshot without it is still an
// engine file, and Open creates the empty bucket.
func addedBucket(name []byte) bool {
	return bytes.Equal(name, bBodies) || bytes.Equal(name, bSources) || bytes.Equal(name, bHeld) ||
		bytes.Equal(name, bObjects) || bytes.Equal(name, bAttempts) || bytes.Equal(name, bPieces)
}

// Keys in the meta bucket.
var (
	metaVersion = []byte("version") // layout version, 8 bytes big endian
	metaApplied = []byte("applied") // last applied Raft index, 8 bytes big endian
	// metaTokenBase is added to an entry's index to make its leases' tokens,
	// 8 bytes big endian; absent: 0 (PrepareRestore).
	metaTokenBase = []byte("tokenbase")
	metaWidth     = []byte("width") // retention bucket width in ns, 8 bytes big endian
)

// layoutVersion is the version of the bucket layout described in doc.go.
const layoutVersion = 1

// Defaults for the zero values of Options.
const (
	DefaultBucketWidth = time.Hour
	DefaultLockTimeout = 5 * time.Second
	DefaultListLimit   = 100
	MaxListLimit       = 1000
)

// DefaultInitialMmapSize is 8 GiB of address space on 64-bit platforms
// (256 MiB on others), not memory: only file pages the engine has read are
// resident, and they are page cache the kernel can take back. bbolt remaps
// when the file outgrows the map (doubling up to 1 GiB, then 1 GiB at a
// time), and a remap waits for every open read transaction; a raft snapshot
// holds one for as long as it copies the file, so an apply that needed a
// remap waited for the whole copy (TestWritesGrowTheFileWhileASnapshotIsOpen
// hangs with a 256 MiB map). With 8 GiB the file grows to that size without
// a remap. etcd maps 10 GiB up front for the same reason.
var DefaultInitialMmapSize = initialMmapSize(strconv.IntSize)

func initialMmapSize(intSize int) int {
	if intSize < 64 {
		return 256 << 20
	}
	// Computed at run time: the constant 8<<30 does not compile where int
	// has 32 bits.
	gibs := 8
	return gibs << 30
}

// Options configures Open. The zero value is the production setting.
type Options struct {
	// BucketWidth is the width of the retention buckets: a key expires at the
	// end of the bucket that holds its CreatedAt+Retention, and Expire deletes
	// whole buckets. It is part of the replicated state: it is written into a
	// new file and every later Open (and Restore) uses the stored width, so all
	// replicas agree. Zero: DefaultBucketWidth (one hour).
	BucketWidth time.Duration
	// NoSync skips the fsync of each commit. For tests and benchmarks only: a
	// crash may then lose or tear committed entries. Zero (false): every
	// ApplyBatch is on disk before it returns.
	NoSync bool
	// InitialMmapSize is the initial size of the memory map. A write that grows
	// the file past the map must wait for open read transactions (a long
	// Snapshot) to remap, so a generous map keeps writes flowing. Zero:
	// DefaultInitialMmapSize.
	InitialMmapSize int
	// LockTimeout is how long Open waits for the file lock held by another
	// process. Zero: DefaultLockTimeout.
	LockTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.BucketWidth <= 0 {
		o.BucketWidth = DefaultBucketWidth
	}
	if o.InitialMmapSize <= 0 {
		o.InitialMmapSize = DefaultInitialMmapSize
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	return o
}

// Engine is the event state machine on one bbolt file. All methods are safe
// for concurrent use: bbolt serialises write transactions, queries run in read
// transactions beside them.
type Engine struct {
	path string
	opts Options

	// mu guards db and width. Every method holds it shared for its whole
	// transaction; Restore and Close hold it exclusively to swap or close the
	// file.
	mu    sync.RWMutex
	db    *bolt.DB // nil once closed
	width int64    // retention bucket width in ns, as stored in the file

	applied atomic.Uint64 // last applied index, mirrored after each commit

	// wmu guards pending, the write transaction ApplyBatchDeferred keeps
	// open (nil when none). An open transaction holds mu shared. Lock order:
	// wmu, then mu.
	wmu sync.Mutex
	// views are the snapshot views open now (snapview.go); a restore ends
	// their streams, which would otherwise hold it for as long as a slow
	// reader takes.
	viewsMu   sync.Mutex
	views     map[*SnapshotView]struct{}
	replacing bool // a restore is replacing the file: new views begin aborted
	pending   *pendingTx
	// open is set while pending is: LeaseDue then answers from the due
	// entries the pending transaction put (openDue) and the committed
	// state, without waiting for wmu or committing what is pending.
	open atomic.Bool
	// lost is set, for good, when a commit of applied entries failed, or a
	// storage error discarded them (ErrLostCommit). Whoever triggered that commit (the FSM's timer, or a
	// read that needed the file current) the entries are gone from the
	// transaction, and applying later ones on top would skip them forever.
	// Guarded by wmu.
	lost error
	// commit commits a pending transaction: (*bolt.Tx).Commit; tests fail it
	// the way a full disk does.
	commit func(*bolt.Tx) error

	// ovMu guards overlay: the state of every event the pending transaction
	// wrote (0: deleted), so that Exists answers from the applied state
	// whether it is committed yet or not.
	ovMu    sync.RWMutex
	overlay map[string]State
	// openDue: the earliest due entry the pending transaction put, by
	// source (guarded by ovMu; cleared with overlay).
	openDue map[string]int64

	// bodies is the replay guard's in-memory index of the bodies bucket
	// (bodyindex.go), as of the last commit. Guarded by wmu.
	bodies bodyIndex

	// packEvents is how the last commit that created events split the
	// events bucket's pages, and recent the event keys created last
	// (applier.packEvents). Guarded by wmu.
	packEvents bool
	recent     recentKeys
}

// pendingTx is a write transaction with applied entries not yet committed.
type pendingTx struct {
	tx      *bolt.Tx
	a       *applier
	start   uint64 // last applied index when it began
	applied uint64 // last applied index in it
}

// Open opens (creating if needed) the engine file at path.
func Open(path string, opts Options) (*Engine, error) {
	opts = opts.withDefaults()
	e := &Engine{path: path, opts: opts, commit: (*bolt.Tx).Commit}
	db, width, applied, err := openFile(path, opts, true, true)
	if err != nil {
		return nil, err
	}
	e.db, e.width = db, width
	e.applied.Store(applied)
	if err := db.View(func(tx *bolt.Tx) (err error) { e.bodies, err = loadBodyIndex(tx); return err }); err != nil {
		db.Close()
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	return e, nil
}

// openFile opens a bbolt file, checks the layout version and returns the
// stored width and last applied index. With create, it first creates the
// buckets and meta keys a new file needs; without, a file that lacks them is
// refused (Restore checks a snapshot this way). check walks the file's pages
// first (CheckPages); a file this process checked or wrote since need not be.
func openFile(path string, opts Options, create, check bool) (*bolt.DB, int64, uint64, error) {
	db, err := openBolt(path, opts, false, check)
	if err != nil {
		return nil, 0, 0, err
	}
	width, applied, err := checkMeta(db, opts, create)
	if err != nil {
		db.Close()
		return nil, 0, 0, err
	}
	return db, width, applied, nil
}

// openBolt opens path with bbolt, after checking that it is not shorter
// than its meta pages say. Read-only, bbolt does not rebuild the freelist
// (a walk of every page) at open: CheckFile walks a file it does not trust
// itself, where a damaged page can be recovered from.
func openBolt(path string, opts Options, readOnly, check bool) (db *bolt.DB, err error) {
	if readOnly || !check {
		// CheckFile walks the pages itself, first; a restore's files were
		// walked before.
		if err := CheckFileSize(path); err != nil {
			return nil, fmt.Errorf("engine: open %s: %w", path, err)
		}
	} else if err := CheckPages(path); err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	defer func() {
		// What CheckPages does not see and bbolt's freelist rebuild does
		// reaches here as bbolt's panic. The file bbolt opened is not
		// closed then (bbolt gives no handle): rare after CheckPages, and
		// at a start the process ends anyway. Best effort only: bbolt's
		// checking goroutine goes on after the first problem it reports,
		// over a transaction its caller's panic rolls back, and may fault
		// the process; CheckPages, first, is what keeps damage from here.
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("engine: open %s: %w: a damaged page (%v)", path, ErrCorrupt, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.LockTimeout,
		// The hashmap freelist stays fast on a large, fragmented file; not
		// syncing it makes commits cheaper and costs a freelist rebuild at Open.
		FreelistType:    bolt.FreelistMapType,
		NoFreelistSync:  true,
		NoSync:          opts.NoSync,
		InitialMmapSize: opts.InitialMmapSize,
		ReadOnly:        readOnly,
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("engine: open %s: %w: another process holds its lock (is another oncehook running on this data_dir?)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	return db, nil
}

// checkMeta checks (and with create, makes) the buckets and meta keys of an
// engine file, and returns its bucket width and last applied index.
func checkMeta(db *bolt.DB, opts Options, create bool) (int64, uint64, error) {
	path := db.Path()
	var width int64
	var applied uint64
	check := func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				if !create && addedBucket(name) {
					continue
				}
				if !create {
					return fmt.Errorf("%w: no %s bucket: not an engine file", ErrCorrupt, name)
				}
				if _, err := tx.CreateBucket(name); err != nil {
					return err
				}
			}
		}
		m := tx.Bucket(bMeta)
		if v := m.Get(metaVersion); v == nil && create {
			if err := m.Put(metaVersion, be64(layoutVersion)); err != nil {
				return err
			}
			if err := m.Put(metaWidth, be64(uint64(opts.BucketWidth))); err != nil {
				return err
			}
		} else if len(v) != 8 || binary.BigEndian.Uint64(v) != layoutVersion {
			return fmt.Errorf("%w: layout version %x, want %d", ErrCorrupt, v, layoutVersion)
		}
		// Refuse a newer binary's file; stamp ours when we will write (version.go).
		if err := checkFormat(m, create); err != nil {
			return err
		}
		v := m.Get(metaWidth)
		if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) <= 0 {
			return fmt.Errorf("%w: bucket width %x", ErrCorrupt, v)
		}
		width = int64(binary.BigEndian.Uint64(v))
		if v := m.Get(metaApplied); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("%w: applied index %x", ErrCorrupt, v)
			}
			applied = binary.BigEndian.Uint64(v)
		}
		return nil
	}
	var err error
	if create {
		err = db.Update(check)
	} else {
		err = db.View(check)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("engine: open %s: %w", path, err)
	}
	return width, applied, nil
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// Close commits what ApplyBatchDeferred left pending and closes the file.
// Later calls return ErrClosed.
func (e *Engine) Close() error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	ferr := e.flushLocked()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.db == nil {
		return ErrClosed
	}
	err := e.db.Close()
	e.db = nil
	return errors.Join(ferr, err)
}

// Path returns the file the engine was opened on.
func (e *Engine) Path() string { return e.path }

// BucketWidth returns the retention bucket width stored in the file.
func (e *Engine) BucketWidth() time.Duration {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return time.Duration(e.width)
}

// LastApplied returns the index of the last committed entry (0 for a new
// file): entries ApplyBatchDeferred left pending count once they are flushed.
func (e *Engine) LastApplied() uint64 { return e.applied.Load() }

// Apply applies one entry's commands under index; see ApplyBatch.
func (e *Engine) Apply(index uint64, cmds ...Command) ([]Result, error) {
	rs, err := e.ApplyBatch([]Entry{{Index: index, Cmds: cmds}})
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// ApplyBatch applies entries in order in one read-write transaction (one
// commit, one fsync) and returns one []Result per entry, one Result per
// command. A command's rejection is its Result.Err and never aborts the batch.
// An entry whose Index is not above the last applied index is skipped and each
// of its commands gets ErrAlreadyApplied. The last applied index is written in
// the same transaction. The error is only for a storage failure (I/O, a corrupt
// record): then nothing of the batch is applied and the caller should stop.
// Entries left pending by ApplyBatchDeferred are committed first.
func (e *Engine) ApplyBatch(entries []Entry) ([][]Result, error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if err := e.flushLocked(); err != nil {
		return nil, err
	}
	out, err := e.applyLocked(entries, false)
	if err != nil {
		return nil, err
	}
	return out, e.flushLocked()
}

// ApplyBatchDeferred is ApplyBatch without the commit: the entries are
// applied (and their results are final) in a write transaction that stays
// open for the next calls, and are committed by Flush, or by the first call
// that needs the file current: ApplyBatch, List, Counts, Snapshot,
// BeginSnapshot, Sync, Restore, RestoreAt, Hash, Dump, Check, Close, and
// Get of an event the pending transaction changed. Exists answers from the
// applied state without a commit (see written). A pending DropPayloads shows
// in Get only once committed.
// Grouping the entries of several calls into one commit is what makes it
// cheaper: a commit writes every page the transaction touched, one write
// each, and consecutive entries touch mostly the same pages (the ends of the
// time-ordered indexes, the branch pages above them, the counters, meta).
//
// Nothing of a pending transaction is durable: a crash loses it and the
// caller (Raft) must be able to apply those entries again, which it does for
// every entry after the last snapshot; a snapshot flushes first. A storage
// error discards the whole pending transaction, earlier calls included: the
// caller must stop, as after an ApplyBatch error.
func (e *Engine) ApplyBatchDeferred(entries []Entry) ([][]Result, error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.applyLocked(entries, true)
}

// Flush commits the entries ApplyBatchDeferred left pending. It is safe to
// call at any time from any goroutine; without pending entries it does
// nothing.
func (e *Engine) Flush() error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.flushLocked()
}

// applyLocked applies entries in the pending transaction, opening it when
// there is none; deferred tells that it may stay open after this call (so
// Exists must be told what it writes). On a storage error the pending
// transaction is discarded. Callers hold wmu.
func (e *Engine) applyLocked(entries []Entry, deferred bool) ([][]Result, error) {
	if e.lost != nil {
		return nil, e.lost
	}
	p := e.pending
	if p == nil {
		e.mu.RLock()
		if e.db == nil {
			e.mu.RUnlock()
			return nil, ErrClosed
		}
		tx, err := e.db.Begin(true)
		if err != nil {
			e.mu.RUnlock()
			return nil, fmt.Errorf("engine: begin: %w", err)
		}
		a := newApplier(tx, e.width)
		a.noteDue = e.noteDue
		a.bodyIdx = e.bodies
		a.recent = &e.recent
		applied := a.lastApplied()
		p = &pendingTx{tx: tx, a: a, start: applied, applied: applied}
		e.pending = p
		e.open.Store(true)
	}

	total := 0
	for i := range entries {
		total += len(entries[i].Cmds)
	}
	out := make([][]Result, len(entries))
	backing := make([]Result, total)
	a := p.a
	a.written = nil
	if deferred {
		a.written = e.written
	}
	var err error
	for i := range entries {
		en := &entries[i]
		rs := backing[:len(en.Cmds):len(en.Cmds)]
		backing = backing[len(en.Cmds):]
		out[i] = rs
		if en.Index <= p.applied {
			for j := range rs {
				rs[j].Err = ErrAlreadyApplied
			}
			continue
		}
		a.index = en.Index
		for j := range en.Cmds {
			a.pos = uint32(j)
			if rs[j], err = a.apply(&en.Cmds[j]); err != nil {
				err = fmt.Errorf("engine: apply index %d: %w", en.Index, err)
				if p.applied > p.start {
					// Entries of this transaction were applied and answered
					// already; the rollback loses them as a failed commit
					// does, and later entries must not go on top of the gap.
					e.lost = fmt.Errorf("%w: entries %d..%d: %w", ErrLostCommit, p.start+1, p.applied, err)
				}
				e.discardLocked()
				return nil, err
			}
		}
		p.applied = en.Index
	}
	return out, nil
}

// written records, for Exists, that the pending transaction stored the
// event key in state st (0: deleted it).
func (e *Engine) written(key string, st State) {
	e.ovMu.Lock()
	if e.overlay == nil {
		e.overlay = make(map[string]State)
	}
	e.overlay[key] = st
	e.ovMu.Unlock()
}

// clearOverlay forgets what the pending transaction wrote, once it is
// committed (or discarded).
func (e *Engine) clearOverlay() {
	e.ovMu.Lock()
	clear(e.openDue)
	if len(e.overlay) > 0 {
		e.overlay = nil
	}
	e.ovMu.Unlock()
}

// flushLocked commits the pending transaction, if any. Callers hold wmu.
func (e *Engine) flushLocked() error {
	if e.lost != nil {
		return e.lost
	}
	p := e.pending
	if p == nil {
		return nil
	}
	if p.applied == p.start {
		// Nothing new: no commit, no fsync.
		e.discardLocked()
		return nil
	}
	e.pending = nil
	defer e.mu.RUnlock()
	defer e.open.Store(false) // after the commit: LeaseDue then reads it in the file
	defer e.clearOverlay()    // after the commit: Exists then finds the keys in the file
	e.packEvents = p.a.packEvents(e.packEvents)
	if err := p.a.finish(p.applied); err != nil {
		p.tx.Rollback()
		e.lost = fmt.Errorf("%w: entries %d..%d: %w", ErrLostCommit, p.start+1, p.applied, err)
		return e.lost
	}
	if err := e.commit(p.tx); err != nil {
		e.lost = fmt.Errorf("%w: entries %d..%d: commit: %w", ErrLostCommit, p.start+1, p.applied, err)
		return e.lost
	}
	e.bodies.merge(p.a.bodyPend)
	// Commits are ordered by bbolt's writer lock but this store is not: a
	// concurrent, later batch may already have stored a higher index.
	for {
		cur := e.applied.Load()
		if cur >= p.applied || e.applied.CompareAndSwap(cur, p.applied) {
			break
		}
	}
	return nil
}

// discardLocked rolls the pending transaction back. Callers hold wmu.
func (e *Engine) discardLocked() {
	if p := e.pending; p != nil {
		e.pending = nil
		p.tx.Rollback()
		e.mu.RUnlock()
		e.clearOverlay()
		e.open.Store(false)
	}
}

// view runs fn in a read transaction, after committing what
// ApplyBatchDeferred left pending.
func (e *Engine) view(fn func(tx *bolt.Tx) error) error {
	if err := e.Flush(); err != nil {
		return err
	}
	return e.viewCommitted(fn)
}

// viewCommitted runs fn in a read transaction on the committed state.
func (e *Engine) viewCommitted(fn func(tx *bolt.Tx) error) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return ErrClosed
	}
	return e.db.View(fn)
}

// strBytes returns the bytes of s without copying. Only for bbolt lookups,
// which read the key and never keep or modify it.
func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Exists reports the state of key without decoding its record: the intake
// calls it on every delivery to answer duplicates without a Raft round. It
// sees entries ApplyBatchDeferred applied and has not committed yet, without
// committing them.
func (e *Engine) Exists(key string) (State, bool, error) {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return 0, false, nil
	}
	e.ovMu.RLock()
	ost, ok := e.overlay[key]
	e.ovMu.RUnlock()
	if ok {
		return ost, ost != 0, nil
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.db == nil {
		return 0, false, ErrClosed
	}
	tx, err := e.db.Begin(false)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback()
	k := strBytes(key)
	v := tx.Bucket(bEvents).Get(k)
	if v == nil {
		return 0, false, nil
	}
	st, err := recordState(k, v)
	if err != nil {
		return 0, false, err
	}
	return st, true, nil
}

// Get returns the event stored under key, with its cached Response and audit
// trail; with withPayload also its Payload and Headers (nil after
// DropPayloads). ErrNotFound when there is none.
func (e *Engine) Get(key string, withPayload bool) (Event, error) {
	// Only a pending transaction that wrote this event's record has something
	// to show (a record, payload and response change together); the intake
	// reads every duplicate's event, mostly one claimed long ago.
	e.ovMu.RLock()
	_, changed := e.overlay[key]
	e.ovMu.RUnlock()
	if changed {
		if err := e.Flush(); err != nil {
			return Event{}, err
		}
	}
	var ev Event
	err := e.viewCommitted(func(tx *bolt.Tx) error {
		k := strBytes(key)
		v := tx.Bucket(bEvents).Get(k)
		if v == nil {
			return ErrNotFound
		}
		flags, err := decodeRecord(k, v, &ev)
		if err != nil {
			return err
		}
		ev.Key = key
		bk := append(appendTime(make([]byte, 0, 8+len(key)), ev.CreatedAt), key...)
		if flags&flagResponse != 0 {
			if rv := tx.Bucket(bResponses).Get(bk); rv != nil {
				if ev.Response, err = decodeResponse(k, rv); err != nil {
					return err
				}
			}
		}
		if flags&flagHistory != 0 {
			if hv := tx.Bucket(bAttempts).Get(bk); hv != nil {
				if ev.History, err = decodeHistory(k, hv); err != nil {
					return err
				}
			}
		}
		if withPayload {
			if pv := tx.Bucket(bPayloads).Get(bk); pv != nil {
				h, err := decodePayloadHead(k, pv)
				if err != nil {
					return err
				}
				ev.Headers, ev.Payload = h.headers, h.payload
				if h.pieced {
					var c *bolt.Cursor
					if b := tx.Bucket(bPieces); b != nil {
						c = b.Cursor()
					}
					if ev.Payload, err = readPieces(c, bk, h); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

// ListFilter selects events for List. Zero fields do not filter.
type ListFilter struct {
	State  State  // only events in this state (walks the states index)
	Source string // only events of this source
	// After and AfterTime are the cursor: pass the Key and UpdatedAt of the last
	// event of the previous page. Without State the order is by key and only
	// After counts; with State the order is (UpdatedAt, Key), oldest first, and
	// both count. Empty After: from the start.
	After     string
	AfterTime int64
	Limit     int // at most this many; zero: DefaultListLimit; capped at MaxListLimit
}

// List returns events without Payload, Headers and Response: with State set,
// the events in that state by UpdatedAt (oldest first) then key; without, all
// events by key. Without State, a Source filter walks only the keys that
// start with "Source:", as every claimed key does (the source is the key's
// scope, docs/architecture.md), so listing a small source costs its own
// events, not the store. With State, the filter is applied while walking the
// state's index, so a rare source in a large state costs a longer walk.
func (e *Engine) List(f ListFilter) ([]Event, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	limit = min(limit, MaxListLimit)
	if f.State != 0 && !validState(f.State) {
		return nil, fmt.Errorf("%w: list state %d", ErrBadCommand, f.State)
	}
	var out []Event
	err := e.view(func(tx *bolt.Tx) error {
		events := tx.Bucket(bEvents)
		add := func(k, v []byte) error {
			var ev Event
			if _, err := decodeRecord(k, v, &ev); err != nil {
				return err
			}
			if f.Source != "" && ev.Source != f.Source {
				return nil
			}
			ev.Key = string(k)
			out = append(out, ev)
			return nil
		}
		if f.State == 0 {
			var scope []byte
			from := strBytes(f.After)
			if f.Source != "" {
				scope = append([]byte(f.Source), ':')
				if bytes.Compare(from, scope) < 0 {
					from = scope
				}
			}
			c := events.Cursor()
			k, v := c.Seek(from)
			if k != nil && f.After != "" && string(k) == f.After {
				k, v = c.Next()
			}
			for ; k != nil && len(out) < limit; k, v = c.Next() {
				if scope != nil && !bytes.HasPrefix(k, scope) {
					break
				}
				if err := add(k, v); err != nil {
					return err
				}
			}
			return nil
		}
		seek := []byte{byte(f.State)}
		if f.After != "" {
			seek = append(appendTime(seek, f.AfterTime), f.After...)
		}
		c := tx.Bucket(bStates).Cursor()
		k, src := c.Seek(seek)
		if k != nil && f.After != "" && bytes.Equal(k, seek) {
			k, src = c.Next()
		}
		for ; k != nil && k[0] == byte(f.State) && len(out) < limit; k, src = c.Next() {
			if len(k) < 10 {
				return fmt.Errorf("%w: states index key %x", ErrCorrupt, k)
			}
			if f.Source != "" && string(src) != f.Source {
				continue
			}
			v := events.Get(k[9:])
			if v == nil {
				return fmt.Errorf("%w: states index names missing event %q", ErrCorrupt, clip(k[9:]))
			}
			if err := add(k[9:], v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Counts returns the number of events per state and per source, read from the
// counters the applies maintain (no scan).
func (e *Engine) Counts() (map[State]int, map[string]int, error) {
	byState := make(map[State]int)
	bySource := make(map[string]int)
	err := e.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bCounters).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) < 2 || len(v) != 8 {
				return fmt.Errorf("%w: counter %q", ErrCorrupt, k)
			}
			n := int(binary.BigEndian.Uint64(v))
			switch k[0] {
			case counterState:
				byState[State(k[1])] = n
			case counterSource:
				bySource[string(k[1:])] = n
			case counterPending: // Backlog's
			default:
				return fmt.Errorf("%w: counter %q", ErrCorrupt, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return byState, bySource, nil
}

// Snapshot writes a consistent copy of the whole file to w (a bbolt file that
// Restore and Open accept) from one read transaction, so applies continue
// while it runs. It returns the bytes written.
func (e *Engine) Snapshot(w io.Writer) (int64, error) {
	var n int64
	err := e.view(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("engine: snapshot: %w", err)
	}
	return n, nil
}

// Restore replaces the whole state with a snapshot read from r: a snapshot
// stream (SnapshotView.WriteStream, snapstream.go) or a plain engine file
// (Snapshot, Backup). The file is written to a temporary file beside the
// engine file, synced and checked, then renamed over the file and
// reopened; on any failure before the rename the
// current state is untouched. The Engine stays usable; LastApplied and the
// bucket width become the snapshot's.
func (e *Engine) Restore(r io.Reader) error { return e.restore(r, 0) }

// RestoreAt is Restore that records index as the last applied entry in the
// restored file before it replaces the engine's: a snapshot's state under
// the index of the log entry it stands for, where the file's own index may
// be another cluster's (an operator's backup). Written in the same file, so
// that no crash can leave the state restored under the old index: the log
// after that index would then be skipped as applied.
func (e *Engine) RestoreAt(r io.Reader, index uint64) error {
	if index == 0 {
		return errors.New("engine: restore at index 0")
	}
	return e.restore(r, index)
}

func (e *Engine) restore(r io.Reader, index uint64) (err error) {
	dir := filepath.Dir(e.path)
	f, err := os.CreateTemp(dir, filepath.Base(e.path)+".restore-*")
	if err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = copySnapshot(f, r); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	// Check it is an engine file before touching the live one.
	db, _, _, err := openFile(tmp, e.opts, false, true)
	if err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	if index > 0 {
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bMeta).Put(metaApplied, binary.BigEndian.AppendUint64(nil, index))
		})
		if err == nil {
			err = db.Sync() // the engine may run without fsync; this file must not
		}
		if err != nil {
			db.Close()
			return fmt.Errorf("engine: restore: set last applied: %w", err)
		}
	}
	if err = db.Close(); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}

	e.wmu.Lock()
	defer e.wmu.Unlock()
	if err = e.flushLocked(); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	// The file is about to be replaced: a backup or snapshot still being
	// written from it ends at its next write (a stalled reader, at its
	// stream's write deadline), so that its read transaction does not hold
	// the close below, and every read behind it.
	e.abortViews()
	defer e.viewsDone()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.db == nil {
		return ErrClosed
	}
	if err = e.db.Close(); err != nil {
		return fmt.Errorf("engine: restore: close: %w", err)
	}
	e.db = nil
	if err = os.Rename(tmp, e.path); err != nil {
		// The old file is intact: reopen it.
		if db, width, applied, oerr := openFile(e.path, e.opts, false, true); oerr == nil {
			e.db, e.width = db, width
			e.applied.Store(applied)
		}
		return fmt.Errorf("engine: restore: %w", err)
	}
	// From here the file in place is the restored one: a failure leaves the
	// engine closed rather than serving a state that may not be on disk, or
	// a file whose replay guard was not loaded.
	if err = restoreSyncDir(dir); err != nil {
		return fmt.Errorf("%w: sync %s: %w", ErrRestoreIncomplete, dir, err)
	}
	// create: a snapshot written before a bucket was added gets it empty.
	// The pages were walked as tmp, above, while no read waited.
	db, width, applied, err := openFile(e.path, e.opts, true, false)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRestoreIncomplete, err)
	}
	var bodies bodyIndex
	if err = db.View(func(tx *bolt.Tx) (err error) { bodies, err = loadBodyIndex(tx); return err }); err != nil {
		db.Close()
		return fmt.Errorf("%w: replay guard: %w", ErrRestoreIncomplete, err)
	}
	e.db, e.width, e.bodies = db, width, bodies
	e.applied.Store(applied)
	return nil
}

// restoreSyncDir is SyncDir; tests replace it to fail a restore after its
// rename.
var restoreSyncDir = SyncDir

// SyncDir fsyncs the directory dir, so that a file created, renamed or
// removed in it survives a power loss. The engine calls it after a restore
// renames the new file into place; the cluster after it writes its marker
// beside the engine's file.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Hash returns a SHA-256 over every bucket's name and key/value pairs in cursor
// order (nested buckets included). Two files with equal hashes hold the same
// state; it is how determinism and replica convergence are tested.
func (e *Engine) Hash() ([32]byte, error) {
	var sum [32]byte
	h := sha256.New()
	err := e.view(func(tx *bolt.Tx) error {
		return walk(tx, func(depth int, kind byte, k, v []byte) error {
			var hdr [1 + 2*binary.MaxVarintLen64]byte
			b := append(hdr[:0], kind)
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = binary.AppendUvarint(b, uint64(len(v)))
			h.Write(b)
			h.Write(k)
			h.Write(v)
			return nil
		})
	})
	if err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	return sum, nil
}

// Dump writes every bucket's key/value pairs in cursor order to w, one per
// line, hex encoded (for diffs when two Hashes differ).
func (e *Engine) Dump(w io.Writer) error {
	return e.view(func(tx *bolt.Tx) error {
		return walk(tx, func(depth int, kind byte, k, v []byte) error {
			var err error
			switch kind {
			case 'B':
				_, err = fmt.Fprintf(w, "%*sbucket %q\n", 2*depth, "", k)
			case 'E':
				_, err = fmt.Fprintf(w, "%*send\n", 2*depth, "")
			default:
				_, err = fmt.Fprintf(w, "%*s%s = %s\n", 2*depth, "", hex.EncodeToString(k), hex.EncodeToString(v))
			}
			return err
		})
	})
}

// walk calls fn for each bucket ('B', name), each key/value pair ('K') and each
// bucket end ('E'), depth first in cursor order.
func walk(tx *bolt.Tx, fn func(depth int, kind byte, k, v []byte) error) error {
	var rec func(depth int, name []byte, b *bolt.Bucket) error
	rec = func(depth int, name []byte, b *bolt.Bucket) error {
		if err := fn(depth, 'B', name, nil); err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				if sb := b.Bucket(k); sb != nil {
					if err := rec(depth+1, k, sb); err != nil {
						return err
					}
					continue
				}
			}
			if err := fn(depth+1, 'K', k, v); err != nil {
				return err
			}
		}
		return fn(depth, 'E', nil, nil)
	}
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return rec(0, name, b) })
}

// Check runs bbolt's page-level consistency check and the engine's own index
// check (every record has exactly the index entries its state implies, every
// index entry names a matching record, counters equal the records) in one read
// transaction. It scans everything: for tests and offline tools, not the hot
// path.
func (e *Engine) Check() error {
	// wmu: the in-memory body index must not move while it is compared.
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if err := e.flushLocked(); err != nil {
		return err
	}
	return e.viewCommitted(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		if err := checkIndexes(tx); err != nil {
			errs = append(errs, err)
		}
		if want, err := loadBodyIndex(tx); err != nil {
			errs = append(errs, err)
		} else if !maps.Equal(want, e.bodies) {
			errs = append(errs, fmt.Errorf("%w: the in-memory body index (%d entries) differs from the bodies bucket (%d)",
				ErrCorrupt, len(e.bodies), len(want)))
		}
		return errors.Join(errs...)
	})
}

// sortedKeys returns m's keys in order (for deterministic writes).
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// noteDue records that the pending transaction put a due entry of source at t.
func (e *Engine) noteDue(source string, t int64) {
	e.ovMu.Lock()
	if e.openDue == nil {
		e.openDue = make(map[string]int64)
	}
	if old, ok := e.openDue[source]; !ok || t < old {
		e.openDue[source] = t
	}
	e.ovMu.Unlock()
}

// openDueBy reports whether the pending transaction put a due entry, by now,
// of a source quotas do not skip.
func (e *Engine) openDueBy(now int64, quotas []Quota) bool {
	e.ovMu.RLock()
	defer e.ovMu.RUnlock()
	for src, t := range e.openDue {
		if q, ok := quotaOf(quotas, []byte(src)); ok && q.Hard && q.Max == 0 {
			continue
		}
		if t <= now {
			return true
		}
	}
	return false
}
