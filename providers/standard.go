package providers

import (
	"bytes"
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (standard) and Svix (svix): webhook-id, webhook-timestamp
// (unix seconds) and webhook-signature, a space-separated list of
// "<version>,<base64>". Both versions sign "<id>.<timestamp>.<raw body>":
//
//   - v1 is HMAC-SHA256 keyed with base64-decode(secret without its whsec_
//     prefix);
//   - v1a is ed25519, checked with a public key configured as
//     "whpk_" + base64(32 bytes); the sender signs with the matching
//     "whsk_" private key, which a receiver never holds.
//
// A source's secrets may mix whsec_ secrets and whpk_ public keys; a header
// may mix v1 and v1a entries, and any entry that verifies with any configured
// key of its kind is enough. Every entry is checked against every key of its
// kind, with no early exit. A source whose secrets are all whpk_ keys accepts
// v1a only: its v1 entries are skipped like unknown versions, so a v1-only
// header is "no signature of a supported version". Likewise a source without
// whpk_ keys skips v1a entries.
//
// Svix sends the same headers named svix-id, svix-timestamp and
// svix-signature; the svix scheme reads those and falls back to webhook-* when
// any is absent, like Svix's own libraries. A request whose svix-id and
// webhook-id are both present and differ is refused (ErrMalformedHeader), by
// either scheme: one of them is not signed, and a key reading it would let a
// captured delivery be replayed as a new event. Entries that cannot be
// decoded (no ',', unknown version, bad base64, wrong length) are skipped; a
// list with more than MaxSignatures entries is refused unread, and one with
// more than MaxEd25519Signatures v1a entries (for a source with public keys)
// too, since each costs an ed25519 verification per key. GitLab's
// signing-token webhooks are Standard Webhooks: use "standard".
type standard struct{ svix bool }

// Key prefixes of Standard Webhooks' asymmetric keys.
const (
	// PublicKeyPrefix starts an ed25519 public key: "whpk_" + base64(32 bytes).
	PublicKeyPrefix = "whpk_"
	// PrivateKeyPrefix starts an ed25519 private key: "whsk_" + base64 of the
	// 32-byte seed (the Standard Webhooks libraries' form, which keygen
	// prints) or of the 64-byte seed+public key (Go's form).
	PrivateKeyPrefix = "whsk_"
	// MaxEd25519Signatures is the most v1a entries one header may carry when
	// the source has public keys; rotation needs two.
	MaxEd25519Signatures = 4
)

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

	errIDsDiffer  = newErr(ErrMalformedHeader, "svix-id and webhook-id differ")
	errIDDot      = newErr(ErrMalformedHeader, "the id contains \".\", which separates the signed parts")
	errTooManyV1a = newErr(ErrMalformedHeader, "too many v1a signatures")
	dot           = []byte(".")
)

func (s standard) Name() string {
	if s.svix {
		return "svix"
	}
	return "standard"
}

func (s standard) Defaults() Defaults {
	// The spec's example schedule ends 75h35m after the first attempt;
	// Svix's own ends 27h35m after it.
	key, window := "header:webhook-id", 76*time.Hour
	if s.svix {
		key, window = "header:svix-id|header:webhook-id", 28*time.Hour
	}
	return Defaults{Key: []string{key}, Retention: 96 * time.Hour, RetryWindow: window, AckStatus: ackAccepted, Type: "json:type"}
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

// whpkKey decodes a Standard Webhooks public key: "whpk_" + base64(32 bytes).
func whpkKey(secret []byte) (ed25519.PublicKey, error) {
	s, ok := strings.CutPrefix(string(secret), PublicKeyPrefix)
	key, err := base64.StdEncoding.DecodeString(s)
	if !ok || err != nil || len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: want whpk_ followed by the base64 of a 32-byte ed25519 public key", ErrBadSecret)
	}
	return ed25519.PublicKey(key), nil
}

// whskKey decodes a Standard Webhooks private key: "whsk_" + base64 of a
// 32-byte seed or of Go's 64-byte seed+public form, whose public half must be
// the seed's.
func whskKey(secret []byte) (ed25519.PrivateKey, error) {
	bad := fmt.Errorf("%w: want whsk_ followed by the base64 of a 32-byte ed25519 seed (or 64-byte private key)", ErrBadSecret)
	s, ok := strings.CutPrefix(string(secret), PrivateKeyPrefix)
	raw, err := base64.StdEncoding.DecodeString(s)
	if !ok || err != nil {
		return nil, bad
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if subtle.ConstantTimeCompare(priv[ed25519.SeedSize:], raw[ed25519.SeedSize:]) != 1 {
			return nil, fmt.Errorf("%w: whsk_ key's public half does not match its seed", ErrBadSecret)
		}
		return priv, nil
	}
	return nil, bad
}

// isPublicKey and isPrivateKey tell a source's secrets apart by prefix.
func isPublicKey(secret []byte) bool  { return strings.HasPrefix(string(secret), PublicKeyPrefix) }
func isPrivateKey(secret []byte) bool { return strings.HasPrefix(string(secret), PrivateKeyPrefix) }

func (s standard) NewVerifier(opts Options) (Verifier, error) {
	raw, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	var keys [][]byte
	var pub []ed25519.PublicKey
	for i, sec := range raw {
		switch {
		case isPublicKey(sec):
			k, err := whpkKey(sec)
			if err != nil {
				return nil, fmt.Errorf("%w: secret #%d is not whpk_ followed by the base64 of 32 bytes", ErrBadSecret, i+1)
			}
			pub = append(pub, k)
		case isPrivateKey(sec):
			return nil, fmt.Errorf("%w: secret #%d is a whsk_ private signing key: configure its whpk_ public key (oncehook keygen -asymmetric prints both)", ErrBadSecret, i+1)
		default:
			k, err := whsecKey(sec)
			if err != nil {
				return nil, fmt.Errorf("%w: secret #%d is not whsec_ followed by base64", ErrBadSecret, i+1)
			}
			keys = append(keys, k)
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
	return &stdVerifier{svix: s.svix, ring: ring, pub: pub, v1: len(keys) > 0, tol: tol}, nil
}

// Sign produces the id, timestamp and a single signature headers; id is
// required (it is signed). A whsec_ secret signs v1 (HMAC-SHA256); a whsk_
// private key signs v1a (ed25519). A whpk_ public key cannot sign.
func (s standard) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: %s: Sign needs an id", ErrBadConfig, s.Name())
	}
	if strings.Contains(id, ".") {
		// Verify refuses it (errIDDot): say so before anything is sent.
		return nil, fmt.Errorf("%w: %s: an id may not contain '.' (it separates the signed parts)", ErrBadConfig, s.Name())
	}
	h := webhookHeaders
	if s.svix {
		h = svixHeaders
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	var sig string
	switch {
	case isPublicKey(secret):
		return nil, newErr(ErrBadSecret, "a whpk_ public key cannot sign: sign with its whsk_ private key")
	case isPrivateKey(secret):
		priv, err := whskKey(secret)
		if err != nil {
			return nil, err
		}
		msg := make([]byte, 0, len(id)+len(ts)+2+len(body))
		msg = append(append(append(append(append(msg, id...), '.'), ts...), '.'), body...)
		sig = "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))
	default:
		key, err := whsecKey(secret)
		if err != nil {
			return nil, err
		}
		sum := hmacSum(algSHA256, key, []byte(id), dot, []byte(ts), dot, body)
		sig = "v1," + base64.StdEncoding.EncodeToString(sum)
	}
	return []Header{
		{Name: h.id, Value: id},
		{Name: h.ts, Value: ts},
		{Name: h.sig, Value: sig},
	}, nil
}

type stdVerifier struct {
	svix bool
	ring *keyring            // the whsec_ secrets as HMAC keys (may hold none)
	pub  []ed25519.PublicKey // the whpk_ public keys (v1a)
	v1   bool                // the source has whsec_ secrets: v1 entries are read
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
	if otherIDDiffers(r.Header, hn, id) {
		return errIDsDiffer
	}
	if bytes.IndexByte(id, '.') >= 0 {
		// The spec forbids it: "." separates the signed parts, and an id
		// holding one lets the same signature fit another id and timestamp.
		return errIDDot
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
	undecoded, err := parseSigList(raw, st, v.v1, len(v.pub) > 0)
	if err != nil {
		return err
	}
	if st.nsig == 0 && st.ned == 0 {
		if undecoded {
			// A sender that hex-encodes or base64url-encodes its v1 would
			// otherwise read "no supported version" and look elsewhere.
			return errSigUndecoded
		}
		return errNoSupported
	}
	matched := false
	if st.nsig > 0 {
		st.compute(id, dot, ts, dot, r.Body)
		matched = st.match()
	}
	if st.ned > 0 {
		// ed25519 needs the signed content in one piece; the buffer is pooled
		// with the state.
		st.msg = append(append(append(append(append(st.msg[:0], id...), '.'), ts...), '.'), r.Body...)
		matched = st.matchEd25519(v.pub) || matched
	}
	if !matched {
		return errNoMatch
	}
	return nil
}

// matchEd25519 checks every received v1a signature with every public key,
// without stopping at the first success, and reports whether any verified.
// The signatures and keys are public, so nothing secret is timed; checking
// them all keeps the cost of a request independent of which one matches.
func (s *macState) matchEd25519(keys []ed25519.PublicKey) bool {
	ok := 0
	for i := 0; i < s.ned; i++ {
		for _, k := range keys {
			if ed25519.Verify(k, s.msg, s.ed[i][:]) {
				ok |= 1
			}
		}
	}
	return ok == 1
}

// otherIDDiffers reports whether the id header of the set not verified
// (webhook-id when svix-* is read, svix-id when webhook-* is) is present with
// a value other than id. The svix default key reads svix-id first and then
// webhook-id, and a key the operator writes may name either: refusing a
// request whose two ids disagree (for standard too, which never reads svix-*)
// keeps the key's id the signed one whichever of the two a key part names.
func otherIDDiffers(h Headers, verified *stdHeaders, id []byte) bool {
	other := svixHeaders
	if verified == svixHeaders {
		other = webhookHeaders
	}
	v := h.Peek(other.id)
	return len(v) > 0 && string(v) != string(id)
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

// parseSigList reads "v1,<b64> v1a,<b64> ..." into st: v1 entries decoded when
// v1 is set, v1a entries when v1a is set. Entries that cannot be one of those
// (no ',', an unknown version, bad base64, the wrong length) are skipped, as
// the Standard Webhooks libraries do: any one entry that verifies is enough,
// and an undecodable neighbour does not spoil it. More than MaxSignatures
// entries of any kind is refused before anything is decoded, and so is a list
// with more than MaxEd25519Signatures v1a entries when v1a is read.
//
// undecoded reports an entry of a version read here that was skipped for its
// encoding or length: the sender's mistake to name when nothing else decoded.
func parseSigList(raw []byte, st *macState, v1, v1a bool) (undecoded bool, err error) {
	entries := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != ' ' && (i == 0 || raw[i-1] == ' ') {
			entries++
		}
	}
	if entries > MaxSignatures {
		return false, errTooManySigs
	}
	nv1a := 0
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
			continue // not "<version>,<signature>": undecodable, skipped
		}
		switch string(e[:c]) {
		case "v1":
			if v1 {
				// An entry that is not base64 of 32 bytes cannot match:
				// skipped, like an unknown version.
				if st.addSig(e[c+1:], encBase64, algSHA256.size) != nil {
					undecoded = true
				}
			}
		case "v1a":
			if v1a {
				if nv1a++; nv1a > MaxEd25519Signatures {
					return false, errTooManyV1a
				}
				if st.addEd25519(e[c+1:]) != nil {
					undecoded = true
				}
			}
		}
	}
	return undecoded, nil
}

// addEd25519 decodes one received v1a signature into the next ed25519 slot.
func (s *macState) addEd25519(src []byte) error {
	if s.ned >= MaxEd25519Signatures {
		return errTooManyV1a
	}
	if len(src) != base64.StdEncoding.EncodedLen(ed25519.SignatureSize) {
		return errSigLength
	}
	var buf [ed25519.SignatureSize + 2]byte
	n, err := sigBase64.Decode(buf[:], src)
	if err != nil {
		return errSigEncoding
	}
	if n != len(s.ed[0]) {
		return errSigLength
	}
	copy(s.ed[s.ned][:], buf[:n])
	s.ned++
	return nil
}
