package providers

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (standard) and Svix (svix): webhook-id, webhook-timestamp
// (unix seconds) and webhook-signature, a space-separated list of
// "<version>,<base64>"; v1 is HMAC-SHA256 over "<id>.<timestamp>.<raw body>"
// keyed with base64-decode(secret without its whsec_ prefix). Svix sends the
// same headers named svix-id, svix-timestamp and svix-signature; the svix
// scheme reads those and falls back to webhook-* when any is absent, like
// Svix's own libraries. Unknown versions (v1a, the asymmetric ed25519 one) are
// skipped; a list with more than MaxSignatures entries is refused unread.
// GitLab's signing-token webhooks are Standard Webhooks: use "standard".
type standard struct{ svix bool }

type stdHeaders struct {
	id, ts, sig                string
	errNoID, errNoTS, errNoSig error
}

func newStdHeaders(prefix string) *stdHeaders {
	h := &stdHeaders{id: prefix + "-id", ts: prefix + "-timestamp", sig: prefix + "-signature"}
	h.errNoID, h.errNoTS, h.errNoSig = missingHeader(h.id), missingHeader(h.ts), missingHeader(h.sig)
	return h
}

var (
	webhookHeaders = newStdHeaders("webhook")
	svixHeaders    = newStdHeaders("svix")

	errNoComma = newErr(ErrMalformedHeader, "signature entry without ','")
	dot        = []byte(".")
)

func (s standard) Name() string {
	if s.svix {
		return "svix"
	}
	return "standard"
}

func (s standard) Defaults() Defaults {
	key := "header:webhook-id"
	if s.svix {
		key = "header:svix-id|header:webhook-id"
	}
	return Defaults{Key: []string{key}, Retention: 96 * time.Hour, AckStatus: ackAccepted}
}

// whsecKey decodes a Standard Webhooks secret: optional "whsec_" + base64.
func whsecKey(secret []byte) ([]byte, error) {
	s := strings.TrimPrefix(string(secret), "whsec_")
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: want whsec_ followed by base64", ErrBadSecret)
	}
	return key, nil
}

func (s standard) NewVerifier(opts Options) (Verifier, error) {
	raw, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(raw))
	for i, sec := range raw {
		if keys[i], err = whsecKey(sec); err != nil {
			return nil, fmt.Errorf("%w: secret #%d is not whsec_ followed by base64", ErrBadSecret, i+1)
		}
	}
	tol, err := tolerance(opts.Tolerance, DefaultTolerance)
	if err != nil {
		return nil, err
	}
	ring, err := newKeyring(algSHA256, keys)
	if err != nil {
		return nil, err
	}
	return &stdVerifier{svix: s.svix, ring: ring, tol: tol}, nil
}

// Sign produces the id, timestamp and a single v1 signature headers; id is
// required (it is signed).
func (s standard) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: %s: Sign needs an id", ErrBadConfig, s.Name())
	}
	key, err := whsecKey(secret)
	if err != nil {
		return nil, err
	}
	h := webhookHeaders
	if s.svix {
		h = svixHeaders
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	sum := hmacSum(algSHA256, key, []byte(id), dot, []byte(ts), dot, body)
	return []Header{
		{Name: h.id, Value: id},
		{Name: h.ts, Value: ts},
		{Name: h.sig, Value: "v1," + base64.StdEncoding.EncodeToString(sum)},
	}, nil
}

type stdVerifier struct {
	svix bool
	ring *keyring
	tol  time.Duration
}

func (v *stdVerifier) Verify(r *Request) error {
	hn := webhookHeaders
	if v.svix {
		hn = v.svixNames(r.Header)
	}
	id, err := peekSig(r.Header, hn.id, hn.errNoID)
	if err != nil {
		return err
	}
	ts, err := peekSig(r.Header, hn.ts, hn.errNoTS)
	if err != nil {
		return err
	}
	raw, err := peekSig(r.Header, hn.sig, hn.errNoSig)
	if err != nil {
		return err
	}
	n, ok := parseUnix(ts)
	if !ok {
		return errTSFormat
	}
	if err := checkWindow(r.Now, time.Unix(n, 0), v.tol); err != nil {
		return err
	}
	st := v.ring.get()
	defer v.ring.put(st)
	if err := parseSigList(raw, st); err != nil {
		return err
	}
	if st.nsig == 0 {
		return errNoSupported
	}
	st.compute(id, dot, ts, dot, r.Body)
	if !st.match() {
		return errNoMatch
	}
	return nil
}

// svixNames picks the header names for a svix delivery: svix-* when all three
// are present; else webhook-* when any of those is present; else svix-*, so
// that a missing header is reported under the name Svix uses.
func (v *stdVerifier) svixNames(h Headers) *stdHeaders {
	if h == nil {
		return svixHeaders
	}
	if len(h.Peek(svixHeaders.id)) > 0 && len(h.Peek(svixHeaders.ts)) > 0 && len(h.Peek(svixHeaders.sig)) > 0 {
		return svixHeaders
	}
	if len(h.Peek(webhookHeaders.id)) > 0 || len(h.Peek(webhookHeaders.ts)) > 0 || len(h.Peek(webhookHeaders.sig)) > 0 {
		return webhookHeaders
	}
	return svixHeaders
}

// parseSigList reads "v1,<b64> v1a,<b64> ..." into st: v1 entries decoded,
// other versions skipped. More than MaxSignatures entries of any version is
// refused before anything is decoded.
func parseSigList(raw []byte, st *macState) error {
	entries := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != ' ' && (i == 0 || raw[i-1] == ' ') {
			entries++
		}
	}
	if entries > MaxSignatures {
		return errTooManySigs
	}
	for len(raw) > 0 {
		var e []byte
		if i := indexByte(raw, ' '); i >= 0 {
			e, raw = raw[:i], raw[i+1:]
		} else {
			e, raw = raw, nil
		}
		if len(e) == 0 {
			continue
		}
		c := indexByte(e, ',')
		if c < 0 {
			return errNoComma
		}
		if string(e[:c]) != "v1" {
			continue
		}
		if err := st.addSig(e[c+1:], encBase64, algSHA256.size); err != nil {
			return err
		}
	}
	return nil
}
