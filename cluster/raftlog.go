package cluster

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hashicorp/raft logs every failed heartbeat and append to an unreachable
// peer at ERROR, a few lines a second for as long as the peer is down: a
// follower stopped for an hour of maintenance writes some ten thousand
// identical lines into the leader's log, and the line that matters (the
// peer came back, a quorum was lost) is buried among them.
//
// repeatFilter is raft's logger's Exclude hook: a message about one peer
// (the same text and the same peer, whatever the changing arguments such
// as the backoff or the time since contact) is written once, then at most
// once per window while it keeps coming. Messages without a peer are
// counted under their text alone. Nothing is dropped at INFO and below
// that a configured raft log level lets through on purpose (debugging);
// only WARN and ERROR repeat like this.
//
// While this node hands its leadership over (a clean stop, an operator's
// transfer-leader), handingOver reports true and the ERROR raft writes when
// the new leader's higher term reaches it ("peer has newer term, stopping
// replication") is dropped: it is the hand-over working, and an ERROR on
// every rolling restart teaches operators to ignore ERROR lines.
type repeatFilter struct {
	window      time.Duration
	now         func() time.Time
	handingOver func() bool // nil: never

	mu   sync.Mutex
	last map[string]time.Time // message and peer -> when it was last written
}

// repeatWindow is how often one repeating raft message about one peer is
// written: often enough that a log read at any time shows the peer is
// still unreachable.
const repeatWindow = 30 * time.Second

// repeatKeys bounds the filter's memory: raft's messages are a fixed set
// and peers are the configured members, so the bound is reached only if
// messages carry a changing identity; the map is then started afresh.
const repeatKeys = 1024

func newRepeatFilter(window time.Duration, now func() time.Time) *repeatFilter {
	if now == nil {
		now = time.Now
	}
	return &repeatFilter{window: window, now: now, last: make(map[string]time.Time)}
}

// peerArgs are the argument names under which raft names the member a
// message is about.
var peerArgs = map[string]bool{"peer": true, "server-id": true, "id": true, "address": true, "server": true}

// handoverNoise are the messages a leadership hand-over makes raft log at
// ERROR on the old leader.
var handoverNoise = map[string]bool{"peer has newer term, stopping replication": true}

// exclude reports whether a message repeats one written less than a window
// ago.
func (f *repeatFilter) exclude(level hclog.Level, msg string, args ...interface{}) bool {
	if level < hclog.Warn {
		return false
	}
	if handoverNoise[msg] && f.handingOver != nil && f.handingOver() {
		return true
	}
	var key strings.Builder
	key.WriteString(msg)
	for i := 0; i+1 < len(args); i += 2 {
		if name, ok := args[i].(string); ok && peerArgs[name] {
			fmt.Fprintf(&key, "\x00%s=%v", name, args[i+1])
		}
	}
	k := key.String()
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.last[k]; ok && now.Sub(at) < f.window {
		return true
	}
	if len(f.last) >= repeatKeys {
		clear(f.last)
	}
	f.last[k] = now
	return false
}
