package providers

import (
	"encoding/json"
	"time"
)

// Slack: X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:" + ts +
// ":" + raw body)>, X-Slack-Request-Timestamp: <unix seconds>. The key is the
// Events API's event_id; slash commands and interactivity (form bodies) have
// none, so a source receiving them must configure its own key.
//
// Handshake: a verified body {"type":"url_verification","challenge":C} is
// answered 200 {"challenge":C} and stored nowhere.
type slack struct{}

var slackSpec = macSpec{
	sigHeader: "X-Slack-Signature",
	prefix:    "v0=",
	alg:       algSHA256,
	enc:       encHex,
	tsHeader:  "X-Slack-Request-Timestamp",
	template:  mustTemplate("v0:{timestamp}:{body}"),
}

func (slack) Name() string { return "slack" }

func (slack) Defaults() Defaults {
	return Defaults{Key: []string{"json:event_id"}, Retention: 24 * time.Hour, RetryWindow: 6 * time.Minute, AckStatus: ackAccepted, Type: "json:event.type"}
}

func (slack) NewVerifier(opts Options) (Verifier, error) {
	v, err := newMACVerifier(slackSpec, opts)
	if err != nil {
		return nil, err
	}
	return &slackVerifier{v}, nil
}

func (slack) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return slackSpec.sign(body, secret, now, id)
}

type slackVerifier struct{ *macVerifier }

// Handshake answers Slack's url_verification. It assumes Verify succeeded.
func (v *slackVerifier) Handshake(r *Request) (int, []byte, string, bool) {
	if t, st := jsonValue(r.Body, "type"); st != found || string(t) != "url_verification" {
		return 0, nil, "", false
	}
	c, st := jsonValue(r.Body, "challenge")
	if st != found {
		return malformedHandshake("url_verification without a challenge")
	}
	out, err := json.Marshal(struct {
		Challenge string `json:"challenge"`
	}{string(c)})
	if err != nil {
		return 0, nil, "", false
	}
	return 200, out, "application/json", true
}
