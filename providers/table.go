package providers

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// schemes is the closed set of providers, by the name a source's `provider`
// key uses. It is built here, explicitly; nothing registers itself.
var schemes = map[string]Scheme{
	"asaas":    asaas{},
	"github":   github{},
	"gitlab":   gitlab{},
	"hmac":     generic{},
	"linear":   linear{},
	"paddle":   paddle{},
	"shopify":  shopify{},
	"slack":    slack{},
	"standard": standard{svix: false},
	"stripe":   stripe{},
	"svix":     standard{svix: true},
	"twilio":   twilio{},
	"zoom":     zoom{},
}

// Lookup returns the scheme called name.
func Lookup(name string) (Scheme, bool) {
	s, ok := schemes[name]
	return s, ok
}

// Names returns every scheme name, sorted.
func Names() []string {
	names := make([]string, 0, len(schemes))
	for n := range schemes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// URLSigner is implemented by schemes whose signature covers the request URL
// (twilio); their Sign cannot work without one and returns an error.
type URLSigner interface {
	SignURL(url string, body, secret []byte, now time.Time, id string) ([]Header, error)
}

// SignURL signs like s.Sign, passing url to schemes that sign it (URLSigner)
// and ignoring it for the others. `oncehook send` and bench/ call this so that
// they need no special case for twilio.
func SignURL(s Scheme, url string, body, secret []byte, now time.Time, id string, spec *HMACSpec) ([]Header, error) {
	if us, ok := s.(URLSigner); ok {
		return us.SignURL(url, body, secret, now, id)
	}
	return s.Sign(body, secret, now, id, spec)
}

// GenerateSecret returns a new random secret in the form scheme expects, for
// `oncehook keygen`: "whsec_" + base64 of 32 random bytes for standard and
// svix, 32 random bytes in hex for the others (a value to paste into the
// provider where it lets you choose the secret; twilio's auth token and
// similar provider-issued secrets are not chosen by you).
func GenerateSecret(scheme string) (string, error) {
	if _, ok := schemes[scheme]; !ok {
		return "", fmt.Errorf("%w: unknown provider %q", ErrBadConfig, scheme)
	}
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	switch scheme {
	case "standard", "svix":
		return "whsec_" + base64.StdEncoding.EncodeToString(b[:]), nil
	}
	return hex.EncodeToString(b[:]), nil
}

// GenerateKeyPair returns a new ed25519 key pair for Standard Webhooks' v1a
// signatures, for `oncehook keygen -asymmetric`: the private key
// "whsk_" + base64 of its 32-byte seed (the form the Standard Webhooks
// libraries read), which the sender signs with, and the public key
// "whpk_" + base64 of 32 bytes, which a source lists among its secrets.
// Only standard and svix have asymmetric keys.
func GenerateKeyPair(scheme string) (private, public string, err error) {
	switch scheme {
	case "standard", "svix":
	default:
		if _, ok := schemes[scheme]; !ok {
			return "", "", fmt.Errorf("%w: unknown provider %q", ErrBadConfig, scheme)
		}
		return "", "", fmt.Errorf("%w: provider %q has no asymmetric keys (only standard and svix: v1a)", ErrBadConfig, scheme)
	}
	pub, priv, err := ed25519.GenerateKey(nil) // crypto/rand; never fails
	if err != nil {
		return "", "", err
	}
	return PrivateKeyPrefix + base64.StdEncoding.EncodeToString(priv.Seed()),
		PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub), nil
}

// PublicKeyOf returns the whpk_ public key of a whsk_ private key.
func PublicKeyOf(private []byte) (string, error) {
	priv, err := whskKey(private)
	if err != nil {
		return "", err
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)), nil
}

// Ack statuses.
const (
	ackAccepted = 202
	ackOK       = 200
)

// verifier turns a constructor's result into a Verifier without the typed-nil
// trap.
func verifier[V Verifier](v V, err error) (Verifier, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Compile-time checks of the table's types against the contract.
var (
	_ Scheme    = github{}
	_ Scheme    = stripe{}
	_ Scheme    = shopify{}
	_ Scheme    = standard{}
	_ Scheme    = slack{}
	_ Scheme    = gitlab{}
	_ Scheme    = paddle{}
	_ Scheme    = twilio{}
	_ Scheme    = linear{}
	_ Scheme    = zoom{}
	_ Scheme    = asaas{}
	_ Scheme    = generic{}
	_ URLSigner = twilio{}

	_ Verifier   = (*macVerifier)(nil)
	_ Verifier   = (*listVerifier)(nil)
	_ Verifier   = (*stdVerifier)(nil)
	_ Verifier   = (*tokenVerifier)(nil)
	_ Verifier   = (*twilioVerifier)(nil)
	_ Handshaker = (*slackVerifier)(nil)
	_ Noticer    = (*slackVerifier)(nil)
	_ Handshaker = (*zoomVerifier)(nil)
)

// SharedKey returns what of a secret a forger would have to guess: the
// decoded key of a whsec_ secret (standard, svix), the secret itself for
// every other scheme with a shared secret. ok is false for an ed25519 key
// (whpk_, whsk_), whose strength does not depend on how it was written, and
// for a whsec_ secret that does not decode (the verifier refuses that one).
// config warns of short and reused shared keys with it.
func SharedKey(provider string, secret []byte) (key []byte, ok bool) {
	if provider != "standard" && provider != "svix" {
		return secret, true
	}
	if isPublicKey(secret) || isPrivateKey(secret) {
		return nil, false
	}
	k, err := whsecKey(secret)
	return k, err == nil
}

// KeyPartSigned reports whether every alternative of a key part reads data
// the provider's signature covers, so that a captured delivery cannot be
// resent under another value of it: the body (json:, body:sha256) for every
// scheme that signs the body (all but the shared-token ones, gitlab and
// asaas), and the id header a scheme signs (webhook-id for standard; svix-id
// and webhook-id for svix; an hmac source's id_header when its template
// signs {id}), and the timestamp header a scheme signs (webhook-timestamp,
// Slack's and Zoom's, an hmac source's timestamp_header when its template
// signs {timestamp}). A timestamp in a key is warned of for another reason
// (each resend carries a new one), but it is not the sender's to write.
// Any other header is.
func KeyPartSigned(provider, part string, spec *HMACSpec) bool {
	gs, err := parseGetters(part)
	if err != nil {
		return false
	}
	sch, ok := Lookup(provider)
	if !ok {
		return false
	}
	bodySigned := sch.Defaults().SecretHeader == ""
	var signedHeaders []string
	switch provider {
	case "standard":
		signedHeaders = []string{"webhook-id", "webhook-timestamp"}
	case "svix":
		// Not the timestamps: a request may carry both names with different
		// values, and only one of them is the signed one.
		signedHeaders = []string{"svix-id", "webhook-id"}
	case "slack":
		signedHeaders = []string{"x-slack-request-timestamp"}
	case "zoom":
		signedHeaders = []string{"x-zm-request-timestamp"}
	case "hmac":
		if spec != nil && spec.IDHeader != "" && strings.Contains(spec.Template, "{id}") {
			signedHeaders = append(signedHeaders, strings.ToLower(spec.IDHeader))
		}
		if spec != nil && spec.TimestampHeader != "" && strings.Contains(spec.Template, "{timestamp}") {
			signedHeaders = append(signedHeaders, strings.ToLower(spec.TimestampHeader))
		}
		bodySigned = spec == nil || spec.Template == "" || strings.Contains(spec.Template, "{body}")
	}
	for _, g := range gs {
		switch g.kind {
		case getHeader:
			if !slices.Contains(signedHeaders, strings.ToLower(g.arg)) {
				return false
			}
		default:
			if !bodySigned {
				return false
			}
		}
	}
	return true
}
