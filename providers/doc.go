// Package providers proves that a webhook delivery comes from the provider a
// source is configured for, and derives the delivery's idempotency key.
//
// It owns, per provider: the signature scheme (which headers, which bytes are
// signed, how secrets become keys), the timestamp window, the default key and
// retention and ack status, the handshakes some providers require before they
// enable a webhook (Slack url_verification, Zoom endpoint.url_validation), and
// signing the way the provider does (for `oncehook send`, bench/ and tests). It
// also owns key and field extraction from headers and JSON bodies.
//
// # Dependencies
//
// providers imports nothing of ours and none of engine, fasthttp or net/http.
// It reads headers through the small Headers interface, which
// *fasthttp.RequestHeader satisfies as is. The only outside module is
// github.com/tidwall/gjson, to read JSON fields without unmarshalling a body.
//
// # Invariants
//
//   - Verification works on the raw body, exactly as received.
//   - Every signature or token comparison is constant time, and with several
//     secrets (rotation) and several signatures every pair is computed and
//     compared; nothing stops at the first mismatch or match.
//   - Timestamps are checked both ways (too old, too far in the future) against
//     Request.Now; the package never reads the clock while verifying.
//   - The work of one request is bounded: MaxHeaderLen per header,
//     MaxSignatures per header, MaxKeyLen per key.
//   - Errors say why a delivery failed, never which secret or which byte.
//   - A Verifier precomputes keys in NewVerifier and pools MAC instances;
//     Verify allocates nothing on success for the HMAC schemes.
//   - The scheme table is an explicit map built in table.go; nothing registers
//     itself.
//
// # Schemes
//
//	name      signature header(s)                              signed bytes                  default key                                       retention  ack
//	github    X-Hub-Signature-256: sha256=<hex>                body                          header:X-GitHub-Delivery                          168h       202
//	stripe    Stripe-Signature: t=..,v1=<hex>[,v1=..]          t "." body                    json:id                                           168h       202
//	shopify   X-Shopify-Hmac-Sha256: <base64>                  body                          header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id 48h  202
//	standard  webhook-id, webhook-timestamp,                   id "." ts "." body            header:webhook-id                                 96h        202
//	          webhook-signature: v1,<base64> ...               (v1 key = base64 of whsec_...;
//	          and v1a,<base64> (ed25519)                        v1a key = whpk_ public key)
//	svix      svix-id/-timestamp/-signature (or webhook-*)     as standard                   header:svix-id|header:webhook-id                  96h        202
//	slack     X-Slack-Signature: v0=<hex>,                     "v0:" ts ":" body             json:event_id                                     24h        202
//	          X-Slack-Request-Timestamp
//	gitlab    X-Gitlab-Token: <secret> (plain token)           -                             header:Idempotency-Key|header:X-Gitlab-Event-UUID 72h        202
//	paddle    Paddle-Signature: ts=..;h1=<hex>[;h1=..]         ts ":" body                   json:event_id                                     168h       202
//	twilio    X-Twilio-Signature: <base64 HMAC-SHA1>           URL + sorted form name+value  header:I-Twilio-Idempotency-Token                 24h        202
//	linear    Linear-Signature: <hex>                          body (+ webhookTimestamp ms)  header:Linear-Delivery                            72h        202
//	zoom      x-zm-signature: v0=<hex>, x-zm-request-timestamp "v0:" ts ":" body             json:event + json:event_ts                        24h        202
//	asaas     asaas-access-token: <token> (plain token)        -                             json:id                                           336h       200
//	hmac      per HMACSpec                                     per HMACSpec template         (must be configured)                              168h       202
//
// All HMACs are SHA-256 except twilio (SHA-1) and hmac (configurable). Keys
// are the secret's bytes as configured, except standard/svix (base64-decoded
// after the whsec_ prefix). standard/svix also verify Standard Webhooks' v1a
// ed25519 signatures with whpk_ public keys listed among the secrets. SCHEMES.md has the operator's version of this
// table with the caveats.
package providers
