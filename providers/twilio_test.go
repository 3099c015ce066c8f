package providers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// TestTwilioReplayBody: what the replay guard hashes for twilio is the signed
// content, not the raw bytes. Every request that verifies under a captured
// signature (parameters re-ordered or re-encoded, the port toggled, bytes
// moved between the query and the parameters) writes the same bytes; a
// different parameter value writes others. A source takes form bodies or
// JSON ones: a JSON delivery's URL recast as a form is refused.
func TestTwilioReplayBody(t *testing.T) {
	const token = "12345"
	now := unix(testT)
	form := mustVerifier(t, "twilio", Options{Secrets: secrets(token)})
	json := mustVerifier(t, "twilio", Options{Secrets: secrets(token), TwilioJSON: true})
	replay := func(v Verifier, url, body string) []byte {
		t.Helper()
		rb, ok := v.(ReplayBodier)
		if !ok {
			t.Fatal("the twilio verifier is not a ReplayBodier")
		}
		h := sha256.New()
		h.Write([]byte("left over")) // WriteReplayBody resets h
		if err := rb.WriteReplayBody(h, &Request{Body: []byte(body), URL: url, Now: now}); err != nil {
			t.Fatalf("WriteReplayBody(%q, %q): %v", url, body, err)
		}
		return h.Sum(nil)
	}

	const (
		hook  = "https://example.com/hook?x=1"
		body  = "MessageSid=SM1&Body=hello+world&From=%2B15551234567"
		drawn = hook + "Bodyhello world" + "From+15551234567" + "MessageSidSM1" // what Twilio signs
	)
	sig := twilioSig(token, drawn)
	want := sha256.Sum256([]byte(drawn)) // the signed string itself, the URL portless already
	if got := replay(form, hook, body); !bytes.Equal(got, want[:]) {
		t.Fatalf("replay body of the original: %x, want sha256(URL + sorted name value)", got)
	}

	jbody := `{"CallSid":"CA1","Caller":"+12349013030"}`
	jsum := sha256.Sum256([]byte(jbody))
	jurl := "https://example.com/myapp?bodySHA256=" + hex.EncodeToString(jsum[:])
	jsig := twilioSig(token, jurl)
	jwant := sha256.Sum256([]byte(jurl))

	cases := []struct {
		name      string
		v         Verifier // nil: form
		url, body string
		sig       string
		want      []byte // nil: any other value than the original's
		refused   bool
	}{
		{"as sent", nil, hook, body, sig, want[:], false},
		{"re-ordered", nil, hook, "From=%2B15551234567&MessageSid=SM1&Body=hello+world", sig, want[:], false},
		{"space as %20", nil, hook, "MessageSid=SM1&Body=hello%20world&From=%2B15551234567", sig, want[:], false},
		{"%2b for %2B", nil, hook, "MessageSid=SM1&Body=hello+world&From=%2b15551234567", sig, want[:], false},
		{"name percent-encoded", nil, hook, "Message%53id=SM1&Body=hello+world&From=%2B15551234567", sig, want[:], false},
		{"empty fields", nil, hook, "&MessageSid=SM1&&Body=hello+world&From=%2B15551234567&", sig, want[:], false},
		{"received with :443", nil, "https://example.com:443/hook?x=1", body, sig, want[:], false},
		{"bytes moved from the parameters into the query", nil, hook + "B",
			"o=dyhello+worldFrom%2B15551234567MessageSidSM1", sig, want[:], false},
		{"another value", nil, hook, "MessageSid=SM2&Body=hello+world&From=%2B15551234567",
			twilioSig(token, hook+"Bodyhello worldFrom+15551234567MessageSidSM2"), nil, false},
		{"another status", nil, hook, body + "&SmsStatus=delivered",
			twilioSig(token, hook+"Bodyhello worldFrom+15551234567MessageSidSM1SmsStatusdelivered"), nil, false},
		{"JSON", json, jurl, jbody, jsig, jwant[:], false},
		{"JSON, received with :443", json, "https://example.com:443/myapp?bodySHA256=" + hex.EncodeToString(jsum[:]), jbody, jsig, jwant[:], false},
		{"JSON URL recast as a form", json, "https://example.com/myapp?",
			"b=odySHA256%3D" + hex.EncodeToString(jsum[:]), jsig, nil, true},
		{"JSON delivery at a form source", form, jurl, jbody, jsig, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.v
			if v == nil {
				v = form
			}
			err := v.Verify(&Request{Body: []byte(c.body), Header: hdrs{{"X-Twilio-Signature", []byte(c.sig)}}, URL: c.url, Now: now})
			if c.refused {
				wantErr(t, "verify", err, ErrBadSignature)
				return
			}
			wantErr(t, "verify", err, nil)
			got := replay(v, c.url, c.body)
			switch {
			case c.want != nil && !bytes.Equal(got, c.want):
				t.Errorf("replay body %x, want %x (the original's)", got, c.want)
			case c.want == nil && (bytes.Equal(got, want[:]) || bytes.Equal(got, jwant[:])):
				t.Errorf("a different callback has the original's replay body")
			}
		})
	}
}
