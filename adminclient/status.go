package adminclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"oncehook/cluster"
)

// statusAnswer is what `oncehook status` reads of GET /v1/status: the node's
// view of the cluster and, from the admin API, the event counts, the sources
// and readiness. Fields an older node does not send stay zero, which the
// printing below shows as "-" or leaves out, as it did for a missing field.
type statusAnswer struct {
	cluster.Status
	Counts   *eventCounts            `json:"counts"`
	Sources  map[string]sourceAnswer `json:"sources"`
	Ready    bool                    `json:"ready"`
	ReadyWhy string                  `json:"ready_reason"`
}

// eventCounts is the "counts" of /v1/status: events stored by state.
type eventCounts struct {
	Pending    int `json:"pending"`
	Processing int `json:"processing"`
	Done       int `json:"done"`
	Dead       int `json:"dead"`
	Stale      int `json:"stale"`
}

// sourceAnswer is one source of /v1/status: its pause state and backlog.
type sourceAnswer struct {
	Paused           bool    `json:"paused"`
	Since            string  `json:"since"`
	By               string  `json:"by"`
	Reason           string  `json:"reason"`
	Backlog          int     `json:"backlog"`
	OldestPendingAge float64 `json:"oldest_pending_age_seconds"`
	Unconfigured     bool    `json:"unconfigured"`

	// row is false for an older node's source, a bare event count: it has
	// no pause state or backlog to print.
	row bool
}

// UnmarshalJSON reads a source as the current API sends it (an object) or as
// an older node does (its event count, which leaves row false).
func (s *sourceAnswer) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '{' {
		*s = sourceAnswer{}
		return nil
	}
	type plain sourceAnswer
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	s.row = true
	return nil
}

// printStatus prints the node's line, one row per member of the Raft
// configuration with the member's own answer (an older node's API has no
// role: its state column stands in), the event counts and the sources.
func printStatus(w io.Writer, st *statusAnswer) {
	leader := "leader " + st.LeaderID
	if st.LeaderID == "" {
		leader = "no leader known"
	}
	fmt.Fprintf(w, "node %s: %s (%s), term %d, commit %d, applied %d, last contact %s, ready %t (%s)\n",
		st.NodeID, st.State, leader, st.Term, st.CommitIndex, st.AppliedIndex, st.LastContact, st.Ready, st.ReadyWhy)
	if st.ClusterID != "" {
		fmt.Fprintf(w, "cluster id %s\n", st.ClusterID)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSUFFRAGE\tROLE\tTERM\tCOMMIT\tAPPLIED\tLAST CONTACT")
	var unreachable []string
	for _, m := range st.Nodes {
		role := m.Role
		if role == "" {
			role = m.State
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, orDash(m.Address), m.Suffrage, role,
			orDash(m.Term), orDash(m.CommitIndex), orDash(m.AppliedIndex), orDash(m.LastContact))
		if m.Error != "" {
			unreachable = append(unreachable, fmt.Sprintf("%s: %s", m.ID, m.Error))
		}
	}
	tw.Flush()
	for _, u := range unreachable {
		fmt.Fprintf(w, "no answer from %s\n", u)
	}
	printFormats(w, st.Nodes)
	if st.StoreFailing != "" {
		fmt.Fprintf(w, "this node cannot store what raft writes (a full or read-only disk?): %s\n", st.StoreFailing)
	}
	if len(st.PeersNotStoring) > 0 {
		fmt.Fprintf(w, "followers that cannot store what this leader sends them (a full or read-only disk? their status says why): %s\n", strings.Join(st.PeersNotStoring, ", "))
	}
	if st.ClockHeld != "" {
		fmt.Fprintf(w, "retention buckets held (nothing expires, no payload is dropped): %s\n", st.ClockHeld)
	}
	if c := st.Counts; c != nil {
		fmt.Fprintf(w, "events: pending %d, processing %d, done %d, dead %d, stale %d\n",
			c.Pending, c.Processing, c.Done, c.Dead, c.Stale)
	}
	printSources(w, st.Sources)
}

// printFormats names each member's data format when they differ: a rolling
// upgrade is under way (docs/operations.md, Upgrades: followers first, the
// leader last). A member that did not answer is left out; one whose binary
// predates the field is "older".
func printFormats(w io.Writer, nodes []cluster.Server) {
	seen := map[uint64]bool{}
	var parts []string
	for _, m := range nodes {
		if m.Error != "" || m.Role == "" || m.Role == "unknown" {
			continue
		}
		seen[m.Format] = true
		f := "older"
		if m.Format > 0 {
			f = fmt.Sprint(m.Format)
		}
		parts = append(parts, m.ID+" "+f)
	}
	if len(seen) > 1 {
		fmt.Fprintf(w, "data formats differ (an upgrade under way: followers first, the leader last): %s\n", strings.Join(parts, ", "))
	}
}

// orDash prints v, or "-" for a field the member left out (its zero value).
func orDash[T comparable](v T) string {
	var zero T
	if v == zero {
		return "-"
	}
	return fmt.Sprint(v)
}

// printSources prints one row per source with its backlog, and for a paused
// one since when, by whom and why. An older node's sources (counts only)
// print nothing.
func printSources(w io.Writer, srcs map[string]sourceAnswer) {
	names := make([]string, 0, len(srcs))
	for name, s := range srcs {
		if s.row {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTATE\tBACKLOG\tOLDEST PENDING\tPAUSED SINCE\tBY\tREASON")
	for _, name := range names {
		s := srcs[name]
		state, since, by, reason := "active", "-", "-", "-"
		if s.Paused {
			state, since, by, reason = "PAUSED", s.Since, s.By, s.Reason
		}
		if s.Unconfigured { // not in the running config: its events are held
			state = "unconfigured"
			if s.Paused {
				state = "PAUSED,unconfigured"
			}
		}
		age := "-"
		if s.Backlog != 0 {
			age = time.Duration(s.OldestPendingAge * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", name, state, s.Backlog, age, since, cell(by), cell(reason))
	}
	tw.Flush()
}

// printAnswer prints an admin API answer the client passes through as it
// came, whatever fields the node's version sends: indented, keys sorted, and
// numbers as the node wrote them (not rounded through a float64).
func printAnswer(w io.Writer, raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("admin API answer: %w", err)
	}
	return printJSON(w, v)
}

// cell makes text someone else wrote (a pause reason, the name a token was
// given, a delivery's error) safe in a terminal table: a control character
// is written as Go would escape it (\x1b rather than an escape sequence
// that moves the cursor or rewrites what the table shows; \t rather than
// a tab that breaks the columns). Text without one is printed as it is.
func cell(s string) string {
	// Not printable covers the controls and the format characters too: a
	// right-to-left override (U+202E) would show a reason or an error
	// backwards, and a zero-width one hide part of it.
	if !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) || r == utf8.RuneError }) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
