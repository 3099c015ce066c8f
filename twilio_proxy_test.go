package main

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"oncehook/providers"
)

// trusted_proxies reaches the intake: from 127.0.0.1, a source trusting it
// rebuilds the URL from the forwarded headers, a source trusting another
// network ignores them.
func TestIntakeTwilioTrustedProxies(t *testing.T) {
	h := newHandler(t)
	tn := startNodeWithSources(t, "", h.url, `
[[source]]
name = "tw-trusted"
provider = "twilio"
secrets = ["twilio-auth-token"]
forward = "%[1]s/tw"
trusted_proxies = ["127.0.0.1"]

[[source]]
name = "tw-untrusted"
provider = "twilio"
secrets = ["twilio-auth-token"]
forward = "%[1]s/tw"
trusted_proxies = ["10.0.0.0/8"]
`)
	body := []byte("CallSid=CA1&From=%2B15551234567")
	s, _ := providers.Lookup("twilio")
	post := func(source, signedURL, id string) int {
		hs, err := providers.SignURL(s, signedURL, body, []byte("twilio-auth-token"), time.Now(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, tn.intake+"/in/"+source, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("X-Forwarded-Host", "hooks.example.com")
		req.Header.Set("I-Twilio-Idempotency-Token", id)
		for _, h := range hs {
			req.Header.Set(h.Name, h.Value)
		}
		return tn.do(req).Status
	}
	direct := tn.intake // http://127.0.0.1:port, the Host header the client sends
	for _, c := range []struct {
		source, url string
		want        int
	}{
		{"tw-trusted", "https://hooks.example.com/in/tw-trusted", http.StatusAccepted},
		{"tw-trusted", direct + "/in/tw-trusted", http.StatusUnauthorized},
		{"tw-untrusted", direct + "/in/tw-untrusted", http.StatusAccepted},
		{"tw-untrusted", "https://hooks.example.com/in/tw-untrusted", http.StatusUnauthorized},
	} {
		if got := post(c.source, c.url, "tok-"+c.url); got != c.want {
			t.Errorf("%s signed over %s: %d, want %d", c.source, c.url, got, c.want)
		}
	}
}
