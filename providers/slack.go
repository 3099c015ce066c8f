package providers

import (
	"encoding/json"
	"strconv"
	"time"
)

// Slack: X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:" + ts +
// ":" + raw body)>, X-Slack-Request-Timestamp: <unix seconds>. The key is the
// Events API's event_id; slash commands and interactivity (form bodies) have
// none, so a source receiving them must configure its own key.
//
// Handshake: a verified body {"type":"url_verification","challenge":C} is
// answered 200 {"challenge":C} and stored nowhere; so is app_rate_limited
// (answered 200, and logged through Notice).
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

// Handshake answers Slack's url_verification, and its app_rate_limited
// notice: a verified message about the app itself that carries no event and
// no event_id. Refused (400 for want of a key), it would count among the
// failures for which Slack disables an app's subscriptions, at the very
// moment it is rate limiting the app. It assumes Verify succeeded.
func (v *slackVerifier) Handshake(r *Request) (int, []byte, string, bool) {
	t, st := jsonValue(r.Body, "type")
	if st != found {
		return 0, nil, "", false
	}
	switch string(t) {
	case "url_verification":
	case "app_rate_limited":
		return 200, []byte(`{"status":"noted","type":"app_rate_limited"}` + "\n"), "application/json", true
	default:
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

// Notice says what an app_rate_limited message tells the operator: Slack
// withheld the app's events for a minute, and will not send them later.
func (v *slackVerifier) Notice(r *Request) (string, []any) {
	if t, st := jsonValue(r.Body, "type"); st != found || string(t) != "app_rate_limited" {
		return "", nil
	}
	var attrs []any
	if team, st := jsonValue(r.Body, "team_id"); st == found {
		attrs = append(attrs, "team_id", string(team))
	}
	if m, st := jsonValue(r.Body, "minute_rate_limited"); st == found {
		if sec, err := strconv.ParseInt(string(m), 10, 64); err == nil {
			attrs = append(attrs, "minute", time.Unix(sec, 0).UTC().Format(time.RFC3339))
		}
	}
	return "slack rate-limited the app: it did not send the app's events of that minute, and will not send them later", attrs
}
