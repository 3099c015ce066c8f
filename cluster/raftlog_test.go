package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TestRaftLogRepeats logs what hashicorp/raft logs while a follower is down
// (the same lines, with a changing backoff, several times a second) through
// a logger built like the node's, and counts the lines written.
func TestRaftLogRepeats(t *testing.T) {
	clock := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	f := newRepeatFilter(repeatWindow, func() time.Time { return clock })
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: &out, Exclude: f.exclude})
	down := raft.Server{Suffrage: raft.Voter, ID: "node2", Address: "127.0.0.1:7002"}
	other := raft.Server{Suffrage: raft.Voter, ID: "node3", Address: "127.0.0.1:7003"}

	count := func(s string) int { return strings.Count(out.String(), s) }
	// Two minutes of a peer down, a heartbeat and an append failing every
	// 250 ms, the lease check every second.
	for i := range 480 {
		hl.Error("failed to heartbeat to", "peer", down.Address, "backoff time", time.Duration(i)*time.Millisecond, "error", "connection refused")
		hl.Error("failed to appendEntries to", "peer", down, "error", "connection refused")
		if i%4 == 0 {
			hl.Warn("failed to contact", "server-id", down.ID, "time", time.Duration(i)*250*time.Millisecond)
		}
		clock = clock.Add(250 * time.Millisecond)
	}
	// 120 s in 30 s windows: written at 0, 30, 60 and 90 s.
	for _, msg := range []string{"failed to heartbeat to", "failed to appendEntries to", "failed to contact"} {
		if n := count(msg); n != 4 {
			t.Errorf("%q written %d times in two minutes, want 4:\n%s", msg, n, out.String())
		}
	}

	// Another peer's failure is its own message.
	hl.Error("failed to appendEntries to", "peer", other, "error", "connection refused")
	if n := count("node3"); n != 1 {
		t.Errorf("the other peer's failure written %d times, want 1", n)
	}
	// INFO lines are never held back: a raft log level of info or debug
	// shows everything it asks for.
	for range 3 {
		hl.Info("pipelining replication", "peer", down)
	}
	if n := count("pipelining replication"); n != 3 {
		t.Errorf("info line written %d times, want 3", n)
	}
	// A repeat after the window is written again.
	clock = clock.Add(repeatWindow)
	hl.Error("failed to appendEntries to", "peer", other, "error", "connection refused")
	if n := count("node3"); n != 2 {
		t.Errorf("the other peer's failure after a window written %d times in all, want 2", n)
	}
}

// TestRaftLogRepeatsBounded checks the filter's memory stays bounded when
// messages carry an ever-changing identity.
func TestRaftLogRepeatsBounded(t *testing.T) {
	f := newRepeatFilter(repeatWindow, nil)
	for i := range 3 * repeatKeys {
		if f.exclude(hclog.Error, "failed to accept connection", "peer", i) {
			t.Fatalf("message %d about a new peer was held back", i)
		}
	}
	if n := len(f.last); n > repeatKeys {
		t.Errorf("filter holds %d keys, want at most %d", n, repeatKeys)
	}
}

// TestHandoverWritesNoError: an operator's leadership transfer leaves no
// ERROR in the old leader's raft log (raft writes one when the new leader's
// term reaches it; it is the hand-over working).
func TestHandoverWritesNoError(t *testing.T) {
	logs := map[string]*lockedBuffer{}
	c := newTestCluster(t, 3, func(cfg *Config) {
		logs[cfg.ID] = &lockedBuffer{}
		cfg.Logger, cfg.RaftLogLevel = slog.New(slog.NewTextHandler(logs[cfg.ID], nil)), "warn"
	})
	ctx := ctxT(t, 30*time.Second)
	li := c.waitLeader(-1)
	old := c.ids[li]
	to, err := c.nodes[li].TransferLeadership(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitKnowsLeader(li, slices.Index(c.ids, to))
	// The old leader's replication to the new one sees the higher term on
	// its next append: one more claim makes sure it has.
	c.mustClaim("src:after-transfer", -1)
	if out := logs[old].String(); strings.Contains(out, "level=ERROR") {
		t.Errorf("the old leader logged an ERROR during a transfer:\n%s", out)
	}
}

// TestRaftLogHandover: the hand-over's ERROR is dropped only while the node
// hands its leadership over; other ERRORs are not.
func TestRaftLogHandover(t *testing.T) {
	var out bytes.Buffer
	handing := false
	f := newRepeatFilter(repeatWindow, nil)
	f.handingOver = func() bool { return handing }
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: &out, Exclude: f.exclude})
	newer := func(peer string) { hl.Error("peer has newer term, stopping replication", "peer", peer) }

	handing = true
	newer("n2")
	hl.Error("failed to appendEntries to", "peer", "n2", "error", "EOF")
	if s := out.String(); strings.Contains(s, "newer term") || !strings.Contains(s, "failed to appendEntries") {
		t.Errorf("while handing over:\n%s\nwant only the append failure", s)
	}
	handing = false
	newer("n3") // a deposed leader that learns of a newer term by itself
	if !strings.Contains(out.String(), "newer term") {
		t.Errorf("outside a hand-over the newer term was not logged:\n%s", out.String())
	}
}

// TestRaftLinesTakeTheNodesFormat: raft's own lines go through the node's
// logger (component=raft), so a log pipeline that parses the node's lines,
// text or JSON (log_format), meets no second format from the library.
func TestRaftLinesTakeTheNodesFormat(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var out lockedBuffer
			h := slog.Handler(slog.NewTextHandler(&out, nil))
			if format == "json" {
				h = slog.NewJSONHandler(&out, nil)
			}
			n := openSolo(t, t.TempDir(), func(c *Config) {
				c.Logger, c.RaftLogLevel = slog.New(h), "info"
			})
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			raftLines := 0
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if format == "text" {
					if strings.Contains(l, "[INFO]") || strings.Contains(l, "[WARN]") || !strings.HasPrefix(l, "time=") {
						t.Fatalf("line %q is not in the node's text format", l)
					}
					if strings.Contains(l, " component=raft") {
						raftLines++
					}
					continue
				}
				var v map[string]any
				if err := json.Unmarshal([]byte(l), &v); err != nil || v["msg"] == nil || v["level"] == nil {
					t.Fatalf("line %q is not a JSON object of the node's (%v)", l, err)
				}
				if v["component"] == "raft" {
					raftLines++
				}
			}
			if raftLines == 0 {
				t.Fatalf("no line of component raft at info while starting a node:\n%s", out.String())
			}
		})
	}
}

// TestStartupElectionIsNoWarning: the election a node starts because it has
// heard of no leader since it started (every start of a single node) is
// INFO; one it starts because its leader went quiet stays WARN. A single
// node's start writes no WARN line at raft's default level.
func TestStartupElectionIsNoWarning(t *testing.T) {
	var out lockedBuffer
	n := openSolo(t, t.TempDir(), func(c *Config) {
		c.Logger, c.RaftLogLevel = slog.New(slog.NewTextHandler(&out, nil)), "warn"
	})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "level=WARN") || strings.Contains(out.String(), "level=ERROR") {
		t.Errorf("a single node's start and stop logged:\n%s", out.String())
	}

	for _, tt := range []struct {
		leader, want string
	}{
		{"", "level=INFO"},
		{"n1", "level=WARN"},
	} {
		var buf bytes.Buffer
		l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)), "info", nil)
		l.Warn(startupElection, "last-leader-addr", tt.leader, "last-leader-id", tt.leader)
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("last leader %q: %q, want %s", tt.leader, buf.String(), tt.want)
		}
	}
}

// TestMissingLogForASnapshotIsNoError: the leader's "failed to get log" for
// an entry compacted away (below the log's first: it then sends that
// follower a snapshot) is INFO; one missing inside the log, or any other
// error, stays ERROR.
func TestMissingLogForASnapshotIsNoError(t *testing.T) {
	for _, tt := range []struct {
		index uint64
		err   error
		want  string
	}{
		{42, raft.ErrLogNotFound, "level=INFO"},   // compacted away: the log starts at 100
		{150, raft.ErrLogNotFound, "level=ERROR"}, // missing inside the log: raft panics next
		{42, errors.New("disk I/O error"), "level=ERROR"},
	} {
		var buf bytes.Buffer
		l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, nil)), "info", nil)
		l.firstIndex = func() (uint64, error) { return 100, nil }
		l.Named("replication").Error(missingLog, "index", tt.index, "error", tt.err)
		if !strings.Contains(buf.String(), tt.want) {
			t.Errorf("index %d, %v: %q, want %s", tt.index, tt.err, buf.String(), tt.want)
		}
	}
}

// TestRaftLoggerSurface: the parts of hclog's interface the library uses:
// its level, derived loggers' names and arguments, formatted values, the
// repeat filter, and the standard-library writer.
func TestRaftLoggerSurface(t *testing.T) {
	var buf bytes.Buffer
	f := newRepeatFilter(repeatWindow, nil)
	l := newRaftLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "warn", f.exclude)
	l.Info("not at warn")
	if buf.Len() != 0 || l.IsInfo() || !l.IsWarn() {
		t.Errorf("info passed a warn logger: %q", buf.String())
	}
	l.SetLevel(hclog.Debug)
	if l.GetLevel() != hclog.Debug || !l.IsDebug() || l.IsTrace() {
		t.Errorf("level after SetLevel(debug) = %v", l.GetLevel())
	}
	sub := l.Named("snap").With("node", "n1")
	sub.Debug("took", "entries", hclog.Fmt("%d of %d", 3, 4))
	for _, want := range []string{"level=DEBUG", "component=raft.snap", "node=n1", `entries="3 of 4"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("derived logger wrote %q, missing %s", buf.String(), want)
		}
	}
	if sub.Name() != "raft.snap" || len(sub.ImpliedArgs()) != 2 {
		t.Errorf("name %q, implied %v", sub.Name(), sub.ImpliedArgs())
	}
	buf.Reset()
	for range 3 {
		l.Error("failed to appendEntries to", "peer", "n2", "error", "EOF")
	}
	if n := strings.Count(buf.String(), "failed to appendEntries"); n != 1 {
		t.Errorf("a repeating error written %d times, want 1:\n%s", n, buf.String())
	}
	buf.Reset()
	l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("from the standard logger")
	if !strings.Contains(buf.String(), `level=ERROR msg="from the standard logger" component=raft`) {
		t.Errorf("standard logger wrote %q", buf.String())
	}
}
