package intake

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// twilioSignature is the X-Twilio-Signature Twilio sends for body posted
// to url, signed with token.
func twilioSignature(t *testing.T, url, body, token string) string {
	t.Helper()
	s, _ := providers.Lookup("twilio")
	hs, err := providers.SignURL(s, url, []byte(body), []byte(token), time.Now(), "", nil)
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
				ctx := twilioCtx(c.peer, c.headers, body, twilioSignature(t, try.url, string(body), token))
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

// TestTwilioReplayGuardSignedContent: Twilio signs the URL and the decoded,
// sorted form parameters, not the raw bytes, so the replay guard hashes that
// signed content. A captured callback re-ordered or re-encoded and sent
// under a new I-Twilio-Idempotency-Token verifies with the captured
// signature, and is answered 200 duplicate naming the original key, stored
// nowhere; a callback with another parameter value is a new event. The
// body:sha256 key SCHEMES.md offers as a fallback is covered the same way
// by the guard.
func TestTwilioReplayGuardSignedContent(t *testing.T) {
	const token = "twilio-auth-token"
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "tw.secret"), token+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "tw"
provider = "twilio"
secret_files = ["tw.secret"]
forward = "http://127.0.0.1:1/tw"

[[source]]
name = "shatw"
provider = "twilio"
secret_files = ["tw.secret"]
forward = "http://127.0.0.1:1/shatw"
key = ["body:sha256"]
`)
	const original = "MessageSid=SM1&Body=hello+world&From=%2B15551234567"
	// send posts body to source as Twilio would have signed it: over the
	// portless public URL (the Host header carries ":8080": the verifier
	// also tries the URL with its port toggled). signedAs, when given, is the
	// body the signature was made for (a captured signature on another body).
	send := func(in *Server, source, host, id, body, signedAs string) answer {
		t.Helper()
		if signedAs == "" {
			signedAs = body
		}
		sig := twilioSignature(t, "http://oncehook.internal/in/"+source+"?acct=1", signedAs, token)
		ctx := twilioCtx("127.0.0.1", map[string]string{"I-Twilio-Idempotency-Token": id}, []byte(body), sig)
		ctx.Request.SetRequestURI("/in/" + source + "?acct=1")
		if host != "" {
			ctx.Request.Header.SetHost(host)
		}
		in.handle(ctx)
		return answer{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body())}
	}
	cases := []struct {
		name   string
		source string
		host   string // "": oncehook.internal:8080
		body   string
		new    bool // a new event: 202; else 200 duplicate of the original
	}{
		{"the same body", "tw", "", original, false},
		{"re-ordered", "tw", "", "From=%2B15551234567&MessageSid=SM1&Body=hello+world", false},
		{"space as %20", "tw", "", "MessageSid=SM1&Body=hello%20world&From=%2B15551234567", false},
		{"%2b for %2B", "tw", "", "MessageSid=SM1&Body=hello+world&From=%2b15551234567", false},
		{"re-ordered and re-encoded", "tw", "", "Body=hello%20world&From=%2b15551234567&MessageSid=SM1", false},
		{"empty fields", "tw", "", "&MessageSid=SM1&&Body=hello+world&From=%2B15551234567&", false},
		{"Host without the port", "tw", "oncehook.internal", "Body=hello+world&MessageSid=SM1&From=%2B15551234567", false},
		{"another value", "tw", "", "MessageSid=SM2&Body=hello+world&From=%2B15551234567", true},
		{"another status", "tw", "", original + "&SmsStatus=delivered", true},
		{"body:sha256 key, re-ordered", "shatw", "", "From=%2B15551234567&MessageSid=SM1&Body=hello+world", false},
		{"body:sha256 key, re-encoded", "shatw", "", "MessageSid=SM1&Body=hello%20world&From=%2b15551234567", false},
		{"body:sha256 key, another value", "shatw", "", "MessageSid=SM2&Body=hello+world&From=%2B15551234567", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := newMemStore(t)
			in := New(Options{Store: store, Sources: set})
			first := send(in, c.source, "", "tok1", original, "")
			if first.status != 202 {
				t.Fatalf("original: %d %s", first.status, first.body)
			}
			origKey := c.source + ":tok1"
			if c.source == "shatw" {
				// The key is the raw body's hash: read it from the answer.
				origKey = strings.TrimSuffix(strings.TrimPrefix(first.body, `{"status":"accepted","key":"`), "\"}\n")
			}
			if _, ok, _ := store.Lookup(origKey); !ok {
				t.Fatalf("original not stored under %q: %s", origKey, first.body)
			}
			signedAs := ""
			if !c.new {
				signedAs = original // the captured signature verifies it
			}
			a := send(in, c.source, c.host, "tok10", c.body, signedAs)
			newKey := c.source + ":tok10"
			if c.source == "shatw" {
				newKey = strings.TrimSuffix(strings.TrimPrefix(a.body, `{"status":"accepted","key":"`), "\"}\n")
			}
			if c.new {
				if a.status != 202 || !strings.HasPrefix(a.body, `{"status":"accepted"`) || newKey == origKey {
					t.Fatalf("another callback: %d %s, want 202 accepted as a new event", a.status, a.body)
				}
				if _, ok, _ := store.Lookup(newKey); !ok {
					t.Fatalf("another callback not stored under %q", newKey)
				}
				return
			}
			want := `{"status":"duplicate","key":"` + origKey + `","state":"pending"}` + "\n"
			if a.status != 200 || a.body != want {
				t.Fatalf("replay: %d %s, want 200 %s", a.status, a.body, want)
			}
			if c.source == "tw" {
				if _, ok, _ := store.Lookup(newKey); ok {
					t.Fatalf("the replay was stored under %s", newKey)
				}
			}
			if _, bySource, err := store.eng.Counts(); err != nil || bySource[c.source] != 1 {
				t.Fatalf("%d events stored (%v), want 1", bySource[c.source], err)
			}
		})
	}
}

// TestTwilioPublicURLProxyLine: a trusted proxy that adds a line of its own
// after the client's (rather than appending to it) is read the same way:
// the last value is the proxy's, whatever the client sent first.
func TestTwilioPublicURLProxyLine(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	ctx := twilioCtx("10.1.2.3", map[string]string{"X-Forwarded-Proto": "http", "X-Forwarded-Host": "evil.example"}, []byte("a=1"), "sig")
	ctx.Request.Header.Add("X-Forwarded-Proto", "https")
	ctx.Request.Header.Add("X-Forwarded-Host", "hooks.example.com")
	if got, want := publicURL(ctx, trusted), "https://hooks.example.com/in/tw?acct=1"; got != want {
		t.Fatalf("publicURL = %q, want %q", got, want)
	}
}

// TestTwilioCapturedFormCannotCarryABody: a captured form callback whose
// parameters the replayer partly wrote (an SMS text holding
// "/../tw2?&bodySHA256=<hex>&" or, when the configured URL has a query,
// "&bodySHA256=<hex>&") sent with its whole signed string as the request
// URI, and a body of the replayer's choosing hashed into that bodySHA256:
// refused, at a sibling form source, at a JSON source sharing the token,
// and at the original source; the real server routes by the normalised
// path. A JSON source takes its own deliveries; a form source refuses them.
func TestTwilioCapturedFormCannotCarryABody(t *testing.T) {
	const token = "twilio-auth-token"
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "tw.secret"), token+"\n")
	set := loadSources(t, dir, `
[[source]]
name = "tw1"
provider = "twilio"
secret_files = ["tw.secret"]
forward = "http://127.0.0.1:1/tw1"

[[source]]
name = "tw2"
provider = "twilio"
secret_files = ["tw.secret"]
forward = "http://127.0.0.1:1/tw2"

[[source]]
name = "twj"
provider = "twilio"
twilio_body = "json"
secret_files = ["tw.secret"]
forward = "http://127.0.0.1:1/twj"
`)
	store := newMemStore(t)
	addr := serveTCP(t, New(Options{Store: store, Sources: set}))
	const host = "hooks.example.com"
	sign := func(url, body string) string { return twilioSignature(t, url, body, token) }
	post := func(uri, ct, sig, id, body string) int {
		t.Helper()
		head := "POST " + uri + " HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: " + ct +
			"\r\nX-Twilio-Signature: " + sig + "\r\nI-Twilio-Idempotency-Token: " + id +
			"\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close"
		return rawRequest(t, addr, head, body).StatusCode
	}
	const formCT, jsonCT = "application/x-www-form-urlencoded", "application/json"
	forged := `{"event":"refund","amount":1000000}`
	sum := sha256.Sum256([]byte(forged))
	hash := hex.EncodeToString(sum[:])

	for i, tc := range []struct {
		name, path, text string
	}{
		{"to a sibling source by dot segments", "/in/tw1", "/../tw2?&bodySHA256=" + hash + "&x="},
		{"to a JSON source by dot segments", "/in/tw1", "/../twj?&bodySHA256=" + hash + "&x="},
		{"to its own source, the configured URL with a query", "/in/tw1?acct=1", "&bodySHA256=" + hash + "&x="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The callback Twilio signed: its URL, then each name and
			// value, sorted, nothing between them.
			form := "AccountSid=AC1&Body=" + url.QueryEscape(tc.text) + "&From=%2B15551234567"
			signedURL := "http://" + host + tc.path
			sig := sign(signedURL, form)
			id := "orig-" + strconv.Itoa(i)
			if got := post(tc.path, formCT, sig, id, form); got != 202 {
				t.Fatalf("the captured callback itself: %d, want 202", got)
			}
			drawn := signedURL + "AccountSidAC1" + "Body" + tc.text + "From+15551234567"
			uri := strings.TrimPrefix(drawn, "http://"+host)
			if got := post(uri, jsonCT, sig, "forged-"+id, forged); got != 401 {
				t.Errorf("its signed string as the URI, with a body of the replayer's: %d, want 401", got)
			}
			for _, src := range []string{"tw1", "tw2", "twj"} {
				if _, ok, _ := store.Lookup(src + ":forged-" + id); ok {
					t.Errorf("stored %s:forged-%s", src, id)
				}
			}
		})
	}

	// Form to form: the text "/../tw2?x=" in a callback signed for /in/tw1,
	// resent with the signed string up to the last parameter as the URI
	// and that parameter as the form: the URI routes to tw2 and the form
	// string is the one Twilio signed.
	{
		text := "/../tw2?x="
		form := "AccountSid=AC1&Body=" + url.QueryEscape(text) + "&From=%2B15551234567"
		sig := sign("http://"+host+"/in/tw1", form)
		if got := post("/in/tw1", formCT, sig, "orig-ff", form); got != 202 {
			t.Fatalf("the captured callback itself: %d, want 202", got)
		}
		if got := post("/in/tw1AccountSidAC1Body"+text, formCT, sig, "forged-ff", "From=%2B15551234567"); got != 401 {
			t.Errorf("resent to tw2 through dot segments: %d, want 401", got)
		}
		if _, ok, _ := store.Lookup("tw2:forged-ff"); ok {
			t.Error("stored tw2:forged-ff")
		}
	}

	// A JSON source's own delivery, and the same at a form source.
	jbody := `{"CallSid":"CA1"}`
	jsum := sha256.Sum256([]byte(jbody))
	for _, tc := range []struct {
		source string
		want   int
	}{{"twj", 202}, {"tw1", 401}} {
		uri := "/in/" + tc.source + "?bodySHA256=" + hex.EncodeToString(jsum[:])
		if got := post(uri, jsonCT, sign("http://"+host+uri, jbody), "json-"+tc.source, jbody); got != tc.want {
			t.Errorf("a JSON delivery to %s: %d, want %d", tc.source, got, tc.want)
		}
	}
}
