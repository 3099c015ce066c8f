package config

import (
	"strconv"
	"strings"
)

// keyLines maps each key path of a TOML file to the line where it first
// appears. BurntSushi/toml reports positions for syntax errors and for values
// its UnmarshalText rejects, but its MetaData carries no lines for unknown keys,
// and for an array of tables it keeps the position of the last element only.
// This scanner fills the gap. Paths carry ordinals, in the form errors print:
//
//	[[source]]                  -> "source[0]"
//	name = "x"                  -> "source[0].name"
//	secret_files = ["a", "b"]   -> "source[0].secret_files", ...[0], ...[1]
//	hmac = { header = "X" }     -> "source[0].hmac", "source[0].hmac.header"
//	[admin]                     -> "admin"
//	tokens = [{ name = "ops" }] -> "admin.tokens[0].name"
//	["odd key"]                 -> "\"odd key\"" (non-bare parts quoted)
//
// It is a heuristic reader, not a validator: on anything it does not
// understand it skips to the next line. The real parser has the final word on
// syntax; this one only says where things are.
type keyLines struct {
	lines  map[string]int
	tables []tableLine // table headers in file order
	// brackets are the lines that open with '[' (after blanks), in file
	// order: where a header the scanner could not read may be.
	brackets []int
}

type tableLine struct {
	line int
	path string
}

// find returns the line of the first key found, trying each key and then each
// of its parents ("source[1].hmac.header", "source[1].hmac", "source[1]"), or 0.
// has reports whether the file sets key itself.
func (kl *keyLines) has(key string) bool {
	if kl == nil {
		return false
	}
	_, ok := kl.lines[key]
	return ok
}

func (kl *keyLines) find(keys ...string) int {
	if kl == nil {
		return 0
	}
	for _, k := range keys {
		if l, ok := kl.lines[k]; ok {
			return l
		}
		if l, ok := kl.lines[k+"[0]"]; ok { // an array where a table was wanted
			return l
		}
	}
	for _, k := range keys {
		for p := parentPath(k); p != ""; p = parentPath(p) {
			if l, ok := kl.lines[p]; ok {
				return l
			}
		}
	}
	return 0
}

// firstUnder returns the first line of key or of anything under it
// (key.x, key[0]), 0 when none.
func (kl *keyLines) firstUnder(key string) int {
	if kl == nil {
		return 0
	}
	first := 0
	for k, l := range kl.lines {
		if k == key || strings.HasPrefix(k, key+".") || strings.HasPrefix(k, key+"[") {
			if first == 0 || l < first {
				first = l
			}
		}
	}
	return first
}

// tableAt returns the path of the table whose header most recently precedes
// line ("" for the root table).
func (kl *keyLines) tableAt(line int) string {
	path := ""
	for _, t := range kl.tables {
		if t.line > line {
			break
		}
		path = t.path
	}
	return path
}

// parentPath strips the last element of a key path: "a[1].b" -> "a[1]",
// "a[1]" -> "a", "a" -> "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// stripIndexes removes ordinals: "source[1].hmac" -> "source.hmac".
func stripIndexes(p string) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}

type scanner struct {
	src    string
	pos    int
	line   int
	out    *keyLines
	arrays map[string]int // array-of-tables path without its ordinal -> count
}

func scanKeyLines(src string) *keyLines {
	s := &scanner{
		src:    src,
		line:   1,
		out:    &keyLines{lines: map[string]int{}},
		arrays: map[string]int{},
	}
	s.document()
	for i, l := range strings.Split(src, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " \t"), "[") {
			s.out.brackets = append(s.out.brackets, i+1)
		}
	}
	return s.out
}

// headerBefore returns the last line at or before line that opens with
// '[', or 0: the parser reports a table header left unclosed on the line
// after it, under the table before it.
func (kl *keyLines) headerBefore(line int) int {
	if kl == nil {
		return 0
	}
	found := 0
	for _, l := range kl.brackets {
		if l > line {
			break
		}
		found = l
	}
	return found
}

func (s *scanner) record(path string, line int) {
	if path == "" {
		return
	}
	if _, ok := s.out.lines[path]; !ok {
		s.out.lines[path] = line
	}
}

func (s *scanner) eof() bool { return s.pos >= len(s.src) }
func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

// advance moves one byte, counting lines.
func (s *scanner) advance() {
	if s.src[s.pos] == '\n' {
		s.line++
	}
	s.pos++
}

// skipSpace skips blanks on the current line.
func (s *scanner) skipSpace() {
	for !s.eof() && (s.peek() == ' ' || s.peek() == '\t') {
		s.pos++
	}
}

// skipBlank skips blanks, newlines and comments.
func (s *scanner) skipBlank() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.advance()
		case '#':
			s.skipLine()
		default:
			return
		}
	}
}

// skipLine moves to the start of the next line.
func (s *scanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		s.pos++
	}
	if !s.eof() {
		s.advance()
	}
}

func (s *scanner) document() {
	table := ""
	for {
		s.skipBlank()
		if s.eof() {
			return
		}
		line := s.line
		ok := true
		if s.peek() == '[' {
			var path string
			path, ok = s.header()
			if ok {
				table = path
				s.out.tables = append(s.out.tables, tableLine{line, path})
				s.record(path, line)
			}
		} else {
			ok = s.keyValue(table)
		}
		if !ok {
			s.skipLine()
			continue
		}
		// Whatever is left on the line must be a comment.
		s.skipSpace()
		if !s.eof() && s.peek() != '\n' && s.peek() != '\r' && s.peek() != '#' {
			s.skipLine()
		}
	}
}

// header reads "[a.b]" or "[[a.b]]" and returns the table's path.
func (s *scanner) header() (string, bool) {
	s.pos++ // '['
	array := s.peek() == '['
	if array {
		s.pos++
	}
	s.skipSpace()
	parts, ok := s.key()
	if !ok {
		return "", false
	}
	s.skipSpace()
	if s.peek() != ']' {
		return "", false
	}
	s.pos++
	if array {
		if s.peek() != ']' {
			return "", false
		}
		s.pos++
	}
	// Parents that are arrays of tables refer to their latest element.
	path := ""
	for _, p := range parts[:len(parts)-1] {
		path = s.child(join(path, quoteKey(p)))
	}
	path = join(path, quoteKey(parts[len(parts)-1]))
	if array {
		n := s.arrays[path]
		s.arrays[path] = n + 1
		return path + "[" + strconv.Itoa(n) + "]", true
	}
	return s.child(path), true
}

// child returns path with the ordinal of its latest element if it names an
// array of tables.
func (s *scanner) child(path string) string {
	if n, ok := s.arrays[path]; ok {
		return path + "[" + strconv.Itoa(n-1) + "]"
	}
	return path
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// keyValue reads `dotted.key = value` inside table.
func (s *scanner) keyValue(table string) bool {
	line := s.line
	parts, ok := s.key()
	if !ok {
		return false
	}
	s.skipSpace()
	if s.peek() != '=' {
		return false
	}
	s.pos++
	path := table
	for _, p := range parts {
		path = join(path, quoteKey(p))
		s.record(path, line)
	}
	return s.value(path)
}

// key reads a dotted key of bare and quoted parts.
func (s *scanner) key() ([]string, bool) {
	var parts []string
	for {
		s.skipSpace()
		var part string
		switch c := s.peek(); {
		case c == '"' || c == '\'':
			start := s.pos
			if !s.str() {
				return nil, false
			}
			raw := s.src[start:s.pos]
			if c == '"' {
				if u, err := strconv.Unquote(raw); err == nil {
					raw = u
				} else {
					raw = raw[1 : len(raw)-1]
				}
			} else {
				raw = raw[1 : len(raw)-1]
			}
			part = raw
		case isBare(c):
			start := s.pos
			for !s.eof() && isBare(s.peek()) {
				s.pos++
			}
			part = s.src[start:s.pos]
		default:
			return nil, false
		}
		parts = append(parts, part)
		s.skipSpace()
		if s.peek() != '.' {
			return parts, true
		}
		s.pos++
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// value reads one value, recording the paths of array elements and inline
// table keys under path.
func (s *scanner) value(path string) bool {
	s.skipSpace()
	switch s.peek() {
	case '"', '\'':
		return s.str()
	case '[':
		s.pos++
		for i := 0; ; i++ {
			s.skipBlank()
			if s.eof() {
				return false
			}
			if s.peek() == ']' {
				s.pos++
				return true
			}
			elem := path + "[" + strconv.Itoa(i) + "]"
			s.record(elem, s.line)
			if !s.value(elem) {
				return false
			}
			s.skipBlank()
			switch s.peek() {
			case ',':
				s.pos++
			case ']':
			default:
				return false
			}
		}
	case '{':
		s.pos++
		for {
			s.skipBlank()
			if s.eof() {
				return false
			}
			if s.peek() == '}' {
				s.pos++
				return true
			}
			if !s.keyValue(path) {
				return false
			}
			s.skipBlank()
			switch s.peek() {
			case ',':
				s.pos++
			case '}':
			default:
				return false
			}
		}
	case 0, '\n', '\r', '#':
		return false
	}
	// Numbers, booleans, dates: up to a delimiter.
	for !s.eof() {
		switch s.peek() {
		case ',', ']', '}', '#', '\n', '\r':
			return true
		}
		s.pos++
	}
	return true
}

// str skips a basic, literal or multi-line string.
func (s *scanner) str() bool {
	q := s.peek()
	triple := strings.Repeat(string(q), 3)
	if strings.HasPrefix(s.src[s.pos:], triple) {
		s.pos += 3
		for !s.eof() {
			if q == '"' && s.peek() == '\\' {
				s.advance()
				if !s.eof() {
					s.advance()
				}
				continue
			}
			if strings.HasPrefix(s.src[s.pos:], triple) {
				s.pos += 3
				// Up to two more quotes belong to the content.
				for i := 0; i < 2 && s.peek() == q; i++ {
					s.pos++
				}
				return true
			}
			s.advance()
		}
		return false
	}
	s.pos++
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '\n':
			return false
		case c == '\\' && q == '"':
			s.pos++
			if !s.eof() && s.peek() != '\n' {
				s.pos++
			}
			continue
		case c == q:
			s.pos++
			return true
		}
		s.pos++
	}
	return false
}

// indexedAt returns the path with ordinals of key ("admin.tokens.token", as
// the TOML parser names a key inside an inline array of tables) that the
// file sets on line, when exactly one element sets it there; "" otherwise.
// Of several on one line it cannot tell which holds the error: this
// scanner also records the keys of the elements after a syntax error.
func (kl *keyLines) indexedAt(key string, line int) string {
	found := ""
	for p, l := range kl.lines {
		if l != line || p == key || stripIndexes(p) != key {
			continue
		}
		if found != "" {
			return ""
		}
		found = p
	}
	return found
}
