package providers

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchBody returns a body of exactly n bytes in the fixture's format: a
// JSON object (webhookTimestamp last, as Linear sends it) or a form body.
func benchBody(f *fixture, n int, now time.Time) string {
	if f.scheme == "twilio" {
		b := testFormBody + "&Pad="
		return b + strings.Repeat("p", n-len(b))
	}
	head := `{"id":"evt_1NG8Du2eZvKYlo2C","event_id":"Ev0001","event":"meeting.started","event_ts":1626230691572,"marker":"XXXX","pad":"`
	tail := fmt.Sprintf(`","webhookTimestamp":%d}`, now.UnixMilli())
	return head + strings.Repeat("p", n-len(head)-len(tail)) + tail
}

type verifyCase struct {
	name string
	v    Verifier
	r    *Request
}

// verifyCases builds, per fixture, a verifier and a valid 1 KiB delivery.
func verifyCases(tb testing.TB) []verifyCase {
	now := unix(testT)
	var out []verifyCase
	for _, f := range fixtures() {
		body := benchBody(&f, 1024, now)
		if len(body) != 1024 {
			tb.Fatalf("%s: body is %d bytes", f.testName(), len(body))
		}
		v := f.verifier(tb, f.secretA)
		r := f.request(f.signed(tb, body, f.secretA, now), body, now)
		if err := v.Verify(r); err != nil {
			tb.Fatalf("%s: %v", f.testName(), err)
		}
		out = append(out, verifyCase{f.testName(), v, r})
	}
	return out
}

func BenchmarkVerify(b *testing.B) {
	for _, c := range verifyCases(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.r.Body)))
			for b.Loop() {
				if err := c.v.Verify(c.r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyV1a measures Standard Webhooks' ed25519 signatures on a
// 1 KiB body: one public key, and the rotation case of two keys and two v1a
// entries of which only the last pair verifies (four verifications, as every
// pair is checked).
func BenchmarkVerifyV1a(b *testing.B) {
	now := unix(testT)
	f := fixture{scheme: "standard"}
	body := []byte(benchBody(&f, 1024, now))
	good := signStd(b, "standard", whskA, body, "msg_1", now)
	other := signStd(b, "standard", whskB, body, "msg_1", now).get("webhook-signature")
	for _, c := range []struct {
		name string
		keys []string
		sig  string
	}{
		{"one-key", []string{whpkA}, good.get("webhook-signature")},
		{"rotation", []string{whpkOther, whpkA}, other + " " + good.get("webhook-signature")},
	} {
		v := mustVerifier(b, "standard", Options{Secrets: secrets(c.keys...)})
		r := &Request{Body: body, Header: good.with("webhook-signature", c.sig), Now: now}
		if err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := v.Verify(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyRotation is the worst ordinary case: two secrets, and for the
// list schemes two signatures, of which only the last pair matches.
func BenchmarkVerifyRotation(b *testing.B) {
	now := unix(testT)
	for _, f := range fixtures() {
		if f.multi == nil {
			continue
		}
		body := benchBody(&f, 1024, now)
		other := "other-" + f.secretB
		if f.scheme == "standard" || f.scheme == "svix" {
			other = f.secretB
		}
		v := f.verifier(b, other, f.secretA)
		good := f.signed(b, body, f.secretA, now)
		bad := f.signed(b, body, f.secretB, now)
		r := f.request(good.with(f.sig, f.multi(bad.get(f.sig), good.get(f.sig))), body, now)
		if err := v.Verify(r); err != nil {
			b.Fatal(err)
		}
		b.Run(f.testName(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyBad measures refusing a bad signature (the flood case).
func BenchmarkVerifyBad(b *testing.B) {
	for _, c := range verifyCases(b) {
		r := *c.r
		r.Body = append([]byte(nil), r.Body...)
		r.Body[len(r.Body)/2] ^= 1
		if c.v.Verify(&r) == nil && c.name != "gitlab" && c.name != "asaas" {
			b.Fatalf("%s: changed body verified", c.name)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.v.Verify(&r)
			}
		})
	}
}

// stripeLikeBody is a 4 KiB Stripe event (payment_intent.succeeded shape).
func stripeLikeBody(n int) []byte {
	head := `{
  "id": "evt_3NG8Du2eZvKYlo2C0pT1bcXz",
  "object": "event",
  "api_version": "2023-10-16",
  "created": 1700000000,
  "data": {
    "object": {
      "id": "pi_3NG8Du2eZvKYlo2C0j6J8wnN",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_details": {"tip": {}},
      "amount_received": 2000,
      "application": null,
      "capture_method": "automatic",
      "client_secret": "pi_3NG8Du2eZvKYlo2C0j6J8wnN_secret_xxxxxxxxxxxxxxxxxxxxxxxx",
      "confirmation_method": "automatic",
      "created": 1699999990,
      "currency": "usd",
      "customer": "cus_OzYxTbQdBUfGSm",
      "description": "Order #1234",
      "latest_charge": "ch_3NG8Du2eZvKYlo2C0mW8bX1P",
      "livemode": false,
      "metadata": {"order_id": "1234"`
	tail := `},
      "payment_method": "pm_1NG8Dt2eZvKYlo2C3RnNwQxe",
      "payment_method_types": ["card"],
      "status": "succeeded"
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": "req_Q3b1dfFzWtN6H1", "idempotency_key": "8f1e2c4b-3a7d-4f0e-9a1b-2c3d4e5f6a7b"},
  "type": "payment_intent.succeeded"
}`
	var mid strings.Builder
	for i := 0; mid.Len()+len(head)+len(tail)+40 < n; i++ {
		fmt.Fprintf(&mid, `, "item_%04d": "sku_%08d"`, i, i*7919)
	}
	pad := n - len(head) - len(tail) - mid.Len()
	mid.WriteString(`, "z": "` + strings.Repeat("z", pad-len(`, "z": ""`)) + `"`)
	return []byte(head + mid.String() + tail)
}

func BenchmarkKey(b *testing.B) {
	body := stripeLikeBody(4096)
	if len(body) != 4096 {
		b.Fatalf("body is %d bytes", len(body))
	}
	// Converted to the interface once, as the intake's *fasthttp.RequestHeader
	// is: a slice converted per call would allocate in the benchmark itself.
	var h Headers = hdrs{{"Content-Type", []byte("application/json")}, {"Stripe-Signature", []byte("t=1,v1=00")}, {"X-Request-Id", []byte("req_1")}}
	cases := []struct {
		name  string
		parts []string
	}{
		{"json:id", []string{"json:id"}},
		{"json:data.object.id", []string{"json:data.object.id"}},
		{"json:type+request.id", []string{"json:type", "json:request.id"}},
		{"header", []string{"header:X-Request-Id"}},
		{"fallback", []string{"header:X-Absent|json:id"}},
	}
	for _, c := range cases {
		k, err := NewKeyer("stripe-live", c.parts)
		if err != nil {
			b.Fatal(err)
		}
		dst := make([]byte, 0, MaxKeyLen)
		if _, err := k.Key(dst, h, body); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Key(dst[:0], h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseTime(b *testing.B) {
	for _, in := range []string{"1700000000", "1700000000123", "2024-03-20T10:07:35.590857Z"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			v := []byte(in)
			for b.Loop() {
				if _, err := ParseTime(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVerifyAllocs holds the performance goal: at most 2 allocations per
// successful Verify (in fact none once the pool is warm), and no allocation to
// derive a key into a buffer with room.
func TestVerifyAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	for _, c := range verifyCases(t) {
		n := testing.AllocsPerRun(200, func() {
			if err := c.v.Verify(c.r); err != nil {
				t.Fatal(err)
			}
		})
		if n > 2 {
			t.Errorf("%s: %.1f allocations per Verify, want at most 2", c.name, n)
		}
	}
	body := stripeLikeBody(4096)
	k, _ := NewKeyer("stripe-live", []string{"json:id", "json:data.object.id", "header:X-Id|body:sha256"})
	dst := make([]byte, 0, MaxKeyLen)
	var h Headers = hdrs{}
	n := testing.AllocsPerRun(200, func() {
		if _, err := k.Key(dst[:0], h, body); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("Key: %.1f allocations, want 0", n)
	}
}
