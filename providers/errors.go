package providers

import "errors"

// Outcomes callers branch on. Every error this package returns wraps exactly one
// of these; the wrapping text says why, never which secret matched or failed and
// never which byte differed.
var (
	// ErrMissingHeader: a header the scheme needs (signature, timestamp, id, token)
	// is absent or empty. The intake answers 401.
	ErrMissingHeader = errors.New("providers: missing header")
	// ErrMalformedHeader: a signature, timestamp or token header cannot be parsed
	// (bad hex/base64, no "=", wrong length, too many entries, too long). 401.
	ErrMalformedHeader = errors.New("providers: malformed header")
	// ErrBadSignature: the header parsed but no signature matched any active
	// secret (or the request carries no signature of a supported version). 401.
	ErrBadSignature = errors.New("providers: bad signature")
	// ErrTimestamp: the signed timestamp is outside the source's tolerance, in
	// the past or in the future. 401.
	ErrTimestamp = errors.New("providers: timestamp outside tolerance")

	// ErrNoKey: an idempotency key part is missing, empty, not a string or a
	// number, or holds a byte outside printable ASCII. The intake answers 400.
	ErrNoKey = errors.New("providers: no idempotency key")
	// ErrKeyTooLong: the derived key is longer than MaxKeyLen bytes. 400.
	ErrKeyTooLong = errors.New("providers: idempotency key too long")
	// ErrNotJSON: a json: key part or field was asked of a body that is not a
	// JSON object or array. 400.
	ErrNotJSON = errors.New("providers: body is not JSON")

	// ErrNoField: a Field (ordering guard) found no usable value.
	ErrNoField = errors.New("providers: field missing")
	// ErrDuplicateMember: a key part or field's JSON path passes a member
	// named twice in its object (JSON readers disagree on which counts).
	// Wrapped with ErrNoKey or ErrNoField. 400.
	ErrDuplicateMember = errors.New("providers: JSON member named twice")
	// ErrBadTime: ParseTime was given something that is not a supported time.
	ErrBadTime = errors.New("providers: bad time value")

	// ErrBadSecret: a configured secret is unusable for its scheme (empty, or a
	// whsec_ secret that is not base64). Configuration time only.
	ErrBadSecret = errors.New("providers: malformed secret")
	// ErrBadConfig: options other than secrets are unusable: an unknown scheme,
	// a bad HMACSpec, a bad key part or field spec, a negative tolerance.
	// Configuration time only.
	ErrBadConfig = errors.New("providers: invalid configuration")
)

// verifyError is an error with a fixed reason, wrapping one sentinel. Verifiers
// keep them in package variables or build them once in NewVerifier, so that a
// failed verification does not allocate.
type verifyError struct {
	kind error
	why  string
}

func (e *verifyError) Error() string { return e.kind.Error() + ": " + e.why }
func (e *verifyError) Unwrap() error { return e.kind }

func newErr(kind error, why string) error { return &verifyError{kind: kind, why: why} }

// Reasons shared by several schemes.
var (
	errNoMatch       = newErr(ErrBadSignature, "no signature matches an active secret")
	errNoSupported   = newErr(ErrBadSignature, "no signature of a supported version")
	errSigUndecoded  = newErr(ErrBadSignature, "no signature could be decoded: v1 and v1a signatures are standard base64 (with padding) of 32 and 64 bytes")
	errTokenMismatch = newErr(ErrBadSignature, "token does not match an active secret")
	errTooOld        = newErr(ErrTimestamp, "timestamp too old")
	errTooNew        = newErr(ErrTimestamp, "timestamp too far in the future")
	errTSFormat      = newErr(ErrMalformedHeader, "timestamp is not a unix time in seconds")
	errHeaderLong    = newErr(ErrMalformedHeader, "header too long")
	errTooManySigs   = newErr(ErrMalformedHeader, "too many signatures")
	errSigEncoding   = newErr(ErrMalformedHeader, "signature is not valid for its encoding")
	errSigLength     = newErr(ErrMalformedHeader, "signature has the wrong length")
	errNoEquals      = newErr(ErrMalformedHeader, "entry without '='")
	errListEntry     = newErr(ErrMalformedHeader, "entry with a space or a second '='")
	errDupTimestamp  = newErr(ErrMalformedHeader, "timestamp given twice")
	errNoTimestamp   = newErr(ErrMalformedHeader, "no timestamp")
	errPrefix        = newErr(ErrMalformedHeader, "signature lacks its version prefix")
)

func missingHeader(name string) error { return newErr(ErrMissingHeader, name) }
