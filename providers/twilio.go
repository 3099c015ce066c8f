package providers

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"hash"
	"slices"
	"time"
)

// Twilio: X-Twilio-Signature: base64(HMAC-SHA1(auth token, URL + params)),
// where URL is the public URL Twilio was configured with (Request.URL; the
// intake must rebuild it exactly, scheme and host as the sender saw them) and
// params is, for a form body, every name immediately followed by its value,
// sorted by name then value, after form decoding. For a JSON body Twilio adds
// bodySHA256=<hex SHA-256 of the body> to the URL's query and signs the URL
// alone; then the body must match that hash. Like Twilio's helper libraries,
// the URL is tried as given and with its port toggled (":443"/":80" added when
// absent, removed when present). No timestamp; the key is
// I-Twilio-Idempotency-Token.
//
// A verifier takes form bodies, or JSON bodies (Options.TwilioJSON), never
// both: the form string has nothing between the URL and the parameters, so
// a captured form delivery whose parameter values the sender partly wrote
// (an SMS text holding "?&bodySHA256=<hex>&") can be replayed with that
// whole string as its URL, which then names the hash of a body of the
// replayer's choosing and verifies as a JSON delivery.
//
// Caveat of the scheme itself: the MAC covers the decoded, sorted parameters,
// not the raw body, so a re-ordered or re-encoded body with the same
// parameters verifies too. The verifier is therefore a ReplayBodier: the
// replay guard hashes the signed content (WriteReplayBody), not the raw body.
type twilio struct{}

const (
	twilioHeader   = "X-Twilio-Signature"
	maxFormPairs   = 1024
	maxTwilioURL   = 8192
	bodySHA256Name = "bodySHA256"
)

var (
	errTwilioNoSig  = missingHeader(twilioHeader)
	errTwilioNoURL  = newErr(ErrBadSignature, "request URL unknown, cannot check a URL signature")
	errTwilioForm   = newErr(ErrBadSignature, "body is not form data (a source of JSON deliveries says twilio_body = \"json\")")
	errTwilioNoHash = newErr(ErrBadSignature, "the URL has no bodySHA256, which this source's JSON deliveries carry (twilio_body = \"json\")")
	errTwilioBody   = newErr(ErrBadSignature, "body does not match the URL's bodySHA256")
	errTwilioSignID = newErr(ErrBadConfig, "twilio signs the request URL: use SignURL")
)

func (twilio) Name() string { return "twilio" }

func (twilio) Defaults() Defaults {
	return Defaults{Key: []string{"header:I-Twilio-Idempotency-Token"}, Retention: 24 * time.Hour, RetryWindow: 15 * time.Second, AckStatus: ackAccepted, ReplayGuard: true}
}

func (twilio) NewVerifier(opts Options) (Verifier, error) {
	keys, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	ring, err := newKeyring(algSHA1, keys)
	if err != nil {
		return nil, err
	}
	return &twilioVerifier{ring: ring, json: opts.TwilioJSON}, nil
}

// Sign fails: the signature covers the URL. Use SignURL.
func (twilio) Sign([]byte, []byte, time.Time, string, *HMACSpec) ([]Header, error) {
	return nil, errTwilioSignID
}

// SignURL signs body as posted to url: a form body's parameters, or, when url
// carries bodySHA256, the URL alone (add bodySHA256=<hex sha256(body)> to url
// yourself for a JSON body). id, when given, goes in I-Twilio-Idempotency-Token.
func (twilio) SignURL(url string, body, secret []byte, _ time.Time, id string) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	if url == "" {
		return nil, errTwilioNoURL
	}
	st := &macState{}
	if _, ok := queryParam(url, bodySHA256Name); !ok {
		if err := st.parseForm(body); err != nil {
			return nil, err
		}
	}
	m := hmac.New(algSHA1.new, secret)
	twilioWrite(m, []byte(url), nil, nil, st)
	hs := []Header{{Name: twilioHeader, Value: base64.StdEncoding.EncodeToString(m.Sum(nil))}}
	if id != "" {
		hs = append(hs, Header{Name: "I-Twilio-Idempotency-Token", Value: id})
	}
	return hs, nil
}

type twilioVerifier struct {
	ring *keyring
	json bool // JSON bodies hashed into the URL's bodySHA256; else form bodies
}

// signsBodyHash reports whether the signature of url covers the URL alone,
// with the body's hash in its bodySHA256, and returns that hash: only for
// a verifier of JSON bodies.
func (v *twilioVerifier) signsBodyHash(url string) (string, bool, error) {
	if !v.json {
		return "", false, nil
	}
	want, ok := queryParam(url, bodySHA256Name)
	if !ok {
		return "", false, errTwilioNoHash
	}
	return want, true, nil
}

func (v *twilioVerifier) Verify(r *Request) error {
	raw, err := peekSig(r.Header, twilioHeader, errTwilioNoSig)
	if err != nil {
		return err
	}
	if r.URL == "" || len(r.URL) > maxTwilioURL {
		return errTwilioNoURL
	}
	st := v.ring.get()
	defer v.ring.put(st)
	if err := st.addSig(raw, encBase64, algSHA1.size); err != nil {
		return err
	}
	want, jsonBody, err := v.signsBodyHash(r.URL)
	if err != nil {
		return err
	}
	st.form, st.pairs = st.form[:0], st.pairs[:0]
	if !jsonBody {
		if err := st.parseForm(r.Body); err != nil {
			return err
		}
	}
	// The URL is copied into pooled scratch (after the form) so that it can
	// be written into the MACs without converting a string per request.
	off := len(st.form)
	st.form = append(st.form, r.URL...)
	url := st.form[off:]
	for i, m := range st.macs {
		twilioWrite(m, url, nil, nil, st)
		st.sums[i] = m.Sum(st.sums[i][:0])
	}
	st.nsum = len(st.macs)
	ok := st.match()
	// The other form of the URL is tried only when the URL as given matched
	// no secret. The extra time says which form of a public URL the sender
	// signed, nothing about the secrets; all secrets are still tried for
	// each form.
	if pre, mid, post, alt := toggledPort(url); !ok && alt {
		for i, m := range st.macs {
			twilioWrite(m, pre, mid, post, st)
			st.sums[i] = m.Sum(st.sums[i][:0])
		}
		ok = st.match()
	}
	if jsonBody {
		sum := sha256.Sum256(r.Body)
		var got [sha256.Size]byte
		bodyOK := decodeHexString(got[:], want)
		bodyOK = subtle.ConstantTimeCompare(sum[:], got[:]) == 1 && bodyOK
		if ok && !bodyOK {
			return errTwilioBody
		}
	}
	if !ok {
		return errNoMatch
	}
	return nil
}

// WriteReplayBody writes what the signature of r covers, built as Verify
// builds it: the URL, then, unless the URL carries bodySHA256, every decoded
// form name immediately followed by its value, sorted by name then value
// (parseForm, twilioWrite). So a body whose parameters are re-ordered or
// re-encoded ('+' or %20, %2b or %2B) writes the same bytes as the body Twilio
// sent. The URL is written without its port when it has one: Verify accepts it
// with its port toggled, so with and without the port are one signed content.
// The URL is kept rather than dropped because the signed string has no
// separator between the URL and the parameters: with the URL written too,
// bytes moved from the parameters into the query (or a JSON delivery's URL
// recast as a form) still write the same bytes. For a JSON body the URL's
// bodySHA256 stands for the body, which Verify checked against it.
func (v *twilioVerifier) WriteReplayBody(h hash.Hash, r *Request) error {
	if r.URL == "" || len(r.URL) > maxTwilioURL {
		return errTwilioNoURL
	}
	st := v.ring.get()
	defer v.ring.put(st)
	st.form, st.pairs = st.form[:0], st.pairs[:0]
	_, jsonBody, err := v.signsBodyHash(r.URL)
	if err != nil {
		return err
	}
	if !jsonBody {
		if err := st.parseForm(r.Body); err != nil {
			return err
		}
	}
	off := len(st.form)
	st.form = append(st.form, r.URL...)
	url := st.form[off:]
	if pre, mid, post, alt := toggledPort(url); alt && mid == nil {
		// The URL has a port: toggledPort's other form is the URL without it.
		twilioWrite(h, pre, post, nil, st)
		return nil
	}
	twilioWrite(h, url, nil, nil, st)
	return nil
}

// twilioWrite resets m and writes the URL (as up to three pieces) and the
// sorted form parameters held in st.
func twilioWrite(m hash.Hash, a, b, c []byte, st *macState) {
	m.Reset()
	m.Write(a)
	if len(b) > 0 {
		m.Write(b)
	}
	if len(c) > 0 {
		m.Write(c)
	}
	for _, p := range st.pairs {
		m.Write(st.form[p.n0:p.n1])
		m.Write(st.form[p.v0:p.v1])
	}
}

// formPair locates one decoded name and value in macState.form.
type formPair struct{ n0, n1, v0, v1 int }

// parseForm decodes an application/x-www-form-urlencoded body into st.form and
// st.pairs, sorted by name, then value. It allocates only while the pooled
// buffers grow.
func (st *macState) parseForm(body []byte) error {
	if need := len(body) + maxTwilioURL; cap(st.form) < need {
		st.form = make([]byte, 0, need)
	}
	for len(body) > 0 {
		var field []byte
		if i := indexByte(body, '&'); i >= 0 {
			field, body = body[:i], body[i+1:]
		} else {
			field, body = body, nil
		}
		if len(field) == 0 {
			continue
		}
		if len(st.pairs) == maxFormPairs {
			return errTwilioForm
		}
		name, value := field, []byte(nil)
		if i := indexByte(field, '='); i >= 0 {
			name, value = field[:i], field[i+1:]
		}
		var p formPair
		var ok bool
		p.n0 = len(st.form)
		if st.form, ok = appendUnescape(st.form, name); !ok {
			return errTwilioForm
		}
		p.n1, p.v0 = len(st.form), len(st.form)
		if st.form, ok = appendUnescape(st.form, value); !ok {
			return errTwilioForm
		}
		p.v1 = len(st.form)
		st.pairs = append(st.pairs, p)
	}
	form := st.form
	slices.SortFunc(st.pairs, func(a, b formPair) int {
		if c := bytes.Compare(form[a.n0:a.n1], form[b.n0:b.n1]); c != 0 {
			return c
		}
		return bytes.Compare(form[a.v0:a.v1], form[b.v0:b.v1])
	})
	return nil
}

// appendUnescape appends s form-decoded ('+' is a space, %XX a byte). Runs
// without either are copied whole.
func appendUnescape(dst, s []byte) ([]byte, bool) {
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '+' && s[i] != '%' {
			i++
		}
		dst = append(dst, s[:i]...)
		if i == len(s) {
			break
		}
		if s[i] == '+' {
			dst = append(dst, ' ')
			s = s[i+1:]
			continue
		}
		if i+2 >= len(s) {
			return dst, false
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return dst, false
		}
		dst = append(dst, hi<<4|lo)
		s = s[i+3:]
	}
	return dst, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// decodeHexString decodes s, exactly len(dst)*2 hex digits, into dst.
func decodeHexString(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := unhex(s[2*i])
		lo, ok2 := unhex(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// queryParam returns the raw value of the first query parameter called name.
func queryParam(url, name string) (string, bool) {
	q := -1
	for i := 0; i < len(url); i++ {
		if url[i] == '#' {
			return "", false
		}
		if url[i] == '?' {
			q = i + 1
			break
		}
	}
	if q < 0 {
		return "", false
	}
	rest := url[q:]
	for rest != "" {
		var f string
		f, rest = cutString(rest, '&')
		if end := indexString(f, '#'); end >= 0 {
			f, rest = f[:end], ""
		}
		k, v := cutString(f, '=')
		if k == name {
			return v, true
		}
	}
	return "", false
}

// toggledPort splits url into the pieces of its other form: with the port
// removed when it has one, with the scheme's default port added when it does
// not. alt is false when no other form exists (no "://", unknown scheme).
func toggledPort(url []byte) (pre, mid, post []byte, alt bool) {
	sep := bytes.Index(url, []byte("://"))
	if sep <= 0 {
		return nil, nil, nil, false
	}
	a := sep + 3
	e := len(url)
	for i := a; i < len(url); i++ {
		if c := url[i]; c == '/' || c == '?' || c == '#' {
			e = i
			break
		}
	}
	h := a
	if at := bytes.LastIndexByte(url[a:e], '@'); at >= 0 {
		h = a + at + 1
	}
	host := url[h:e]
	if c := bytes.LastIndexByte(host, ':'); c >= 0 && c > bytes.LastIndexByte(host, ']') {
		port := host[c+1:]
		if len(port) > 0 && allDigits(port) {
			return url[:h+c], nil, url[e:], true
		}
		return nil, nil, nil, false
	}
	switch {
	case asciiEqualFold(url[:sep], "https"):
		return url[:e], port443, url[e:], true
	case asciiEqualFold(url[:sep], "http"):
		return url[:e], port80, url[e:], true
	}
	return nil, nil, nil, false
}

var (
	port443 = []byte(":443")
	port80  = []byte(":80")
)

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func cutString(s string, c byte) (string, string) {
	if i := indexString(s, c); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func indexString(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
