package providers

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// Fixed ed25519 key pairs for the v1a tests, from 32-byte seeds (the
// Standard Webhooks libraries' whsk_ form). The public keys are derived.
var (
	whskA     = PrivateKeyPrefix + base64.StdEncoding.EncodeToString([]byte("oncehook-test-ed25519-seed-A-32b"))
	whskB     = PrivateKeyPrefix + base64.StdEncoding.EncodeToString([]byte("oncehook-test-ed25519-seed-B-32b"))
	whpkA     = mustPublicKey(whskA)
	whpkB     = mustPublicKey(whskB)
	whpkOther = mustPublicKey(PrivateKeyPrefix + base64.StdEncoding.EncodeToString([]byte("oncehook-test-ed25519-seed-other")))
)

func mustPublicKey(whsk string) string {
	pub, err := PublicKeyOf([]byte(whsk))
	if err != nil {
		panic(err)
	}
	return pub
}

// signStd signs body with secret (whsec_ or whsk_) under id at now and
// returns the headers.
func signStd(t testing.TB, scheme, secret string, body []byte, id string, now time.Time) hdrs {
	t.Helper()
	hs, err := mustLookup(t, scheme).Sign(body, []byte(secret), now, id, nil)
	if err != nil {
		t.Fatalf("sign with %.5s: %v", secret, err)
	}
	return headersOf(hs)
}

func TestV1aGeneratedKeys(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"type":"contact.created"}`)
	for _, scheme := range []string{"standard", "svix"} {
		priv, pub, err := GenerateKeyPair(scheme)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(priv, "whsk_") || len(priv) != len("whsk_")+44 {
			t.Fatalf("private key %q: want whsk_ + base64 of 32 bytes", priv[:5])
		}
		if !strings.HasPrefix(pub, "whpk_") || len(pub) != len("whpk_")+44 {
			t.Fatalf("public key %q: want whpk_ + base64 of 32 bytes", pub)
		}
		if got, _ := PublicKeyOf([]byte(priv)); got != pub {
			t.Fatalf("PublicKeyOf(private) = %q, want %q", got, pub)
		}
		priv2, _, _ := GenerateKeyPair(scheme)
		if priv2 == priv {
			t.Fatal("two equal private keys")
		}
		h := signStd(t, scheme, priv, body, "msg_1", now)
		sig := h.get(map[bool]string{false: "webhook-signature", true: "svix-signature"}[scheme == "svix"])
		if !strings.HasPrefix(sig, "v1a,") || len(sig) != len("v1a,")+88 {
			t.Fatalf("%s: signature header %q: want v1a,<base64 of 64 bytes>", scheme, sig)
		}
		v := mustVerifier(t, scheme, Options{Secrets: secrets(pub)})
		wantErr(t, scheme+" generated pair", v.Verify(&Request{Body: body, Header: h, Now: now}), nil)
	}
	for _, scheme := range []string{"stripe", "github", "hmac"} {
		if _, _, err := GenerateKeyPair(scheme); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: GenerateKeyPair: %v, want ErrBadConfig", scheme, err)
		}
	}
	if _, _, err := GenerateKeyPair("nope"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown scheme: %v", err)
	}
}

func TestV1aVerify(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"id":"evt_1","amount":2000}`)
	goodV1a := signStd(t, "standard", whskA, body, "msg_1", now)
	goodV1 := signStd(t, "standard", whsecA, body, "msg_1", now)
	otherV1a := signStd(t, "standard", whskB, body, "msg_1", now).get("webhook-signature")
	otherV1 := signStd(t, "standard", whsecB, body, "msg_1", now).get("webhook-signature")
	a, b := goodV1a.get("webhook-signature"), goodV1.get("webhook-signature")

	v1aOnly := mustVerifier(t, "standard", Options{Secrets: secrets(whpkA)})
	mixed := mustVerifier(t, "standard", Options{Secrets: secrets(whsecA, whpkA)})
	rotated := mustVerifier(t, "standard", Options{Secrets: secrets(whpkOther, whpkA)})
	wrongKey := mustVerifier(t, "standard", Options{Secrets: secrets(whpkB)})
	v1Only := mustVerifier(t, "standard", Options{Secrets: secrets(whsecA)})

	req := func(sig string, body []byte) *Request {
		return &Request{Body: body, Header: goodV1a.with("webhook-signature", sig), Now: now}
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-2] ^= 1
	cases := []struct {
		name string
		v    Verifier
		r    *Request
		want error
	}{
		{"v1a with its public key", v1aOnly, req(a, body), nil},
		{"v1a, second of two public keys", rotated, req(a, body), nil},
		{"v1a, wrong public key", wrongKey, req(a, body), ErrBadSignature},
		{"v1a, tampered body", v1aOnly, req(a, tampered), ErrBadSignature},
		{"v1a, id changed", v1aOnly, &Request{Body: body, Header: goodV1a.with("webhook-id", "msg_2"), Now: now}, ErrBadSignature},
		{"v1a, timestamp changed", v1aOnly, &Request{Body: body, Header: goodV1a.with("webhook-timestamp", "1700000001"), Now: now}, ErrBadSignature},
		{"v1a, stale timestamp", v1aOnly, &Request{Body: body, Header: goodV1a, Now: now.Add(DefaultTolerance + time.Second)}, ErrTimestamp},
		{"v1a-only source refuses a valid v1", v1aOnly, req(b, body), ErrBadSignature},
		{"v1 source skips a valid v1a", v1Only, req(a, body), ErrBadSignature},
		{"mixed header, v1 good, v1a of another key", mixed, req(b+" "+otherV1a, body), nil},
		{"mixed header, v1a good, v1 of another secret", mixed, req(otherV1+" "+a, body), nil},
		{"mixed header, both good", mixed, req(a+" "+b, body), nil},
		{"mixed header, neither good", mixed, req(otherV1+" "+otherV1a, body), ErrBadSignature},
		{"mixed header with unknown versions", mixed, req("v2,xyz "+otherV1a+" v1b,abc "+a, body), nil},
		{"mixed source, v1a only in header", mixed, req(a, body), nil},
		{"mixed source, v1 only in header", mixed, req(b, body), nil},
		{"mixed header to a v1-only source", v1Only, req(otherV1a+" "+b, body), nil},
		{"v1a of the body under another id", v1aOnly, req(signStd(t, "standard", whskA, body, "msg_x", now).get("webhook-signature"), body), ErrBadSignature},
		// Undecodable entries are skipped: alone, no signature is usable;
		// beside a good one, it verifies.
		{"v1a signature is not base64", v1aOnly, req("v1a,"+strings.Repeat("!", 88), body), ErrBadSignature},
		{"v1a signature too short", v1aOnly, req("v1a,"+a[4:40], body), ErrBadSignature},
		{"v1a signature empty", v1aOnly, req("v1a,", body), ErrBadSignature},
		{"v1a signature of 63 bytes", v1aOnly, req("v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 63)), body), ErrBadSignature},
		{"v1a undecodable entries beside a good one", v1aOnly, req("v1a,"+strings.Repeat("!", 88)+" v1a,"+a[4:40]+" v1a, "+a, body), nil},
		{"v1a all-zero signature", v1aOnly, req("v1a,"+base64.StdEncoding.EncodeToString(make([]byte, 64)), body), ErrBadSignature},
		{"MaxEd25519Signatures v1a entries", rotated, req(repeatJoin(otherV1a, " ", MaxEd25519Signatures-1)+" "+a, body), nil},
		{"too many v1a entries", rotated, req(repeatJoin(otherV1a, " ", MaxEd25519Signatures)+" "+a, body), ErrMalformedHeader},
		{"many v1a entries to a v1-only source are skipped", v1Only, req(repeatJoin(otherV1a, " ", MaxSignatures-1)+" "+b, body), nil},
	}
	for _, c := range cases {
		wantErr(t, c.name, c.v.Verify(c.r), c.want)
	}

	// svix reads svix-* headers for v1a too.
	sv := signStd(t, "svix", whskA, body, "msg_1", now)
	wantErr(t, "svix v1a", mustVerifier(t, "svix", Options{Secrets: secrets(whpkA)}).Verify(&Request{Body: body, Header: sv, Now: now}), nil)
}

func TestV1aKeys(t *testing.T) {
	now := unix(testT)
	body := []byte(`{}`)
	// A source never holds a signing key, and a malformed public key is refused;
	// the error names the position, never the value.
	for _, bad := range []string{
		whskA,
		"whpk_not base64!",
		"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31)),
		"whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 64)),
		"whpk_",
	} {
		_, err := mustLookup(t, "standard").NewVerifier(Options{Secrets: secrets(whsecA, bad)})
		if !errors.Is(err, ErrBadSecret) {
			t.Errorf("secret %.8q: %v, want ErrBadSecret", bad, err)
			continue
		}
		if strings.Contains(err.Error(), strings.TrimPrefix(strings.TrimPrefix(bad, "whpk_"), "whsk_")) && len(bad) > 6 {
			t.Errorf("error %q shows the key", err)
		}
		if !strings.Contains(err.Error(), "#2") {
			t.Errorf("error %q does not name secret #2", err)
		}
	}

	// Sign: a public key cannot sign; the 64-byte private form signs like its seed.
	if _, err := mustLookup(t, "standard").Sign(body, []byte(whpkA), now, "msg_1", nil); !errors.Is(err, ErrBadSecret) {
		t.Errorf("Sign with a public key: %v", err)
	}
	seed, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(whskA, "whsk_"))
	long := "whsk_" + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed))
	if x, y := signStd(t, "standard", whskA, body, "m", now).get("webhook-signature"),
		signStd(t, "standard", long, body, "m", now).get("webhook-signature"); x != y {
		t.Errorf("64-byte private key signs %q, its seed %q", y, x)
	}
	if got, _ := PublicKeyOf([]byte(long)); got != whpkA {
		t.Errorf("PublicKeyOf(64-byte form) = %q, want %q", got, whpkA)
	}
	mismatch := ed25519.NewKeyFromSeed(seed)
	copy(mismatch[32:], make([]byte, 32))
	for _, bad := range []string{
		"whsk_" + base64.StdEncoding.EncodeToString(mismatch),
		"whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 16)),
		"whsk_%%",
	} {
		if _, err := mustLookup(t, "standard").Sign(body, []byte(bad), now, "m", nil); !errors.Is(err, ErrBadSecret) {
			t.Errorf("Sign with %.10q: %v, want ErrBadSecret", bad, err)
		}
	}
}

// The Standard Webhooks specification's own example (in the spec's text)
// carries a v1a entry but publishes no key, so it cannot be verified; the
// published library vector in testdata/vectors.json (seed
// "TESTSIGNINGKEYDONOTUSETHISFORANY") is the v1a vector we check. Here: the
// spec example's header parses, and its v1a entry does not verify under an
// unrelated key.
func TestV1aSpecExampleParses(t *testing.T) {
	body := []byte(`{"type":"contact.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"1f81eb52-5198-4599-803e-771906343485"}}`)
	h := hdrs{
		{"webhook-id", []byte("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W")},
		{"webhook-timestamp", []byte("1674087231")},
		{"webhook-signature", []byte("v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==")},
	}
	v := mustVerifier(t, "standard", Options{Secrets: secrets(whpkA, whsecA)})
	wantErr(t, "spec example", v.Verify(&Request{Body: body, Header: h, Now: unix(1674087231)}), ErrBadSignature)
}

// TestUndecodableSignatureSaysSo: a header whose only entries of a version
// the source reads could not be decoded (hex, base64url, a cut copy) is
// answered with what a signature must look like; one with no entry of such
// a version says that instead, as before. Both are ErrBadSignature (401).
func TestUndecodableSignatureSaysSo(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"type":"ping"}`)
	good := signStd(t, "standard", whsecA, body, "msg_1", now)
	mac, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(good.get("webhook-signature"), "v1,"))
	v1 := mustVerifier(t, "standard", Options{Secrets: secrets(whsecA)})
	v1a := mustVerifier(t, "standard", Options{Secrets: secrets(whpkA)})
	for _, tt := range []struct {
		name string
		v    Verifier
		sig  string
		want string
	}{
		{"v1 in hex", v1, "v1," + hex.EncodeToString(mac), "no signature could be decoded"},
		{"v1 in base64url without padding", v1, "v1," + base64.RawURLEncoding.EncodeToString(mac), "no signature could be decoded"},
		{"v1a cut short", v1a, "v1a,abc", "no signature could be decoded"},
		{"only an unknown version", v1, "v2," + base64.StdEncoding.EncodeToString(mac), "no signature of a supported version"},
		{"v1 to a v1a-only source", v1a, "v1,x", "no signature of a supported version"},
	} {
		err := tt.v.Verify(&Request{Body: body, Header: good.with("webhook-signature", tt.sig), Now: now})
		if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Verify = %v, want ErrBadSignature saying %q", tt.name, err, tt.want)
		}
	}
}
