package engine

import "errors"

// Outcomes callers branch on. A duplicate claim is not an error (Result.Created == false).
var (
	// ErrStaleToken: a complete or fail carried a fencing token older than the
	// event's current lease; the late worker's result is discarded.
	ErrStaleToken = errors.New("engine: stale fencing token")
	// ErrNotFound: no event with that key.
	ErrNotFound = errors.New("engine: event not found")
	// ErrWrongState: the command does not apply to the event's current state
	// (e.g. complete of a pending event, fail after done, replay of a pending event).
	ErrWrongState = errors.New("engine: wrong state for command")
	// ErrAlreadyApplied: the entry's index is not newer than the last applied
	// index; the command was skipped (safe log replay after restart).
	ErrAlreadyApplied = errors.New("engine: entry already applied")
	// ErrCorrupt: a stored record or an encoded command failed to decode.
	ErrCorrupt = errors.New("engine: corrupt record")
	// ErrBadCommand: a command is malformed (unknown op, empty key, ...).
	ErrBadCommand = errors.New("engine: bad command")
	// ErrNoPayload: a replay of an event whose payload was dropped after its
	// payload retention; there is nothing to deliver again.
	ErrNoPayload = errors.New("engine: payload dropped")
	// ErrSuperseded: a provider's re-arm (a replay with OnlyFrom) of an
	// ordered event whose object has a newer event claimed since; the event
	// stays as it is, since delivering it now would put it after a newer
	// one (order.go). An operator's replay has no such check.
	ErrSuperseded = errors.New("engine: a newer event of its order object was claimed")
	// ErrLastAttemptRunning: a provider's re-arm (a replay with OnlyFrom)
	// of a dead event whose last attempt timed out less than its lease ago
	// (LastAttemptWait): the handler may still be running it, and a new
	// attempt now would run beside it. The event stays dead.
	ErrLastAttemptRunning = errors.New("engine: the event's last attempt timed out and its lease still runs")
	// ErrClosed: the engine was closed (or a Restore failed with
	// ErrRestoreIncomplete).
	ErrClosed = errors.New("engine: closed")
	// ErrRestoreIncomplete: a Restore put the restored file in place of the
	// engine's and then failed (its directory would not sync, the file would
	// not open again, or its replay guard would not load). The engine is
	// closed; the file holds the restored state under the index RestoreAt
	// gave it. The process must restart.
	ErrRestoreIncomplete = errors.New("engine: restore replaced the file but did not finish")
	// ErrLostCommit: a commit of applied entries failed (a full disk), so the
	// file no longer holds what the caller was told was applied. Nothing is
	// applied or read after it: the process must restart and apply those
	// entries again from the log.
	ErrLostCommit = errors.New("engine: applied entries were not committed")
)
