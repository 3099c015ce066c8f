package main

import (
	"fmt"
	"os"
	"regexp"
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

// TestReloadKeepsRestartOnlyValues: a reload whose file changes keys that
// need a restart (node.id, node.data_dir) leaves the running config with the
// values the node runs: the admin API names the node it is, and a restore
// spools its upload in the data dir it uses, not in a directory named in a
// file the node has not restarted on.
func TestReloadKeepsRestartOnlyValues(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	started := tn.n.cfg.Load()
	changed := strings.Replace(string(text), `id = "node1"`, `id = "nodeX"`, 1)
	changed = strings.Replace(changed, "data_dir = ", "data_dir = \"/nonexistent/oncehook\"\n# was: ", 1)
	if changed == string(text) || !strings.Contains(changed, "nodeX") {
		t.Fatal("the test config has no node id and data_dir to change")
	}
	mustWrite(t, tn.cfgPath, changed)
	tn.n.reload(tn.cfgPath)
	if logs := tn.logs(); !strings.Contains(logs, "needs_restart=\"[node.id node.data_dir]\"") && !strings.Contains(logs, "needs_restart=[node.id node.data_dir]") {
		t.Fatalf("the reload did not report node.id and node.data_dir as needing a restart:\n%s", logs)
	}
	run := tn.n.cfg.Load()
	if run == started {
		t.Fatal("the reload was not applied")
	}
	if run.Node.ID != "node1" || run.Node.DataDir != started.Node.DataDir {
		t.Fatalf("the running config after the reload: node %q, data_dir %q; want node1 and %q", run.Node.ID, run.Node.DataDir, started.Node.DataDir)
	}
}

// TestReloadWarnsOfAKeyChange: a reload that changes a source's key makes
// the retries of events claimed before it new events; the reload says so
// at warn, naming the source. Other changes do not.
func TestReloadWarnsOfAKeyChange(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const at = "[[source]]\n"
	if !strings.Contains(string(text), at) {
		t.Fatalf("the test config has no %q", at)
	}
	const warning = "keep keys made the old way"
	mustWrite(t, tn.cfgPath, strings.Replace(string(text), "forward = ", "max_attempts = 7\nforward = ", 1))
	tn.n.reload(tn.cfgPath)
	if strings.Contains(tn.logs(), warning) {
		t.Fatalf("a reload that changed no key warned of one:\n%s", tn.logs())
	}
	mustWrite(t, tn.cfgPath, strings.Replace(string(text), "forward = ", "key = [\"json:id\"]\nforward = ", 1))
	tn.n.reload(tn.cfgPath)
	logs := tn.logs()
	i := strings.Index(logs, warning)
	if i < 0 {
		t.Fatalf("no warning of the key change:\n%s", logs)
	}
	line := logs[strings.LastIndex(logs[:i], "\n")+1:]
	line, _, _ = strings.Cut(line, "\n")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "key changed") || !strings.Contains(line, "-> [") || !strings.Contains(line, "json:id") {
		t.Fatalf("the warning: %s", line)
	}
	// Reloaded again with the same key (another setting changed): no new
	// warning.
	mustWrite(t, tn.cfgPath, strings.Replace(string(text), "forward = ", "key = [\"json:id\"]\nmax_attempts = 9\nforward = ", 1))
	tn.n.reload(tn.cfgPath)
	if n := strings.Count(tn.logs(), warning); n != 1 {
		t.Fatalf("%d key change warnings after a reload that kept the key, want 1:\n%s", n, tn.logs())
	}
}

// TestReloadWarningsNameTheirLine: a warning a reload logs names the file
// and line it is about, as validate prints it.
func TestReloadWarningsNameTheirLine(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := regexp.MustCompile(`(?m)^max_body = .*$`).ReplaceAllString(string(text), `max_body = "100B"`)
	if !strings.Contains(edited, `max_body = "100B"`) {
		edited = strings.Replace(string(text), "forward = ", "max_body = \"100B\"\nforward = ", 1)
	}
	mustWrite(t, tn.cfgPath, edited)
	tn.n.reload(tn.cfgPath)
	want := 0
	for i, l := range strings.Split(edited, "\n") {
		if strings.HasPrefix(l, "max_body") {
			want = i + 1
		}
	}
	logs := tn.logs()
	i := strings.Index(logs, "max_body: 100 refuses (413)")
	if i < 0 {
		t.Fatalf("no warning of the small max_body:\n%s", logs)
	}
	line, _, _ := strings.Cut(logs[strings.LastIndex(logs[:i], "\n")+1:], "\n")
	if !strings.Contains(line, "file="+tn.cfgPath) || !strings.Contains(line, fmt.Sprintf("line=%d", want)) {
		t.Fatalf("the warning: %s; want file=%s line=%d", line, tn.cfgPath, want)
	}
}

// TestKeyListTellsPartsFromAlternatives: the key change warning writes a key
// as the file does, so a key of two parts does not read like one part of two
// alternatives.
func TestKeyListTellsPartsFromAlternatives(t *testing.T) {
	two, alt := keyList([]string{"json:event_id", "json:event_type"}), keyList([]string{"json:event_id|json:event_type"})
	if two == alt {
		t.Fatalf("both keys read %s", two)
	}
	if want := `["json:event_id", "json:event_type"]`; two != want {
		t.Fatalf("keyList = %s, want %s", two, want)
	}
}

// TestReloadWarnsOfAGuardChange: a reload that keeps a source's replay
// guard on but changes what it hashes with the body (a shopify source
// gaining accept_types, then its topic read elsewhere) leaves the bodies
// held before unmatched; the reload says so at warn. A reload that turns
// the guard off, or changes nothing it hashes, does not.
func TestReloadWarnsOfAGuardChange(t *testing.T) {
	const shop = `
[[source]]
name = "shop"
provider = "shopify"
secrets = ["shpss_reload_guard_test_secret_0123456789"]
replay_guard = "body"
forward = "%[1]s"
`
	tn := startNodeWithSources(t, "", "http://127.0.0.1:1", shop)
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	const warning = "replay guard now holds"
	steps := []struct {
		name, from, to string
		warns          bool
	}{
		{"another setting", `replay_guard = "body"`, `replay_guard = "body"` + "\nmax_attempts = 7", false},
		{"accept_types added", `replay_guard = "body"`, `replay_guard = "body"` + "\naccept_types = [\"orders/create\"]", true},
		{"the list changed", `replay_guard = "body"`, `replay_guard = "body"` + "\naccept_types = [\"orders/create\", \"orders/paid\"]", false},
		{"the topic header spelt another way", `replay_guard = "body"`, `replay_guard = "body"` + "\naccept_types = [\"orders/create\", \"orders/paid\"]\ntype = \"header:x-shopify-topic\"", false},
		{"the topic read elsewhere", `replay_guard = "body"`, `replay_guard = "body"` + "\naccept_types = [\"orders/create\", \"orders/paid\"]\ntype = \"json:topic\"", true},
		{"the guard turned off", `replay_guard = "body"`, `replay_guard = "off"`, false},
	}
	seen := 0
	for k, st := range steps {
		if !strings.Contains(string(text), st.from) {
			t.Fatalf("%s: the config has no %q", st.name, st.from)
		}
		mustWrite(t, tn.cfgPath, strings.Replace(string(text), st.from, st.to, 1))
		tn.n.reload(tn.cfgPath)
		logs := tn.logs()
		if strings.Count(logs, "configuration reloaded") != k+1 {
			t.Fatalf("%s: the reload was rejected:\n%s", st.name, logs)
		}
		n := strings.Count(logs, warning)
		if st.warns {
			seen++
		}
		if n != seen {
			t.Fatalf("%s: %d guard change warnings, want %d:\n%s", st.name, n, seen, logs)
		}
		if st.warns {
			i := strings.LastIndex(logs, warning)
			line := logs[strings.LastIndex(logs[:i], "\n")+1:]
			line, _, _ = strings.Cut(line, "\n")
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "source shop") || !strings.Contains(line, "topic") {
				t.Fatalf("%s: the warning: %s", st.name, line)
			}
		}
	}
}

// TestReloadRefusesWhatTheNextStartWould: a reload whose file names a node
// id the data dir does not hold (validate and the next start refuse it) is
// rejected now, the running configuration kept and the metric at 0, rather
// than accepted as "needs a restart" and failing at the next one.
func TestReloadRefusesWhatTheNextStartWould(t *testing.T) {
	tn := startTestNode(t, "", "http://127.0.0.1:1")
	text, err := os.ReadFile(tn.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(text), `id = "node1"`, `id = "node3x"`, 1)
	if changed == string(text) {
		t.Fatal("the test config has no node id to change")
	}
	mustWrite(t, tn.cfgPath, changed)
	tn.n.reload(tn.cfgPath)
	logs := tn.logs()
	if !strings.Contains(logs, "reload rejected") || !strings.Contains(logs, "another node") {
		t.Fatalf("the reload was not rejected for the data dir's owner:\n%s", logs)
	}
	if strings.Contains(logs, "configuration reloaded") {
		t.Fatalf("the reload was also applied:\n%s", logs)
	}
	if got, ok := metricValue(tn.metricsText(), "oncehook_config_last_reload_successful"); !ok || got != 0 {
		t.Fatalf("oncehook_config_last_reload_successful = %v (%v), want 0", got, ok)
	}
	if id := tn.n.cfg.Load().Node.ID; id != "node1" {
		t.Fatalf("running node id %q, want node1", id)
	}
}
