package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeAdmin serves answer for every request, as a node's admin API
// (or something else at that address) would.
func fakeAdmin(t *testing.T, ctype string, answer []byte) (addr, tokenFile string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	tokenFile = filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte(strings.Repeat("t", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, tokenFile
}

// TestShowsALargeEventWhole: a source's max_body may be up to 64 MiB, and
// the JSON of such an event is longer (a binary payload as base64, escapes
// in a text one): events show -body prints it whole; it was cut at 64 MiB
// and failed with "unexpected end of JSON input".
func TestShowsALargeEventWhole(t *testing.T) {
	payload := strings.Repeat("a", 65<<20) // e.g. a 49 MiB binary payload as payload_base64
	answer := []byte(`{"key":"big:1","state":"dead","payload_base64":"` + payload + `"}`)
	addr, tok := fakeAdmin(t, "application/json", answer)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"events", "show", "big:1", "-body", "-addr", addr, "-token-file", tok}, &out, &errOut)
	if err != nil {
		t.Fatalf("events show -body of a %d MiB answer: %v", len(answer)>>20, err)
	}
}

// TestAnswerNotJSONNamesTheRequest: an address that answers 200 with
// something other than JSON (a proxy's or another service's page) fails
// every client command with the request and the address named, not the
// bare decoder error ("invalid character '<' ...").
func TestAnswerNotJSONNamesTheRequest(t *testing.T) {
	addr, tok := fakeAdmin(t, "text/html", []byte("<html><body>Sign in to the proxy</body></html>"))
	for _, args := range [][]string{
		{"status"},
		{"events"},
		{"events", "show", "k:1"},
		{"raft", "list-peers"},
		{"replay", "-key", "k:1", "-reason", "r"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(args, "-addr", addr, "-token-file", tok), &out, &errOut)
		if err == nil {
			t.Errorf("%v: no error for an HTML answer", args)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, addr) && !strings.Contains(msg, "/v1/") {
			t.Errorf("%v: error %q names neither the address nor the request", args, msg)
		}
	}
}

// TestUnknownSubcommandBeforeTheToken: a mistyped raft or snapshot
// subcommand is a usage error (exit 2), even where the token file cannot
// be read: a typo must not read as a permissions problem.
func TestUnknownSubcommandBeforeTheToken(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such.token")
	for _, args := range [][]string{
		{"raft", "list-peer"},
		{"snapshot", "safe", "backup.db"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append(args, "-addr", "127.0.0.1:1", "-token-file", missing), &out, &errOut)
		var usage usageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), "unknown "+args[0]+" command") {
			t.Errorf("%v: %v, want a usage error naming the unknown command", args, err)
		}
	}
}
