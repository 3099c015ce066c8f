package main

import (
	"errors"
	"flag"
	"fmt"
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
