package providers

import (
	"fmt"
	"strings"
	"testing"
)

// TestVerifyErrorsNeverQuoteTheSignature: for every scheme, a delivery
// signed with another secret is refused with an error that quotes neither
// the secret nor any part of the signature the right secret makes for that
// body (which would let anyone forge with the 401's text), nor the secret.
func TestVerifyErrorsNeverQuoteTheSignature(t *testing.T) {
	now := unix(testT)
	spec := &HMACSpec{Header: "X-Signature", TimestampHeader: "X-Timestamp", Template: "{timestamp}.{body}"}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			right, wrong := "leak-test-secret-0123456789abcdef", "another-secret-fedcba9876543210"
			if name == "standard" || name == "svix" {
				right, wrong = whsecA, whsecB
			}
			url := ""
			if name == "twilio" {
				url = "https://hooks.example.com/in/tw"
			}
			body := []byte(fmt.Sprintf(`{"id":"evt_1","event":"x","event_ts":1,"webhookTimestamp":%d}`, now.UnixMilli()))
			if name == "twilio" {
				body = []byte("AccountSid=AC1&Body=hello")
			}
			var o Options
			o.Secrets = secrets(right)
			if name == "hmac" {
				o.HMAC = spec
			}
			v := mustVerifier(t, name, o)
			sign := func(secret string) hdrs {
				t.Helper()
				hs, err := SignURL(mustLookup(t, name), url, body, []byte(secret), now, "msg_1", spec)
				if err != nil {
					t.Fatal(err)
				}
				return headersOf(hs)
			}
			good, bad := sign(right), sign(wrong)
			if err := v.Verify(&Request{Body: body, Header: good, URL: url, Now: now}); err != nil {
				t.Fatalf("the rightly signed delivery: %v", err)
			}
			err := v.Verify(&Request{Body: body, Header: bad, URL: url, Now: now})
			if err == nil {
				t.Fatal("a delivery signed with another secret verified")
			}
			text := err.Error()
			// The pieces of the right headers that the wrong ones do not
			// share: the signature (or, for a token scheme, the token).
			var secretParts []string
			for _, h := range good {
				for _, piece := range strings.FieldsFunc(string(h.value), func(r rune) bool { return r == ',' || r == ' ' || r == '=' }) {
					if len(piece) >= 8 && !strings.Contains(bad.get(h.name), piece) {
						secretParts = append(secretParts, piece)
					}
				}
			}
			secretParts = append(secretParts, right)
			if len(secretParts) < 2 {
				t.Fatalf("no signature found in %v", good)
			}
			for _, p := range secretParts {
				for i := 0; i+8 <= len(p); i++ {
					if w := p[i : i+8]; strings.Contains(text, w) {
						t.Fatalf("the error %q quotes %q of the right signature or secret %q", text, w, p)
					}
				}
			}
		})
	}
}
