package providers

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// vector is a published (or, for Shopify, independently computed) test vector
// from testdata/vectors.json; each vector's name says where it comes from.
type vector struct {
	Name   string `json:"name"`
	Scheme string `json:"scheme"`
	Secret string `json:"secret"`
	// SignSecret is what Sign takes when it is not Secret: a v1a vector is
	// verified with a whpk_ public key and signed with its whsk_ private key.
	SignSecret string            `json:"sign_secret"`
	Body       string            `json:"body"`
	URL        string            `json:"url"`
	ID         string            `json:"id"`
	Now        int64             `json:"now"`
	Headers    map[string]string `json:"headers"`
	SigHeader  string            `json:"sig_header"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatal("no vectors")
	}
	return vs
}

func TestPublishedVectors(t *testing.T) {
	for _, vec := range loadVectors(t) {
		t.Run(vec.Name, func(t *testing.T) {
			now := unix(vec.Now)
			if vec.Now == 0 {
				now = unix(1_700_000_000) // schemes without a timestamp: any time
			}
			v := mustVerifier(t, vec.Scheme, Options{Secrets: secrets(vec.Secret)})
			r := &Request{Body: []byte(vec.Body), Header: headerMap(vec.Headers), URL: vec.URL, Now: now}
			if err := v.Verify(r); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			// The same vector with a wrong secret fails.
			wrong := mustVerifier(t, vec.Scheme, Options{Secrets: secrets(wrongSecret(vec.Scheme, vec.Secret))})
			if err := wrong.Verify(r); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("wrong secret: %v, want ErrBadSignature", err)
			}
			if vec.SigHeader == "" {
				return
			}
			// Sign recomputes the published value.
			signWith := vec.Secret
			if vec.SignSecret != "" {
				signWith = vec.SignSecret
			}
			hs, err := SignURL(mustLookup(t, vec.Scheme), vec.URL, []byte(vec.Body), []byte(signWith), now, vec.ID, nil)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if got, want := headersOf(hs).get(vec.SigHeader), vec.Headers[vec.SigHeader]; got != want {
				t.Fatalf("Sign %s = %q, want %q", vec.SigHeader, got, want)
			}
		})
	}
}

func wrongSecret(scheme, secret string) string {
	if strings.HasPrefix(secret, PublicKeyPrefix) {
		return whpkOther // a public key of another pair
	}
	if scheme == "standard" || scheme == "svix" {
		return "whsec_" + "dGhpcyBpcyBub3QgdGhlIHNlY3JldA=="
	}
	return "not the secret"
}
