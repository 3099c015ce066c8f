package providers

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// signedIDCase is one scheme (or one header set of it) for TestKeyIDIsTheSignedOne.
type signedIDCase struct {
	name   string
	scheme string
	spec   *HMACSpec
	key    []string // nil: the scheme's default key
	body   string
	// rename maps the names Sign produces to the names sent (svix's
	// webhook-* set).
	rename map[string]string
	// extra are headers a real sender adds that Sign does not produce.
	extra hdrs
	// signedID is the header the signature covers as the delivery's id, ""
	// when the scheme signs no id (its key header is then not covered).
	signedID string
	// lookalikes are unsigned headers a key could be read from instead of
	// signedID: the other header set's id, and a repeat of signedID itself.
	lookalikes []string
}

func signedIDCases() []signedIDCase {
	body := testJSONBody(unix(testT))
	genericSpec := &HMACSpec{Header: "X-Signature", TimestampHeader: "X-Timestamp", IDHeader: "X-Delivery",
		Template: "{id}.{timestamp}.{body}"}
	return []signedIDCase{
		{name: "asaas", scheme: "asaas", body: body},
		{name: "github", scheme: "github", body: body},
		{name: "gitlab", scheme: "gitlab", body: body},
		{name: "hmac (id_header signed by the template)", scheme: "hmac", spec: genericSpec, key: []string{"header:X-Delivery"},
			body: body, signedID: "X-Delivery", lookalikes: []string{"X-Delivery"}},
		{name: "linear", scheme: "linear", body: body},
		{name: "paddle", scheme: "paddle", body: body},
		{name: "shopify", scheme: "shopify", body: body},
		{name: "slack", scheme: "slack", body: body},
		{name: "standard", scheme: "standard", body: body, signedID: "webhook-id",
			lookalikes: []string{"svix-id", "webhook-id"}},
		{name: "stripe", scheme: "stripe", body: body},
		{name: "svix (svix-* set)", scheme: "svix", body: body, signedID: "svix-id",
			lookalikes: []string{"webhook-id", "svix-id"}},
		{name: "svix (webhook-* set)", scheme: "svix", body: body, signedID: "webhook-id",
			rename:     map[string]string{"svix-id": "webhook-id", "svix-timestamp": "webhook-timestamp", "svix-signature": "webhook-signature"},
			lookalikes: []string{"svix-id", "webhook-id"}},
		{name: "twilio", scheme: "twilio", body: testFormBody, extra: hdrs{{"I-Twilio-Idempotency-Token", []byte(testID)}}},
		{name: "zoom", scheme: "zoom", body: body},
	}
}

// For every scheme of the table, a validly signed delivery whose key reads a
// header: when the scheme signs an id, the key is that signed id, and adding
// or changing an unsigned look-alike header never gives a delivery a new key
// (the request is refused, or its key is unchanged). When the scheme signs no
// id, the test proves the key header is indeed unsigned, so that the table
// below (and providers/SCHEMES.md) cannot claim coverage the scheme lacks.
func TestKeyIDIsTheSignedOne(t *testing.T) {
	now := unix(testT)
	const url = "https://example.com/in/src"
	covered := map[string]bool{}
	for _, c := range signedIDCases() {
		covered[c.scheme] = true
		t.Run(c.name, func(t *testing.T) {
			s := mustLookup(t, c.scheme)
			secret := "secret"
			if c.scheme == "standard" || c.scheme == "svix" {
				secret = whsecA
			}
			hs, err := SignURL(s, url, []byte(c.body), []byte(secret), now, testID, c.spec)
			if err != nil {
				t.Fatal(err)
			}
			h := headersOf(hs)
			for i := range h {
				if n, ok := c.rename[h[i].name]; ok {
					h[i].name = n
				}
			}
			h = append(h, c.extra...)
			v := mustVerifier(t, c.scheme, Options{Secrets: secrets(secret), HMAC: c.spec})
			parts := c.key
			if parts == nil {
				parts = s.Defaults().Key
			}
			k, err := NewKeyer("src", parts)
			if err != nil {
				t.Fatal(err)
			}
			req := func(h hdrs) *Request { return &Request{Body: []byte(c.body), Header: h, URL: url, Now: now} }
			if err := v.Verify(req(h)); err != nil {
				t.Fatalf("valid delivery: %v", err)
			}
			headerPart := ""
			for _, p := range parts {
				for _, alt := range strings.Split(p, "|") {
					if name, ok := strings.CutPrefix(alt, "header:"); ok && headerPart == "" {
						headerPart = name
					}
				}
			}
			if headerPart == "" {
				if c.signedID != "" {
					t.Fatalf("the case names a signed id %s but the key reads no header", c.signedID)
				}
				return // the key comes from the signed body
			}
			want := "src:" + testID
			got, err := k.Key(nil, h, []byte(c.body))
			if err != nil || string(got) != want {
				t.Fatalf("Key = %q, %v; want %q", got, err, want)
			}

			if c.signedID == "" {
				// The scheme signs no id: changing the key header keeps the
				// signature valid. (Replays of such schemes are not stopped
				// by the signature; see providers/SCHEMES.md.)
				if err := v.Verify(req(h.with(headerPart, "other-id"))); err != nil {
					t.Fatalf("%s changed: %v; the scheme signs it after all: name it as signedID", headerPart, err)
				}
				return
			}
			// The id header is signed: changing it breaks the signature.
			if err := v.Verify(req(h.with(c.signedID, "forged-0"))); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("signed id %s changed: %v, want ErrBadSignature", c.signedID, err)
			}
			for _, name := range c.lookalikes {
				var forged hdrs
				if strings.EqualFold(name, c.signedID) {
					// A second header of the signed name, after the first.
					forged = append(append(hdrs{}, h...), hdr{name, []byte("forged-1")})
				} else {
					forged = h.with(name, "forged-1")
				}
				if err := v.Verify(req(forged)); err != nil {
					if !errors.Is(err, ErrMalformedHeader) && !errors.Is(err, ErrBadSignature) {
						t.Errorf("%s added: %v, want a verification error", name, err)
					}
					continue // refused: no key is derived
				}
				got, err := k.Key(nil, forged, []byte(c.body))
				if err != nil || string(got) != want {
					t.Errorf("%s: forged-1 added: verified with key %q, %v; want %q (the signed id)", name, got, err, want)
				}
				// Every key part that names an id header gives the signed id too.
				for _, alt := range []string{"header:" + c.signedID, "header:" + name} {
					ka, err := NewKeyer("src", []string{alt})
					if err != nil {
						t.Fatal(err)
					}
					if got, err := ka.Key(nil, forged, []byte(c.body)); err == nil && string(got) != want {
						t.Errorf("%s: forged-1 added: key %s gives %q, want %q", name, alt, got, want)
					}
				}
			}
			// The same look-alike carrying the signed id is harmless.
			for _, name := range c.lookalikes {
				same := h.with(name, testID)
				if err := v.Verify(req(same)); err != nil {
					t.Errorf("%s equal to the signed id: %v", name, err)
				}
			}
		})
	}
	for _, name := range Names() {
		if !covered[name] {
			t.Errorf("scheme %q has no case in signedIDCases", name)
		}
	}
}

// A svix delivery carrying both header sets with different ids is refused,
// whichever set is complete: the key could otherwise read the unsigned id.
func TestSvixMixedSetsWithDifferentIDs(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"test": 2432232314}`)
	v := mustVerifier(t, "svix", Options{Secrets: secrets(whsecA)})
	sv, _ := mustLookup(t, "svix").Sign(body, []byte(whsecA), now, "msg_1", nil)
	wh, _ := mustLookup(t, "standard").Sign(body, []byte(whsecA), now, "msg_1", nil)
	other, _ := mustLookup(t, "standard").Sign(body, []byte(whsecA), now, "msg_2", nil)
	both := append(headersOf(sv), headersOf(wh)...)
	cases := []struct {
		name string
		h    hdrs
		want error
	}{
		{"both sets, same id", both, nil},
		{"both sets, each validly signed, ids differ", append(headersOf(sv), headersOf(other)...), ErrMalformedHeader},
		{"webhook-* set and a lone forged svix-id", headersOf(wh).with("svix-id", "forged-1"), ErrMalformedHeader},
		{"svix-* set and a lone forged webhook-id", headersOf(sv).with("webhook-id", "forged-1"), ErrMalformedHeader},
		{"webhook-* set and an empty svix-id", headersOf(wh).with("svix-id", ""), nil},
	}
	for _, c := range cases {
		wantErr(t, c.name, v.Verify(&Request{Body: body, Header: c.h, Now: now}), c.want)
	}
}

// Signature lists around the Standard Webhooks library vector (secret
// whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id msg_p5jXN8AQM9LWM0D4loKWxJek,
// timestamp 1614265330, body {"test": 2432232314}): entries that cannot be
// decoded are skipped, and one valid entry among them verifies, for standard
// and svix alike. Rows are in testdata/siglists.json.
func TestStandardSkipsUndecodable(t *testing.T) {
	b, err := os.ReadFile("testdata/siglists.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Name, Sig, Want string }
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	wants := map[string]error{"ok": nil, "bad_signature": ErrBadSignature, "malformed": ErrMalformedHeader}
	body := []byte(`{"test": 2432232314}`)
	now := unix(1614265330)
	for _, scheme := range []string{"standard", "svix"} {
		prefix := "webhook"
		if scheme == "svix" {
			prefix = "svix"
		}
		v := mustVerifier(t, scheme, Options{Secrets: secrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")})
		for _, r := range rows {
			want, ok := wants[r.Want]
			if !ok {
				t.Fatalf("%s: want %q", r.Name, r.Want)
			}
			h := hdrs{
				{prefix + "-id", []byte("msg_p5jXN8AQM9LWM0D4loKWxJek")},
				{prefix + "-timestamp", []byte("1614265330")},
				{prefix + "-signature", []byte(r.Sig)},
			}
			wantErr(t, scheme+": "+r.Name, v.Verify(&Request{Body: body, Header: h, Now: now}), want)
		}
	}
}
