package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"oncehook/admin"
	"oncehook/adminclient"
	"oncehook/engine"
)

// The client commands: each parses its flags, checks them and makes one
// call of package adminclient, which talks to the admin API and prints.

// clientFlags adds -addr, -token-file and -ca to fs (adminclient.Flags).
var clientFlags = adminclient.Flags

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stdout, stderr)
	mk := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	c, err := mk()
	if err != nil {
		return err
	}
	return c.Status(ctx, stdout, *asJSON)
}

func cmdEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "show" {
		return cmdEventShow(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("events", stdout, stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage of oncehook events:\n"+
			"  oncehook events [flags]            list events\n"+
			"  oncehook events show KEY [flags]   one event and its history (-body: with its payload)\n")
		fs.PrintDefaults()
	}
	mk := clientFlags(fs)
	state := fs.String("state", "", "pending|processing|done|dead|stale")
	source := fs.String("source", "", "source name")
	limit := fs.Int("limit", 100, "most events to list (a page holds at most 1000)")
	after := fs.String("after", "", "start after this cursor (the \"next\" a previous page printed)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 && fs.Arg(0) == "show" {
		// "events -addr X show KEY": the flags given before show go with it.
		return cmdEventShow(ctx, append(args[:len(args)-fs.NArg():len(args)-fs.NArg()], fs.Args()[1:]...), stdout, stderr)
	}
	if err := noArgs(fs, "to read one event: oncehook events show KEY"); err != nil {
		return err
	}
	if err := checkStateFlag("events", *state, false); err != nil {
		return err
	}
	if *limit < 1 {
		return usageError{fmt.Sprintf("events -limit %d: want a whole number from 1 (a page holds at most %d events)", *limit, engine.MaxListLimit)}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	q := adminclient.EventsQuery{State: *state, Source: *source, Limit: *limit, After: *after}
	return c.Events(ctx, stdout, stderr, q, *asJSON)
}

func cmdEventShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events show", stdout, stderr)
	mk := clientFlags(fs)
	body := fs.Bool("body", false, "include headers, cached response and payload")
	// The event is printed as JSON either way; -json is taken so that the
	// flag that works for the list works here too.
	fs.Bool("json", true, "print JSON (the only form of one event)")
	keys, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(keys) != 1 {
		return usageError{fmt.Sprintf("events show needs one KEY (e.g. stripe-live:evt_123), got %d: %q", len(keys), keys)}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	return c.ShowEvent(ctx, stdout, keys[0], *body)
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stdout, stderr)
	mk := clientFlags(fs)
	var keys multiFlag
	fs.Var(&keys, "key", "full scoped key to replay (repeatable)")
	source := fs.String("source", "", "source name (with -state)")
	state := fs.String("state", "", "replay every event in this state: dead|done|stale")
	since := fs.String("since", "", "with -state: only events updated since (duration like 24h, or RFC3339)")
	reason := fs.String("reason", "", "why (recorded in the audit trail; required)")
	dry := fs.Bool("dry-run", false, "show what would be replayed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "give each key with -key KEY"); err != nil {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return usageError{"replay needs -reason"}
	}
	if len(keys) == 0 && *state == "" {
		return usageError{"replay needs -key KEY (repeatable) or -state dead|done|stale"}
	}
	switch {
	case len(keys) > 0 && *state != "":
		return usageError{"replay takes -key KEY or -state, not both"}
	case len(keys) > 0 && *source != "":
		return usageError{"replay -source goes with -state (a key names its source: source:id)"}
	case len(keys) > 0 && *since != "":
		return usageError{"replay -since goes with -state"}
	}
	if err := checkStateFlag("replay", *state, true); err != nil {
		return err
	}
	if *since != "" {
		if err := admin.CheckSince(*since); err != nil {
			return usageError{"replay -" + err.Error()}
		}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	return c.Replay(ctx, stdout, admin.ReplayRequest{Source: *source, Keys: keys, State: *state, Since: *since, Reason: *reason, DryRun: *dry})
}

// cmdPause is oncehook pause and oncehook resume: POST
// /v1/sources/{name}/pause or .../resume.
func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	fs := newFlags(verb, stdout, stderr)
	mk := clientFlags(fs)
	source := fs.String("source", "", "source name (required)")
	reason := fs.String("reason", "", "why (recorded with the "+verb+"; required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	if *source == "" || strings.TrimSpace(*reason) == "" {
		return usageError{verb + " needs -source and -reason"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	return c.Pause(ctx, stdout, *source, *reason, pause)
}

// cmdPurge is oncehook purge: POST /v1/purge.
func cmdPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("purge", stdout, stderr)
	mk := clientFlags(fs)
	state := fs.String("state", "", "delete every event in this state: dead|done|stale (required)")
	source := fs.String("source", "", "only this source's events")
	before := fs.String("before", "", "only events updated before this RFC 3339 time, or this long ago (720h) (required)")
	reason := fs.String("reason", "", "why (logged with who; required)")
	dry := fs.Bool("dry-run", false, "show what would be deleted")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	if *state == "" || *before == "" || strings.TrimSpace(*reason) == "" {
		return usageError{"purge needs -state, -before and -reason"}
	}
	if err := checkStateFlag("purge", *state, true); err != nil {
		return err
	}
	if err := admin.CheckBefore(*before); err != nil {
		return usageError{"purge -" + err.Error()}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	return c.Purge(ctx, stdout, admin.PurgeRequest{State: *state, Source: *source, Before: *before, Reason: *reason, DryRun: *dry})
}

func cmdRaft(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"raft needs list-peers, remove-peer or transfer-leader"}
	}
	fs := newFlags("raft "+args[0], stdout, stderr)
	mk := clientFlags(fs)
	// Each subcommand takes only its own flags; "raft -h" shows them all.
	var id, to *string
	if sub := args[0]; sub == "remove-peer" || isHelp(sub) {
		id = fs.String("id", "", "server id (remove-peer)")
	}
	if sub := args[0]; sub == "transfer-leader" || isHelp(sub) {
		to = fs.String("to", "", "the voter to lead (transfer-leader; default: the most up-to-date one)")
	}
	if isHelp(args[0]) {
		// "raft -h": the subcommands and their flags, not "unknown raft
		// command "-h"".
		fmt.Fprintln(stdout, "Usage: oncehook raft list-peers | remove-peer -id N | transfer-leader [-to N] [flags]")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	switch args[0] {
	case "list-peers", "remove-peer", "transfer-leader":
	default:
		// Before the client's own checks: a typo is no token problem.
		return usageError{fmt.Sprintf("unknown raft command %q", args[0])}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	switch args[0] {
	case "list-peers":
		return c.ListPeers(ctx, stdout)
	case "remove-peer":
		if *id == "" {
			return usageError{"remove-peer needs -id"}
		}
		return c.RemovePeer(ctx, stdout, *id)
	case "transfer-leader":
		return c.TransferLeadership(ctx, stdout, *to)
	}
	return usageError{fmt.Sprintf("unknown raft command %q", args[0])}
}

func cmdSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"snapshot needs save FILE or restore FILE"}
	}
	fs := newFlags("snapshot "+args[0], stdout, stderr)
	mk := clientFlags(fs)
	if isHelp(args[0]) {
		// "snapshot -h": as for raft, not "snapshot -h needs one FILE".
		fmt.Fprintln(stdout, "Usage: oncehook snapshot save FILE | restore FILE [flags]")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	if args[0] != "save" && args[0] != "restore" {
		return usageError{fmt.Sprintf("unknown snapshot command %q", args[0])}
	}
	// Flags go before or after FILE, as the usage line shows them.
	files, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return usageError{fmt.Sprintf("snapshot %s needs one FILE, got %d: %q", args[0], len(files), files)}
	}
	if files[0] == "" {
		return usageError{fmt.Sprintf("snapshot %s needs one FILE, got an empty name", args[0])}
	}
	if files[0] == "-" {
		// A backup is written whole or not at all (a file renamed into
		// place), and a restore's upload needs its length first.
		stream := "standard output"
		if args[0] == "restore" {
			stream = "standard input"
		}
		return usageError{fmt.Sprintf("snapshot %s needs a FILE: \"-\" is not %s here (./- names a file called -)", args[0], stream)}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	switch args[0] {
	case "save":
		return c.SaveSnapshot(ctx, stdout, files[0])
	case "restore":
		return c.RestoreSnapshot(ctx, stdout, files[0])
	}
	return usageError{fmt.Sprintf("unknown snapshot command %q", args[0])}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// checkStateFlag refuses a -state the admin API would refuse, before any
// request, as the usage error it is (exit 2). finished: only the states an
// operator may replay or purge (done, dead, stale).
func checkStateFlag(cmd, name string, finished bool) error {
	if name == "" {
		return nil
	}
	st, ok := engine.ParseState(name)
	switch {
	case !ok && finished:
		return usageError{fmt.Sprintf("%s -state %q: want dead, done or stale", cmd, name)}
	case !ok:
		return usageError{fmt.Sprintf("%s -state %q: want pending, processing, done, dead or stale", cmd, name)}
	case finished && !engine.Replayable(st):
		return usageError{fmt.Sprintf("%s -state %s: %s events are still in flight; %s takes dead, done or stale", cmd, name, name, cmd)}
	}
	return nil
}
