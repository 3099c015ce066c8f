package providers

import (
	"encoding/hex"
	"strconv"
	"time"
)

// Paddle Billing: Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...], each h1
// the hex HMAC-SHA256 over "<ts>:<raw body>" keyed with the endpoint secret as
// is (pdl_ntfset_...). Several h1 may appear during rotation; any one
// verifies. Paddle's SDKs allow 5 s; oncehook uses the source's tolerance
// (default 5 minutes), both ways.
type paddle struct{}

var paddleList = &listSpec{header: "Paddle-Signature", sep: ';', tsKey: "ts", sigKey: "h1", join: []byte(":")}

func (paddle) Name() string { return "paddle" }

func (paddle) Defaults() Defaults {
	return Defaults{Key: []string{"json:event_id"}, Retention: 168 * time.Hour, RetryWindow: 72 * time.Hour, AckStatus: ackAccepted, Type: "json:event_type"}
}

func (paddle) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newListVerifier(paddleList, opts))
}

// Sign produces Paddle-Signature: ts=<now>;h1=<hex>. The event id lives in the
// body; id is not used.
func (paddle) Sign(body, secret []byte, now time.Time, _ string, _ *HMACSpec) ([]Header, error) {
	if len(secret) == 0 {
		return nil, newErr(ErrBadSecret, "empty secret")
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	sum := hmacSum(algSHA256, secret, []byte(ts), []byte(":"), body)
	return []Header{{Name: "Paddle-Signature", Value: "ts=" + ts + ";h1=" + hex.EncodeToString(sum)}}, nil
}
