package providers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	testT  = 1_700_000_000
	testID = "evt_0001-abc"
)

func testJSONBody(now time.Time) string {
	return fmt.Sprintf(`{"id":"evt_1NG8Du2eZvKYlo2C","object":"event","event_id":"Ev0001","event":"meeting.started",`+
		`"event_ts":1626230691572,"type":"event_callback","webhookTimestamp":%d,`+
		`"data":{"object":{"id":"pi_1","amount":2000,"marker":"XXXX"}}}`, now.UnixMilli())
}

const testFormBody = "CallSid=CA1234567890ABCDE&From=%2B15551234567&Body=XXXX+hello&To=%2B15557654321&MessageSid=SM1"

// fixture describes one scheme for the shared behaviour tests.
type fixture struct {
	name     string // test name; scheme unless several fixtures share one
	scheme   string
	spec     *HMACSpec
	url      string
	body     string
	secretA  string
	secretB  string
	required []string // headers whose absence is ErrMissingHeader
	sig      string   // the signature (or token) header
	// malformed signature header values: ErrMalformedHeader
	malformed []string
	// malformedTS timestamp header values: ErrMalformedHeader
	tsHeader    string
	malformedTS []string
	tolerance   time.Duration // 0: no timestamp
	bodySigned  bool
	// multi joins a header value signed with secretB and one signed with
	// secretA into one value carrying both signatures; nil when the scheme
	// carries a single signature.
	multi func(bad, good string) string
	// unsupported turns a good value into one whose only signature has a
	// version the scheme ignores.
	unsupported func(good string) string
	// many repeats the good value's signature MaxSignatures+1 times.
	many func(good string) string
}

var (
	hex64  = strings.Repeat("ab", 32)
	huge   = strings.Repeat("a", MaxHeaderLen+1)
	whsecA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	whsecB = "whsec_dGhpcyBpcyBhbm90aGVyIHNlY3JldCBrZXk="
)

func after(s, sep string) string {
	_, v, _ := strings.Cut(s, sep)
	return v
}

func repeatJoin(s, sep string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = s
	}
	return strings.Join(parts, sep)
}

func fixtures() []fixture {
	body := testJSONBody(unix(testT))
	stdMulti := func(bad, good string) string { return bad + " " + good }
	stdUnsupported := func(good string) string { return "v1a," + after(good, ",") + " v2," + after(good, ",") }
	stdMany := func(good string) string { return repeatJoin(good, " ", MaxSignatures+1) }
	// Undecodable entries are skipped (TestStandardSkipsUndecodable); only
	// an oversized header is malformed.
	stdMalformed := []string{huge}
	return []fixture{
		{
			scheme: "github", body: body, secretA: "s3cret-a", secretB: "s3cret-b",
			required: []string{"X-Hub-Signature-256"}, sig: "X-Hub-Signature-256",
			malformed:  []string{"sha256=zz", "sha256=" + strings.Repeat("zz", 32), "sha1=" + hex64, hex64, "sha256=" + hex64[:62], huge},
			bodySigned: true,
		},
		{
			scheme: "stripe", body: body, secretA: "whsec_test_a", secretB: "whsec_test_b",
			required: []string{"Stripe-Signature"}, sig: "Stripe-Signature",
			malformed: []string{"garbage", "t=1700000000,garbage", "v1=" + hex64, "t=abc,v1=" + hex64, "t=-1,v1=" + hex64,
				"t=1700000000,t=1700000000,v1=" + hex64, "t=1700000000,v1=zz", "t=1700000000,v1=" + strings.Repeat("zz", 32), huge},
			tolerance: DefaultTolerance, bodySigned: true,
			multi:       func(bad, good string) string { return bad + ",v1=" + after(good, "v1=") },
			unsupported: func(good string) string { return strings.Replace(good, "v1=", "v0=", 1) },
			many: func(good string) string {
				return "t=" + after(good, "t=")[:10] + strings.Repeat(",v1="+after(good, "v1="), MaxSignatures+1)
			},
		},
		{
			scheme: "shopify", body: body, secretA: "shop-secret-a", secretB: "shop-secret-b",
			required: []string{"X-Shopify-Hmac-Sha256"}, sig: "X-Shopify-Hmac-Sha256",
			malformed:  []string{strings.Repeat("!", 44), "abc", hex64, huge},
			bodySigned: true,
		},
		{
			scheme: "standard", body: body, secretA: whsecA, secretB: whsecB,
			required: []string{"webhook-id", "webhook-timestamp", "webhook-signature"}, sig: "webhook-signature",
			malformed: stdMalformed, tsHeader: "webhook-timestamp", malformedTS: []string{"abc", "-5", "1.5", "170000000000000"},
			tolerance: DefaultTolerance, bodySigned: true,
			multi: stdMulti, unsupported: stdUnsupported, many: stdMany,
		},
		{
			scheme: "svix", body: body, secretA: whsecA, secretB: whsecB,
			required: []string{"svix-id", "svix-timestamp", "svix-signature"}, sig: "svix-signature",
			malformed: stdMalformed, tsHeader: "svix-timestamp", malformedTS: []string{"abc", "-5"},
			tolerance: DefaultTolerance, bodySigned: true,
			multi: stdMulti, unsupported: stdUnsupported, many: stdMany,
		},
		{
			scheme: "slack", body: body, secretA: "8f742231b10e8888abcd99yyyzzz85a5", secretB: "another-signing-secret",
			required: []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"}, sig: "X-Slack-Signature",
			malformed: []string{"v0=xyz", "v1=" + strings.Repeat("ab", 32), "v0=" + strings.Repeat("g", 64), hex64, huge},
			tsHeader:  "X-Slack-Request-Timestamp", malformedTS: []string{"abc", "-5", "1.5", " 1700000000"},
			tolerance: DefaultTolerance, bodySigned: true,
		},
		{
			scheme: "gitlab", body: body, secretA: "gitlab-token-a", secretB: "gitlab-token-b",
			required: []string{"X-Gitlab-Token"}, sig: "X-Gitlab-Token",
			malformed: []string{huge},
		},
		{
			scheme: "paddle", body: body, secretA: "pdl_ntfset_a", secretB: "pdl_ntfset_b",
			required: []string{"Paddle-Signature"}, sig: "Paddle-Signature",
			malformed: []string{"garbage", "h1=" + hex64, "ts=abc;h1=" + hex64, "ts=1700000000;ts=1700000000;h1=" + hex64,
				"ts=1700000000;h1=zz", huge},
			tolerance: DefaultTolerance, bodySigned: true,
			multi:       func(bad, good string) string { return bad + ";h1=" + after(good, "h1=") },
			unsupported: func(good string) string { return strings.Replace(good, "h1=", "h2=", 1) },
			many: func(good string) string {
				return "ts=" + after(good, "ts=")[:10] + strings.Repeat(";h1="+after(good, "h1="), MaxSignatures+1)
			},
		},
		{
			scheme: "twilio", body: testFormBody, url: "https://example.com/in/twilio?x=1",
			secretA: "auth-token-a", secretB: "auth-token-b",
			required: []string{"X-Twilio-Signature"}, sig: "X-Twilio-Signature",
			malformed:  []string{strings.Repeat("!", 28), "abc", huge},
			bodySigned: true,
		},
		{
			scheme: "linear", body: body, secretA: "lin_wh_a", secretB: "lin_wh_b",
			required: []string{"Linear-Signature"}, sig: "Linear-Signature",
			malformed: []string{"zz", strings.Repeat("zz", 32), "sha256=" + hex64, huge},
			tolerance: LinearTolerance, bodySigned: true,
		},
		{
			scheme: "zoom", body: body, secretA: "zoom-secret-token-a", secretB: "zoom-secret-token-b",
			required: []string{"x-zm-signature", "x-zm-request-timestamp"}, sig: "x-zm-signature",
			malformed: []string{"v0=xyz", "v1=" + hex64, huge},
			tsHeader:  "x-zm-request-timestamp", malformedTS: []string{"abc", "1e9"},
			tolerance: DefaultTolerance, bodySigned: true,
		},
		{
			scheme: "asaas", body: body, secretA: "asaas-token-a", secretB: "asaas-token-b",
			required: []string{"asaas-access-token"}, sig: "asaas-access-token",
			malformed: []string{huge},
		},
		{
			name: "hmac-full", scheme: "hmac", body: body, secretA: "generic-a", secretB: "generic-b",
			spec: &HMACSpec{Header: "X-Signature", Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
				TimestampHeader: "X-Timestamp", IDHeader: "X-Delivery", Template: "{id}.{timestamp}.{body}"},
			required: []string{"X-Signature", "X-Timestamp", "X-Delivery"}, sig: "X-Signature",
			malformed: []string{"sha512=!!!!", "sha256=" + hex64, "sha512=" + hex64, huge},
			tsHeader:  "X-Timestamp", malformedTS: []string{"abc", "-5"},
			tolerance: DefaultTolerance, bodySigned: true,
		},
		{
			name: "hmac-defaults", scheme: "hmac", body: body, secretA: "generic-a", secretB: "generic-b",
			spec:     &HMACSpec{Header: "X-Signature"},
			required: []string{"X-Signature"}, sig: "X-Signature",
			malformed:  []string{"zz", strings.Repeat("zz", 32), huge},
			bodySigned: true,
		},
		{
			name: "hmac-sha1", scheme: "hmac", body: body, secretA: "generic-a", secretB: "generic-b",
			spec: &HMACSpec{Header: "X-Sig", Algorithm: "sha1", Encoding: "hex", TimestampHeader: "X-Ts",
				Template: "{timestamp}.{body}"},
			required: []string{"X-Sig", "X-Ts"}, sig: "X-Sig",
			malformed: []string{"zz", huge},
			tsHeader:  "X-Ts", malformedTS: []string{"abc"},
			tolerance: DefaultTolerance, bodySigned: true,
		},
	}
}

func (f *fixture) testName() string {
	if f.name != "" {
		return f.name
	}
	return f.scheme
}

func (f *fixture) verifier(t testing.TB, secrets ...string) Verifier {
	t.Helper()
	opts := Options{HMAC: f.spec}
	for _, s := range secrets {
		opts.Secrets = append(opts.Secrets, []byte(s))
	}
	return mustVerifier(t, f.scheme, opts)
}

// signed returns the headers of a delivery of body signed with secret at now.
func (f *fixture) signed(t testing.TB, body, secret string, now time.Time) hdrs {
	t.Helper()
	hs, err := SignURL(mustLookup(t, f.scheme), f.url, []byte(body), []byte(secret), now, testID, f.spec)
	if err != nil {
		t.Fatalf("%s: Sign: %v", f.testName(), err)
	}
	h := headersOf(hs)
	if f.scheme == "svix" {
		// Svix's own header names, the fallback is tested in the vectors.
		h = hdrs{
			{"svix-id", h.Peek("svix-id")},
			{"svix-timestamp", h.Peek("svix-timestamp")},
			{"svix-signature", h.Peek("svix-signature")},
		}
	}
	return h
}

func (f *fixture) request(h hdrs, body string, now time.Time) *Request {
	return &Request{Body: []byte(body), Header: h, URL: f.url, Now: now}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("%s: %v, want success", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

func TestSchemes(t *testing.T) {
	now := unix(testT)
	for _, f := range fixtures() {
		t.Run(f.testName(), func(t *testing.T) {
			va := f.verifier(t, f.secretA)
			good := f.signed(t, f.body, f.secretA, now)
			req := f.request(good, f.body, now)

			wantErr(t, "sign/verify round trip", va.Verify(req), nil)
			wantErr(t, "wrong secret", f.verifier(t, f.secretB).Verify(req), ErrBadSignature)
			wantErr(t, "rotation: second of two secrets", f.verifier(t, f.secretB, f.secretA).Verify(req), nil)
			wantErr(t, "rotation: first of two secrets", f.verifier(t, f.secretA, f.secretB).Verify(req), nil)

			changed := strings.Replace(f.body, "XXXX", "XXXY", 1)
			if changed == f.body {
				t.Fatal("fixture body has no XXXX marker")
			}
			if f.bodySigned {
				wantErr(t, "one body byte changed", va.Verify(f.request(good, changed, now)), ErrBadSignature)
			} else {
				// Token schemes authenticate the sender, not the body.
				wantErr(t, "token scheme, body changed", va.Verify(f.request(good, changed, now)), nil)
			}

			for _, name := range f.required {
				wantErr(t, "missing "+name, va.Verify(f.request(good.without(name), f.body, now)), ErrMissingHeader)
				wantErr(t, "empty "+name, va.Verify(f.request(good.with(name, ""), f.body, now)), ErrMissingHeader)
			}
			wantErr(t, "no headers at all", va.Verify(&Request{Body: []byte(f.body), URL: f.url, Now: now}), ErrMissingHeader)
			wantErr(t, "nil Headers", va.Verify(&Request{Body: []byte(f.body), Header: hdrs(nil), URL: f.url, Now: now}), ErrMissingHeader)

			for _, m := range f.malformed {
				err := va.Verify(f.request(good.with(f.sig, m), f.body, now))
				wantErr(t, fmt.Sprintf("malformed %s %.40q", f.sig, m), err, ErrMalformedHeader)
			}
			for _, m := range f.malformedTS {
				err := va.Verify(f.request(good.with(f.tsHeader, m), f.body, now))
				wantErr(t, fmt.Sprintf("malformed %s %q", f.tsHeader, m), err, ErrMalformedHeader)
			}

			if f.tolerance > 0 {
				old := now.Add(f.tolerance + time.Second)
				wantErr(t, "timestamp too old", va.Verify(f.request(good, f.body, old)), ErrTimestamp)
				future := now.Add(-f.tolerance - time.Second)
				wantErr(t, "timestamp too far in the future", va.Verify(f.request(good, f.body, future)), ErrTimestamp)
				wantErr(t, "timestamp at the edge (past)", va.Verify(f.request(good, f.body, now.Add(f.tolerance))), nil)
				wantErr(t, "timestamp at the edge (future)", va.Verify(f.request(good, f.body, now.Add(-f.tolerance))), nil)
				wantErr(t, "zero Request.Now", va.Verify(f.request(good, f.body, time.Time{})), ErrTimestamp)

				// A per-source tolerance is honoured.
				wide := mustVerifier(t, f.scheme, Options{Secrets: secrets(f.secretA), HMAC: f.spec, Tolerance: time.Hour})
				wantErr(t, "wide tolerance", wide.Verify(f.request(good, f.body, now.Add(50*time.Minute))), nil)
			} else {
				// No timestamp in the scheme: age does not matter.
				wantErr(t, "no timestamp, a year later", va.Verify(f.request(good, f.body, now.AddDate(1, 0, 0))), nil)
			}

			if f.multi != nil {
				bad := f.signed(t, f.body, f.secretB, now)
				both := f.multi(bad.get(f.sig), good.get(f.sig))
				wantErr(t, "several signatures, one valid", va.Verify(f.request(good.with(f.sig, both), f.body, now)), nil)
				badOnly := f.multi(bad.get(f.sig), bad.get(f.sig))
				wantErr(t, "several signatures, none valid", va.Verify(f.request(good.with(f.sig, badOnly), f.body, now)), ErrBadSignature)
				// Several secrets and several signatures.
				other := "unrelated-" + f.secretB
				if f.scheme == "standard" || f.scheme == "svix" {
					other = "whsec_dW5yZWxhdGVkIHNlY3JldCBrZXk="
				}
				vab := f.verifier(t, other, f.secretA)
				wantErr(t, "several secrets x several signatures", vab.Verify(f.request(good.with(f.sig, both), f.body, now)), nil)
			}
			if f.unsupported != nil {
				u := f.unsupported(good.get(f.sig))
				wantErr(t, "only unsupported versions", va.Verify(f.request(good.with(f.sig, u), f.body, now)), ErrBadSignature)
			}
			if f.many != nil {
				m := f.many(good.get(f.sig))
				if len(m) > MaxHeaderLen {
					t.Fatalf("many: %d bytes, over MaxHeaderLen; the test would not test the count", len(m))
				}
				wantErr(t, "too many signatures", va.Verify(f.request(good.with(f.sig, m), f.body, now)), ErrMalformedHeader)
			}
		})
	}
}

// Every scheme in the table has a fixture, and every fixture a scheme.
func TestFixturesCoverTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range fixtures() {
		seen[f.scheme] = true
	}
	for _, n := range Names() {
		if !seen[n] {
			t.Errorf("scheme %q has no fixture", n)
		}
	}
}

func TestLookupAndNames(t *testing.T) {
	want := []string{"asaas", "github", "gitlab", "hmac", "linear", "paddle", "shopify", "slack", "standard", "stripe", "svix", "twilio", "zoom"}
	if got := Names(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range want {
		s, ok := Lookup(n)
		if !ok || s.Name() != n {
			t.Errorf("Lookup(%q) = %v, %v", n, s, ok)
		}
	}
	if _, ok := Lookup("GitHub"); ok {
		t.Error("Lookup is case-sensitive")
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup(nope) succeeded")
	}
}

func TestDefaults(t *testing.T) {
	want := map[string]struct {
		key       string
		retention time.Duration
		ack       int
	}{
		"github":   {"header:X-GitHub-Delivery", 168 * time.Hour, 202},
		"stripe":   {"json:id", 168 * time.Hour, 202},
		"shopify":  {"header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id", 72 * time.Hour, 202},
		"standard": {"header:webhook-id", 96 * time.Hour, 202},
		"svix":     {"header:svix-id|header:webhook-id", 96 * time.Hour, 202},
		"slack":    {"json:event_id", 24 * time.Hour, 202},
		"gitlab":   {"header:Idempotency-Key|header:X-Gitlab-Event-UUID", 72 * time.Hour, 202},
		"paddle":   {"json:event_id", 168 * time.Hour, 202},
		"twilio":   {"header:I-Twilio-Idempotency-Token", 24 * time.Hour, 202},
		"linear":   {"header:Linear-Delivery", 72 * time.Hour, 202},
		"zoom":     {"json:event json:event_ts", 24 * time.Hour, 202},
		"asaas":    {"json:id", 384 * time.Hour, 200},
		"hmac":     {"", 168 * time.Hour, 202},
	}
	for _, n := range Names() {
		d := mustLookup(t, n).Defaults()
		w, ok := want[n]
		if !ok {
			t.Errorf("%s: no expectation", n)
			continue
		}
		if got := strings.Join(d.Key, " "); got != w.key || d.Retention != w.retention || d.AckStatus != w.ack {
			t.Errorf("%s: Defaults = %q %v %d, want %q %v %d", n, got, d.Retention, d.AckStatus, w.key, w.retention, w.ack)
		}
		if n != "hmac" {
			if _, err := NewKeyer("src", d.Key); err != nil {
				t.Errorf("%s: default key does not parse: %v", n, err)
			}
		}
		// Defaults returns a fresh slice: a caller cannot change the table.
		if len(d.Key) > 0 {
			d.Key[0] = "changed"
			if mustLookup(t, n).Defaults().Key[0] == "changed" {
				t.Errorf("%s: Defaults shares its Key slice", n)
			}
		}
	}
}

func TestNewVerifierErrors(t *testing.T) {
	cases := []struct {
		scheme string
		opts   Options
		want   error
	}{
		{"github", Options{}, ErrBadSecret},
		{"github", Options{Secrets: secrets("a", "")}, ErrBadSecret},
		{"stripe", Options{Secrets: secrets("a"), Tolerance: -time.Second}, ErrBadConfig},
		{"standard", Options{Secrets: secrets("whsec_not base64!")}, ErrBadSecret},
		{"standard", Options{Secrets: secrets("whsec_")}, ErrBadSecret},
		{"svix", Options{Secrets: secrets(whsecA, "whsec_%%%")}, ErrBadSecret},
		{"gitlab", Options{}, ErrBadSecret},
		{"asaas", Options{Secrets: secrets("")}, ErrBadSecret},
		{"twilio", Options{}, ErrBadSecret},
		{"linear", Options{Secrets: secrets("a"), Tolerance: -1}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a")}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "bad header"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Algorithm: "md5"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Encoding: "base32"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Template: "{id}.{body}"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Template: "{timestamp}{body}"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Template: "{id}"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Template: "{body}{body}"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", Template: "{bdy}"}}, ErrBadConfig},
		{"hmac", Options{Secrets: secrets("a"), HMAC: &HMACSpec{Header: "X-Sig", IDHeader: "a b"}}, ErrBadConfig},
	}
	for _, c := range cases {
		v, err := mustLookup(t, c.scheme).NewVerifier(c.opts)
		if !errors.Is(err, c.want) {
			t.Errorf("%s %+v: %v, want %v", c.scheme, c.opts, err, c.want)
		}
		if v != nil {
			t.Errorf("%s: non-nil Verifier with an error", c.scheme)
		}
		// Errors never carry the secret.
		for _, s := range c.opts.Secrets {
			if len(s) > 8 && err != nil && strings.Contains(err.Error(), string(s)) {
				t.Errorf("%s: error %q contains a secret", c.scheme, err)
			}
		}
	}
}

// Verify errors never carry a secret or a signature.
func TestErrorsDoNotLeak(t *testing.T) {
	now := unix(testT)
	for _, f := range fixtures() {
		va := f.verifier(t, f.secretA)
		good := f.signed(t, f.body, f.secretA, now)
		sig := good.get(f.sig)
		for _, req := range []*Request{
			f.request(good, f.body+" ", now),
			f.request(good, f.body, now.Add(time.Hour)),
		} {
			err := f.verifier(t, f.secretB).Verify(req)
			if err == nil {
				err = va.Verify(req)
			}
			if err == nil {
				continue
			}
			msg := err.Error()
			for _, s := range []string{f.secretA, f.secretB, sig} {
				if len(s) > 4 && strings.Contains(msg, s) {
					t.Errorf("%s: error %q leaks %q", f.testName(), msg, s)
				}
			}
		}
	}
}

func TestSignErrors(t *testing.T) {
	now := unix(testT)
	if _, err := mustLookup(t, "twilio").Sign([]byte("a=b"), []byte("k"), now, "", nil); err == nil {
		t.Error("twilio Sign without URL succeeded")
	}
	if _, err := SignURL(mustLookup(t, "twilio"), "", []byte("a=b"), []byte("k"), now, "", nil); err == nil {
		t.Error("twilio SignURL with empty URL succeeded")
	}
	if _, err := mustLookup(t, "standard").Sign([]byte("{}"), []byte(whsecA), now, "", nil); err == nil {
		t.Error("standard Sign without id succeeded")
	}
	if _, err := mustLookup(t, "standard").Sign([]byte("{}"), []byte("whsec_!!"), now, "id", nil); !errors.Is(err, ErrBadSecret) {
		t.Errorf("standard Sign with a bad secret: %v", err)
	}
	if _, err := mustLookup(t, "hmac").Sign([]byte("{}"), []byte("k"), now, "", nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("hmac Sign without spec: %v", err)
	}
	for _, n := range Names() {
		if n == "twilio" {
			continue
		}
		spec := &HMACSpec{Header: "X-Sig"}
		if _, err := mustLookup(t, n).Sign([]byte("{}"), nil, now, "id", spec); !errors.Is(err, ErrBadSecret) {
			t.Errorf("%s: Sign with an empty secret: %v", n, err)
		}
	}
}

// Sign produces exactly the headers a real sender sends.
func TestSignHeaders(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"id":"evt_1"}`)
	cases := []struct {
		scheme string
		url    string
		names  []string
	}{
		{"github", "", []string{"X-Hub-Signature-256", "X-GitHub-Delivery"}},
		{"stripe", "", []string{"Stripe-Signature"}},
		{"shopify", "", []string{"X-Shopify-Hmac-Sha256", "X-Shopify-Event-Id"}},
		{"standard", "", []string{"webhook-id", "webhook-timestamp", "webhook-signature"}},
		{"svix", "", []string{"svix-id", "svix-timestamp", "svix-signature"}},
		{"slack", "", []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"}},
		{"gitlab", "", []string{"X-Gitlab-Token", "Idempotency-Key"}},
		{"paddle", "", []string{"Paddle-Signature"}},
		{"twilio", "https://h.example/x?bodySHA256=00", []string{"X-Twilio-Signature", "I-Twilio-Idempotency-Token"}},
		{"linear", "", []string{"Linear-Signature", "Linear-Delivery"}},
		{"zoom", "", []string{"x-zm-signature", "x-zm-request-timestamp"}},
		{"asaas", "", []string{"asaas-access-token"}},
	}
	for _, c := range cases {
		secret := []byte("secret")
		if c.scheme == "standard" || c.scheme == "svix" {
			secret = []byte(whsecA)
		}
		hs, err := SignURL(mustLookup(t, c.scheme), c.url, body, secret, now, "id-1", nil)
		if err != nil {
			t.Fatalf("%s: %v", c.scheme, err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, h.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.names) {
			t.Errorf("%s: Sign headers %v, want %v", c.scheme, got, c.names)
		}
	}
	hs, _ := mustLookup(t, "stripe").Sign(body, []byte("whsec_x"), now, "", nil)
	if v := hs[0].Value; !strings.HasPrefix(v, "t=1700000000,v1=") || len(v) != len("t=1700000000,v1=")+64 {
		t.Errorf("stripe header %q", v)
	}
	hs, _ = mustLookup(t, "paddle").Sign(body, []byte("pdl"), now, "", nil)
	if v := hs[0].Value; !strings.HasPrefix(v, "ts=1700000000;h1=") {
		t.Errorf("paddle header %q", v)
	}
	hs, _ = mustLookup(t, "standard").Sign(body, []byte(whsecA), now, "msg_1", nil)
	if h := headersOf(hs); h.get("webhook-id") != "msg_1" || h.get("webhook-timestamp") != "1700000000" ||
		!strings.HasPrefix(h.get("webhook-signature"), "v1,") {
		t.Errorf("standard headers %v", hs)
	}
}

func TestGenerateSecret(t *testing.T) {
	for _, n := range Names() {
		s, err := GenerateSecret(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		s2, _ := GenerateSecret(n)
		if s == s2 {
			t.Errorf("%s: two equal secrets", n)
		}
		spec := &HMACSpec{Header: "X-Sig"}
		// The secret works with its scheme.
		v, err := mustLookup(t, n).NewVerifier(Options{Secrets: secrets(s), HMAC: spec})
		if err != nil {
			t.Fatalf("%s: generated secret rejected: %v", n, err)
		}
		url := ""
		if n == "twilio" {
			url = "https://example.com/in/t"
		}
		hs, err := SignURL(mustLookup(t, n), url, []byte("a=b"), []byte(s), unix(testT), "id-1", spec)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if err := v.Verify(&Request{Body: []byte("a=b"), Header: headersOf(hs), URL: url, Now: unix(testT)}); err != nil && n != "linear" {
			t.Errorf("%s: round trip with a generated secret: %v", n, err)
		}
	}
	if s, _ := GenerateSecret("standard"); !strings.HasPrefix(s, "whsec_") || len(s) != len("whsec_")+44 {
		t.Errorf("standard secret %q", s)
	}
	if _, err := GenerateSecret("nope"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown scheme: %v", err)
	}
}
