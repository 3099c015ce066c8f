package providers

import (
	"time"
)

// Linear: Linear-Signature: <hex HMAC-SHA256(secret, raw body)>. The timestamp
// is inside the signed body, webhookTimestamp in unix milliseconds; it is
// checked after the MAC matched, so that only an authentic value is read.
//
// Window: Linear recommends one minute. A source's tolerance, when set, is
// used as is (widen it for clock skew, narrow it if you like); zero means 60 s,
// not the 5 minutes of the other schemes. A body without webhookTimestamp is
// ErrTimestamp.
type linear struct{}

// LinearTolerance is linear's window when Options.Tolerance is zero.
const LinearTolerance = time.Minute

var linearSpec = macSpec{
	sigHeader: "Linear-Signature",
	alg:       algSHA256,
	enc:       encHex,
	template:  mustTemplate("{body}"),
	sendID:    "Linear-Delivery",
}

var (
	errLinearNoTS  = newErr(ErrTimestamp, "body has no webhookTimestamp")
	errLinearBadTS = newErr(ErrTimestamp, "body webhookTimestamp is not unix milliseconds")
)

func (linear) Name() string { return "linear" }

func (linear) Defaults() Defaults {
	return Defaults{Key: []string{"header:Linear-Delivery"}, Retention: 72 * time.Hour, RetryWindow: 7 * time.Hour, AckStatus: ackAccepted, ReplayGuard: true, Type: "json:type",
		Tolerance: LinearTolerance}
}

func (linear) NewVerifier(opts Options) (Verifier, error) {
	tol, err := tolerance(opts.Tolerance, LinearTolerance)
	if err != nil {
		return nil, err
	}
	v, err := newMACVerifier(linearSpec, opts)
	if err != nil {
		return nil, err
	}
	v.after = func(r *Request) error {
		raw, st := jsonValue(r.Body, "webhookTimestamp")
		if st != found {
			return errLinearNoTS
		}
		ms, ok := digits(raw)
		if !ok || ms > (1<<63-1)/1_000_000 {
			return errLinearBadTS
		}
		return checkWindow(r.Now, time.UnixMilli(ms), tol)
	}
	return v, nil
}

// Sign signs body as it is; for Verify to accept it, body must carry a current
// webhookTimestamp (unix ms), as Linear's own deliveries do.
func (linear) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return linearSpec.sign(body, secret, now, id)
}
