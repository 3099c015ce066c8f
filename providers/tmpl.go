package providers

// The single-signature HMAC verifier. GitHub, Shopify, Slack, Zoom, Linear and
// the generic "hmac" scheme are all one header carrying one MAC over a template
// of {id}, {timestamp} and {body}; they differ only in the data of a macSpec.

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
)

type segKind uint8

const (
	segLit segKind = iota
	segID
	segTimestamp
	segBody
)

type segment struct {
	kind segKind
	lit  []byte
}

// template is a compiled signed-content template.
type template []segment

// compileTemplate parses a template over {id}, {timestamp} and {body}. {body}
// must appear exactly once (a MAC that does not cover the body proves nothing
// about it); any other '{' is an error, so that a typo does not silently become
// literal text.
func compileTemplate(t string) (template, error) {
	if t == "" {
		t = "{body}"
	}
	var out template
	bodies := 0
	lit := func(s string) {
		if s != "" {
			out = append(out, segment{kind: segLit, lit: []byte(s)})
		}
	}
	for rest := t; rest != ""; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			lit(rest)
			break
		}
		lit(rest[:i])
		rest = rest[i:]
		switch {
		case strings.HasPrefix(rest, "{body}"):
			out = append(out, segment{kind: segBody})
			bodies++
			rest = rest[len("{body}"):]
		case strings.HasPrefix(rest, "{id}"):
			out = append(out, segment{kind: segID})
			rest = rest[len("{id}"):]
		case strings.HasPrefix(rest, "{timestamp}"):
			out = append(out, segment{kind: segTimestamp})
			rest = rest[len("{timestamp}"):]
		default:
			return nil, fmt.Errorf("%w: template %q: unknown placeholder at %q (want {id}, {timestamp} or {body})", ErrBadConfig, t, rest)
		}
	}
	if bodies != 1 {
		return nil, fmt.Errorf("%w: template %q must contain {body} exactly once", ErrBadConfig, t)
	}
	if err := checkSeparated(t, out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkSeparated refuses two placeholders with nothing between them, as in
// "{id}{body}": where one part ends and the next begins is then not signed,
// so one signature fits many splits of the same bytes (id "evt_1" with body
// "{...}" and id "evt_1{" with the body's rest sign alike), and a captured
// delivery could be replayed under another id.
func checkSeparated(t string, segs template) error {
	for i := 1; i < len(segs); i++ {
		if segs[i-1].kind != segLit && segs[i].kind != segLit {
			return fmt.Errorf("%w: template %q: %s and %s are adjacent: put a separator between them (e.g. \".\"), "+
				"else one signed string splits into parts more than one way", ErrBadConfig, t, segs[i-1].kind, segs[i].kind)
		}
	}
	return nil
}

// splitsOnce refuses an id or timestamp that contains the separator next
// to it in the signed string. A separator between placeholders is not
// enough on its own: with "{id}.{body}", the id "evt_1" and the body
// "{\"amount\":1.5}" sign exactly what the id "evt_1.{\"amount\":1" and the
// body "5}" sign, so a captured delivery, cut elsewhere, verified as a new
// event. Parts before {body} are read from the left: each must end where
// the first occurrence of the separator after it begins; parts after
// {body} are read from the right: each must start where the last
// occurrence of the separator before it ends. Then the signed string has
// one split, and only the signer's parts verify. scratch is a buffer the
// caller lends; the grown buffer is returned.
func (t template) splitsOnce(id, ts, scratch []byte) ([]byte, error) {
	body := 0
	for i, s := range t {
		if s.kind == segBody {
			body = i
		}
	}
	for i, s := range t {
		if s.kind != segID && s.kind != segTimestamp {
			continue
		}
		v := id
		if s.kind == segTimestamp {
			v = ts
		}
		var ok bool
		switch {
		case i < body: // t[i+1] is a separator (checkSeparated)
			sep := t[i+1].lit
			scratch = append(append(scratch[:0], v...), sep...)
			ok = bytes.Index(scratch, sep) == len(v)
		case i > 0: // t[i-1] is a separator
			sep := t[i-1].lit
			scratch = append(append(scratch[:0], sep...), v...)
			ok = bytes.LastIndex(scratch, sep) == 0
		default: // nothing before it: only a template without {body}
			ok = true
		}
		if !ok {
			if s.kind == segID {
				return scratch, errIDSplits
			}
			return scratch, errTSSplits
		}
	}
	return scratch, nil
}

var (
	errIDSplits = newErr(ErrMalformedHeader, "the id contains the separator next to it in the signed string, "+
		"so the signature would fit other ids")
	errTSSplits = newErr(ErrMalformedHeader, "the timestamp contains the separator next to it in the signed string, "+
		"so the signature would fit other timestamps (use another separator)")
)

// CheckTemplate reports whether t is a usable template for the generic hmac
// scheme's signed content (HMACSpec.Template): only {id}, {timestamp} and
// {body}, {body} exactly once, and a separator between any two placeholders.
func CheckTemplate(t string) error {
	_, err := compileTemplate(t)
	return err
}

func (k segKind) String() string {
	switch k {
	case segID:
		return "{id}"
	case segTimestamp:
		return "{timestamp}"
	case segBody:
		return "{body}"
	}
	return "text"
}

func (t template) uses(k segKind) bool {
	for _, s := range t {
		if s.kind == k {
			return true
		}
	}
	return false
}

// write feeds the signed content into every MAC of st.
func (t template) compute(st *macState, id, ts, body []byte) {
	for i, m := range st.macs {
		m.Reset()
		for _, s := range t {
			switch s.kind {
			case segLit:
				m.Write(s.lit)
			case segID:
				m.Write(id)
			case segTimestamp:
				m.Write(ts)
			case segBody:
				m.Write(body)
			}
		}
		st.sums[i] = m.Sum(st.sums[i][:0])
	}
	st.nsum = len(st.macs)
}

// macSpec describes a single-signature scheme.
type macSpec struct {
	sigHeader string
	prefix    string
	alg       algorithm
	enc       encoding
	tsHeader  string // "" when no timestamp is signed
	tsAny     bool   // timestamp in any ParseTime form (generic); else unix seconds
	idHeader  string // header whose value is {id}
	template  template
	// sendID is the header Sign fills with the id when the scheme does not
	// sign one (X-GitHub-Delivery, ...); "" for none.
	sendID string
}

// specFromHMAC validates and compiles an operator's HMACSpec.
func specFromHMAC(hs *HMACSpec) (macSpec, error) {
	if hs == nil {
		return macSpec{}, fmt.Errorf("%w: the hmac scheme needs an HMAC spec", ErrBadConfig)
	}
	if !validHeaderName(hs.Header) {
		return macSpec{}, fmt.Errorf("%w: hmac header %q is not a header name", ErrBadConfig, hs.Header)
	}
	alg, ok := algorithmByName(hs.Algorithm)
	if !ok {
		return macSpec{}, fmt.Errorf("%w: hmac algorithm %q (want sha1, sha256 or sha512)", ErrBadConfig, hs.Algorithm)
	}
	enc, ok := encodingByName(hs.Encoding)
	if !ok {
		return macSpec{}, fmt.Errorf("%w: hmac encoding %q (want hex or base64)", ErrBadConfig, hs.Encoding)
	}
	for _, h := range []string{hs.TimestampHeader, hs.IDHeader} {
		if h != "" && !validHeaderName(h) {
			return macSpec{}, fmt.Errorf("%w: hmac header %q is not a header name", ErrBadConfig, h)
		}
	}
	t, err := compileTemplate(hs.Template)
	if err != nil {
		return macSpec{}, err
	}
	if t.uses(segID) && hs.IDHeader == "" {
		return macSpec{}, fmt.Errorf("%w: hmac template uses {id} but no id header is set", ErrBadConfig)
	}
	if t.uses(segTimestamp) && hs.TimestampHeader == "" {
		return macSpec{}, fmt.Errorf("%w: hmac template uses {timestamp} but no timestamp header is set", ErrBadConfig)
	}
	if hs.TimestampHeader != "" && !t.uses(segTimestamp) {
		// The tolerance would be checked on a value the signature does not
		// cover: a captured delivery resent with a fresh one would pass.
		return macSpec{}, fmt.Errorf("%w: hmac timestamp header %s is set but the template does not sign {timestamp}", ErrBadConfig, hs.TimestampHeader)
	}
	return macSpec{
		sigHeader: hs.Header,
		prefix:    hs.Prefix,
		alg:       alg,
		enc:       enc,
		tsHeader:  hs.TimestampHeader,
		tsAny:     true,
		idHeader:  hs.IDHeader,
		template:  t,
	}, nil
}

// macVerifier verifies a macSpec scheme.
type macVerifier struct {
	spec   macSpec
	prefix []byte
	ring   *keyring
	tol    time.Duration

	errNoSig, errNoTS, errNoID error

	// after, when set, runs once the MAC matched (linear's body timestamp).
	after func(r *Request) error
}

func newMACVerifier(spec macSpec, opts Options) (*macVerifier, error) {
	keys, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	tol, err := tolerance(opts.Tolerance, DefaultTolerance)
	if err != nil {
		return nil, err
	}
	ring, err := newKeyring(spec.alg, keys)
	if err != nil {
		return nil, err
	}
	return &macVerifier{
		spec:     spec,
		prefix:   []byte(spec.prefix),
		ring:     ring,
		tol:      tol,
		errNoSig: missingHeader(spec.sigHeader),
		errNoTS:  missingHeader(spec.tsHeader),
		errNoID:  missingHeader(spec.idHeader),
	}, nil
}

func (v *macVerifier) Verify(r *Request) error {
	if _, err := v.check(r); err != nil {
		return err
	}
	if v.after != nil {
		return v.after(r)
	}
	return nil
}

// check verifies the headers' MAC and returns the index of a secret that matched.
func (v *macVerifier) check(r *Request) (int, error) {
	raw, err := peekSig(r.Header, v.spec.sigHeader, v.errNoSig)
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(raw, v.prefix) {
		return 0, errPrefix
	}
	raw = raw[len(v.prefix):]
	var ts, id []byte
	if v.spec.tsHeader != "" {
		if ts, err = peekSig(r.Header, v.spec.tsHeader, v.errNoTS); err != nil {
			return 0, err
		}
		if err := v.checkTimestamp(ts, r.Now); err != nil {
			return 0, err
		}
	}
	if v.spec.idHeader != "" {
		if id, err = peekSig(r.Header, v.spec.idHeader, v.errNoID); err != nil {
			return 0, err
		}
	}
	st := v.ring.get()
	defer v.ring.put(st)
	if id != nil || ts != nil {
		if st.msg, err = v.spec.template.splitsOnce(id, ts, st.msg); err != nil {
			return 0, err
		}
	}
	if err := st.addSig(raw, v.spec.enc, v.spec.alg.size); err != nil {
		return 0, err
	}
	v.spec.template.compute(st, id, ts, r.Body)
	key, ok := st.matchKey()
	if !ok {
		return 0, errNoMatch
	}
	return key, nil
}

func (v *macVerifier) checkTimestamp(ts []byte, now time.Time) error {
	if v.spec.tsAny {
		n, err := ParseTime(ts)
		if err != nil {
			return errTSFormatAny
		}
		return checkWindow(now, time.Unix(0, n), v.tol)
	}
	n, ok := parseUnixText(ts)
	if !ok {
		return errTSFormat
	}
	return checkWindow(now, time.Unix(n, 0), v.tol)
}

var errTSFormatAny = newErr(ErrMalformedHeader, "timestamp is not unix time (seconds, milliseconds, microseconds or nanoseconds), decimal seconds or RFC 3339")

// sign produces the headers a sender of spec attaches to body.
func (spec macSpec) sign(body, secret []byte, now time.Time, id string) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	if spec.idHeader != "" && id == "" {
		return nil, fmt.Errorf("%w: %s: Sign needs an id", ErrBadConfig, spec.idHeader)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	var parts [][]byte
	for _, s := range spec.template {
		switch s.kind {
		case segLit:
			parts = append(parts, s.lit)
		case segID:
			parts = append(parts, []byte(id))
		case segTimestamp:
			parts = append(parts, []byte(ts))
		case segBody:
			parts = append(parts, body)
		}
	}
	sum := hmacSum(spec.alg, secret, parts...)
	hs := []Header{{Name: spec.sigHeader, Value: spec.prefix + spec.enc.encode(sum)}}
	if spec.tsHeader != "" {
		hs = append(hs, Header{Name: spec.tsHeader, Value: ts})
	}
	if spec.idHeader != "" {
		hs = append(hs, Header{Name: spec.idHeader, Value: id})
	}
	if spec.sendID != "" && id != "" {
		hs = append(hs, Header{Name: spec.sendID, Value: id})
	}
	return hs, nil
}

// validHeaderName reports whether s is a non-empty HTTP token.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// mustTemplate compiles a built-in scheme's template.
func mustTemplate(t string) template {
	tt, err := compileTemplate(t)
	if err != nil {
		panic(err)
	}
	return tt
}
