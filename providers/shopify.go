package providers

import (
	"encoding/binary"
	"hash"
	"time"
)

// Shopify: X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(client secret, raw body)>.
// No timestamp. The key is X-Shopify-Event-Id (Shopify's documented duplicate
// marker), falling back to X-Shopify-Webhook-Id for senders that lack it.
type shopify struct{}

var shopifySpec = macSpec{
	sigHeader: "X-Shopify-Hmac-Sha256",
	alg:       algSHA256,
	enc:       encBase64,
	template:  mustTemplate("{body}"),
	sendID:    "X-Shopify-Event-Id",
}

func (shopify) Name() string { return "shopify" }

func (shopify) Defaults() Defaults {
	return Defaults{
		Key: []string{"header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id"},
		// Shopify retries 8 times over 4 h since 2024-09-10; the window is
		// the 48 h of the policy before it, which older senders may still
		// follow.
		Retention:   72 * time.Hour,
		RetryWindow: 48 * time.Hour,
		AckStatus:   ackAccepted,
		Type:        "header:X-Shopify-Topic",
		// No id or time is signed; the guard holds the topic with the body
		// (shopifyVerifier), so one body under several topics is several
		// events.
		ReplayGuard: true,
	}
}

func (shopify) NewVerifier(opts Options) (Verifier, error) {
	v, err := newMACVerifier(shopifySpec, opts)
	if err != nil {
		return nil, err
	}
	return shopifyVerifier{v}, nil
}

// shopifyTopic names the delivery's topic (orders/create). Shopify does not
// sign it.
const shopifyTopic = "X-Shopify-Topic"

// shopifyVerifier is a ReplayBodier: the replay guard holds the topic with
// the body, because Shopify sends one body under several topics at once
// (orders/create and orders/updated for a new order), which a guard of the
// body alone would take for one event. A captured body resent under its
// own topic is still found; resent under another topic it is a new event
// (the topic is not signed; accept_types bounds the topics claimed:
// docs/security.md).
type shopifyVerifier struct{ *macVerifier }

var _ ReplayBodier = shopifyVerifier{}

// WriteReplayBody writes the topic header's value as received (absent:
// empty), length-prefixed, then the body.
func (v shopifyVerifier) WriteReplayBody(h hash.Hash, r *Request) error {
	var topic []byte
	if r.Header != nil {
		topic = r.Header.Peek(shopifyTopic)
	}
	h.Reset()
	var n [binary.MaxVarintLen64]byte
	h.Write(binary.AppendUvarint(n[:0], uint64(len(topic))))
	h.Write(topic)
	h.Write(r.Body)
	return nil
}

func (shopify) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return shopifySpec.sign(body, secret, now, id)
}
