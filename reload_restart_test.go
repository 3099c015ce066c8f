package main

import (
	"os"
	"strings"
	"testing"
)

// TestReloadNeedsRestartIsAgainstWhatRuns: a restart-only key changed in the
// file is reported as needing a restart at every reload until the node
// restarts, not only at the first, as a warning (seen at log_level warn);
// put back as it was, it needs none.
func TestReloadNeedsRestartIsAgainstWhatRuns(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const admin = "[admin]\nlisten = \"127.0.0.1:0\""
	if !strings.Contains(string(text), admin) {
		t.Fatalf("the test config has no %q", admin)
	}
	moved := strings.Replace(string(text), admin, "[admin]\nlisten = \"127.0.0.1:1\"", 1)
	lastReload := func() string {
		t.Helper()
		logs := tn.logs()
		i := strings.LastIndex(logs, "configuration reloaded")
		if i < 0 {
			t.Fatalf("no reload logged:\n%s", logs)
		}
		line, _, _ := strings.Cut(logs[strings.LastIndex(logs[:i], "\n")+1:], "\n")
		return line
	}
	for i, tt := range []struct {
		file    string
		restart bool
	}{
		{moved, true},
		{moved, true}, // reloaded again, unchanged: still pending
		{string(text), false},
		{string(text), false},
	} {
		mustWrite(t, tn.cfgPath, tt.file)
		tn.n.reload(tn.cfgPath)
		line := lastReload()
		if got := strings.Contains(line, "needs_restart=[admin.listen]"); got != tt.restart {
			t.Fatalf("reload %d: %s\nwant admin.listen needing a restart: %v", i+1, line, tt.restart)
		}
		// A change waiting for a restart is a warning, seen at log_level warn.
		if level := map[bool]string{true: "level=WARN", false: "level=INFO"}[tt.restart]; !strings.Contains(line, level) {
			t.Fatalf("reload %d: %s\nwant %s", i+1, line, level)
		}
	}
}
