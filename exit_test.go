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
// its message; -h exits 2 quietly; any other error exits 1.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		msg  string
		code int
	}{
		{"success", nil, "", 0},
		{"help", flag.ErrHelp, "", 2},
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

// TestClientCommandsRefuseArguments: a client command that takes none
// refuses a stray argument (a key given without -key) with a usage error,
// before it talks to any node, instead of ignoring it.
func TestClientCommandsRefuseArguments(t *testing.T) {
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
