package providers

import "time"

// GitHub: X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>. No
// timestamp, so no tolerance; replays are stopped by the key, X-GitHub-Delivery,
// which a manual redelivery keeps. The legacy SHA-1 X-Hub-Signature header is
// not accepted (a downgrade).
type github struct{}

var githubSpec = macSpec{
	sigHeader: "X-Hub-Signature-256",
	prefix:    "sha256=",
	alg:       algSHA256,
	enc:       encHex,
	template:  mustTemplate("{body}"),
	sendID:    "X-GitHub-Delivery",
}

func (github) Name() string { return "github" }

func (github) Defaults() Defaults {
	return Defaults{Key: []string{"header:X-GitHub-Delivery"}, Retention: 168 * time.Hour, RetryWindow: 72 * time.Hour, AckStatus: ackAccepted, ReplayGuard: true, Type: "header:X-GitHub-Event"}
}

func (github) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newMACVerifier(githubSpec, opts))
}

func (github) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return githubSpec.sign(body, secret, now, id)
}
