package providers

// Idempotency keys and fields: values read from a verified delivery's headers
// or JSON body, without unmarshalling the body.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
)

// MaxKeyLen is the longest idempotency key, "source:" prefix included.
const MaxKeyLen = 512

// A part spec is one of
//
//	header:NAME      the value of header NAME
//	json:PATH        a string or number in the JSON body; PATH is dot-separated
//	                 object keys and array indexes, e.g. data.items.0.id
//	body:sha256      hex SHA-256 of the raw body (only when asked for: two
//	                 different events with equal bodies would collide)
//
// or several of them separated by '|': the first that is present and non-empty
// is used (e.g. "header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id").

type getterKind uint8

const (
	getHeader getterKind = iota
	getJSON
	getBodySHA256
)

type getter struct {
	kind getterKind
	arg  string // header name or JSON path
}

// lookupStatus is why a getter found nothing.
type lookupStatus uint8

const (
	found lookupStatus = iota
	missing
	notJSON
	notScalar
	badChars
	padded     // starts or ends with a space
	duplicated // a member on the path appears twice in its object
)

func parseGetters(spec string) ([]getter, error) {
	if spec == "" {
		return nil, fmt.Errorf("%w: empty key part", ErrBadConfig)
	}
	var gs []getter
	for _, alt := range strings.Split(spec, "|") {
		alt = strings.TrimSpace(alt)
		kind, arg, ok := strings.Cut(alt, ":")
		if !ok {
			return nil, fmt.Errorf("%w: key part %q: want header:NAME, json:PATH or body:sha256", ErrBadConfig, spec)
		}
		switch kind {
		case "header":
			if !validHeaderName(arg) {
				return nil, fmt.Errorf("%w: key part %q: %q is not a header name", ErrBadConfig, spec, arg)
			}
			gs = append(gs, getter{kind: getHeader, arg: arg})
		case "json":
			if err := checkJSONPath(arg); err != nil {
				return nil, fmt.Errorf("%w: key part %q: %v", ErrBadConfig, spec, err)
			}
			gs = append(gs, getter{kind: getJSON, arg: arg})
		case "body":
			if arg != "sha256" {
				return nil, fmt.Errorf("%w: key part %q: only body:sha256 is supported", ErrBadConfig, spec)
			}
			gs = append(gs, getter{kind: getBodySHA256})
		default:
			return nil, fmt.Errorf("%w: key part %q: unknown kind %q (want header, json or body)", ErrBadConfig, spec, kind)
		}
	}
	return gs, nil
}

// checkJSONPath accepts dot-separated segments of letters, digits, '_' and '-'.
// Anything else (gjson wildcards, modifiers, queries, escapes) is refused so
// that a path means exactly one location.
func checkJSONPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty JSON path")
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			return fmt.Errorf("JSON path %q has an empty segment", p)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
				return fmt.Errorf("JSON path %q: character %q not allowed (letters, digits, '_', '-', '.')", p, c)
			}
		}
	}
	return nil
}

// lookup finds g's value. The result aliases body or header memory, except for
// a JSON string with escapes (copied) and body:sha256 (written to scratch, or
// to a new array when scratch is nil).
//
// text widens what a value may hold from printable ASCII (a key's part,
// which travels in headers) to printable UTF-8 (an event type, which is only
// compared with configured ones).
func (g *getter) lookup(h Headers, body []byte, scratch *[64]byte, text bool) ([]byte, lookupStatus) {
	var v []byte
	switch g.kind {
	case getHeader:
		if h == nil {
			return nil, missing
		}
		v = h.Peek(g.arg)
	case getJSON:
		var st lookupStatus
		if v, st = jsonValue(body, g.arg); st != found {
			return nil, st
		}
	case getBodySHA256:
		if scratch == nil {
			scratch = new([64]byte)
		}
		sum := sha256.Sum256(body)
		hex.Encode(scratch[:], sum[:])
		return scratch[:], found
	}
	if len(v) == 0 {
		return nil, missing
	}
	if text && !printableText(v) || !text && !printable(v) {
		return nil, badChars
	}
	// A space at either end would be lost where the key travels as a header
	// value (Idempotency-Key: HTTP trims them), so that "evt_1 " and "evt_1"
	// would reach the handler as one key for two events.
	if v[0] == ' ' || v[len(v)-1] == ' ' {
		return nil, padded
	}
	return v, found
}

// looksJSON reports whether body starts, after white space, like a JSON object
// or array. It is a cheap gate, not validation: the body's authenticity was
// already proven, and gjson never reads outside it.
func looksJSON(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return false
}

// jsonValue returns the string (unquoted) or number at path.
func jsonValue(body []byte, path string) ([]byte, lookupStatus) {
	if !looksJSON(body) {
		return nil, notJSON
	}
	// gjson reads a string; view body as one without copying. Nothing gjson
	// returns is kept past this function except through the copy below.
	r, once := lookupOnce(unsafe.String(unsafe.SliceData(body), len(body)), path)
	if !once {
		return nil, duplicated
	}
	switch r.Type {
	case gjson.Null:
		return nil, missing
	case gjson.String:
		if len(r.Raw) < 2 || r.Raw[0] != '"' || r.Raw[len(r.Raw)-1] != '"' {
			return nil, notJSON // an unterminated string: the body is broken
		}
		if raw, ok := rawAt(body, r); ok && strings.IndexByte(r.Raw, '\\') < 0 {
			return raw[1 : len(raw)-1], found
		}
		return []byte(r.Str), found // escaped: the unescaped copy
	case gjson.Number:
		if raw, ok := rawAt(body, r); ok {
			return raw, found
		}
		return []byte(r.Raw), found
	}
	return nil, notScalar
}

// lookupOnce finds path's value in doc, and reports whether each object
// member on its way appears once in its object. JSON allows a name twice;
// readers then disagree (gjson's Get, and so a key read with it, takes the
// first; encoding/json, JSON.parse and most handlers the last), and a key,
// type or order read from one copy while the handler acts on the other would
// dedupe, filter or order by a value the handler never sees. Names compare
// unescaped ("i\u0064" is "id"). One walk of each object on the way finds
// the member and counts its name.
func lookupOnce(doc, path string) (gjson.Result, bool) {
	cur := gjson.Parse(doc)
	for seg := range strings.SplitSeq(path, ".") {
		if !cur.IsObject() {
			// An array (a numeric segment is its index), or a scalar that
			// has no member: gjson says which.
			cur = cur.Get(seg)
			continue
		}
		n := 0
		var next gjson.Result
		cur.ForEach(func(k, v gjson.Result) bool {
			if k.Str == seg {
				if n++; n == 1 {
					next = v
				}
			}
			return n < 2
		})
		if n > 1 {
			return gjson.Result{}, false
		}
		cur = next
	}
	return cur, true
}

// rawAt returns r's raw text as a slice of body, when gjson reported where it is.
func rawAt(body []byte, r gjson.Result) ([]byte, bool) {
	if r.Index <= 0 || r.Index+len(r.Raw) > len(body) {
		return nil, false
	}
	raw := body[r.Index : r.Index+len(r.Raw)]
	if string(raw) != r.Raw {
		return nil, false
	}
	return raw, true
}

// printable reports whether every byte of v is printable ASCII (0x20-0x7e).
func printable(v []byte) bool {
	for _, c := range v {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// keyPart is one part of a key with its errors prebuilt, so that a delivery
// without a key costs no allocation to refuse.
type keyPart struct {
	spec    string
	getters []getter
	errs    [duplicated + 1]error
	text    bool // values are printable UTF-8 (NewTextField), not ASCII
}

func newKeyPart(spec string, kind error) (keyPart, error) {
	gs, err := parseGetters(spec)
	if err != nil {
		return keyPart{}, err
	}
	p := keyPart{spec: spec, getters: gs}
	p.errs[missing] = fmt.Errorf("%w: key part %q: missing or empty", kind, spec)
	p.errs[notJSON] = fmt.Errorf("%w: key part %q", ErrNotJSON, spec)
	p.errs[notScalar] = fmt.Errorf("%w: key part %q: not a string or number", kind, spec)
	p.errs[badChars] = fmt.Errorf("%w: key part %q: a byte outside printable ASCII", kind, spec)
	p.errs[padded] = fmt.Errorf("%w: key part %q: starts or ends with a space", kind, spec)
	p.errs[duplicated] = fmt.Errorf("%w: key part %q: a member on its path appears twice in the body (JSON readers disagree on which one counts)%w", kind, spec, silent{ErrDuplicateMember})
	return p, nil
}

// silent wraps an error for errors.Is without adding to the message.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// readsJSON reports whether an alternative of p is a json:PATH.
func (p *keyPart) readsJSON() bool {
	for _, g := range p.getters {
		if g.kind == getJSON {
			return true
		}
	}
	return false
}

// value tries each alternative in turn. Missing values fall through to the
// next alternative; a value that is present but unusable does not. When every
// alternative is missing and one needed a JSON body that was not JSON, the
// error is ErrNotJSON.
func (p *keyPart) value(h Headers, body []byte, scratch *[64]byte) ([]byte, error) {
	sawNotJSON := false
	for i := range p.getters {
		v, st := p.getters[i].lookup(h, body, scratch, p.text)
		switch st {
		case found:
			return v, nil
		case missing:
			continue
		case notJSON:
			sawNotJSON = true
			continue
		}
		return nil, p.errs[st]
	}
	if sawNotJSON {
		return nil, p.errs[notJSON]
	}
	return nil, p.errs[missing]
}

// Keyer derives a source's idempotency keys. It is immutable and safe for
// concurrent use.
type Keyer struct {
	prefix     string // "source:"
	parts      []keyPart
	errTooLong error
}

// NewKeyer builds the key rule "source:" + parts joined with ':'. The source
// name must be printable ASCII without ':' or spaces; parts must be non-empty
// (an empty Defaults().Key means the source must configure one).
func NewKeyer(source string, parts []string) (*Keyer, error) {
	if source == "" || strings.IndexByte(source, ':') >= 0 || !printable([]byte(source)) || strings.IndexByte(source, ' ') >= 0 {
		return nil, fmt.Errorf("%w: source name %q cannot prefix a key (printable ASCII, no ':' or space)", ErrBadConfig, source)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: source %q: no key parts (this provider has no default key; set key)", ErrBadConfig, source)
	}
	k := &Keyer{
		prefix:     source + ":",
		errTooLong: fmt.Errorf("%w: over %d bytes", ErrKeyTooLong, MaxKeyLen),
	}
	for _, spec := range parts {
		p, err := newKeyPart(spec, ErrNoKey)
		if err != nil {
			return nil, err
		}
		k.parts = append(k.parts, p)
	}
	return k, nil
}

// Key appends the delivery's key to dst and returns it; it allocates nothing
// when dst has room (except for a JSON string value with escapes). On error dst
// is returned unchanged. The error wraps ErrNoKey, ErrNotJSON or ErrKeyTooLong
// and names the part.
//
// With several parts, a ':' or '%' inside a part's value is written %3A or
// %25, so that the parts can be told apart: joined as they are, "x:y"+"z"
// and "x"+"y:z" would make one key, and the second event would be taken for
// a duplicate of the first and never delivered. A key of one part is the
// value as it is.
func (k *Keyer) Key(dst []byte, h Headers, body []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, k.prefix...)
	var scratch [64]byte
	escape := len(k.parts) > 1
	for i := range k.parts {
		if i > 0 {
			dst = append(dst, ':')
		}
		v, err := k.parts[i].value(h, body, &scratch)
		if err != nil {
			return dst[:start], err
		}
		if escape && bytes.ContainsAny(v, ":%") {
			for _, c := range v {
				switch c {
				case ':':
					dst = append(dst, "%3A"...)
				case '%':
					dst = append(dst, "%25"...)
				default:
					dst = append(dst, c)
				}
			}
			if len(dst)-start > MaxKeyLen {
				return dst[:start], k.errTooLong
			}
			continue
		}
		if len(dst)-start+len(v) > MaxKeyLen {
			return dst[:start], k.errTooLong
		}
		dst = append(dst, v...)
	}
	return dst, nil
}

// ReadsJSON reports whether some part of the key reads the JSON body (a
// json:PATH alternative), so that a body that is not JSON cannot be keyed
// by it.
func (k *Keyer) ReadsJSON() bool {
	for i := range k.parts {
		if k.parts[i].readsJSON() {
			return true
		}
	}
	return false
}

// Parts returns the key's part specs.
func (k *Keyer) Parts() []string {
	out := make([]string, len(k.parts))
	for i := range k.parts {
		out[i] = k.parts[i].spec
	}
	return out
}

// Field reads one value of a delivery, e.g. for the ordering guard's object
// and time (`order = { object = "json:data.object.id", time = "json:created" }`).
// It takes one part spec, alternatives allowed. It is immutable and safe for
// concurrent use.
type Field struct {
	part keyPart
}

// NewField parses a part spec (see Keyer).
func NewField(spec string) (*Field, error) {
	p, err := newKeyPart(spec, ErrNoField)
	if err != nil {
		return nil, err
	}
	return &Field{part: p}, nil
}

// NewTextField is NewField for a value that is only compared, never part of
// a key, such as an event type: it may be any printable UTF-8 text
// (PrintableText), where a key's part is printable ASCII.
func NewTextField(spec string) (*Field, error) {
	f, err := NewField(spec)
	if err != nil {
		return nil, err
	}
	f.part.text = true
	f.part.errs[badChars] = fmt.Errorf("%w: key part %q: not printable UTF-8 text", ErrNoField, spec)
	return f, nil
}

// PrintableText reports whether t is a value a text field reads: valid
// UTF-8 without control or other unprintable characters.
func PrintableText(t string) bool {
	return printableText(unsafe.Slice(unsafe.StringData(t), len(t)))
}

func printableText(v []byte) bool {
	for len(v) > 0 {
		if c := v[0]; c < utf8.RuneSelf {
			if c < 0x20 || c > 0x7e {
				return false
			}
			v = v[1:]
			continue
		}
		r, n := utf8.DecodeRune(v)
		if r == utf8.RuneError && n <= 1 || !unicode.IsPrint(r) {
			return false
		}
		v = v[n:]
	}
	return true
}

// ReadsJSON reports whether the field reads the JSON body (a json:PATH
// alternative).
func (f *Field) ReadsJSON() bool { return f.part.readsJSON() }

// String returns the field's spec.
func (f *Field) String() string { return f.part.spec }

// Value returns the field's value: a header value, or a JSON string (unquoted)
// or number (as written). The result may alias body or the header's memory;
// copy it to keep it. The error wraps ErrNoField or ErrNotJSON.
func (f *Field) Value(h Headers, body []byte) ([]byte, error) {
	return f.part.value(h, body, nil)
}

var errTimeEmpty = newErr(ErrBadTime, "empty")

// ParseTime reads a time as unix nanoseconds. It accepts
//
//   - an integer unix time whose unit follows from its digit count: up to 10
//     digits seconds, 11-13 milliseconds (13 is the usual case), 14-16
//     microseconds, 17-19 nanoseconds;
//   - decimal unix seconds with a fraction ("1531420618.123456", Slack's ts);
//   - an RFC 3339 time, with or without fractional seconds.
//
// Times that unix nanoseconds cannot hold (after 2262) are errors wrapping
// ErrBadTime. The numeric forms do not allocate.
func ParseTime(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errTimeEmpty
	}
	intPart, frac, hasDot := b, []byte(nil), false
	for i, c := range b {
		if c == '.' {
			intPart, frac, hasDot = b[:i], b[i+1:], true
			break
		}
	}
	if n, ok := digits(intPart); ok {
		if hasDot {
			if len(intPart) > 10 || len(frac) == 0 || n > maxUnixSeconds {
				return 0, badTime(b)
			}
			ns := int64(0)
			scale := int64(1e8)
			for _, c := range frac {
				if c < '0' || c > '9' {
					return 0, badTime(b)
				}
				ns += int64(c-'0') * scale
				scale /= 10
			}
			if n*1e9 > 1<<63-1-ns {
				return 0, badTime(b)
			}
			return n*1e9 + ns, nil
		}
		var unit int64
		switch l := len(intPart); {
		case l <= 10:
			unit = 1_000_000_000
		case l <= 13:
			unit = 1_000_000
		case l <= 16:
			unit = 1_000
		default:
			unit = 1
		}
		if n > (1<<63-1)/unit {
			return 0, badTime(b)
		}
		return n * unit, nil
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil || t.Year() < 1678 || t.Year() > 2261 {
		return 0, badTime(b)
	}
	return t.UnixNano(), nil
}

// maxUnixSeconds is the last second unix nanoseconds can hold.
const maxUnixSeconds = (1<<63 - 1) / 1_000_000_000

// digits parses 1-19 ASCII digits into an int64 without overflow.
func digits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func badTime(b []byte) error {
	const max = 40
	if len(b) > max {
		b = b[:max]
	}
	return fmt.Errorf("%w: %q is not unix seconds/milliseconds or RFC 3339", ErrBadTime, b)
}
