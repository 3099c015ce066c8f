package providers

import (
	"encoding/hex"
	"strconv"
	"time"
)

// Stripe: Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...], each v1 the hex
// HMAC-SHA256 over "<t>.<raw body>" keyed with the signing secret string as is
// (whsec_... included, not base64-decoded). Several v1 appear while a secret
// is rolled; v0 and unknown schemes are ignored. Unlike Stripe's SDK, a
// timestamp too far in the future is refused too.
type stripe struct{}

var stripeList = &listSpec{header: "Stripe-Signature", sep: ',', tsKey: "t", sigKey: "v1", join: []byte(".")}

func (stripe) Name() string { return "stripe" }

func (stripe) Defaults() Defaults {
	return Defaults{Key: []string{"json:id"}, Retention: 168 * time.Hour, RetryWindow: 72 * time.Hour, AckStatus: ackAccepted, Type: "json:type"}
}

func (stripe) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newListVerifier(stripeList, opts))
}

// Sign produces Stripe-Signature: t=<now>,v1=<hex>. Stripe's event id lives in
// the body; id is not used.
func (stripe) Sign(body, secret []byte, now time.Time, _ string, _ *HMACSpec) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	sum := hmacSum(algSHA256, secret, []byte(ts), []byte("."), body)
	return []Header{{Name: "Stripe-Signature", Value: "t=" + ts + ",v1=" + hex.EncodeToString(sum)}}, nil
}
