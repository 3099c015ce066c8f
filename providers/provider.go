package providers

// This file is the contract between providers and its callers (the intake in
// package main, the `send` command, bench/). The signatures here are fixed; how
// each scheme is implemented is this package's own business.

import (
	"encoding/json"
	"hash"
	"time"
)

// Headers is the read side of a request's headers. Lookup is case-insensitive.
// *fasthttp.RequestHeader satisfies it as is; an http.Header needs a two-line adapter.
type Headers interface {
	Peek(name string) []byte
}

// Request is what a verifier sees of one delivery.
type Request struct {
	Body   []byte    // the raw body, exactly as received
	Header Headers   // the request headers
	URL    string    // the public URL the sender signed (twilio), query as received; may be empty
	Now    time.Time // what timestamps are checked against; providers never reads the clock
}

// Options configures one source's verifier.
type Options struct {
	// Secrets are the source's active secrets, newest or oldest first; any one
	// verifies (rotation). Their meaning is the scheme's: a whsec_ string for
	// standard/svix, a shared token for gitlab/asaas, a raw key elsewhere.
	Secrets [][]byte
	// Tolerance is the timestamp window, applied both ways; zero means the
	// scheme's default: 5 minutes (DefaultTolerance), 60 s for linear
	// (LinearTolerance, Linear's recommendation).
	Tolerance time.Duration
	// HMAC describes the generic "hmac" scheme; nil for every other scheme.
	HMAC *HMACSpec
	// TwilioJSON makes a twilio verifier take JSON bodies, whose SHA-256
	// the URL's bodySHA256 carries, instead of form bodies. A verifier
	// takes one kind only: a form delivery's signed string (URL and
	// parameters, with nothing between them) can be sent as a URL that
	// holds a bodySHA256 of the sender's choosing.
	TwilioJSON bool
}

// HMACSpec is the operator's description of a generic HMAC sender.
type HMACSpec struct {
	Header          string // header carrying the signature
	Algorithm       string // sha1 | sha256 | sha512; empty means sha256
	Encoding        string // hex | base64; empty means hex
	Prefix          string // e.g. "sha256="; stripped before decoding
	TimestampHeader string // optional; enables tolerance checks (unix s or ms, or RFC 3339)
	IDHeader        string // optional; value for {id}
	Template        string // signed content from {id} {timestamp} {body}; default "{body}"
}

// RetryMargin is how much longer than the provider's RetryWindow a default
// Retention keeps a key at least: a resend late in the window, or after a
// slow redelivery, still finds its key.
const RetryMargin = 12 * time.Hour

// Defaults are a provider's defaults for a source that does not override them.
type Defaults struct {
	Key       []string      // key parts, e.g. ["header:X-GitHub-Delivery"]
	Retention time.Duration // the provider's retry window plus margin (at least RetryMargin)
	// RetryWindow is how long after the first delivery the provider may
	// still resend an event, automatically or by a documented redelivery;
	// 0: none documented (hmac). SCHEMES.md cites the provider's doc for each.
	RetryWindow time.Duration
	AckStatus   int // answer for a new event (asaas: 200, else 202)
	// ReplayGuard: the signature covers neither an event id nor (usefully) a
	// time, so a captured body resent under a new unsigned delivery id would
	// verify as a new event; the source's replay_guard defaults to "body".
	// SCHEMES.md gives the reason per provider.
	ReplayGuard bool
	// Type is the key part (header:NAME or json:PATH) the event type is read
	// from for a source's accept_types and drop_types; empty: the provider
	// sends no type, so a filter needs the source's own `type`.
	Type string
	// Tolerance is the scheme's timestamp window when the source sets none;
	// 0: DefaultTolerance. Linear's is its recommended 60 s.
	Tolerance time.Duration
	// GuardByType: the provider sends one body under several event types at
	// once (shopify: orders/create and orders/updated of a new order), so
	// on a source that lists its types (accept_types) the replay guard
	// holds the type with the body: each listed type's delivery is its own
	// event, and a captured body can be resent at most once per listed
	// type. The type is not signed, so without such a list the guard holds
	// the body alone.
	GuardByType bool
	// SecretHeader names the header that carries the source's secret itself
	// (a shared token, gitlab and asaas), "" for a signature scheme. It is
	// never stored with an event: config refuses it in forward_headers.
	SecretHeader string
}

// Scheme is one provider's signature scheme.
type Scheme interface {
	Name() string
	Defaults() Defaults
	// NewVerifier checks the options (e.g. a malformed whsec_ secret) and
	// precomputes what it can, so that Verify does no setup work.
	NewVerifier(opts Options) (Verifier, error)
	// Sign produces the headers a real sender would attach to body, signed
	// with secret at now; id is the delivery/event id for schemes that send one
	// in a header. Used by `oncehook send`, bench/ and tests.
	Sign(body []byte, secret []byte, now time.Time, id string, spec *HMACSpec) ([]Header, error)
}

// Header is one name/value pair produced by Sign.
type Header struct {
	Name  string
	Value string
}

// Verifier checks deliveries for one source. It is safe for concurrent use.
type Verifier interface {
	// Verify returns nil or an error wrapping one of ErrMissingHeader,
	// ErrMalformedHeader, ErrBadSignature, ErrTimestamp. The error never says
	// which secret or which byte.
	Verify(r *Request) error
}

// Handshaker is implemented by verifiers of providers that must answer a
// challenge before they enable a webhook (Slack url_verification, Zoom
// endpoint.url_validation). The intake calls it after Verify succeeded; when ok,
// it answers status/body/contentType and stores nothing.
type Handshaker interface {
	Handshake(r *Request) (status int, body []byte, contentType string, ok bool)
}

// Noticer is implemented by handshakers whose provider also sends messages
// about the webhook itself that the operator must hear of (Slack's
// app_rate_limited): for a request Handshake answered, Notice returns what to
// log at WARN, with its attributes, or "" for nothing.
type Noticer interface {
	Notice(r *Request) (msg string, attrs []any)
}

// malformedHandshake is the answer to a handshake message without its
// challenge: 400, and like every handshake it is not stored as an event.
func malformedHandshake(why string) (int, []byte, string, bool) {
	out, _ := json.Marshal(struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}{"error", why + ": nothing stored"})
	return 400, append(out, '\n'), "application/json", true
}

// ReplayBodier is implemented by verifiers whose signature covers something
// other than the raw body's bytes (twilio: the URL and the decoded, sorted
// form parameters, so a re-ordered or re-encoded body verifies too). The
// intake's replay guard hashes what WriteReplayBody writes instead of the
// raw body; the guard of every other verifier hashes the raw body.
type ReplayBodier interface {
	// WriteReplayBody resets h and writes a canonical form of what the
	// signature of r covers: two requests that verify under the same
	// signature write the same bytes. r must have passed Verify; an error
	// (a body Verify would have refused) writes nothing usable.
	WriteReplayBody(h hash.Hash, r *Request) error
}
