package providers

import (
	"crypto/sha256"
	"strings"
	"testing"
)

// Fuzz targets for every header parser and for key extraction. Each checks
// that nothing panics and that garbage never verifies: the seeds are signed
// with a secret the verifier does not hold, so any success would be a forged
// MAC. The corpus lives in testdata/fuzz/<FuzzName>/.

func fuzzVerifier(t testing.TB, scheme string, spec *HMACSpec) Verifier {
	s1, s2 := "fuzz-secret", "fuzz-secret-2"
	if scheme == "standard" || scheme == "svix" {
		s1, s2 = whsecA, "whsec_dW5yZWxhdGVkIHNlY3JldCBrZXk="
	}
	return mustVerifier(t, scheme, Options{Secrets: secrets(s1, s2), HMAC: spec})
}

// seedValue returns header's value for body signed with a secret the fuzz
// verifier does not hold.
func seedValue(t testing.TB, scheme, header, body string, spec *HMACSpec) string {
	secret := "another-secret"
	if scheme == "standard" || scheme == "svix" {
		secret = whsecB
	}
	hs, err := SignURL(mustLookup(t, scheme), "https://example.com/in/x", []byte(body), []byte(secret), unix(testT), "msg_1", spec)
	if err != nil {
		t.Fatal(err)
	}
	return headersOf(hs).get(header)
}

// seedValueWith is seedValue with a chosen signing secret.
func seedValueWith(t testing.TB, scheme, header, body, secret string) string {
	hs, err := mustLookup(t, scheme).Sign([]byte(body), []byte(secret), unix(testT), "msg_1", nil)
	if err != nil {
		t.Fatal(err)
	}
	return headersOf(hs).get(header)
}

func mustFail(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("garbage verified")
	}
}

func FuzzStripeHeader(f *testing.F) {
	body := `{"id":"evt_1"}`
	f.Add(seedValue(f, "stripe", "Stripe-Signature", body, nil), []byte(body))
	f.Add("t=1700000000,v1="+hex64+",v0="+hex64+",v1="+hex64, []byte(body))
	f.Add("t=,v1=,=,,,", []byte{})
	f.Add(strings.Repeat("v1=a,", 40), []byte("x"))
	v := fuzzVerifier(f, "stripe", nil)
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		mustFail(t, v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: unix(testT)}))
	})
}

func FuzzPaddleHeader(f *testing.F) {
	body := `{"event_id":"evt_1"}`
	f.Add(seedValue(f, "paddle", "Paddle-Signature", body, nil), []byte(body))
	f.Add("ts=1700000000;h1="+hex64+";h1="+hex64, []byte(body))
	f.Add("ts=;h1=;;=", []byte{})
	v := fuzzVerifier(f, "paddle", nil)
	f.Fuzz(func(t *testing.T, h string, body []byte) {
		mustFail(t, v.Verify(&Request{Body: body, Header: hdrs{{"Paddle-Signature", []byte(h)}}, Now: unix(testT)}))
	})
}

func FuzzStandardHeaders(f *testing.F) {
	body := `{"test": 2432232314}`
	f.Add("msg_1", "1700000000", seedValue(f, "standard", "webhook-signature", body, nil), []byte(body))
	f.Add("msg_1", "1700000000", "v1,AAAA v1a,BBBB v2,", []byte(body))
	f.Add("", "", ",,, v1, ,v1", []byte{})
	// v1a: signed with a private key whose public key the verifiers lack.
	f.Add("msg_1", "1700000000", seedValueWith(f, "standard", "webhook-signature", body, whskB)+" "+
		seedValue(f, "standard", "webhook-signature", body, nil), []byte(body))
	f.Add("msg_1", "1700000000", "v1a,"+strings.Repeat("A", 88)+" v1a,=", []byte(body))
	v := fuzzVerifier(f, "standard", nil)
	sv := fuzzVerifier(f, "svix", nil)
	// Mixed sources: v1 secrets and v1a public keys, and public keys only.
	mixed := mustVerifier(f, "standard", Options{Secrets: secrets(whsecA, whpkA, whpkOther)})
	v1aOnly := mustVerifier(f, "svix", Options{Secrets: secrets(whpkA)})
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		r := &Request{Body: body, Now: unix(testT), Header: hdrs{
			{"webhook-id", []byte(id)}, {"webhook-timestamp", []byte(ts)}, {"webhook-signature", []byte(sig)},
			{"svix-id", []byte(id)}, {"svix-timestamp", []byte(ts)}, {"svix-signature", []byte(sig)},
		}}
		mustFail(t, v.Verify(r))
		mustFail(t, sv.Verify(r))
		mustFail(t, mixed.Verify(r))
		mustFail(t, v1aOnly.Verify(r))
	})
}

// FuzzV0Headers covers slack and zoom ("v0=<hex>" plus a timestamp header).
func FuzzV0Headers(f *testing.F) {
	body := `{"type":"url_verification","challenge":"x","event":"endpoint.url_validation","payload":{"plainToken":"p"}}`
	f.Add(seedValue(f, "slack", "X-Slack-Signature", body, nil), "1700000000", []byte(body))
	f.Add(seedValue(f, "zoom", "x-zm-signature", body, nil), "1700000000", []byte(body))
	f.Add("v0=", "", []byte{})
	f.Add("v0="+hex64, "17000000000000000000", []byte("{}"))
	slack := fuzzVerifier(f, "slack", nil)
	zoom := fuzzVerifier(f, "zoom", nil)
	f.Fuzz(func(t *testing.T, sig, ts string, body []byte) {
		r := &Request{Body: body, Now: unix(testT), Header: hdrs{
			{"X-Slack-Signature", []byte(sig)}, {"X-Slack-Request-Timestamp", []byte(ts)},
			{"x-zm-signature", []byte(sig)}, {"x-zm-request-timestamp", []byte(ts)},
		}}
		mustFail(t, slack.Verify(r))
		mustFail(t, zoom.Verify(r))
		// A handshake is only ever asked after a successful Verify; it must
		// not panic on anything anyway.
		slack.(Handshaker).Handshake(r)
		slack.(Noticer).Notice(r)
		zoom.(Handshaker).Handshake(r)
	})
}

// FuzzSingleHeaders covers the one-signature schemes and the generic one.
func FuzzSingleHeaders(f *testing.F) {
	full := &HMACSpec{Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
		TimestampHeader: "X-Timestamp", IDHeader: "X-Delivery", Template: "{id}.{timestamp}.{body}"}
	body := `{"webhookTimestamp":1700000000000}`
	f.Add(seedValue(f, "github", "X-Hub-Signature-256", body, nil), "1700000000", "d-1", []byte(body))
	f.Add(seedValue(f, "shopify", "X-Shopify-Hmac-Sha256", body, nil), "", "", []byte(body))
	f.Add(seedValue(f, "linear", "Linear-Signature", body, nil), "", "", []byte(body))
	f.Add(seedValue(f, "hmac", "X-Signature", body, full), "1700000000", "msg_1", []byte(body))
	f.Add("sha512=", "2023-11-14T22:13:20Z", "", []byte{})
	vs := []Verifier{
		fuzzVerifier(f, "github", nil),
		fuzzVerifier(f, "shopify", nil),
		fuzzVerifier(f, "linear", nil),
		fuzzVerifier(f, "hmac", full),
		fuzzVerifier(f, "hmac", &HMACSpec{Header: "X-Signature", Encoding: "base64"}),
		fuzzVerifier(f, "gitlab", nil),
		fuzzVerifier(f, "asaas", nil),
	}
	f.Fuzz(func(t *testing.T, sig, ts, id string, body []byte) {
		r := &Request{Body: body, Now: unix(testT), Header: hdrs{
			{"X-Hub-Signature-256", []byte(sig)}, {"X-Shopify-Hmac-Sha256", []byte(sig)},
			{"Linear-Signature", []byte(sig)}, {"X-Signature", []byte(sig)},
			{"X-Timestamp", []byte(ts)}, {"X-Delivery", []byte(id)},
			{"X-Gitlab-Token", []byte(sig)}, {"asaas-access-token", []byte(sig)},
		}}
		for _, v := range vs {
			mustFail(t, v.Verify(r))
		}
	})
}

func FuzzTwilio(f *testing.F) {
	body := testFormBody
	url := "https://example.com/in/x"
	f.Add(url, seedValue(f, "twilio", "X-Twilio-Signature", body, nil), []byte(body))
	f.Add("https://[::1]:99/x?bodySHA256=00&a#b", "AAAAAAAAAAAAAAAAAAAAAAAAAAA=", []byte("{}"))
	f.Add("http://@:/", "", []byte("a=%&b=%2&=&&+"))
	form := fuzzVerifier(f, "twilio", nil)
	json := mustVerifier(f, "twilio", Options{Secrets: secrets("fuzz-secret", "fuzz-secret-2"), TwilioJSON: true})
	f.Fuzz(func(t *testing.T, url, sig string, body []byte) {
		for _, v := range []Verifier{form, json} {
			r := &Request{Body: body, URL: url, Now: unix(testT), Header: hdrs{{"X-Twilio-Signature", []byte(sig)}}}
			mustFail(t, v.Verify(r))
			h := sha256.New()
			_ = v.(ReplayBodier).WriteReplayBody(h, r) // answers, never panics
		}
	})
}

// FuzzKey derives keys from arbitrary bodies and headers: no panic, and any key
// is "src:"-prefixed, printable ASCII and at most MaxKeyLen bytes; any type a
// text field reads is printable UTF-8.
func FuzzKey(f *testing.F) {
	f.Add([]byte(`{"id":"evt_1","data":{"items":[{"id":"a"},{"id":"b"}]}}`), "hdr")
	f.Add([]byte(`{"id":"a\u0000b","data":{"items":[1,{"id":"\ud800"}]}}`), "")
	f.Add([]byte(`[{"id":1e999}]`), "\x00")
	f.Add([]byte(`{"id":`), "x")
	f.Add([]byte(`{"type":"commande.cr\u00e9\u00e9e","id":"\u0085"}`), "caf\xe9")
	f.Add([]byte(`{"id":"`+strings.Repeat("a", 600)+`"}`), "x")
	var keyers []*Keyer
	for _, parts := range [][]string{
		{"json:id"}, {"json:data.items.1.id"}, {"json:0.id"}, {"header:X-Id|json:id"},
		{"json:id", "header:X-Id", "body:sha256"}, {"json:data.items"},
	} {
		k, err := NewKeyer("src", parts)
		if err != nil {
			f.Fatal(err)
		}
		keyers = append(keyers, k)
	}
	field, _ := NewField("json:data.items.0.id|json:id")
	text, _ := NewTextField("json:type|header:X-Id")
	f.Fuzz(func(t *testing.T, body []byte, h string) {
		hs := hdrs{{"X-Id", []byte(h)}}
		for _, k := range keyers {
			key, err := k.Key(nil, hs, body)
			if err != nil {
				continue
			}
			if !strings.HasPrefix(string(key), "src:") || len(key) > MaxKeyLen || !printable(key) || key[len(key)-1] == ' ' {
				t.Fatalf("bad key %q", key)
			}
		}
		if v, err := field.Value(hs, body); err == nil {
			ParseTime(v)
		}
		// An event type: printable UTF-8 text, no space at either end.
		if v, err := text.Value(hs, body); err == nil && (!PrintableText(string(v)) || v[0] == ' ' || v[len(v)-1] == ' ') {
			t.Fatalf("bad type %q", v)
		}
	})
}

// FuzzKeySpec parses arbitrary part specs: no panic; a spec that parses works.
func FuzzKeySpec(f *testing.F) {
	for _, s := range []string{"json:id", "header:X|json:a.0.b", "body:sha256", "json:a..b", "json:@this", "|", "json:#"} {
		f.Add(s)
	}
	body := []byte(`{"a":[{"b":"c"}],"id":"x"}`)
	f.Fuzz(func(t *testing.T, spec string) {
		k, err := NewKeyer("src", []string{spec})
		if err != nil {
			return
		}
		k.Key(nil, hdrs{{"X", []byte("v")}}, body)
	})
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"1700000000", "1700000000123", "1.5", "2023-11-14T22:13:20.5Z", "9223372036854775807", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ParseTime(b)
		if err == nil && len(b) > 0 && b[0] >= '0' && b[0] <= '9' && !strings.ContainsAny(string(b), "-T") && n < 0 {
			t.Fatalf("ParseTime(%q) = %d: a number gave a negative time", b, n)
		}
	})
}
