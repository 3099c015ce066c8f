// Package engine is oncehook's event state machine: every claimed idempotency
// key, its payload, its lifecycle (pending -> processing -> done | pending
// again | dead, stale; docs/architecture.md, Event states), its leases and
// fencing tokens, and its expiry, in one bbolt file.
//
// The cluster package applies Raft log entries to it (ApplyBatchDeferred), snapshots
// it (Snapshot) and restores it (Restore); the intake and the admin API read it
// (Exists, Get, List, Counts). The engine owns the file, the record encodings
// and the Raft entry codec (EncodeEntry, DecodeEntry). The commands and their
// outcomes are the contract in command.go and errors.go.
//
// # Invariants
//
//   - Deterministic. Apply never reads a clock or random numbers: every time is
//     in the command (Command.Now, stamped by the Raft leader; durations are
//     relative to it). Nothing written depends on map iteration order
//     (counters are written in sorted order). The same entries applied to two
//     fresh files give byte-identical bucket contents (Hash).
//   - Atomic batches. ApplyBatch applies many entries in one bbolt read-write
//     transaction and stores the last applied index in the same transaction,
//     so after a crash the file is exactly as of some batch, and entries at or
//     below the stored index are skipped (ErrAlreadyApplied) when the log is
//     replayed. A rejected command (Result.Err) changes nothing and never
//     aborts the batch; only storage failures do. ApplyBatchDeferred leaves
//     the transaction open so that the entries of several calls share one
//     commit (Flush, or the next call that needs the file current); Exists
//     sees those entries at once, through an in-memory note of the event
//     states they wrote.
//   - Durable. Each commit is fsynced before ApplyBatch returns, unless
//     Options.NoSync. The freelist is not synced (rebuilt at Open). Entries
//     left pending by ApplyBatchDeferred are not durable until a commit: the
//     caller must be able to apply them again (Raft replays the log).
//   - Fenced. A lease's token is the index of the entry that applied it plus
//     the file's token base (0 until a restore; PrepareRestore raises it above
//     every token issued before and every token the backup holds: format 12,
//     tokenbase.go), so tokens grow with the Raft log, across restores too;
//     Complete and Fail with an older token are rejected (ErrStaleToken), and
//     an event is never leased twice under one token.
//   - Attempts counts delivery attempts started: Lease increments it, Fail
//     compares it with MaxAttempts (dead when Attempts >= MaxAttempts; 0 means
//     no limit), Reclaim keeps it, Replay resets it to 0, and a Fail with
//     Refund (a hand-back: the attempt never started) takes the lease's one
//     back and never makes the event dead.
//   - Cheap when big. Lease, Reclaim, Expire, DropPayloads and Purge walk
//     time-ordered indexes from their start and stop at Now (or Before), so
//     their cost grows with the events they change, not with the events
//     stored (Lease's also with the sources that have due events: it merges
//     their runs, and a source whose quota is spent costs it nothing more); Reclaim's horizon walks the due and leases indexes from their
//     end and stops at Now+Horizon. Expire ends whole retention buckets (keys
//     live at least their retention: a key claimed at Now with Retention R
//     expires at the end of the bucket holding Now+R). Replay by state seeks
//     to Since in that state's index. Counts reads counters kept in the same
//     transactions, not a scan.
//   - Nothing unfinished expires. Expire deletes the done and stale events of
//     an ended bucket, and the dead ones flagged flagDeadKept (their dead
//     retention passed; reported in Result.Events); it moves the pending,
//     processing and other dead events to a later bucket (Now + the event's
//     RetentionWindow; an unflagged dead one DefaultDeadRetention, flagged).
//     A Fail that makes an event dead moves its expiry to at least the bucket
//     of Now+DeadRetention and flags it; a replay moves it to the bucket of
//     Now+RetentionWindow and clears the flag. The window is the claim's
//     ExpiresAt-CreatedAt, stored in the record (flagLife) once it moved.
//   - Paused sources. While a source is paused its pending events wait in
//     its run of due, which Lease and LeaseDue pass over (one lookup in
//     sources a run), so none is leased and none of their attempts is
//     spent; OpPause and OpResume move nothing (format 21). Entries of older
//     formats moved the source's due entries to held at a pause, indexed a
//     paused source's transitions into pending there, and moved them back
//     at a resume; OpResume still moves what they left in held back to due,
//     at their own times, so they go out oldest first. Leases already out
//     are unaffected (pause.go).
//   - Ordered delivery. Every unfinished (pending or processing) event
//     claimed with an order object is in its object's queue (objects),
//     oldest order time first, ties in claim order (entry index, then
//     position in the entry); Lease leases an ordered event only when it is
//     its queue's head, and the head leaves only when done, dead or deleted,
//     so at most one event per object is processing and it is the head. A
//     replay appends the event at the tail (order.go). Lease walks past the
//     due events that are not their queue's head: they cost it one seek each.
//   - Attempt history. A Fail carrying an Attempt appends it (body cut to
//     MaxAttemptBody bytes) to the event's history, the newest 10 kept;
//     nothing else writes it; deleting the event deletes it (history.go).
//   - Indexes agree with records: every event has one states entry; a
//     pending event has a due entry, or, of a paused source, a due entry
//     xor a held entry; a lease entry iff processing, a done entry while done
//     with its payload (at doneTime: PayloadDropAt, or UpdatedAt without
//     one); one expiry entry, at ExpiresAt; flagDeadKept only on dead
//     events, PayloadDropAt only on done ones; an objects entry iff ordered
//     and unfinished; an attempts entry iff flagged; counters equal the
//     records.
//     Check verifies all of it.
//
// # Bucket layout (version 1)
//
// time(t) in a key is t as 8 bytes big endian with the sign bit flipped, so
// keys sort in time order. Records are described in codec.go. Only the events
// bucket is keyed by the (random) idempotency key; every other bucket a claim
// writes starts its keys with a time that grows with the log (due and states
// after a short prefix: the source, the state), so a batch of claims appends
// to the last pages of a few runs instead of dirtying one random page per
// claim and bucket. Moves of many events (lease, reclaim, replay) are done in
// key order for the same reason (see keyOrder).
//
//	meta       "version" -> layout version; "applied" -> last applied index;
//	           "tokenbase" -> added to an index to make a lease's token
//	           (tokenbase.go; absent: 0);
//	           "width" -> retention bucket width in ns (fixed at creation);
//	           "format" -> the highest FormatVersion that wrote the file
//	           (version.go; absent in files older than the stamp);
//	           "cluster" -> the cluster's id (identity.go; absent: not named)
//	events     key -> event record (state, attempts, token, times, source,
//	           last error, audit, the handler's last step); small, so Get and
//	           List stay cheap
//	payloads   time(CreatedAt) key -> headers + payload (dropped by DropPayloads);
//	           a payload over 64 KiB (format 14): headers + its length, the
//	           bytes in pieces
//	pieces     time(CreatedAt) key n(4) -> bytes n*64Ki.. of the payload
//	           (pieces.go: written once, deleted with the payload)
//	responses  time(CreatedAt) key -> cached handler response (sync mode)
//	due        len(source) source time(NextAttemptAt) key -> ""  (every
//	           pending event of a source that is not paused; len is 2 bytes
//	           big endian, so each source's events are one run, oldest
//	           first, and a lease merges the runs: due.go. Files of format 8
//	           and older had time key only; Open rewrites them)
//	leases     time(LeaseUntil) key -> ""      (every processing event)
//	done       time(drop) key -> ""            (done events still holding a payload;
//	           drop is PayloadDropAt = completion + the Complete's
//	           PayloadRetention, or UpdatedAt for events completed without
//	           one, which DropPayloads drops by Since)
//	states     state time(UpdatedAt) key -> source  (every event; List, Replay by state)
//	expiry     time(bucket end) -> bucket of
//	             'e' time(CreatedAt) key -> ""  (the events that expire with it)
//	             'o' object -> ""               (the order entries that expire with it)
//	           (an event's entry moves when its expiry does; a bucket left
//	           empty stays until it ends)
//	orders     order object -> newest order time, expiry (8+8 bytes; ordering guard),
//	           then the entry index and position of the claim that set it
//	           (8+4 bytes, format 15; order.go superseded); its expiry follows
//	           any event of the object whose expiry moves later (format 16,
//	           retention.go keepOrder)
//	counters   's' state -> n; 'c' source -> n; 'p' source -> pending n
//	           (8 bytes big endian, no zero entries; 'p' since format 9:
//	           Open counts an older file's)
//	bodies     time(CreatedAt) key -> body key  (events holding a replay-guard
//	           entry, flagged in their record; an in-memory index finds them
//	           by body key, see bodyindex.go; added to version 1 later: a file
//	           without it is read as empty)
//	sources    source -> paused record (paused at, who, reason; codec in
//	           pause.go); present iff the source is paused (OpPause, OpResume)
//	held       source 0x00 time(NextAttemptAt) key -> ""  (a pending event
//	           of a paused source that an entry older than format 21 indexed
//	           here instead of due; a paused source name never holds 0x00)
//	objects    len(object) object time(OrderTime) index(8) pos(4) key -> ""
//	           (every unfinished event claimed with an order object; the
//	           2-byte length keeps objects apart; order.go)
//	attempts   time(CreatedAt) key -> the event's failed attempts (flagged in
//	           its record; history.go)
//
// sources and held were added to version 1 later, like bodies: a file or
// snapshot without them opens, and Open creates them empty. So were objects
// and attempts, and pieces.
//
// # Imports
//
// The engine imports nothing of oncehook, and must not import raft, fasthttp,
// toml or net/http (TestDependencyRule): it is a pure library around bbolt. It
// starts no goroutines.
package engine
