package providers

import (
	"encoding/hex"
	"encoding/json"
	"time"
)

// Zoom: x-zm-signature: v0=<hex HMAC-SHA256(secret token, "v0:" + ts + ":" +
// raw body)>, x-zm-request-timestamp: <unix seconds>. Zoom documents no event
// id; the default key is the body's event name and event_ts (ms).
//
// Handshake: a verified endpoint.url_validation event is answered 200
// {"plainToken":P,"encryptedToken":hex(HMAC-SHA256(secret, P))}, computed with
// the secret that signed the request (so it works during rotation).
type zoom struct{}

var zoomSpec = macSpec{
	sigHeader: "x-zm-signature",
	prefix:    "v0=",
	alg:       algSHA256,
	enc:       encHex,
	tsHeader:  "x-zm-request-timestamp",
	template:  mustTemplate("v0:{timestamp}:{body}"),
}

func (zoom) Name() string { return "zoom" }

func (zoom) Defaults() Defaults {
	return Defaults{Key: []string{"json:event", "json:event_ts"}, Retention: 24 * time.Hour, RetryWindow: 85 * time.Minute, AckStatus: ackAccepted, Type: "json:event"}
}

func (zoom) NewVerifier(opts Options) (Verifier, error) {
	v, err := newMACVerifier(zoomSpec, opts)
	if err != nil {
		return nil, err
	}
	return &zoomVerifier{v}, nil
}

func (zoom) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return zoomSpec.sign(body, secret, now, id)
}

type zoomVerifier struct{ *macVerifier }

// Handshake answers Zoom's endpoint.url_validation. It re-runs the signature
// check to learn which secret signed the request.
func (v *zoomVerifier) Handshake(r *Request) (int, []byte, string, bool) {
	if e, st := jsonValue(r.Body, "event"); st != found || string(e) != "endpoint.url_validation" {
		return 0, nil, "", false
	}
	p, st := jsonValue(r.Body, "payload.plainToken")
	if st != found {
		return malformedHandshake("endpoint.url_validation without a payload.plainToken")
	}
	key, err := v.check(r)
	if err != nil {
		return 0, nil, "", false
	}
	sum := hmacSum(algSHA256, v.ring.keys[key], p)
	out, err := json.Marshal(struct {
		PlainToken     string `json:"plainToken"`
		EncryptedToken string `json:"encryptedToken"`
	}{string(p), hex.EncodeToString(sum)})
	if err != nil {
		return 0, nil, "", false
	}
	return 200, out, "application/json", true
}
