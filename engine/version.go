package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// FormatVersion names everything this binary understands of the engine's
// stored and replicated formats: buckets, record flags, entry fields, ops and
// their meanings. It grows by one each time one of them is added, never for a
// change that older binaries read correctly. The history:
//
//	1  the first release: buckets meta..counters, record flags response and
//	   step, entry fields now..step, ops claim..noop
//	2  the replay guard: bodies bucket, record flag body, entry field bodyKey
//	3  pause: sources and held buckets, ops pause and resume
//	4  ordered objects: objects bucket, record flag order
//	5  attempt history: attempts bucket, record flag history, entry field attempt
//	6  retention rules: record flags deadKept and life, entry fields
//	   payloadRetention, deadRetention and horizon, op purge
//	7  a keyed replay's required state: entry field onlyFrom; log entries
//	   carry their writer's format (entry version 2)
//	8  a claim that carries its lease: entry field leaseNow
//	9  the due index by source (due.go; Open rewrites an older file's), the
//	   pending counters by source, and a lease's quotas: entry fields
//	   quotas, share and spare
//	10 a sync answer's Content-Type: entry field responseType, response
//	   value version 2
//	11 a hand-back's refund of the lease's attempt: entry field refund
//	12 a token base (meta tokenbase, set by PrepareRestore): a lease's token
//	   is the entry's index plus the base, so that after a restore tokens
//	   stay above every token issued before and every token the backup holds
//	13 fragments: an entry larger than FragmentChunk travels as several log
//	   entries (entry version 3) that every replica joins (fragment.go)
//	14 pieces: a payload larger than pieceLen is stored in the pieces bucket
//	   in pieces, its head a payload value of version 2 (pieces.go)
//	15 a provider's re-arm (a keyed replay with onlyFrom) leaves an ordered
//	   event whose object moved on as it is (ErrSuperseded); an orders entry
//	   names the claim that set it
//	16 an orders entry is kept as long as any event of its object whose
//	   expiry moved (unfinished past its retention, dead, replayed)
//	17 an expire with a max visits at most that many entries of the ended
//	   buckets, deleting each
//	18 the cluster's id: meta cluster, op identify (identity.go)
//	19 a lease's lengths by source from the running configuration: entry
//	   field leases (an event of a named source is leased for, and keeps,
//	   that length)
//	20 a provider's re-arm (a keyed replay with onlyFrom, entry field
//	   leaseFor the source's lease) leaves a dead event whose last attempt
//	   timed out while that attempt's lease runs (ErrLastAttemptRunning)
//	21 a replay by state with a max visits at most that many entries of
//	   the state's index, from a cursor (entry fields since and key), of
//	   events updated before before; a paused source's pending events stay
//	   in the due index (leases pass over its run), a pause moves nothing
//	22 a reclaim's horizon cuts a lease ending beyond it to Now plus the
//	   event's lease length, no longer to Now (a clock stepped back)
//
// A file records the highest format that has written to it (meta "format";
// files written before the stamp existed have none and read as format 0). Open
// and Restore refuse a file stamped newer than FormatVersion with
// ErrNewerFormat, and stamp an older one: the binary that writes to it next
// may add any of its formats' fields. One index needs migrating: the due
// index of a file older than format 9 is rewritten by source (migrateDue),
// and its pending counters are written (countPending), in the transaction
// that stamps it. Nothing else does: added buckets are
// created empty (addedBucket), and every optional record field and entry
// field is announced by its flag or mask bit, so an old value keeps its
// bytes and meaning.
//
// A log entry (version 2) carries its writer's FormatVersion, and its
// commands are applied with that format's meanings where a meaning changed
// (Command.semantics): a newer follower applying an older leader's entries
// during a rolling upgrade computes what the leader computes, so the replicas
// stay byte-identical. The changed meanings, and the format they start at:
//
//	formatOrderedObjects  a claim with an order object joins its object's
//	                      queue (delivery one at a time per object)
//	formatRetentionRules  expire keeps unfinished and dead events (moves
//	                      them); a replay gives a fresh retention window
//	formatTokenBase       a lease's token is the entry's index plus the
//	                      file's token base
//	formatPieces          a claim stores a payload larger than pieceLen in
//	                      pieces (the file's layout, which Hash covers)
//	formatRearmOrder      a replay with OnlyFrom of an ordered event whose
//	                      object moved on leaves it (ErrSuperseded)
//	formatOrderKept       an event whose expiry moves keeps its object's
//	                      orders entry at least as long (keepOrder)
//	formatExpireBatched   an expire's Max bounds the entries it visits
//	formatRearmWait       a replay with OnlyFrom leaves a dead event whose
//	                      timed-out last attempt's lease runs at Now
//	formatReplayBatched   a replay by state's Max bounds the entries it
//	                      visits, from its cursor, before Before
//	formatPauseInPlace    a pause leaves the source's due events in due,
//	                      and a transition into pending of a paused
//	                      source's event indexes it in due, not held
//	formatLeaseKeptAhead  a reclaim's horizon cuts a lease ending beyond it
//	                      to Now plus the event's lease length (at most the
//	                      horizon), where it cut it to Now
//
// An entry this binary cannot read (a newer entry version or format, an
// unknown field-mask bit or an unknown op) fails
// to decode with ErrNewerFormat rather than ErrCorrupt, and the cluster stops
// applying instead of skipping it (docs/operations.md, Upgrades).
const FormatVersion = 22

// Formats at which the meaning of an existing command changed.
const (
	formatOrderedObjects = 4
	formatRetentionRules = 6
	formatTokenBase      = 12
	formatPieces         = 14
	formatRearmOrder     = 15
	formatOrderKept      = 16
	formatExpireBatched  = 17
	formatRearmWait      = 20
	formatReplayBatched  = 21
	formatPauseInPlace   = 21
	formatLeaseKeptAhead = 22
)

// ErrNewerFormat: a file, snapshot or log entry was written by a newer binary
// (a higher FormatVersion) than this one. The error names both; the remedy is
// to upgrade this node's binary, never to skip the data.
var ErrNewerFormat = errors.New("engine: written by a newer format")

// metaFormat is the meta key of the highest format that has written to the
// file, 8 bytes big endian.
var metaFormat = []byte("format")

// lastOp is the newest op of FormatVersion: a higher op in a log entry was
// written by a newer binary. Raise it with every new op.
const lastOp = OpIdentify

// fileFormat returns the format stamped in a file's meta bucket (0: none).
func fileFormat(m *bolt.Bucket) (uint64, error) {
	v := m.Get(metaFormat)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: format %x", ErrCorrupt, v)
	}
	return binary.BigEndian.Uint64(v), nil
}

// formatsAhead bounds how far a newer release's format can be ahead of this
// binary's: formats are numbered one after the other, one per change of the
// data, so a stamp further ahead is damage, not a release.
const formatsAhead = 1000

// checkFormat refuses a file stamped by a newer format than this binary's
// and, with stamp, records FormatVersion in an older one.
func checkFormat(m *bolt.Bucket, stamp bool) error {
	f, err := fileFormat(m)
	if err != nil {
		return err
	}
	if f > FormatVersion+formatsAhead {
		// bbolt keeps no checksum of its data pages: a damaged stamp must not
		// send the operator after a binary that was never released.
		return fmt.Errorf("%w: engine file stamped format %d, which no release wrote (this binary writes format %d): the file is damaged",
			ErrCorrupt, f, FormatVersion)
	}
	if f > FormatVersion {
		return fmt.Errorf("%w: engine file written by format %d; this binary reads up to format %d: upgrade this node's binary",
			ErrNewerFormat, f, FormatVersion)
	}
	if stamp && f < FormatVersion {
		if f < formatDueBySource {
			if err := migrateDue(m.Tx()); err != nil {
				return fmt.Errorf("migrate the due index: %w", err)
			}
			if err := countPending(m.Tx()); err != nil {
				return fmt.Errorf("count the pending events: %w", err)
			}
		}
		return m.Put(metaFormat, be64(FormatVersion))
	}
	return nil
}

// Format returns the format stamped in the open file: FormatVersion once this
// binary has opened it.
func (e *Engine) Format() (uint64, error) {
	var f uint64
	err := e.view(func(tx *bolt.Tx) (err error) {
		f, err = fileFormat(tx.Bucket(bMeta))
		return err
	})
	return f, err
}

// newerEntry is the decode error of a log entry part this binary does not know.
func newerEntry(what string) string {
	return fmt.Sprintf("%s is from a newer format; this binary reads up to format %d: upgrade this node's binary", what, FormatVersion)
}

// failNewer is fail for a part of the input a newer binary wrote: the error
// wraps ErrNewerFormat instead of ErrCorrupt.
func (d *decoder) failNewer(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrNewerFormat, newerEntry(what))
	}
}
