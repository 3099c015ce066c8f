package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftLogger is the hclog.Logger that raft, its transport and its snapshot
// store write to. Their lines go through the node's own slog logger, tagged
// component=raft, so they take the node's format (text or JSON, log_format)
// and field names: a log pipeline that parses the node's lines parses
// raft's too, where hclog's own output ("[WARN]  raft: ...", or JSON with
// "@level" and "@message") would be a second format in one stream.
//
// Its own level (raft_log_level, default warn) comes first, then the repeat
// filter (raftlog.go), then the node's level. One message changes level:
// raft's "heartbeat timeout reached, starting election" is a WARN even when
// no leader was ever heard since this node started, which is every start of
// a single node and the first election of a cluster; without a last leader
// it is written at INFO, and with one (a leader went quiet) it stays WARN.
// And "failed to get log" for an entry compacted away (below the log's
// first) is INFO: a follower that needs it is sent a snapshot, which is
// routine (a restore, a follower back after a long absence).
type raftLogger struct {
	base    *slog.Logger // the node's
	log     *slog.Logger // base with component and implied args
	name    string       // hclog's name: "raft", "raft.net", ...
	implied []any
	level   *atomic.Int32 // an hclog.Level, shared with the loggers derived from this one
	exclude func(level hclog.Level, msg string, args ...any) bool
	// firstIndex is the log store's FirstIndex, once it is open (nil
	// before): it tells an entry compacted away from one missing.
	firstIndex func() (uint64, error)
}

func newRaftLogger(node *slog.Logger, level string, exclude func(hclog.Level, string, ...any) bool) *raftLogger {
	l := &raftLogger{base: node, name: "raft", level: new(atomic.Int32), exclude: exclude}
	l.log = node.With("component", l.name)
	lv := hclog.LevelFromString(level)
	if lv == hclog.NoLevel {
		lv = hclog.Warn
	}
	l.level.Store(int32(lv))
	return l
}

// startupElection is the message whose level depends on its last leader.
const startupElection = "heartbeat timeout reached, starting election"

// missingLog is raft's message for an entry its log no longer holds.
const missingLog = "failed to get log"

func (l *raftLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Warn && msg == startupElection && argValue(args, "last-leader-id") == "" {
		level = hclog.Info
	}
	if level == hclog.Error && msg == missingLog && argValue(args, "error") == raft.ErrLogNotFound.Error() && l.compactedAway(args) {
		// The leader's replication reads an entry a follower needs that a
		// compaction or a restore took away: it sends that follower a
		// snapshot instead, as designed. Every catch-up by snapshot said
		// so at ERROR. An entry missing inside the log (raft panics next)
		// stays ERROR.
		level = hclog.Info
	}
	if level == hclog.Off || level < hclog.Level(l.level.Load()) {
		return
	}
	if l.exclude != nil && l.exclude(level, msg, args...) {
		return
	}
	l.log.Log(context.Background(), slogLevel(level), msg, plainArgs(args)...)
}

// compactedAway reports whether the "index" argument names an entry below
// the log's first: one a compaction took away, not one missing inside it.
func (l *raftLogger) compactedAway(args []any) bool {
	if l.firstIndex == nil {
		return false
	}
	idx, err := strconv.ParseUint(argValue(args, "index"), 10, 64)
	if err != nil {
		return false
	}
	first, err := l.firstIndex()
	return err == nil && idx < first
}

// argValue returns the value of one of hclog's key/value arguments as text,
// "" when it is absent or empty.
func argValue(args []any, name string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == name {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

// plainArgs turns hclog's formatted values (hclog.Fmt) into text; slog
// would print their parts as a list.
func plainArgs(args []any) []any {
	out, copied := args, false
	for i, a := range args {
		f, ok := a.(hclog.Format)
		if !ok || len(f) == 0 {
			continue
		}
		format, ok := f[0].(string)
		if !ok {
			continue
		}
		if !copied {
			out, copied = append([]any(nil), args...), true
		}
		out[i] = fmt.Sprintf(format, f[1:]...)
	}
	return out
}

func slogLevel(l hclog.Level) slog.Level {
	switch {
	case l <= hclog.Trace:
		return slog.LevelDebug - 4
	case l == hclog.Debug:
		return slog.LevelDebug
	case l == hclog.Info:
		return slog.LevelInfo
	case l == hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (l *raftLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *raftLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *raftLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *raftLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *raftLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *raftLogger) enabled(level hclog.Level) bool {
	return level >= hclog.Level(l.level.Load()) && hclog.Level(l.level.Load()) != hclog.Off
}

func (l *raftLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *raftLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *raftLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *raftLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *raftLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *raftLogger) ImpliedArgs() []any { return l.implied }

func (l *raftLogger) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(append([]any(nil), l.implied...), args...)
	c.log = l.log.With(plainArgs(args)...)
	return &c
}

func (l *raftLogger) Name() string { return l.name }

func (l *raftLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

// ResetNamed names the logger afresh; the component attribute follows the
// name, the implied arguments stay.
func (l *raftLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	c.log = l.base.With("component", name).With(plainArgs(l.implied)...)
	return &c
}

func (l *raftLogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }
func (l *raftLogger) GetLevel() hclog.Level      { return hclog.Level(l.level.Load()) }

func (l *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter writes each line it is given as one message, at the
// level the options force, else INFO.
func (l *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return lineWriter(func(line string) { l.Log(level, line) })
}

type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(line) > 0 {
			w(string(line))
		}
	}
	return len(p), nil
}
