package providers

import "time"

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
		GuardByType: true,
	}
}

func (shopify) NewVerifier(opts Options) (Verifier, error) {
	return verifier(newMACVerifier(shopifySpec, opts))
}

func (shopify) Sign(body, secret []byte, now time.Time, id string, _ *HMACSpec) ([]Header, error) {
	return shopifySpec.sign(body, secret, now, id)
}
