package providers

import (
	"crypto/sha256"
	"crypto/subtle"
	"time"
)

// tokenVerifier checks a shared token sent in plain text (GitLab's
// X-Gitlab-Token, Asaas's asaas-access-token). The received token and every
// secret are compared as SHA-256 digests, so that the comparison takes the
// same time whatever the lengths, and every secret is compared.
type tokenVerifier struct {
	header   string
	digests  [][sha256.Size]byte
	errNoTok error
}

func newTokenVerifier(header string, opts Options) (*tokenVerifier, error) {
	keys, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	v := &tokenVerifier{header: header, errNoTok: missingHeader(header)}
	for _, k := range keys {
		v.digests = append(v.digests, sha256.Sum256(k))
	}
	return v, nil
}

func (v *tokenVerifier) Verify(r *Request) error {
	tok, err := peekSig(r.Header, v.header, v.errNoTok)
	if err != nil {
		return err
	}
	got := sha256.Sum256(tok)
	ok := 0
	for i := range v.digests {
		ok |= subtle.ConstantTimeCompare(got[:], v.digests[i][:])
	}
	if ok != 1 {
		return errTokenMismatch
	}
	return nil
}

// GitLab (classic secret token): X-Gitlab-Token carries the secret itself. It
// proves who sent the request, not that the body is intact, and has no
// timestamp. The key is Idempotency-Key (stable across retries), else
// X-Gitlab-Event-UUID. GitLab's newer signing token sends Standard Webhooks
// headers: configure such a source as "standard".
type gitlab struct{}

func (gitlab) Name() string { return "gitlab" }

func (gitlab) Defaults() Defaults {
	return Defaults{
		Key:          []string{"header:Idempotency-Key|header:X-Gitlab-Event-UUID"},
		Retention:    72 * time.Hour,
		RetryWindow:  48 * time.Hour, // no automatic retry; "Recent events" can be resent for 2 days
		AckStatus:    ackAccepted,
		ReplayGuard:  true,
		Type:         "header:X-Gitlab-Event",
		SecretHeader: "X-Gitlab-Token",
	}
}

func (gitlab) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newTokenVerifier("X-Gitlab-Token", opts))
}

// Sign sends the secret as X-Gitlab-Token and id as Idempotency-Key.
func (gitlab) Sign(_, secret []byte, _ time.Time, id string, _ *HMACSpec) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	hs := []Header{{Name: "X-Gitlab-Token", Value: string(secret)}}
	if id != "" {
		hs = append(hs, Header{Name: "Idempotency-Key", Value: id})
	}
	return hs, nil
}

// Asaas: asaas-access-token carries the token configured in Asaas's panel. No
// HMAC, no timestamp. Asaas counts anything but exactly 200 as a failure and
// pauses the queue after 15, so the ack status is 200. Events are kept 14 days
// and a resumed queue sends them all, so retention covers 14 days and two.
type asaas struct{}

func (asaas) Name() string { return "asaas" }

func (asaas) Defaults() Defaults {
	return Defaults{Key: []string{"json:id"}, Retention: 384 * time.Hour, RetryWindow: 336 * time.Hour, AckStatus: ackOK, Type: "json:event",
		SecretHeader: "asaas-access-token"}
}

func (asaas) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newTokenVerifier("asaas-access-token", opts))
}

// Sign sends the secret as asaas-access-token; the event id is in the body.
func (asaas) Sign(_, secret []byte, _ time.Time, _ string, _ *HMACSpec) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	return []Header{{Name: "asaas-access-token", Value: string(secret)}}, nil
}
