package config

import (
	"go/build"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const examplePath = "../config.example.toml"

// loadExample loads config.example.toml with /etc/oncehook/ moved into a
// temporary directory holding a dummy secret (a valid whsec_ one, usable by
// every provider) at each path the example names.
func loadExample(t *testing.T) (*Config, error) {
	t.Helper()
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, m := range regexp.MustCompile(`/etc/oncehook/([A-Za-z0-9._-]+)`).FindAllStringSubmatch(string(data), -1) {
		writeFile(t, dir, m[1], standardSecret+"\n", 0o600)
	}
	text := strings.ReplaceAll(string(data), "/etc/oncehook/", dir+"/")
	return Load(writeFile(t, dir, "oncehook.toml", text, 0o644))
}

// TestExample: the shipped example loads and validates, so it cannot go stale.
func TestExample(t *testing.T) {
	c, err := loadExample(t)
	if err != nil {
		t.Fatalf("config.example.toml: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate again: %v", err)
	}
	var names []string
	for _, s := range c.Sources {
		names = append(names, s.Name+"/"+s.Provider)
		mustBuildVerifier(t, &s)
	}
	if want := []string{"stripe-live/stripe", "github/github", "orders/standard", "legacy/hmac"}; !slices.Equal(names, want) {
		t.Errorf("sources %v, want %v", names, want)
	}
	if c.Cluster == nil || len(c.Cluster.Peers) != 3 || len(c.Cluster.Token) == 0 || len(c.Admin.Tokens) != 1 {
		t.Errorf("cluster %+v admin %+v", c.Cluster, c.Admin)
	}
	if r, s := Diff(c, c); r != nil || s != nil {
		t.Errorf("Diff(example, example) = %q, %q", r, s)
	}
}

// schemaKeys lists every key path the file format has ("source.hmac.header").
func schemaKeys(t reflect.Type, section string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		sec := join(section, name)
		ft := f.Type
		if st, ok := sectionTypes[sec]; ok {
			ft = st
		}
		for ft.Kind() == reflect.Pointer || (ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct) {
			ft = ft.Elem()
		}
		out = append(out, sec)
		if ft.Kind() == reflect.Struct {
			out = append(out, schemaKeys(ft, sec)...)
		}
	}
	return out
}

// TestExampleDocumentsEveryKey: every key of the format appears in the
// example, set or in a comment (the alternatives of a key it sets, a
// setting the example shows but leaves off).
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for p := range scanKeyLines(string(data)).lines {
		present[stripIndexes(p)] = true
	}
	commentOnly := map[string]string{
		"source.secrets":       "or secrets = [",
		"admin.tokens.token":   "inline token = ",
		"source.order":         "\n# order = { object = ",
		"source.order.object":  "# order = { object = ",
		"source.order.time":    `, time = "json:created", `,
		"source.order.missing": `, missing = "reject" }`,
		"source.drop_types":    "\n# drop_types = [",
		"source.twilio_body":   "\n# twilio_body = \"form\"",
	}
	keys := schemaKeys(reflect.TypeFor[rawFile](), "")
	if len(keys) < 45 {
		t.Fatalf("schema walk found only %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if present[k] {
			continue
		}
		if hint, ok := commentOnly[k]; ok && strings.Contains(string(data), hint) {
			continue
		}
		t.Errorf("config.example.toml does not document %s", k)
	}
}

// TestExampleDefaults: every `# default X` comment in the example states the
// default the code applies.
func TestExampleDefaults(t *testing.T) {
	d, s := Default(), newSource()
	q := strconv.Quote
	defaults := map[string]string{
		"node.id":                   q(d.Node.ID),
		"node.data_dir":             q(d.Node.DataDir),
		"node.listen":               q(d.Node.Listen),
		"node.log_level":            q(d.Node.LogLevel),
		"node.log_format":           q(d.Node.LogFormat),
		"cluster.raft_listen":       q(defaultCluster().RaftListen),
		"cluster.heartbeat_timeout": q(defaultCluster().HeartbeatTimeout.String()),
		"cluster.election_timeout":  q(defaultCluster().ElectionTimeout.String()),
		"admin.listen":              q(d.Admin.Listen),
		"source.tolerance":          q(s.Tolerance.String()),
		"source.max_body":           q(s.MaxBody.String()),
		"source.mode":               q(s.Mode),
		"source.lease":              q(s.Lease.String()),
		"source.max_attempts":       strconv.Itoa(s.MaxAttempts),
		"source.backoff_min":        q(s.BackoffMin.String()),
		"source.backoff_max":        q(s.BackoffMax.String()),
		"source.forward_timeout":    q(s.ForwardTimeout.String()),
		"source.keys_refresh":       q(s.KeysRefresh.String()),
		"cluster.tls_cert":          `""`,
		"admin.tls_cert":            `""`,
		"admin.max_restore":         q(Size(DefaultMaxRestore).String()),
		"source.keys_url":           `""`,
		"source.schema_file":        `""`,
	}
	data, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	kl := scanKeyLines(string(data))
	byLine := map[int]string{}
	for p, l := range kl.lines {
		if !strings.Contains(p, "[") || strings.HasPrefix(p, "source[0].") {
			p = stripIndexes(p)
			if _, ok := defaults[p]; ok {
				byLine[l] = p
			}
		}
	}
	reDefault := regexp.MustCompile(`#\s*default\s+("[^"]*"|[0-9]+)`)
	checked := 0
	for i, line := range strings.Split(string(data), "\n") {
		m := reDefault.FindStringSubmatch(line)
		key, ok := byLine[i+1]
		if m == nil || !ok {
			continue
		}
		checked++
		if m[1] != defaults[key] {
			t.Errorf("line %d: %s says default %s, the code's is %s", i+1, key, m[1], defaults[key])
		}
	}
	if checked < len(defaults) {
		t.Errorf("checked %d default comments, want %d", checked, len(defaults))
	}
}

// TestDependencyRule: config may import the standard library, BurntSushi/toml
// and oncehook/providers; never fasthttp, raft, bbolt, engine, cluster or
// forward.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"github.com/BurntSushi/toml": true, "oncehook/providers": true}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		std := !strings.Contains(first, ".") && first != "oncehook"
		if !std && !allowed[imp] {
			t.Errorf("config imports %s", imp)
		}
	}
}
