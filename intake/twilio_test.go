package intake

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// twilioCtx is a request as the intake receives it: from peer, to Host
// "oncehook.internal:8080", with the given extra headers.
func twilioCtx(peer string, headers map[string]string, body []byte, sig string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("/in/tw?acct=1")
	req.Header.SetHost("oncehook.internal:8080")
	req.Header.SetContentType("application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Twilio-Signature", sig)
	req.SetBody(body)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(peer), Port: 40000}, nil)
	return &ctx
}

// Twilio signs the public URL. Behind a trusted proxy its X-Forwarded-Proto
// and X-Forwarded-Host rebuild it; from any other peer they are ignored and
// the URL is the Host header with the listener's scheme, so a client cannot
// pick the URL a captured signature is checked against.
func TestTwilioPublicURLTrustedProxies(t *testing.T) {
	const token = "twilio-auth-token"
	body := []byte("CallSid=CA1234567890ABCDE&From=%2B15551234567&To=%2B15557654321")
	s, _ := providers.Lookup("twilio")
	v, err := s.NewVerifier(providers.Options{Secrets: [][]byte{[]byte(token)}})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(url string) string {
		hs, err := providers.SignURL(s, url, body, []byte(token), time.Now(), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Name == "X-Twilio-Signature" {
				return h.Value
			}
		}
		t.Fatal("no X-Twilio-Signature")
		return ""
	}
	const (
		public = "https://hooks.example.com/in/tw?acct=1"
		direct = "http://oncehook.internal:8080/in/tw?acct=1"
	)
	fwd := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "hooks.example.com"}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name    string
		peer    string
		trusted []netip.Prefix
		headers map[string]string
		wantURL string
	}{
		{"trusted proxy", "10.1.2.3", trusted, fwd, public},
		{"trusted proxy, IPv6", "fd00::7", trusted, fwd, public},
		{"trusted proxy, list appended to: the last value", "10.1.2.3", trusted,
			map[string]string{"X-Forwarded-Proto": "http, https", "X-Forwarded-Host": "evil.example, hooks.example.com"}, public},
		{"trusted proxy, proto only", "10.1.2.3", trusted, map[string]string{"X-Forwarded-Proto": "HTTPS"},
			"https://oncehook.internal:8080/in/tw?acct=1"},
		{"trusted proxy, unusable values ignored", "10.1.2.3", trusted,
			map[string]string{"X-Forwarded-Proto": "javascript", "X-Forwarded-Host": "evil.example/x?"}, direct},
		{"untrusted peer", "203.0.113.9", trusted, fwd, direct},
		{"no trusted_proxies", "10.1.2.3", nil, fwd, direct},
		{"no forwarded headers", "10.1.2.3", trusted, nil, direct},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forged := public
			if c.wantURL == public {
				forged = direct
			}
			for _, try := range []struct {
				url  string
				want bool
			}{{c.wantURL, true}, {forged, false}} {
				ctx := twilioCtx(c.peer, c.headers, body, sign(try.url))
				url := publicURL(ctx, c.trusted)
				if url != c.wantURL {
					t.Fatalf("publicURL = %q, want %q", url, c.wantURL)
				}
				err := v.Verify(&providers.Request{Body: body, Header: &ctx.Request.Header, URL: url, Now: time.Now()})
				switch {
				case try.want && err != nil:
					t.Errorf("signed over %s: %v, want verified", try.url, err)
				case !try.want && !errors.Is(err, providers.ErrBadSignature):
					t.Errorf("signed over %s: %v, want ErrBadSignature", try.url, err)
				}
			}
		})
	}
}
