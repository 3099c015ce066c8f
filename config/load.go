package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"oncehook/providers"
)

// The file's shape. Each section is decoded on its own (toml.Primitive) so that
// a bad value in one source does not hide a bad value in the next, and so that
// a decode error can be given the ordinal of its [[source]]. Pointers and nil
// slices mark keys whose default depends on the provider.

type rawFile struct {
	Node    toml.Primitive   `toml:"node"`
	Cluster toml.Primitive   `toml:"cluster"`
	Admin   toml.Primitive   `toml:"admin"`
	Source  []toml.Primitive `toml:"source"`
}

type rawNode struct {
	ID        string `toml:"id"`
	DataDir   string `toml:"data_dir"`
	Listen    string `toml:"listen"`
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
	// MaxConnsPerIP is a pointer so that an explicit 0 is refused, not
	// taken for the default.
	MaxConnsPerIP *int `toml:"max_conns_per_ip"`
}

type rawCluster struct {
	RaftListen string   `toml:"raft_listen"`
	Advertise  string   `toml:"advertise"`
	Peers      []string `toml:"peers"`
	TokenFile  string   `toml:"token_file"`
	TLSCert    string   `toml:"tls_cert"`
	TLSKey     string   `toml:"tls_key"`
	TLSCA      string   `toml:"tls_ca"`

	HeartbeatTimeout Duration `toml:"heartbeat_timeout"`
	ElectionTimeout  Duration `toml:"election_timeout"`
}

type rawAdmin struct {
	Listen     string           `toml:"listen"`
	Tokens     []toml.Primitive `toml:"tokens"`
	TLSCert    string           `toml:"tls_cert"`
	TLSKey     string           `toml:"tls_key"`
	MaxRestore *Size            `toml:"max_restore"`
}

type rawToken struct {
	Name      string  `toml:"name"`
	TokenFile string  `toml:"token_file"`
	Token     *string `toml:"token"`
}

type rawSource struct {
	Name           string    `toml:"name"`
	Provider       string    `toml:"provider"`
	Secrets        []string  `toml:"secrets"`
	SecretFiles    []string  `toml:"secret_files"`
	Tolerance      Duration  `toml:"tolerance"`
	Key            []string  `toml:"key"`
	Retention      *Duration `toml:"retention"`
	MaxBody        Size      `toml:"max_body"`
	Forward        string    `toml:"forward"`
	ForwardHeaders []string  `toml:"forward_headers"`
	Mode           string    `toml:"mode"`
	AckStatus      *int      `toml:"ack_status"`
	Lease          Duration  `toml:"lease"`
	MaxAttempts    int       `toml:"max_attempts"`
	BackoffMin     Duration  `toml:"backoff_min"`
	BackoffMax     Duration  `toml:"backoff_max"`
	ForwardTimeout Duration  `toml:"forward_timeout"`
	MaxRate        float64   `toml:"max_rate"`
	MaxRateBurst   int       `toml:"max_rate_burst"`
	AllowIPs       []string  `toml:"allow_ips"`
	TrustedProxies []string  `toml:"trusted_proxies"`
	TwilioBody     string    `toml:"twilio_body"`
	KeysURL        string    `toml:"keys_url"`
	KeysRefresh    Duration  `toml:"keys_refresh"`
	SchemaFile     string    `toml:"schema_file"`
	Order          *rawOrder `toml:"order"`
	HMAC           *rawHMAC  `toml:"hmac"`
	ReplayGuard    string    `toml:"replay_guard"`
	Type           string    `toml:"type"`
	AcceptTypes    []string  `toml:"accept_types"`
	DropTypes      []string  `toml:"drop_types"`

	DeadRetention    Duration `toml:"dead_retention"`
	PayloadRetention Duration `toml:"payload_retention"`
}

type rawOrder struct {
	Object  string `toml:"object"`
	Time    string `toml:"time"`
	Missing string `toml:"missing"`
}

type rawHMAC struct {
	Header          string `toml:"header"`
	Algorithm       string `toml:"algorithm"`
	Encoding        string `toml:"encoding"`
	Prefix          string `toml:"prefix"`
	TimestampHeader string `toml:"timestamp_header"`
	IDHeader        string `toml:"id_header"`
	Template        string `toml:"template"`
}

// sectionTypes gives the shape behind each toml.Primitive of the file, for
// the unknown-key walk.
var sectionTypes = map[string]reflect.Type{
	"node":         reflect.TypeFor[rawNode](),
	"cluster":      reflect.TypeFor[rawCluster](),
	"admin":        reflect.TypeFor[rawAdmin](),
	"admin.tokens": reflect.TypeFor[rawToken](),
	"source":       reflect.TypeFor[rawSource](),
}

// Load reads the TOML file at path, applies defaults (the provider's for key,
// retention and ack_status), reads every secret and token file, normalises and
// validates. Every problem found is returned, joined, each an *Error of the
// form `file:line: key: message`; on error the Config is nil. Load has no side
// effects and may be called any number of times (SIGHUP calls it again: secret
// files are re-read each time).
//
// Paths of secret, token, TLS and schema files are resolved against the
// directory of path when relative; for secret, token and TLS files, a relative
// path that exists under $CREDENTIALS_DIRECTORY (systemd LoadCredential=) is
// taken from there first. Secret, token and TLS key files readable by others
// (mode & 0o004) or writable by group or others (mode & 0o022) are refused,
// and so is a config file readable by others that holds secrets or tokens
// inline.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			msg = pe.Err.Error() + permissionHint(err, pe.Path) // the path is already the prefix
		}
		return nil, &Error{File: path, Message: "cannot read config: " + msg, Err: err}
	}
	return parse(path, data)
}

// parse reads data as the config file at path (relative paths in it are the
// file's directory's).
func parse(path string, data []byte) (*Config, error) {
	l := &loader{
		p:   &problems{file: path},
		dir: filepath.Dir(path),
		md:  toml.MetaData{},
	}
	l.p.lines = scanKeyLines(string(data))
	c := l.load(data)
	if err := l.p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

type loader struct {
	p   *problems
	dir string
	md  toml.MetaData
}

func (l *loader) load(data []byte) *Config {
	var raw rawFile
	md, err := toml.Decode(string(data), &raw)
	if err != nil {
		l.decodeError("", err)
		return nil
	}
	l.md = md

	// Decode each section; remember whether any failed.
	var (
		node    = rawNode{}
		cluster = rawCluster{}
		admin   = rawAdmin{}
		tokens  []rawToken
		sources = make([]rawSource, len(raw.Source))
	)
	bad := false
	if md.IsDefined("node") {
		bad = !l.decodeTable(raw.Node, &node, "node") || bad
	}
	if md.IsDefined("cluster") {
		bad = !l.decodeTable(raw.Cluster, &cluster, "cluster") || bad
	}
	if md.IsDefined("admin") {
		bad = !l.decodeTable(raw.Admin, &admin, "admin") || bad
		tokens = make([]rawToken, len(admin.Tokens))
		for i := range admin.Tokens {
			bad = !l.decodeTable(admin.Tokens[i], &tokens[i], "admin.tokens["+strconv.Itoa(i)+"]") || bad
		}
	}
	for i := range raw.Source {
		bad = !l.decodeTable(raw.Source[i], &sources[i], "source["+strconv.Itoa(i)+"]") || bad
	}

	// Unknown keys, from the parser's own view of the document walked against
	// the raw structs. (MetaData.Undecoded would do for plain tables, but it
	// has no ordinals, and a section that failed to decode leaves its keys
	// looking unknown.)
	var generic map[string]any
	if _, err := toml.Decode(string(data), &generic); err == nil {
		l.unknownKeys(generic, reflect.TypeFor[rawFile](), "", "")
	}
	if bad {
		// Partly decoded sections would only produce confusing follow-ups.
		return nil
	}

	var inline []string
	for i, t := range tokens {
		if t.Token != nil && *t.Token != "" {
			inline = append(inline, "admin.tokens["+strconv.Itoa(i)+"].token")
		}
	}
	for i := range sources {
		// A standard source's whpk_ public keys verify and cannot sign:
		// inline, they make the file no more sensitive than any other.
		if slices.ContainsFunc(sources[i].Secrets, func(v string) bool { return !strings.HasPrefix(v, providers.PublicKeyPrefix) }) {
			inline = append(inline, "source["+strconv.Itoa(i)+"].secrets")
		}
	}
	slices.SortStableFunc(inline, func(a, b string) int { return cmp.Compare(l.p.lines.find(a), l.p.lines.find(b)) })
	l.checkInline(inline)
	l.checkWritable()

	c := Default()
	c.Path = l.p.file
	c.lines = l.p.lines
	l.node(&c.Node, node)
	// Like every relative path in the file, data_dir (and its default)
	// is the config file's directory's: started from another working
	// directory, a node must not open another, empty data dir and forget
	// every key it held.
	c.Node.DataDir = l.absolute(c.Node.DataDir)
	if md.IsDefined("cluster") {
		c.Cluster = l.cluster(cluster)
	}
	l.admin(&c.Admin, admin, tokens)
	for i := range sources {
		c.Sources = append(c.Sources, l.source(i, &sources[i]))
	}
	c.validate(l.p)
	return c
}

// decodeTable decodes one table into dst (a pointer to a raw struct) key by
// key, in file order, so that every bad value is reported and always in the
// same order (toml stops at the first error it meets in map order). prefix is
// the table's path with ordinals ("source[2]"); errors are reported under it.
// It returns false when the table itself could not be read; a key whose value
// did not decode is left unset, reported, and not judged again.
// Keys dst has no field for are left to unknownKeys.
func (l *loader) decodeTable(prim toml.Primitive, dst any, prefix string) bool {
	// toml decodes a non-table into a map without complaint (node = 5).
	var generic any
	if err := l.md.PrimitiveDecode(prim, &generic); err == nil {
		if _, ok := generic.(map[string]any); !ok {
			l.p.add(prefix, nil, fmt.Sprintf("want a table, got %s", tomlType(generic)))
			return false
		}
	}
	var m map[string]toml.Primitive
	if err := l.md.PrimitiveDecode(prim, &m); err != nil {
		l.decodeError(prefix, err)
		return false
	}
	rv := reflect.ValueOf(dst).Elem()
	fields := map[string]int{}
	for i := range rv.NumField() {
		name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("toml"), ",")
		fields[name] = i
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	line := func(k string) int {
		if n := l.p.lines.find(prefix + "." + quoteKey(k)); n > 0 {
			return n
		}
		return int(^uint(0) >> 1)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(line(a), line(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	ok := true
	for _, k := range keys {
		i, known := fields[k]
		if !known || k == "" {
			continue
		}
		if err := l.md.PrimitiveDecode(m[k], rv.Field(i).Addr().Interface()); err != nil {
			// The value stays unset, and its error is the answer for it:
			// the other keys are still judged (validation skips this one).
			l.decodeError(prefix, err)
			l.p.undecoded(prefix + "." + quoteKey(k))
		}
	}
	return ok
}

// tomlType names the TOML type of a decoded value, for errors.
func tomlType(v any) string {
	switch v.(type) {
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	}
	return "a date or time"
}

// reDecode matches the errors BurntSushi/toml formats itself (type mismatches)
// rather than returning as ParseError.
var reDecode = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "((?:[^"\\]|\\.)*)"\): (.*)$`)

// reDefinedTwice matches the parser's error for a key or table defined twice.
var reArrayAfterInline = regexp.MustCompile(`^Key '((?:[^'\\]|\\.)*)' was already created and cannot be used as an array\.?$`)

var reDefinedTwice = regexp.MustCompile(`^Key '((?:[^'\\]|\\.)*)' has already been defined\.?$`)

// decodeError turns a toml error into an *Error. prefix, when set, is the
// indexed path of the element being decoded ("source[1]"); it replaces the
// unindexed section name in the error's key, and the line is then looked up
// by the scanner, because toml keeps the position of the last element only.
func (l *loader) decodeError(prefix string, err error) {
	var (
		line int
		key  string
		msg  = err.Error()
	)
	var pe toml.ParseError
	if errors.As(err, &pe) {
		line, key, msg = pe.Position.Line, pe.LastKey, pe.Message
		if strings.Contains(msg, "table name") || strings.Contains(msg, "table array name") {
			// A header left unclosed: the parser is past it, on the next
			// line, and its last key is the table before.
			key = ""
			if h := l.p.lines.headerBefore(line); h > 0 {
				line = h
			}
		}
		if prefix == "" {
			// The whole file's parse: a syntax error, which may quote a
			// secret. (A section's decode reports our own types' errors,
			// "invalid duration \"5 minutes\"", which quote no secret.)
			msg = syntaxMessage(msg)
		}
	} else if m := reDecode.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		key, msg = m[2], m[3]
		if u, err := strconv.Unquote(`"` + m[2] + `"`); err == nil {
			key = u
		}
	} else {
		msg = strings.TrimPrefix(msg, "toml: ")
	}
	if m := reDefinedTwice.FindStringSubmatch(msg); m != nil {
		// The parser's words name the key only inside its message, and a
		// table defined twice has no last key.
		if key == "" {
			key = m[1]
		}
		msg = "set twice: a key, or a [table] other than an array of tables ([[source]]), may appear once"
	}
	if m := reArrayAfterInline.FindStringSubmatch(msg); m != nil {
		// [[key]] after key was set another way: an inline list
		// (tokens = [...]), a [key] table, a value.
		key = m[1]
		if key == "source" || key == "admin.tokens" { // the arrays of tables
			msg = fmt.Sprintf("[[%s]] cannot add to the %s set above (an inline list or a [%s] table): write every entry as a [[%s]] table, or all of them in one inline list", key, key, key, key)
		} else {
			msg = fmt.Sprintf("[[%s]] after %s was set above: %s is one table, written once as [%s]", key, key, key, key)
		}
		l.p.list = append(l.p.list, &Error{File: l.p.file, Line: line, Key: key, Message: msg, Err: err})
		return
	}
	if (key == "source" || key == "admin.tokens") &&
		strings.HasPrefix(msg, "incompatible types: TOML value has type map[string]any; destination has type slice") {
		// [source.x] or tokens = {...} where [[source]] / tokens = [{...}]
		// was meant (the only arrays of tables; other arrays hold strings).
		msg = fmt.Sprintf("want an array of tables ([[%s]], or [{...}]), got a table", key)
	}
	if line == 0 && key != "" {
		// toml names no line for a type mismatch of a whole table.
		line = l.p.lines.firstUnder(key)
	}
	if prefix != "" {
		section := stripIndexes(prefix)
		if key == section || strings.HasPrefix(key, section+".") {
			key = prefix + key[len(section):]
			if kl := l.p.lines.find(key); kl > 0 {
				line = kl
			}
		}
	} else if line > 0 && key != "" {
		// A syntax error inside the n-th [[source]]: say which one.
		if t := l.p.lines.tableAt(line); t != "" {
			if u := stripIndexes(t); u != t && (key == u || strings.HasPrefix(key, u+".")) {
				key = t + key[len(u):]
			}
		}
		// Or inside the n-th element of an inline array of tables
		// (tokens = [{...}, {...}]).
		if p := l.p.lines.indexedAt(key, line); p != "" {
			key = p
		}
	}
	l.p.list = append(l.p.list, &Error{File: l.p.file, Line: line, Key: key, Message: msg, Err: err})
}

// syntaxMessages rewrite the TOML parser's syntax errors that quote the
// text they found, which may be a secret (secrets = [whsec_...] unquoted,
// a token with a bad escape): validate prints the error and serve logs it.
// Each keeps what the parser expected, never what it found; file:line and
// the key say where to look. The parser's own words in the kept parts are
// fixed text, not input.
var syntaxMessages = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`^expected value but found .*$`), "syntax error: expected a value (a string must be quoted)"},
	// lease = 5s: the parser reads 5 and stops at the s.
	{regexp.MustCompile(`^(expected a top-level item to end with a newline, comment, or EOF),? but (?:got|found) .*$`),
		`syntax error: $1 (a string or duration must be quoted: lease = "30s")`},
	// "expected X, but got 'c' instead", "expected a digit but got 'c'".
	{regexp.MustCompile(`^(expected .*?),? but (?:got|found) .*$`), "syntax error: $1"},
	// `Invalid integer "12_": underscores must be surrounded by digits`.
	{regexp.MustCompile(`^Invalid (integer|float) "(?:[^"\\]|\\.)*"(: .*)$`), "syntax error: invalid $1$2"},
	{regexp.MustCompile(`^Invalid float value: .*$`), "syntax error: invalid float"},
	{regexp.MustCompile(`^(invalid float|invalid datetime|invalid duration|cannot use sign with non-decimal numbers|not a binary number|not an octal number|not a hexadecimal number): .*$`), "syntax error: $1"},
	{regexp.MustCompile(`^.* is out of (?:range for|the safe) (\w+)(?: range)?$`), "syntax error: number out of range for $1"},
	{regexp.MustCompile(`^invalid escape in string .*$`), `syntax error: invalid escape in a string (\\ for a backslash, or a 'literal string')`},
	{regexp.MustCompile(`^Escaped character .* is not valid UTF-8\.$`), "syntax error: an escaped character is not valid UTF-8"},
}

// syntaxQuiet are the parser's messages that quote no input (keys are not
// secret: "Key 'source.name' has already been defined."): kept as they are.
var syntaxQuiet = regexp.MustCompile(`^(unexpected|strings cannot contain newlines|newlines not allowed within inline tables|Key '|TOML files cannot contain control characters|invalid UTF-8 byte|files cannot contain NULL bytes|floats must start with a digit|"[^"]*" is not a table)`)

// syntaxMessage is msg, a TOML syntax error, without any of the text the
// parser found (syntaxMessages). A message of a form not known here (a
// newer parser's) says only "syntax error": it might quote a secret.
func syntaxMessage(msg string) string {
	for _, m := range syntaxMessages {
		if m.re.MatchString(msg) {
			return m.re.ReplaceAllString(msg, m.repl)
		}
	}
	if syntaxQuiet.MatchString(msg) {
		return msg
	}
	return "syntax error (the text found is not shown: it may be a secret)"
}

// nearestKey is the known key k was most likely meant to be: the same but
// for case, '_' and '-' (maxAttempts, max-attempts), or within two edits of
// it (max_attemps, nodes for node); "" when none is that close, or when two
// are equally close.
func nearestKey(k string, fields map[string]reflect.Type) string {
	fold := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	best, bestD, tie := "", 3, false
	for name := range fields {
		d := editDistance(fold(k), fold(name))
		if d > 0 && len(name) < 4 {
			continue // a short key is too near too many typos
		}
		switch {
		case d < bestD:
			best, bestD, tie = name, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie || bestD > 2 {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// unknownKeys reports every key of v (a decoded table) that t has no field
// for. Matching is exact: toml's case-insensitive fallback would otherwise
// accept "Listen" for "listen".
func (l *loader) unknownKeys(v map[string]any, t reflect.Type, section, path string) {
	fields := tomlFields(t)
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ft, ok := fields[k]
		p := join(path, quoteKey(k))
		if !ok {
			msg := "unknown key"
			if near := nearestKey(k, fields); near != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", near)
			}
			l.p.add(p, ErrUnknownKey, msg)
			continue
		}
		sec := join(section, k)
		if st, ok := sectionTypes[sec]; ok {
			if ft.Kind() == reflect.Slice {
				ft = reflect.SliceOf(st)
			} else {
				ft = st
			}
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			if sub, ok := v[k].(map[string]any); ok {
				l.unknownKeys(sub, ft, sec, p)
			}
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			for i, e := range tables(v[k]) {
				l.unknownKeys(e, ft.Elem(), sec, p+"["+strconv.Itoa(i)+"]")
			}
		}
	}
}

// quoteKey quotes a key that is not bare, as TOML would need it.
func quoteKey(k string) string {
	for i := 0; i < len(k); i++ {
		if !isBare(k[i]) {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// tables returns the tables of an array of tables, inline or not.
func tables(v any) []map[string]any {
	switch a := v.(type) {
	case []map[string]any:
		return a
	case []any:
		out := make([]map[string]any, 0, len(a))
		for _, e := range a {
			m, _ := e.(map[string]any)
			out = append(out, m) // a nil map walks as empty
		}
		return out
	}
	return nil
}

// tomlFields maps each toml tag of struct t to its field's type.
func tomlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			out[name] = f.Type
		}
	}
	return out
}

func (l *loader) node(n *Node, r rawNode) {
	setString(&n.ID, r.ID)
	setString(&n.DataDir, r.DataDir)
	setString(&n.Listen, r.Listen)
	setString(&n.LogLevel, strings.ToLower(r.LogLevel))
	setString(&n.LogFormat, strings.ToLower(r.LogFormat))
	if r.MaxConnsPerIP != nil {
		n.MaxConnsPerIP = *r.MaxConnsPerIP
	}
}

func setString(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func (l *loader) cluster(r rawCluster) *Cluster {
	c := defaultCluster()
	setString(&c.RaftListen, r.RaftListen)
	c.Advertise = r.Advertise // derived in validate when empty
	for i, s := range r.Peers {
		key := "cluster.peers[" + strconv.Itoa(i) + "]"
		id, addr, ok := strings.Cut(s, "=")
		id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
		if !ok || id == "" || addr == "" {
			// Keep the entry so that later indexes match the file;
			// validate skips entries with a problem already.
			l.p.add(key, nil, fmt.Sprintf("want \"id=host:port\", got %q", s))
		}
		c.Peers = append(c.Peers, Peer{ID: id, Addr: addr})
	}
	c.TLSCert = l.resolve(r.TLSCert, true)
	c.TLSKey = l.resolve(r.TLSKey, true)
	c.TLSCA = l.resolve(r.TLSCA, true)
	if r.HeartbeatTimeout != 0 {
		c.HeartbeatTimeout = r.HeartbeatTimeout
	}
	if r.ElectionTimeout != 0 {
		c.ElectionTimeout = r.ElectionTimeout
	}
	if r.TokenFile != "" {
		c.TokenFile = l.resolve(r.TokenFile, true)
		if sec, ok := l.readSecret("cluster.token_file", c.TokenFile); ok {
			c.Token = sec
		}
	}
	return &c
}

func (l *loader) admin(a *Admin, r rawAdmin, tokens []rawToken) {
	setString(&a.Listen, r.Listen)
	a.TLSCert = l.resolve(r.TLSCert, true)
	a.TLSKey = l.resolve(r.TLSKey, true)
	if r.MaxRestore != nil {
		a.MaxRestore = *r.MaxRestore
	}
	for i, t := range tokens {
		key := "admin.tokens[" + strconv.Itoa(i) + "]"
		tok := AdminToken{Name: t.Name}
		switch {
		case t.Token != nil && t.TokenFile != "":
			l.p.add(key+".token", nil, "token and token_file are both set; use one")
		case t.TokenFile != "":
			tok.TokenFile = l.resolve(t.TokenFile, true)
			if sec, ok := l.readSecret(key+".token_file", tok.TokenFile); ok {
				tok.Token = sec
			}
		case t.Token != nil:
			l.notAReference(key+".token", *t.Token, "token_file")
			tok.Token = Secret(*t.Token)
		}
		a.Tokens = append(a.Tokens, tok)
	}
}

// notAReference refuses an inline secret that is, beyond doubt, a
// reference to the secret rather than the secret: the path of a file that
// exists ("/etc/oncehook/github.secret", copied from secret_files) or a
// variable's name ("${GITHUB_SECRET}", "$GITHUB_SECRET", "env:GITHUB_SECRET").
// The file does not expand either, so it would be the key itself, a string
// a forger can guess, and `oncehook send` signing with the same string would
// hide the mistake. A value that only starts like a path may be a real
// secret (base64 starts with '/' once in 64): Warnings names one that reads
// like a path throughout.
func (l *loader) notAReference(key, v, fileKey string) {
	var looks string
	path := strings.TrimPrefix(v, "file:")
	switch {
	case strings.HasPrefix(v, "$(") && variableRef.MatchString(v):
		looks = "a shell command's output"
	case variableRef.MatchString(v):
		looks = "the name of an environment variable"
	case strings.HasPrefix(path, "/") || strings.HasPrefix(path, "./") || strings.HasPrefix(path, "../"):
		if _, err := os.Stat(l.resolve(path, false)); err != nil {
			return
		}
		looks = "the path of a file that exists"
	default:
		return
	}
	l.p.add(key, nil, fmt.Sprintf("is %s, and an inline value is used as it is written, never expanded nor read: "+
		"put the file's path in %s, or the secret itself inline", looks, fileKey))
}

// variableRef matches the ways configs name an environment variable or a
// command's output: ${NAME} (${NAME:-x} too), $(cmd), $NAME (upper case,
// as variables are named), %NAME%, env:NAME.
var variableRef = regexp.MustCompile(`^(\$\{[^{}]*\}|\$\([^()]*\)|\$[A-Z_][A-Z0-9_]*|%[A-Za-z_][A-Za-z0-9_]*%|(?i:env):[A-Za-z_][A-Za-z0-9_]*)$`)

func (l *loader) source(i int, r *rawSource) Source {
	key := "source[" + strconv.Itoa(i) + "]"
	s := newSource()
	s.Name = r.Name
	s.Provider = strings.ToLower(r.Provider)

	switch {
	case r.Secrets != nil && r.SecretFiles != nil:
		l.p.add(key+".secrets", nil, "secrets and secret_files are both set; give each secret once, inline or (better) as a file")
	case r.SecretFiles != nil:
		for j, f := range r.SecretFiles {
			path := l.resolve(f, true)
			s.SecretFiles = append(s.SecretFiles, path)
			if sec, ok := l.readSecret(key+".secret_files["+strconv.Itoa(j)+"]", path); ok {
				s.Secrets = append(s.Secrets, sec)
			}
		}
	default:
		for j, v := range r.Secrets {
			l.notAReference(key+".secrets["+strconv.Itoa(j)+"]", v, "secret_files")
			s.Secrets = append(s.Secrets, Secret(v))
		}
	}

	if r.Tolerance != 0 {
		s.Tolerance = r.Tolerance
	}
	s.Key = r.Key
	if r.Retention != nil {
		s.Retention = *r.Retention
	}
	if r.MaxBody != 0 {
		s.MaxBody = r.MaxBody
	}
	s.Forward = r.Forward
	s.ForwardHeaders = r.ForwardHeaders
	setString(&s.Mode, strings.ToLower(r.Mode))
	if r.AckStatus != nil {
		s.AckStatus = *r.AckStatus
	}
	if r.Lease != 0 {
		s.Lease = r.Lease
	}
	if r.DeadRetention != 0 {
		s.DeadRetention = r.DeadRetention
	}
	if r.MaxAttempts != 0 {
		s.MaxAttempts = r.MaxAttempts
	}
	if r.BackoffMin != 0 {
		s.BackoffMin = r.BackoffMin
	}
	if r.BackoffMax != 0 {
		s.BackoffMax = r.BackoffMax
	}
	if r.ForwardTimeout != 0 {
		s.ForwardTimeout = r.ForwardTimeout
	}
	s.MaxRate, s.MaxRateBurst = r.MaxRate, r.MaxRateBurst
	if s.MaxRateBurst == 0 && s.MaxRate > 0 && s.MaxRate <= maxRate {
		s.MaxRateBurst = max(1, int(math.Ceil(s.MaxRate)))
	}
	for j, v := range r.AllowIPs {
		p, err := parsePrefix(v)
		if err != nil {
			l.p.add(key+".allow_ips["+strconv.Itoa(j)+"]", err, fmt.Sprintf("invalid CIDR or IP %q", v))
		}
		s.AllowIPs = append(s.AllowIPs, p) // invalid on error: indexes match the file
	}
	for j, v := range r.TrustedProxies {
		p, err := parsePrefix(v)
		if err != nil {
			l.p.add(key+".trusted_proxies["+strconv.Itoa(j)+"]", err, fmt.Sprintf("invalid CIDR or IP %q", v))
		}
		s.TrustedProxies = append(s.TrustedProxies, p)
	}
	s.KeysURL = r.KeysURL
	if r.KeysRefresh != 0 {
		s.KeysRefresh = r.KeysRefresh
	}
	if r.SchemaFile != "" {
		s.SchemaFile = l.resolve(r.SchemaFile, false)
		if f, err := os.Open(s.SchemaFile); err != nil {
			l.p.add(key+".schema_file", err, "cannot read schema: "+errText(err))
		} else {
			f.Close()
		}
	}
	if r.Order != nil {
		s.Order = &Order{Object: r.Order.Object, Time: r.Order.Time, Missing: strings.ToLower(r.Order.Missing)}
	}
	if r.HMAC != nil {
		s.HMAC = &providers.HMACSpec{
			Header:          r.HMAC.Header,
			Algorithm:       r.HMAC.Algorithm,
			Encoding:        r.HMAC.Encoding,
			Prefix:          r.HMAC.Prefix,
			TimestampHeader: r.HMAC.TimestampHeader,
			IDHeader:        r.HMAC.IDHeader,
			Template:        r.HMAC.Template,
		}
		normaliseHMAC(s.HMAC)
	}
	s.ReplayGuard = strings.ToLower(r.ReplayGuard)
	s.TwilioBody = strings.ToLower(r.TwilioBody)
	s.Type = r.Type
	s.AcceptTypes = r.AcceptTypes
	s.DropTypes = r.DropTypes
	s.PayloadRetention = r.PayloadRetention
	applyProviderDefaults(&s, r.Key != nil, r.Retention != nil, r.AckStatus != nil, r.Tolerance != 0)
	return s
}

// parsePrefix accepts a CIDR ("10.0.0.0/8") or a bare address ("10.0.0.1",
// "::1"), returning the masked prefix. An IPv4-mapped one
// ("::ffff:10.0.0.1", "::ffff:10.0.0.0/104") is taken as the IPv4 it maps:
// the intake compares the peer's address unmapped, and a mapped entry would
// never match.
func parsePrefix(v string) (netip.Prefix, error) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a := p.Addr(); a.Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, fmt.Errorf("%s spans beyond the IPv4-mapped range (::ffff:0:0/96)", v)
			}
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, errors.New("zones are not allowed")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// absolute is path against the config's directory, made absolute.
func (l *loader) absolute(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	p := filepath.Join(l.dir, path)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// resolve makes a relative path absolute against the config's directory, or
// against $CREDENTIALS_DIRECTORY when credentials is set and the file exists
// there (systemd LoadCredential=name:/path makes it available as "name").
func (l *loader) resolve(path string, credentials bool) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); credentials && dir != "" {
		p := filepath.Join(dir, path)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join(l.dir, path)
}

// readSecret reads one secret or token file. It refuses a file that is not a
// regular file, is readable by others, is writable by its group or by others
// (whoever can write it can choose the secret), or is empty, reporting the path and the
// os error at key, never the content. Surrounding whitespace (the trailing
// newline of `echo secret > file`, Windows' \r\n) is trimmed, and so is a
// leading UTF-8 byte order mark (Notepad writes one): kept, it would be
// part of the secret, which Validate accepts, and every signature would
// fail to verify (401) with nothing to say why.
func (l *loader) readSecret(key, path string) (Secret, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		l.p.add(key, err, "cannot read secret file: "+errText(err))
		return nil, false
	}
	if !fi.Mode().IsRegular() {
		l.p.add(key, nil, fmt.Sprintf("cannot read secret file: %s is not a regular file", path))
		return nil, false
	}
	if perm := fi.Mode().Perm(); perm&0o026 != 0 {
		what, chmod := unsafeMode(perm)
		l.p.add(key, ErrSecretFileMode, fmt.Sprintf(
			"secret file %s has mode %#o: it must not be %s (chmod %s %s)", path, perm, what, chmod, path))
		return nil, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		l.p.add(key, err, "cannot read secret file: "+errText(err))
		return nil, false
	}
	b = bytes.TrimSpace(bytes.TrimPrefix(b, utf8BOM))
	if len(b) == 0 {
		l.p.add(key, nil, fmt.Sprintf("secret file %s is empty", path))
		return nil, false
	}
	return Secret(b), true
}

// utf8BOM is the byte order mark some editors put at the start of a text
// file: EF BB BF.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// errText is an os error's text: "open /x: no such file or directory",
// followed for a refused read by who is reading and how to let it.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + " " + pe.Path + ": " + pe.Err.Error() + permissionHint(err, pe.Path)
	}
	return err.Error()
}

// permissionHint says, after a permission error on path, which user and
// group this process runs as and the usual fix: under systemd the service
// user reads files that root wrote, and "permission denied" alone does not
// say whose permission. "" for any other error.
func permissionHint(err error, path string) string {
	if !errors.Is(err, fs.ErrPermission) {
		return ""
	}
	uid, gid := os.Geteuid(), os.Getegid()
	who := fmt.Sprintf("uid %d", uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		who = fmt.Sprintf("user %s (uid %d)", u.Username, uid)
	}
	group := strconv.Itoa(gid)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	// The fix names the service's group, not the caller's: an operator
	// checking the file as someone else must not hand a secret to a group
	// of their own.
	return fmt.Sprintf(" (this process runs as %s, group %s; the user serve runs as must be able to read the file and enter each directory above it: for the packaged unit's user, chgrp oncehook %s && chmod 0640 %s)",
		who, group, path, path)
}

// unsafeMode says what is wrong with the mode of a secret, token or key file
// ("" when nothing is) and the chmod argument that fixes it: such a file must
// not be readable by others (mode & 0o004), nor writable by its group or by
// others (mode & 0o022). Group-readable is fine (0640, root:oncehook).
func unsafeMode(perm fs.FileMode) (what, chmod string) {
	readable, groupW, otherW := perm&0o004 != 0, perm&0o020 != 0, perm&0o002 != 0
	switch {
	case readable && groupW:
		return "readable by others or writable by its group", "g-w,o-rwx"
	case readable:
		return "readable by others", "o-rwx"
	case groupW && otherW:
		return "writable by its group or by others", "go-w"
	case groupW:
		return "writable by its group", "g-w"
	case otherW:
		return "writable by others", "o-w"
	}
	return "", ""
}

// checkWritable refuses a config file others may write: whoever can write
// it chooses the node's secret and token files, its handlers and its data
// dir. (Its group may: root:oncehook 0660 gives the file to the service's
// own group.)
func (l *loader) checkWritable() {
	fi, err := os.Stat(l.p.file)
	if err != nil {
		return
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		l.p.list = append(l.p.list, &Error{File: l.p.file, Err: ErrSecretFileMode, Message: fmt.Sprintf(
			"config file %s has mode %#o: it must not be writable by others, who would choose the node's secret files, handlers and data dir (chmod o-w %s)",
			l.p.file, perm, l.p.file)})
	}
}

// checkInline refuses a config file that is readable by others when it holds
// credentials inline (a source's secrets, an admin token): the file is then
// as sensitive as a secret file. inline lists the keys holding them, in file
// order; the problem is reported at the first.
func (l *loader) checkInline(inline []string) {
	if len(inline) == 0 {
		return
	}
	fi, err := os.Stat(l.p.file)
	if err != nil {
		return // read a moment ago; a race with a rename is not ours to report
	}
	perm := fi.Mode().Perm()
	if perm&0o004 == 0 {
		return
	}
	l.p.add(inline[0], ErrSecretFileMode, fmt.Sprintf(
		"config file %s holds inline credentials and has mode %#o: it must not be readable by others (chmod o-rwx %s), or move them to files (secret_files, token_file)",
		l.p.file, perm, l.p.file))
}
