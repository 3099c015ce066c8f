package providers

// The machinery every HMAC scheme shares: a keyring of precomputed keys with a
// pool of ready MAC instances, decoding of received signatures into pooled
// buffers, the all-pairs constant-time match, and timestamp checks.

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"
	"time"
)

// Limits on the work one request can cause.
const (
	// MaxSignatures is the most signatures one header may carry (rotation lists).
	// A header with more is ErrMalformedHeader, rejected before any MAC is computed.
	MaxSignatures = 16
	// MaxHeaderLen is the longest signature or token header accepted, in bytes.
	MaxHeaderLen = 4096
	// DefaultTolerance is the timestamp window used when Options.Tolerance is zero.
	DefaultTolerance = 5 * time.Minute

	maxMACSize = sha512.Size
	sigSlot    = maxMACSize + 8 // room for base64's DecodedLen slack
)

// algorithm is a hash usable for HMAC.
type algorithm struct {
	name string
	new  func() hash.Hash
	size int
}

var (
	algSHA1   = algorithm{"sha1", sha1.New, sha1.Size}
	algSHA256 = algorithm{"sha256", sha256.New, sha256.Size}
	algSHA512 = algorithm{"sha512", sha512.New, sha512.Size}
)

func algorithmByName(name string) (algorithm, bool) {
	switch name {
	case "sha1":
		return algSHA1, true
	case "sha256", "":
		return algSHA256, true
	case "sha512":
		return algSHA512, true
	}
	return algorithm{}, false
}

// encoding is how a signature travels in a header.
type encoding uint8

const (
	encHex encoding = iota
	encBase64
)

func encodingByName(name string) (encoding, bool) {
	switch name {
	case "hex", "":
		return encHex, true
	case "base64":
		return encBase64, true
	}
	return 0, false
}

func (e encoding) encode(sum []byte) string {
	if e == encBase64 {
		return base64.StdEncoding.EncodeToString(sum)
	}
	return hex.EncodeToString(sum)
}

// keyring is one source's secrets as HMAC keys, with a pool of macStates so that
// a verification neither allocates nor redoes the key schedule: a pooled
// crypto/hmac instance keeps its padded-key states and Reset restores them.
type keyring struct {
	alg  algorithm
	keys [][]byte
	pool sync.Pool
}

// newKeyring builds the keyring and one pooled state, so that a key the hash
// refuses (crypto/hmac panics on short keys in FIPS 140-only mode) is a
// configuration error, not a crash on the first delivery.
func newKeyring(alg algorithm, keys [][]byte) (k *keyring, err error) {
	k = &keyring{alg: alg, keys: keys}
	k.pool.New = func() any { return k.newState() }
	defer func() {
		if r := recover(); r != nil {
			k, err = nil, fmt.Errorf("%w: %v", ErrBadSecret, r)
		}
	}()
	k.pool.Put(k.newState())
	return k, nil
}

// macState is the per-request scratch of one keyring: one MAC instance per key,
// the sums computed for this request, and the received signatures, decoded.
type macState struct {
	macs []hash.Hash
	// sums[i] is key i's MAC over the signed content; only the first nsum
	// are set for the current request, and match never reads the others.
	sums   [][]byte
	nsum   int
	nsig   int
	sigs   [MaxSignatures][sigSlot]byte
	siglen [MaxSignatures]uint8

	// Scheme-specific scratch, kept with the state so that it is pooled too.
	form  []byte                                            // twilio: decoded form names and values
	pairs []formPair                                        // twilio: the form's pairs, sorted
	ed    [MaxEd25519Signatures][ed25519.SignatureSize]byte // standard: received v1a signatures
	ned   int                                               // standard: how many of ed are set
	msg   []byte                                            // standard: the content v1a signs
}

func (k *keyring) newState() *macState {
	s := &macState{
		macs: make([]hash.Hash, len(k.keys)),
		sums: make([][]byte, len(k.keys)),
	}
	for i, key := range k.keys {
		s.macs[i] = hmac.New(k.alg.new, key)
	}
	buf := make([]byte, len(s.sums)*maxMACSize)
	for i := range s.sums {
		s.sums[i] = buf[i*maxMACSize : i*maxMACSize : (i+1)*maxMACSize]
	}
	return s
}

func (k *keyring) get() *macState {
	s := k.pool.Get().(*macState)
	s.nsig, s.nsum, s.ned = 0, 0, 0
	return s
}

func (k *keyring) put(s *macState) { k.pool.Put(s) }

// compute sets the sum of every key over the concatenation of parts.
// Nothing is concatenated in memory: the parts are written into the MAC.
func (s *macState) compute(parts ...[]byte) {
	for i, m := range s.macs {
		m.Reset()
		for _, p := range parts {
			m.Write(p)
		}
		s.sums[i] = m.Sum(s.sums[i][:0])
	}
	s.nsum = len(s.macs)
}

// match compares every received signature with every computed sum in constant
// time, without stopping at the first match, and reports whether any matched.
// Sums and signatures have the same length (addSig checks it), so each
// comparison runs over the whole value.
func (s *macState) match() bool {
	ok := 0
	for i := 0; i < s.nsig; i++ {
		sig := s.sigs[i][:s.siglen[i]]
		for _, sum := range s.sums[:s.nsum] {
			ok |= subtle.ConstantTimeCompare(sum, sig)
		}
	}
	return ok == 1
}

// matchKey is match that also says which key matched, for a handshake that
// must answer with the secret the sender used. It still compares every pair.
func (s *macState) matchKey() (int, bool) {
	found := -1
	for i := 0; i < s.nsig; i++ {
		sig := s.sigs[i][:s.siglen[i]]
		for j := s.nsum - 1; j >= 0; j-- {
			eq := subtle.ConstantTimeCompare(s.sums[j], sig)
			found = subtle.ConstantTimeSelect(eq, j, found)
		}
	}
	return found, found >= 0
}

// sigBase64 decodes received signatures: strict, so that a signature has one
// spelling (the providers' libraries compare the text, and refuse one whose
// unused last bits are set; a handler checking the header again must not
// fail a delivery accepted here).
var sigBase64 = base64.StdEncoding.Strict()

// addSig decodes one received signature into the next slot. It rejects a
// signature whose length is not the algorithm's, so that match compares
// equal-length values only.
func (s *macState) addSig(src []byte, enc encoding, size int) error {
	if s.nsig >= MaxSignatures {
		return errTooManySigs
	}
	dst := s.sigs[s.nsig][:]
	var n int
	switch enc {
	case encHex:
		if len(src) != 2*size {
			return errSigLength
		}
		var err error
		if n, err = hex.Decode(dst, src); err != nil {
			return errSigEncoding
		}
	case encBase64:
		if len(src) != base64.StdEncoding.EncodedLen(size) {
			return errSigLength
		}
		var err error
		if n, err = sigBase64.Decode(dst, src); err != nil {
			return errSigEncoding
		}
	}
	if n != size {
		return errSigLength
	}
	s.siglen[s.nsig] = uint8(n)
	s.nsig++
	return nil
}

// secretKeys copies the configured secrets, checking that there is at least one
// and that none is empty. The error names a position, never a value.
func secretKeys(secrets [][]byte) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, newErr(ErrBadSecret, "no secret configured")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: secret #%d is empty", ErrBadSecret, i+1)
		}
		keys[i] = append([]byte(nil), s...)
	}
	return keys, nil
}

// tolerance resolves Options.Tolerance: zero means def.
func tolerance(t, def time.Duration) (time.Duration, error) {
	switch {
	case t < 0:
		return 0, fmt.Errorf("%w: negative tolerance %v", ErrBadConfig, t)
	case t == 0:
		return def, nil
	}
	return t, nil
}

// parseUnix parses a unix time in whole seconds: 1 to 11 ASCII digits, nothing
// else (no sign, no space, no leading zero: the providers sign the number's
// own spelling, and a MAC over another would verify here and nowhere else).
// It does not allocate.
func parseUnix(b []byte) (int64, bool) {
	if len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	return parseUnixText(b)
}

// parseUnixText is parseUnix for schemes whose MAC covers the timestamp's
// text as sent (Slack's v0 and the other templates): a leading zero is then
// that text, as the providers' libraries take it.
func parseUnixText(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 11 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// checkWindow reports whether t is within tol of now, both ways.
func checkWindow(now, t time.Time, tol time.Duration) error {
	d := now.Sub(t)
	if d > tol {
		return errTooOld
	}
	if d < -tol {
		return errTooNew
	}
	return nil
}

// peekSig reads a required header, bounded by MaxHeaderLen.
func peekSig(h Headers, name string, missing error) ([]byte, error) {
	if h == nil {
		return nil, missing
	}
	v := h.Peek(name)
	if len(v) == 0 {
		return nil, missing
	}
	if len(v) > MaxHeaderLen {
		return nil, errHeaderLong
	}
	return v, nil
}

// hmacSum is the one-shot MAC used by Sign and handshakes (not the hot path).
func hmacSum(alg algorithm, key []byte, parts ...[]byte) []byte {
	m := hmac.New(alg.new, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}
