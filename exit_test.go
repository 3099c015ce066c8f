package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"oncehook/adminclient"
)

// TestExitStatus: a usage mistake, the client flags' included, exits 2 with
// its message; -h exits 0 quietly (the usage is printed already); any other
// error exits 1.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		msg  string
		code int
	}{
		{"success", nil, "", 0},
		{"help", flag.ErrHelp, "", 0},
		{"usage", usageError{"replay needs -reason"}, "replay needs -reason", 2},
		{"client flags", adminclient.UsageError{Msg: "-ca (or ONCEHOOK_CA) is for https"}, "-ca (or ONCEHOOK_CA) is for https", 2},
		{"wrapped client flags", fmt.Errorf("status: %w", adminclient.UsageError{Msg: "bad"}), "bad", 2},
		{"failure", errors.New("admin API: refused"), "admin API: refused", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg, code := exitStatus(tc.err); msg != tc.msg || code != tc.code {
				t.Errorf("exitStatus(%v) = %q, %d; want %q, %d", tc.err, msg, code, tc.msg, tc.code)
			}
		})
	}
}

// TestCommandsRefuseArguments: a command that takes no argument
// refuses a stray argument (a key given without -key) with a usage error,
// before it talks to any node, instead of ignoring it.
func TestCommandsRefuseArguments(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(args []string) error
		args []string
		hint string
	}{
		{"status", func(a []string) error { return cmdStatus(t.Context(), a, io.Discard, io.Discard) }, []string{"extra"}, ""},
		{"events", func(a []string) error { return cmdEvents(t.Context(), a, io.Discard, io.Discard) }, []string{"-state", "dead", "stripe:evt_1"}, "oncehook events show KEY"},
		{"replay", func(a []string) error { return cmdReplay(t.Context(), a, io.Discard, io.Discard) }, []string{"-reason", "fixed", "stripe:evt_1"}, "-key KEY"},
		{"pause", func(a []string) error { return cmdPause(t.Context(), a, io.Discard, io.Discard, true) }, []string{"-source", "s", "-reason", "r", "now"}, ""},
		{"purge", func(a []string) error { return cmdPurge(t.Context(), a, io.Discard, io.Discard) }, []string{"-state", "dead", "-before", "2026-01-01T00:00:00Z", "-reason", "r", "x"}, ""},
		{"keygen", func(a []string) error { return cmdKeygen(a, io.Discard, io.Discard) }, []string{"-provider", "hmac", "extra"}, ""},
		{"validate", func(a []string) error { return cmdValidate(a, io.Discard, io.Discard) }, []string{"oncehook.toml"}, "-config F"},
		{"serve", func(a []string) error { return cmdServe(t.Context(), a, io.Discard, io.Discard) }, []string{"oncehook.toml"}, "-config F"},
		{"sink", func(a []string) error { return cmdSink(t.Context(), a, io.Discard, io.Discard) }, []string{"extra"}, ""},
		{"raft list-peers", func(a []string) error { return cmdRaft(t.Context(), a, io.Discard, io.Discard) }, []string{"list-peers", "extra"}, ""},
		{"raft remove-peer", func(a []string) error { return cmdRaft(t.Context(), a, io.Discard, io.Discard) }, []string{"remove-peer", "-id", "node3", "node4"}, ""},
		{"version", func(a []string) error { return cmdVersion(a, io.Discard, io.Discard) }, []string{"extra"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1") // nothing listens: a call would fail otherwise
			err := tc.run(tc.args)
			msg, code := exitStatus(err)
			if code != 2 || !strings.Contains(msg, "takes no arguments") || !strings.Contains(msg, tc.hint) {
				t.Fatalf("%v: exit %d %q, want 2 with \"takes no arguments\" and %q", tc.args, code, msg, tc.hint)
			}
		})
	}
}

// TestReplayNeedsAScope: replay without -key or -state is a usage error
// (exit 2) before any node is asked.
func TestReplayNeedsAScope(t *testing.T) {
	t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1") // nothing listens: a call would fail otherwise
	err := cmdReplay(t.Context(), []string{"-reason", "fixed"}, io.Discard, io.Discard)
	if msg, code := exitStatus(err); code != 2 || !strings.Contains(msg, "-key KEY (repeatable) or -state") {
		t.Fatalf("replay without a scope: exit %d %q, want 2 naming -key and -state", code, msg)
	}
}

// TestSubcommandHelp: "oncehook CMD -h" (and -help, --help) prints CMD's
// usage on stdout and exits 0 as "oncehook -h" does, for every command: asking for
// help is not a usage error. raft and snapshot read a subcommand before
// their flags, so their "-h" must not be taken for one.
func TestSubcommandHelp(t *testing.T) {
	t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1") // nothing listens: a call would fail otherwise
	for _, tc := range []struct {
		args  []string
		usage string // in what is printed
	}{
		{[]string{"serve"}, "-config"},
		{[]string{"validate"}, "-config"},
		{[]string{"sink"}, "-listen"},
		{[]string{"send"}, "-source"},
		{[]string{"keygen"}, "-provider"},
		{[]string{"status"}, "-addr"},
		{[]string{"events"}, "-state"},
		{[]string{"events"}, "events show KEY"},
		{[]string{"events", "show"}, "-body"},
		{[]string{"replay"}, "-reason"},
		{[]string{"purge"}, "-before"},
		{[]string{"pause"}, "-source"},
		{[]string{"resume"}, "-source"},
		{[]string{"raft"}, "list-peers"},
		{[]string{"raft", "list-peers"}, "-addr"},
		{[]string{"raft", "remove-peer"}, "-id"},
		{[]string{"snapshot"}, "save FILE"},
		{[]string{"snapshot", "save"}, "-addr"},
		{[]string{"version"}, "Usage: oncehook version"},
	} {
		asked := [][]string{}
		for _, h := range []string{"-h", "-help", "--help"} {
			asked = append(asked, append(append([]string(nil), tc.args...), h))
		}
		if len(tc.args) == 1 {
			asked = append(asked, []string{"help", tc.args[0]}) // oncehook help status
		}
		for _, args := range asked {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				var stdout, stderr strings.Builder
				err := run(t.Context(), args, &stdout, &stderr)
				msg, code := exitStatus(err)
				if code != 0 || msg != "" {
					t.Errorf("exit %d %q (err %v), want 0 and nothing after the usage", code, msg, err)
				}
				// Asked for, the usage goes to stdout (`oncehook send -h | less`).
				if !strings.Contains(stdout.String(), tc.usage) || stderr.Len() != 0 {
					t.Errorf("printed %q to stdout and %q to stderr, want the usage (with %q) on stdout alone", stdout.String(), stderr.String(), tc.usage)
				}
			})
		}
	}
}

// TestBadFlagReportedOnce: a mistyped flag is reported once, after the
// usage, by main's "Error:" line; the flag package's own copy of the message,
// printed before the usage, is not.
func TestBadFlagReportedOnce(t *testing.T) {
	t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "-keys", "x"}, "flag provided but not defined: -keys"},
		{[]string{"events", "-limit", "many"}, `invalid value "many" for flag -limit`},
		{[]string{"events", "show", "k", "-bdy"}, "flag provided but not defined: -bdy"},
		{[]string{"raft", "list-peers", "-idd", "1"}, "flag provided but not defined: -idd"},
		{[]string{"serve", "-conifg", "x"}, "flag provided but not defined: -conifg"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			msg, code := exitStatus(run(t.Context(), tc.args, &stdout, &stderr))
			if code != 2 || !strings.Contains(msg, tc.want) {
				t.Fatalf("exit %d %q, want 2 with %q", code, msg, tc.want)
			}
			printed := stdout.String() + stderr.String() + "Error: " + msg + "\n"
			if n := strings.Count(printed, tc.want); n != 1 {
				t.Errorf("%q printed %d times, want once:\n%s", tc.want, n, printed)
			}
			if !strings.Contains(stderr.String(), "Usage of oncehook") {
				t.Errorf("stderr %q, want the usage", stderr.String())
			}
		})
	}
}

// TestClientCommandsCheckValues: a -state, -since, -before or -limit value
// the admin API would refuse, or a snapshot without exactly one FILE, is a
// usage error (exit 2) found before any request, with what the flag takes;
// a valid one reaches the node (snapshot's flags before or after FILE).
func TestClientCommandsCheckValues(t *testing.T) {
	events := func(a []string) error { return cmdEvents(t.Context(), a, io.Discard, io.Discard) }
	replay := func(a []string) error { return cmdReplay(t.Context(), a, io.Discard, io.Discard) }
	purge := func(a []string) error { return cmdPurge(t.Context(), a, io.Discard, io.Discard) }
	snapshot := func(a []string) error { return cmdSnapshot(t.Context(), a, io.Discard, io.Discard) }
	pause := func(a []string) error { return cmdPause(t.Context(), a, io.Discard, io.Discard, true) }
	show := func(a []string) error {
		return cmdEvents(t.Context(), append([]string{"show"}, a...), io.Discard, io.Discard)
	}
	for _, tc := range []struct {
		run  func(args []string) error
		args []string
		want string // "" : the value is fine, the call fails on the connection
	}{
		{events, []string{"-state", "bogus"}, "want pending, processing, done, dead or stale"},
		{events, []string{"-state", "processing"}, ""},
		{events, []string{"-limit", "0"}, "want a whole number from 1"},
		{events, []string{"-limit", "-3"}, "want a whole number from 1"},
		{events, []string{"-limit", "5000"}, ""},
		{replay, []string{"-state", "pending", "-reason", "r"}, "still in flight; replay takes dead, done or stale"},
		{replay, []string{"-state", "Dead", "-reason", "r"}, "want dead, done or stale"},
		{replay, []string{"-state", "dead", "-since", "yesterday", "-reason", "r"}, "RFC 3339 time or a duration"},
		{replay, []string{"-state", "dead", "-since", "24h", "-reason", "r"}, ""},
		{purge, []string{"-state", "processing", "-before", "1h", "-reason", "r"}, "still in flight; purge takes dead, done or stale"},
		{purge, []string{"-state", "done", "-before", "last week", "-reason", "r"}, "RFC 3339 time or a duration"},
		{purge, []string{"-state", "done", "-before", "-1h", "-reason", "r"}, "must be positive"},
		{purge, []string{"-state", "stale", "-before", "2026-01-01T00:00:00Z", "-reason", "r"}, ""},
		{snapshot, []string{"save", "backup.db", "-addr", "127.0.0.1:1"}, ""}, // flags after FILE
		{snapshot, []string{"save", "-addr", "127.0.0.1:1", "backup.db"}, ""},
		{show, []string{"-json", "stripe:evt_1"}, ""},
		{show, []string{"stripe:evt_1", "-json"}, ""},
		{snapshot, []string{"save", "a.db", "b.db"}, "needs one FILE, got 2"},
		{snapshot, []string{"save"}, "needs one FILE, got 0"},
		{snapshot, []string{"save", ""}, "needs one FILE, got an empty name"},
		{snapshot, []string{"save", "-"}, "not standard output"},
		{snapshot, []string{"restore", "-"}, "not standard input"},
		{replay, []string{"-key", "stripe:evt_1", "-state", "dead", "-reason", "r"}, "-key KEY or -state, not both"},
		{replay, []string{"-key", "stripe:evt_1", "-source", "std", "-reason", "r"}, "-source goes with -state"},
		{replay, []string{"-key", "stripe:evt_1", "-since", "1h", "-reason", "r"}, "-since goes with -state"},
		{replay, []string{"-key", "stripe:evt_1", "-reason", "   "}, "replay needs -reason"},
		{replay, []string{"-key", "stripe:evt_1", "-reason", "r"}, ""},
		{pause, []string{"-source", "std", "-reason", " \t "}, "pause needs -source and -reason"},
		{purge, []string{"-state", "done", "-before", "1h", "-reason", "  "}, "purge needs -state, -before and -reason"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv("ONCEHOOK_ADDR", "127.0.0.1:1") // nothing listens
			t.Setenv("ONCEHOOK_TOKEN", "t")
			msg, code := exitStatus(tc.run(tc.args))
			if tc.want == "" {
				if code != 1 || !strings.Contains(msg, "127.0.0.1:1") {
					t.Fatalf("exit %d %q, want 1 from the connection", code, msg)
				}
				return
			}
			if code != 2 || !strings.Contains(msg, tc.want) {
				t.Fatalf("exit %d %q, want 2 with %q", code, msg, tc.want)
			}
		})
	}
}

// TestSinkRefusesAStatusItCannotAnswer: `sink -status` takes a final
// status; 99 made every delivery panic in net/http, 700 and 1xx answered
// what no handler does. Usage errors (exit 2), before it listens.
func TestSinkRefusesAStatusItCannotAnswer(t *testing.T) {
	for _, status := range []string{"99", "100", "199", "600", "700", "-1"} {
		err := cmdSink(t.Context(), []string{"-listen", "127.0.0.1:1", "-status", status}, io.Discard, io.Discard)
		if msg, code := exitStatus(err); code != 2 || !strings.Contains(msg, "200-599") {
			t.Errorf("sink -status %s: exit %d %q, want 2 naming 200-599", status, code, msg)
		}
	}
}
