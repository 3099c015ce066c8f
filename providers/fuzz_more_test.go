package providers

// The header fuzzers sign with a secret the verifier lacks, so
// they prove only that garbage fails. This one signs with the secret the
// verifier holds: a delivery signed by the scheme's own Sign verifies (or
// fails for a reason other than a MAC mismatch), the signature binds the
// body, the id and the timestamp, and no error quotes the secret.

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var signedSchemes = []struct {
	name string
	spec *HMACSpec
	// body: the signature covers the body (not a token scheme)
	body bool
	// signed: the headers whose value the verification depends on
	signed []string
}{
	{"stripe", nil, true, []string{"Stripe-Signature"}},
	{"paddle", nil, true, []string{"Paddle-Signature"}},
	{"standard", nil, true, []string{"webhook-id", "webhook-timestamp", "webhook-signature"}},
	{"svix", nil, true, []string{"svix-id", "svix-timestamp", "svix-signature"}},
	{"github", nil, true, []string{"X-Hub-Signature-256"}},
	{"shopify", nil, true, []string{"X-Shopify-Hmac-Sha256"}},
	{"linear", nil, true, []string{"Linear-Signature"}},
	{"slack", nil, true, []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"}},
	{"zoom", nil, true, []string{"x-zm-signature", "x-zm-request-timestamp"}},
	{"hmac", &HMACSpec{Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
		TimestampHeader: "X-Timestamp", IDHeader: "X-Delivery", Template: "{id}.{timestamp}.{body}"}, true,
		[]string{"X-Signature", "X-Timestamp", "X-Delivery"}},
	{"hmac", &HMACSpec{Header: "X-Signature", TimestampHeader: "X-Timestamp", Template: "{timestamp}:{body}"}, true,
		[]string{"X-Signature", "X-Timestamp"}},
	{"gitlab", nil, false, []string{"X-Gitlab-Token"}},
	{"asaas", nil, false, []string{"asaas-access-token"}},
}

func FuzzSignedDelivery(f *testing.F) {
	type fixture struct {
		secret string
		v      Verifier
	}
	fx := make([]fixture, len(signedSchemes))
	for i, s := range signedSchemes {
		secret, err := GenerateSecret(s.name)
		if err != nil {
			f.Fatal(err)
		}
		fx[i] = fixture{secret, mustVerifier(f, s.name, Options{Secrets: secrets(secret), HMAC: s.spec})}
	}
	f.Add(uint8(0), []byte(`{"id":"evt_1"}`), []byte(`{"id":"evt_2"}`), "msg_1", int16(0), "")
	f.Add(uint8(2), []byte(`{"a":1}`), []byte(`{"a":1} `), "msg.1", int16(-10), "v1,AAAA")
	f.Add(uint8(9), []byte("x"), []byte("y"), "id\x00", int16(299), "")
	f.Add(uint8(7), []byte(`{"type":"url_verification"}`), []byte{}, "", int16(301), "v0=00")
	f.Fuzz(func(t *testing.T, which uint8, body, other []byte, id string, skew int16, extra string) {
		i := int(which) % len(signedSchemes)
		s, x := signedSchemes[i], fx[i]
		now := unix(testT)
		hs, err := mustLookup(t, s.name).Sign(body, []byte(x.secret), now.Add(time.Duration(skew)*time.Second), id, s.spec)
		if err != nil {
			if strings.Contains(err.Error(), x.secret) {
				t.Fatalf("Sign error quotes the secret: %v", err)
			}
			return
		}
		h := headersOf(hs)
		r := &Request{Body: body, Header: h, Now: now}
		err = x.v.Verify(r)
		if err != nil && strings.Contains(err.Error(), x.secret) {
			t.Fatalf("Verify error quotes the secret: %v", err)
		}
		if errors.Is(err, ErrBadSignature) {
			t.Fatalf("%s: a delivery its own Sign signed (id %q, skew %ds, %d-byte body) does not match: %v\nheaders %q",
				s.name, id, skew, len(body), err, hs)
		}
		if err != nil {
			return
		}
		// The signature binds the body.
		if s.body && !bytes.Equal(other, body) {
			if x.v.Verify(&Request{Body: other, Header: h, Now: now}) == nil {
				t.Fatalf("%s: signed for %q, verified for %q", s.name, body, other)
			}
		}
		// And every header it signs: changing one's value to another
		// never verifies.
		for j, hd := range h {
			if !slices.ContainsFunc(s.signed, func(n string) bool { return strings.EqualFold(n, hd.name) }) {
				continue
			}
			mod := append(hdrs(nil), h...)
			nv := extra
			if nv == "" || nv == string(hd.value) {
				nv = string(hd.value) + "0"
			}
			mod[j] = hdr{hd.name, []byte(nv)}
			if x.v.Verify(&Request{Body: body, Header: mod, Now: now}) == nil {
				// A signature header gaining an entry (a rotation
				// list) may still verify: only when the old value is
				// inside the new one.
				if bytes.Contains([]byte(nv), hd.value) {
					continue
				}
				t.Fatalf("%s: header %s %q changed to %q and still verified", s.name, hd.name, hd.value, nv)
			}
		}
	})
}
