package engine

import "strconv"

// The names of states and commands are part of the product's surface: the
// admin API, the CLI, metrics labels and logs all print them. They are defined
// here once, next to the values they name.

var stateNames = [...]string{
	StatePending:    "pending",
	StateProcessing: "processing",
	StateDone:       "done",
	StateDead:       "dead",
	StateStale:      "stale",
}

// States lists every state in order; for callers that report per state.
var States = []State{StatePending, StateProcessing, StateDone, StateDead, StateStale}

// String is the state's name ("pending", ...), or "unknown" for a value that
// is not a state.
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return "unknown"
}

// ParseState reads a state's name; ok is false for anything else.
func ParseState(name string) (s State, ok bool) {
	for _, st := range States {
		if stateNames[st] == name {
			return st, true
		}
	}
	return 0, false
}

// Replayable reports whether an operator may replay an event in state s: a
// finished event (done, dead or stale) goes back to pending; an event still
// in flight cannot be replayed.
func Replayable(s State) bool { return s == StateDone || s == StateDead || s == StateStale }

var opNames = [...]string{
	OpClaim:        "claim",
	OpLease:        "lease",
	OpComplete:     "complete",
	OpFail:         "fail",
	OpReclaim:      "reclaim",
	OpReplay:       "replay",
	OpExpire:       "expire",
	OpDropPayloads: "drop payloads",
	OpNoop:         "noop",
	OpPause:        "pause",
	OpResume:       "resume",
	OpPurge:        "purge",
	OpIdentify:     "identify",
}

// String is the command's name ("claim", ...), or "op(N)" for a value the
// engine does not know.
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}
