package providers

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Scheme-specific behaviour beyond the shared matrix of TestSchemes.

func TestSlackHandshake(t *testing.T) {
	now := unix(testT)
	s := mustLookup(t, "slack")
	v := mustVerifier(t, "slack", Options{Secrets: secrets("signing")})
	hs, ok := v.(Handshaker)
	if !ok {
		t.Fatal("slack verifier is not a Handshaker")
	}
	cases := []struct {
		body      string
		ok        bool
		challenge string
	}{
		{`{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`,
			true, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"},
		{`{"type":"url_verification","challenge":"a\"b<c>"}`, true, `a"b<c>`},
		{`{"type":"event_callback","event_id":"Ev1","challenge":"x"}`, false, ""},
		// A handshake without its challenge is answered 400 and, like
		// every handshake, not stored as an event.
		{`{"type":"url_verification"}`, true, ""},
		{`{"type":"url_verification","event_id":"Ev1"}`, true, ""},
		{`token=x&challenge=y&type=url_verification`, false, ""},
		{``, false, ""},
	}
	for _, c := range cases {
		h, _ := s.Sign([]byte(c.body), []byte("signing"), now, "", nil)
		r := &Request{Body: []byte(c.body), Header: headersOf(h), Now: now}
		if err := v.Verify(r); err != nil {
			t.Fatalf("%s: Verify: %v", c.body, err)
		}
		status, out, ctype, ok := hs.Handshake(r)
		if ok != c.ok {
			t.Errorf("%s: ok = %v", c.body, ok)
			continue
		}
		if !ok {
			continue
		}
		if c.challenge == "" {
			var got struct{ Status, Error string }
			if status != 400 || ctype != "application/json" || json.Unmarshal(out, &got) != nil || got.Error != "url_verification without a challenge: nothing stored" {
				t.Errorf("%s: %d %q %s; want 400 naming the missing challenge", c.body, status, ctype, out)
			}
			continue
		}
		var got struct{ Challenge string }
		if status != 200 || ctype != "application/json" || json.Unmarshal(out, &got) != nil || got.Challenge != c.challenge {
			t.Errorf("%s: %d %q %s", c.body, status, ctype, out)
		}
	}
}

func TestZoomHandshake(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
	expect := func(secret string) string {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte("qgg8vlvZRS6UYooatFL8Aw"))
		return hex.EncodeToString(m.Sum(nil))
	}
	// During rotation the answer uses the secret that signed the request.
	for _, signer := range []string{"old-token", "new-token"} {
		v := mustVerifier(t, "zoom", Options{Secrets: secrets("new-token", "old-token")})
		h, _ := mustLookup(t, "zoom").Sign(body, []byte(signer), now, "", nil)
		r := &Request{Body: body, Header: headersOf(h), Now: now}
		if err := v.Verify(r); err != nil {
			t.Fatal(err)
		}
		status, out, ctype, ok := v.(Handshaker).Handshake(r)
		var got struct{ PlainToken, EncryptedToken string }
		if !ok || status != 200 || ctype != "application/json" || json.Unmarshal(out, &got) != nil {
			t.Fatalf("%s: %v %d %q %s", signer, ok, status, ctype, out)
		}
		if got.PlainToken != "qgg8vlvZRS6UYooatFL8Aw" || got.EncryptedToken != expect(signer) {
			t.Errorf("%s: %s", signer, out)
		}
	}
	// Not a validation event, or an unverifiable one: no handshake.
	v := mustVerifier(t, "zoom", Options{Secrets: secrets("new-token")})
	other := []byte(`{"event":"meeting.started","event_ts":1,"payload":{}}`)
	h, _ := mustLookup(t, "zoom").Sign(other, []byte("new-token"), now, "", nil)
	if _, _, _, ok := v.(Handshaker).Handshake(&Request{Body: other, Header: headersOf(h), Now: now}); ok {
		t.Error("handshake on a normal event")
	}
	// A validation event without its token: 400, not stored.
	empty := []byte(`{"event":"endpoint.url_validation","event_ts":1,"payload":{}}`)
	h, _ = mustLookup(t, "zoom").Sign(empty, []byte("new-token"), now, "", nil)
	if status, out, _, ok := v.(Handshaker).Handshake(&Request{Body: empty, Header: headersOf(h), Now: now}); !ok || status != 400 || !strings.Contains(string(out), "without a payload.plainToken") {
		t.Errorf("validation event without a plainToken: %v %d %s; want 400", ok, status, out)
	}
	h, _ = mustLookup(t, "zoom").Sign(body, []byte("intruder"), now, "", nil)
	if _, _, _, ok := v.(Handshaker).Handshake(&Request{Body: body, Header: headersOf(h), Now: now}); ok {
		t.Error("handshake on a request signed with an unknown secret")
	}
}

func TestOnlySlackAndZoomHandshake(t *testing.T) {
	for _, n := range Names() {
		v := mustVerifier(t, n, Options{Secrets: secrets(whsecA), HMAC: &HMACSpec{Header: "X-Sig"}})
		_, ok := v.(Handshaker)
		if ok != (n == "slack" || n == "zoom") {
			t.Errorf("%s: Handshaker = %v", n, ok)
		}
	}
}

func TestLinearBodyTimestamp(t *testing.T) {
	now := unix(testT)
	secret := []byte("lin")
	sign := func(body string) hdrs {
		h, err := mustLookup(t, "linear").Sign([]byte(body), secret, now, "d-1", nil)
		if err != nil {
			t.Fatal(err)
		}
		return headersOf(h)
	}
	v := mustVerifier(t, "linear", Options{Secrets: [][]byte{secret}})
	cases := []struct {
		body string
		now  time.Time
		want error
	}{
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, now.UnixMilli()), now, nil},
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, now.UnixMilli()), now.Add(59 * time.Second), nil},
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, now.UnixMilli()), now.Add(61 * time.Second), ErrTimestamp},
		{fmt.Sprintf(`{"action":"create","webhookTimestamp":%d}`, now.UnixMilli()), now.Add(-61 * time.Second), ErrTimestamp},
		{`{"action":"create"}`, now, ErrTimestamp},
		{`{"action":"create","webhookTimestamp":"soon"}`, now, ErrTimestamp},
		{`{"action":"create","webhookTimestamp":-5}`, now, ErrTimestamp},
		{`not json`, now, ErrTimestamp},
	}
	for _, c := range cases {
		err := v.Verify(&Request{Body: []byte(c.body), Header: sign(c.body), Now: c.now})
		wantErr(t, c.body, err, c.want)
	}
	// A source tolerance replaces the 60 s default.
	wide := mustVerifier(t, "linear", Options{Secrets: [][]byte{secret}, Tolerance: 5 * time.Minute})
	body := fmt.Sprintf(`{"webhookTimestamp":%d}`, now.UnixMilli())
	wantErr(t, "5m tolerance", wide.Verify(&Request{Body: []byte(body), Header: sign(body), Now: now.Add(4 * time.Minute)}), nil)
	// A bad MAC is reported before the timestamp is read.
	bad := sign(body).with("Linear-Signature", hex64)
	wantErr(t, "bad MAC, stale time", v.Verify(&Request{Body: []byte(body), Header: bad, Now: now.Add(time.Hour)}), ErrBadSignature)
}

func twilioSig(token, s string) string {
	m := hmac.New(sha1.New, []byte(token))
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func TestTwilio(t *testing.T) {
	now := unix(testT)
	v := mustVerifier(t, "twilio", Options{Secrets: secrets("12345")})
	verify := func(url, body, sig string) error {
		return v.Verify(&Request{Body: []byte(body), Header: hdrs{{"X-Twilio-Signature", []byte(sig)}}, URL: url, Now: now})
	}
	// Sorting by name, then value for repeated names; decoding before signing.
	body := "b=2&a=%2Fx&a=1&c=&d+e=f+g"
	signed := "https://example.com/hook" + "a/x" + "a1" + "b2" + "c" + "d ef g" // "/" sorts before "1"
	wantErr(t, "sorted params", verify("https://example.com/hook", body, twilioSig("12345", signed)), nil)

	// The URL is tried with its port toggled, like Twilio's libraries.
	wantErr(t, "signed with :443, received without",
		verify("https://example.com/hook", "a=1", twilioSig("12345", "https://example.com:443/hooka1")), nil)
	wantErr(t, "signed without port, received with :443",
		verify("https://example.com:443/hook", "a=1", twilioSig("12345", "https://example.com/hooka1")), nil)
	wantErr(t, "http and :80",
		verify("http://example.com/hook?x=1", "a=1", twilioSig("12345", "http://example.com:80/hook?x=1a1")), nil)
	wantErr(t, "custom port kept or dropped",
		verify("https://example.com:8443/hook", "a=1", twilioSig("12345", "https://example.com/hooka1")), nil)
	wantErr(t, "another host",
		verify("https://example.com/hook", "a=1", twilioSig("12345", "https://example.org/hooka1")), ErrBadSignature)
	wantErr(t, "another path",
		verify("https://example.com/hook", "a=1", twilioSig("12345", "https://example.com/hoo/a1")), ErrBadSignature)

	// JSON bodies (a source with twilio_body = "json"): bodySHA256 in the
	// URL, the URL alone signed, the body checked.
	vj := mustVerifier(t, "twilio", Options{Secrets: secrets("12345"), TwilioJSON: true})
	verifyJSON := func(url, body, sig string) error {
		return vj.Verify(&Request{Body: []byte(body), Header: hdrs{{"X-Twilio-Signature", []byte(sig)}}, URL: url, Now: now})
	}
	jbody := `{"CallSid":"CA1234567890ABCDE","Caller":"+12349013030"}`
	sum := sha256.Sum256([]byte(jbody))
	jurl := "https://example.com/myapp?bodySHA256=" + hex.EncodeToString(sum[:])
	jsig := twilioSig("12345", jurl)
	wantErr(t, "JSON body", verifyJSON(jurl, jbody, jsig), nil)
	wantErr(t, "JSON body changed", verifyJSON(jurl, jbody+" ", jsig), ErrBadSignature)
	wantErr(t, "JSON body, bad bodySHA256", verifyJSON(jurl[:len(jurl)-1]+"x", jbody, twilioSig("12345", jurl[:len(jurl)-1]+"x")), ErrBadSignature)
	hs, err := SignURL(mustLookup(t, "twilio"), jurl, []byte(jbody), []byte("12345"), now, "", nil)
	if err != nil || headersOf(hs).get("X-Twilio-Signature") != jsig {
		t.Errorf("SignURL for a JSON body: %v %v", hs, err)
	}
	// Twilio's own ruby snippet: bodySHA256 given, wrong body.
	wantErr(t, "JSON body with another body's hash", verifyJSON(jurl, `{"x":1}`, jsig), ErrBadSignature)
	// One kind of body a source: a form source refuses a JSON delivery,
	// a JSON source a form one.
	wantErr(t, "JSON body at a form source", verify(jurl, jbody, jsig), ErrBadSignature)
	wantErr(t, "form body at a JSON source", verifyJSON("https://example.com/hook", "a=1", twilioSig("12345", "https://example.com/hooka1")), ErrBadSignature)

	// A captured form delivery whose text holds "&bodySHA256=<hash of a
	// body of the replayer's choosing>&", replayed with its whole signed
	// string as the URL: a form source reads the URL's bodySHA256 as
	// nothing but query (the forged body is no form of that string).
	forged := `{"event":"refund","amount":1000000}`
	fsum := sha256.Sum256([]byte(forged))
	sms := "https://example.com/hook?x=1"
	text := "&bodySHA256=" + hex.EncodeToString(fsum[:]) + "&y="
	captured := sms + "AccountSidAC1" + "Body" + text + "FromX"
	capSig := twilioSig("12345", captured)
	wantErr(t, "the captured form delivery", verify(sms, "AccountSid=AC1&Body="+url.QueryEscape(text)+"&From=X", capSig), nil)
	wantErr(t, "its signed string replayed as a JSON delivery's URL", verify(captured, forged, capSig), ErrBadSignature)

	// A body that is not form data, without bodySHA256, cannot be covered.
	wantErr(t, "bad escape", verify("https://example.com/hook", "a=%zz", twilioSig("12345", "https://example.com/hook")), ErrBadSignature)
	wantErr(t, "no URL", verify("", "a=1", twilioSig("12345", "a1")), ErrBadSignature)
	if _, err := SignURL(mustLookup(t, "twilio"), "https://x/y", []byte("a=%"), []byte("k"), now, "", nil); err == nil {
		t.Error("SignURL accepted a bad form body")
	}
	many := strings.Repeat("a=1&", maxFormPairs+1)
	wantErr(t, "too many params", verify("https://example.com/hook", many, twilioSig("12345", "x")), ErrBadSignature)
}

func TestToggledPort(t *testing.T) {
	cases := map[string]string{
		"https://example.com/x":          "https://example.com:443/x",
		"https://example.com":            "https://example.com:443",
		"https://example.com?q=1":        "https://example.com:443?q=1",
		"HTTPS://example.com/x":          "HTTPS://example.com:443/x",
		"http://example.com/x":           "http://example.com:80/x",
		"https://example.com:443/x":      "https://example.com/x",
		"https://example.com:8443/x?y=1": "https://example.com/x?y=1",
		"https://u:p@example.com/x":      "https://u:p@example.com:443/x",
		"https://u:p@example.com:99/x":   "https://u:p@example.com/x",
		"https://[::1]/x":                "https://[::1]:443/x",
		"https://[::1]:8443/x":           "https://[::1]/x",
		"ftp://example.com/x":            "",
		"example.com/x":                  "",
		"https://example.com:port/x":     "",
	}
	for in, want := range cases {
		pre, mid, post, ok := toggledPort([]byte(in))
		got := ""
		if ok {
			got = string(pre) + string(mid) + string(post)
		}
		if got != want {
			t.Errorf("toggledPort(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStripeDetails(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"id":"evt_1"}`)
	v := mustVerifier(t, "stripe", Options{Secrets: secrets("whsec_k")})
	hs, _ := mustLookup(t, "stripe").Sign(body, []byte("whsec_k"), now, "", nil)
	good := headersOf(hs).get("Stripe-Signature")
	sig := after(good, "v1=")
	for _, h := range []string{
		"t=1700000000,v1=" + sig + ",v0=" + hex64, // v0 ignored
		"v1=" + sig + ",t=1700000000",             // order free
		"t=1700000000,v2=" + hex64 + ",v1=" + sig, // unknown scheme ignored
		"t=1700000000,v1=" + strings.ToUpper(sig), // hex case
		"t=1700000000,v1=,v1=" + sig,              // an undecodable v1 skipped
		"t=1700000000,v1=abc,v1=" + sig + ",v1=zz" + hex64[2:],
	} {
		wantErr(t, h, v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: now}), nil)
	}
	// What stripe-go refuses is refused (a handler that checks the header
	// again must not fail an event acknowledged here): spaces, empty
	// entries, a second '=' in an entry.
	for _, h := range []string{
		"t=1700000000, v1=" + sig,
		"t=1700000000,\tv1=" + sig,
		"t=1700000000,v1=" + sig + " ",
		"t=1700000000,,v1=" + sig,
		"t=1700000000,v1=" + sig + ",",
		"t=1700000000,v1=x=y,v1=" + sig,
		"t==1700000000,v1=" + sig,
	} {
		wantErr(t, h, v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: now}), ErrMalformedHeader)
	}
	// When no v1 decodes, the answer says why.
	for _, h := range []string{"t=1700000000,v1=abc", "t=1700000000,v1=,v1=zz" + hex64[2:]} {
		wantErr(t, h, v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: now}), ErrMalformedHeader)
	}
	// The key is the secret string as is: a base64-decoded key does not verify.
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("1700000000."))
	m.Write(body)
	h := "t=1700000000,v1=" + hex.EncodeToString(m.Sum(nil))
	wantErr(t, "key without prefix", v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: now}), ErrBadSignature)
	// The timestamp is signed: changing it breaks the signature.
	h = strings.Replace(good, "t=1700000000", "t=1700000001", 1)
	wantErr(t, "timestamp changed", v.Verify(&Request{Body: body, Header: hdrs{{"Stripe-Signature", []byte(h)}}, Now: now}), ErrBadSignature)
}

func TestStandardDetails(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"test": 2432232314}`)
	v := mustVerifier(t, "standard", Options{Secrets: secrets(whsecA)})
	hs, _ := mustLookup(t, "standard").Sign(body, []byte(whsecA), now, "msg_1", nil)
	h := headersOf(hs)
	good := h.get("webhook-signature")
	for _, s := range []string{
		"v1a,bm90IGEgc2lnbmF0dXJl " + good, // ed25519 entry skipped
		good + "  v2,xyz",                  // double space, unknown version
		" " + good + " ",
	} {
		wantErr(t, s, v.Verify(&Request{Body: body, Header: h.with("webhook-signature", s), Now: now}), nil)
	}
	// The id is signed.
	wantErr(t, "id changed", v.Verify(&Request{Body: body, Header: h.with("webhook-id", "msg_2"), Now: now}), ErrBadSignature)
	// A secret without the whsec_ prefix is the same key.
	bare := mustVerifier(t, "standard", Options{Secrets: secrets(strings.TrimPrefix(whsecA, "whsec_"))})
	wantErr(t, "secret without prefix", bare.Verify(&Request{Body: body, Header: h, Now: now}), nil)
	// standard does not read svix-* headers.
	sv, _ := mustLookup(t, "svix").Sign(body, []byte(whsecA), now, "msg_1", nil)
	wantErr(t, "svix headers to standard", v.Verify(&Request{Body: body, Header: headersOf(sv), Now: now}), ErrMissingHeader)
	// Exactly MaxSignatures entries are fine.
	list := repeatJoin("v1a,eA==", " ", MaxSignatures-1) + " " + good
	wantErr(t, "MaxSignatures entries", v.Verify(&Request{Body: body, Header: h.with("webhook-signature", list), Now: now}), nil)
}

func TestGitHubDetails(t *testing.T) {
	now := unix(testT)
	body := []byte("Hello, World!")
	v := mustVerifier(t, "github", Options{Secrets: secrets("It's a Secret to Everybody")})
	// The legacy SHA-1 header alone is not accepted (downgrade).
	m := hmac.New(sha1.New, []byte("It's a Secret to Everybody"))
	m.Write(body)
	legacy := hdrs{{"X-Hub-Signature", []byte("sha1=" + hex.EncodeToString(m.Sum(nil)))}}
	wantErr(t, "legacy header only", v.Verify(&Request{Body: body, Header: legacy, Now: now}), ErrMissingHeader)
	up := hdrs{{"X-Hub-Signature-256", []byte("sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17")}}
	wantErr(t, "upper-case hex", v.Verify(&Request{Body: body, Header: up, Now: now}), nil)
}

func TestGenericHMACDetails(t *testing.T) {
	now := unix(testT)
	body := []byte(`{"a":1}`)
	spec := &HMACSpec{Header: "X-Webhook-Signature", Encoding: "base64",
		TimestampHeader: "X-Webhook-Signature-Timestamp", Template: "{timestamp}.{body}"}
	v := mustVerifier(t, "hmac", Options{Secrets: secrets("zd"), HMAC: spec})
	sign := func(ts string) hdrs {
		m := hmac.New(sha256.New, []byte("zd"))
		m.Write([]byte(ts + "."))
		m.Write(body)
		return hdrs{
			{"X-Webhook-Signature", []byte(base64.StdEncoding.EncodeToString(m.Sum(nil)))},
			{"X-Webhook-Signature-Timestamp", []byte(ts)},
		}
	}
	for _, ts := range []string{"1700000000", "1700000000123", "2023-11-14T22:13:20Z"} {
		wantErr(t, "timestamp "+ts, v.Verify(&Request{Body: body, Header: sign(ts), Now: now}), nil)
	}
	wantErr(t, "old RFC 3339", v.Verify(&Request{Body: body, Header: sign("2023-11-14T20:13:20Z"), Now: now}), ErrTimestamp)
	// Literal text in the template is signed too.
	spec2 := &HMACSpec{Header: "X-Sig", IDHeader: "X-Id", Template: "v1:{id}:{body}"}
	v2 := mustVerifier(t, "hmac", Options{Secrets: secrets("k"), HMAC: spec2})
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("v1:abc:"))
	m.Write(body)
	h := hdrs{{"X-Sig", []byte(hex.EncodeToString(m.Sum(nil)))}, {"X-Id", []byte("abc")}}
	wantErr(t, "template with literals", v2.Verify(&Request{Body: body, Header: h, Now: now}), nil)
	wantErr(t, "template, id changed", v2.Verify(&Request{Body: body, Header: h.with("X-Id", "abd"), Now: now}), ErrBadSignature)
	hs, err := mustLookup(t, "hmac").Sign(body, []byte("k"), now, "abc", spec2)
	if err != nil || headersOf(hs).get("X-Sig") != h.get("X-Sig") || headersOf(hs).get("X-Id") != "abc" {
		t.Errorf("Sign: %v %v", hs, err)
	}
	if _, err := mustLookup(t, "hmac").Sign(body, []byte("k"), now, "", spec2); !errors.Is(err, ErrBadConfig) {
		t.Errorf("Sign without the id the template needs: %v", err)
	}
}

func TestTokenSchemes(t *testing.T) {
	for _, c := range []struct{ scheme, header string }{{"gitlab", "X-Gitlab-Token"}, {"asaas", "asaas-access-token"}} {
		v := mustVerifier(t, c.scheme, Options{Secrets: secrets("tok-1", "tok-2")})
		for tok, want := range map[string]error{
			"tok-1": nil, "tok-2": nil, "tok-3": ErrBadSignature, "tok-": ErrBadSignature,
			"tok-1 ": ErrBadSignature, "TOK-1": ErrBadSignature, "tok-12": ErrBadSignature,
		} {
			err := v.Verify(&Request{Header: hdrs{{c.header, []byte(tok)}}})
			wantErr(t, c.scheme+" "+tok, err, want)
		}
	}
}

// Verifiers are shared by the intake's goroutines: run each with good and bad
// deliveries at once (meaningful under -race), results unchanged.
func TestConcurrentVerify(t *testing.T) {
	cases := verifyCases(t)
	done := make(chan error)
	const workers = 8
	for w := 0; w < workers; w++ {
		go func() {
			var err error
			for i := 0; i < 50 && err == nil; i++ {
				for _, c := range cases {
					if e := c.v.Verify(c.r); e != nil {
						err = fmt.Errorf("%s: %v", c.name, e)
						break
					}
					bad := *c.r
					bad.Body = append([]byte("x"), c.r.Body...)
					if c.v.Verify(&bad) == nil && c.name != "gitlab" && c.name != "asaas" {
						err = fmt.Errorf("%s: changed body verified", c.name)
						break
					}
				}
			}
			done <- err
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestSignaturesAreCanonical: a base64 signature whose unused last bits
// are set decodes to the same bytes, and the providers' libraries refuse
// it (they compare the encoded text). Refused here too: accepted, a
// delivery replayed in that spelling would reach a handler that checks
// the signature header again with them, and fail there for good. The
// same for a timestamp with a leading zero (the libraries sign the number).
func TestSignaturesAreCanonical(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	now := unix(testT)
	body := []byte(`{"id":"evt_1"}`)
	for _, tc := range []struct{ provider, secret, header, prefix string }{
		{"standard", whsecA, "webhook-signature", "v1,"},
		{"svix", whsecA, "svix-signature", "v1,"},
		{"shopify", "shpss_k", "X-Shopify-Hmac-Sha256", ""},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			v := mustVerifier(t, tc.provider, Options{Secrets: secrets(tc.secret)})
			hs, err := mustLookup(t, tc.provider).Sign(body, []byte(tc.secret), now, "msg_1", nil)
			if err != nil {
				t.Fatal(err)
			}
			h := headersOf(hs)
			good := h.get(tc.header)
			wantErr(t, "as signed", v.Verify(&Request{Body: body, Header: h, Now: now}), nil)
			sig := strings.TrimPrefix(good, tc.prefix)
			if len(sig) != 44 || sig[43] != '=' {
				t.Fatalf("signature %q: want 44 characters of base64", sig)
			}
			c := strings.IndexByte(alphabet, sig[42])
			odd := tc.prefix + sig[:42] + string(alphabet[c^1]) + "="
			if err := v.Verify(&Request{Body: body, Header: h.with(tc.header, odd), Now: now}); err == nil {
				t.Errorf("%s %q (unused bits set) verified", tc.header, odd)
			}
		})
	}
	for _, ts := range []string{"01700000000", "00", "0"} {
		if n, ok := parseUnix([]byte(ts)); ok && ts != "0" {
			t.Errorf("parseUnix(%q) = %d: a leading zero passed", ts, n)
		}
	}
	if n, ok := parseUnix([]byte("0")); !ok || n != 0 {
		t.Errorf("parseUnix(\"0\") = %d, %v", n, ok)
	}
	// Where the MAC covers the text as sent (Slack's v0, the templates),
	// a leading zero is that text: Slack's own library takes it.
	if n, ok := parseUnixText([]byte("01700000000")); !ok || n != 1700000000 {
		t.Errorf("parseUnixText(\"01700000000\") = %d, %v", n, ok)
	}
}
