package providers

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// Two placeholders with nothing between them are refused: the boundary
// between the parts is not signed, so one signed string splits two ways (id
// "evt_1" with body `{"a":1}` signs like id `evt_1{` with body `"a":1}`).
func TestTemplateSeparators(t *testing.T) {
	for _, c := range []struct {
		template string
		ok       bool
	}{
		{"", true},
		{"{body}", true},
		{"{id}.{body}", true},
		{"{id}.{timestamp}.{body}", true},
		{"v1:{timestamp}:{body}", true},
		{"{timestamp} {body}", true},
		{"{body}|{id}", true},
		{"{id}{body}", false},
		{"{timestamp}{body}", false},
		{"{body}{id}", false},
		{"{body}{timestamp}", false},
		{"{id}{timestamp}.{body}", false},
		{"v1:{id}.{timestamp}{body}", false},
	} {
		err := CheckTemplate(c.template)
		if c.ok {
			if err != nil {
				t.Errorf("%q: %v, want accepted", c.template, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "adjacent") {
			t.Errorf("%q: %v, want ErrBadConfig naming the adjacent placeholders", c.template, err)
		}
		spec := &HMACSpec{Header: "X-Sig", IDHeader: "X-Id", TimestampHeader: "X-Ts", Template: c.template}
		if _, err := mustLookup(t, "hmac").NewVerifier(Options{Secrets: secrets("k"), HMAC: spec}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%q: NewVerifier: %v, want ErrBadConfig", c.template, err)
		}
		if _, err := mustLookup(t, "hmac").Sign([]byte("{}"), []byte("k"), unix(testT), "id", spec); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%q: Sign: %v, want ErrBadConfig", c.template, err)
		}
	}
}

// A separator between placeholders is not enough: a part that contains the
// separator next to it lets one signed string split another way, so a
// captured delivery, cut elsewhere, would verify under another id, another
// timestamp or another body. Each case is two splits of one signed string:
// the signer's verifies, the other holds a part with its separator in it and
// is refused.
func TestSignatureSplitsOneWay(t *testing.T) {
	type parts struct{ id, ts, body string }
	for _, c := range []struct {
		name, template string
		signer, forged parts
		refused        error
	}{
		{"id before the body", "{id}.{body}",
			parts{"req-885cbc", "", `{"amount":1.5,"note":"x"}`}, parts{`req-885cbc.{"amount":1`, "", `5,"note":"x"}`}, errIDSplits},
		{"id after the body", "{body}.{id}",
			parts{"7", "", `{"a":"x.y"}`}, parts{`y"}.7`, "", `{"a":"x`}, errIDSplits},
		{"a separator that overlaps itself", "{id}..{body}",
			parts{"req", "", ".x"}, parts{"req.", "", "x"}, errIDSplits},
		{"a decimal timestamp", "{timestamp}.{body}",
			parts{"", "1700000000", `5.{"a":1}`}, parts{"", "1700000000.5", `{"a":1}`}, errTSSplits},
		{"id and timestamp", "{id}.{timestamp}.{body}",
			parts{"evt", "1700000000", "1700000000.{}"}, parts{"evt.1700000000", "1700000000", "{}"}, errIDSplits},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := &HMACSpec{Header: "X-Sig", Algorithm: "sha256", Encoding: "hex", Template: c.template}
			if strings.Contains(c.template, "{id}") {
				spec.IDHeader = "X-Id"
			}
			if strings.Contains(c.template, "{timestamp}") {
				spec.TimestampHeader = "X-Ts"
			}
			signed := func(p parts) string {
				r := strings.NewReplacer("{id}", p.id, "{timestamp}", p.ts, "{body}", p.body)
				return r.Replace(c.template)
			}
			if signed(c.signer) != signed(c.forged) {
				t.Fatalf("not one signed string: %q and %q", signed(c.signer), signed(c.forged))
			}
			sig := hex.EncodeToString(hmacSum(algSHA256, []byte("k"), []byte(signed(c.signer))))
			v := mustVerifier(t, "hmac", Options{Secrets: secrets("k"), HMAC: spec})
			verify := func(p parts) error {
				h := hdrs{}.with("X-Sig", sig)
				if spec.IDHeader != "" {
					h = h.with("X-Id", p.id)
				}
				if spec.TimestampHeader != "" {
					h = h.with("X-Ts", p.ts)
				}
				return v.Verify(&Request{Header: h, Body: []byte(p.body), Now: unix(1700000000)})
			}
			if err := verify(c.signer); err != nil {
				t.Fatalf("the signer's parts: %v", err)
			}
			if err := verify(c.forged); !errors.Is(err, c.refused) || !errors.Is(err, ErrMalformedHeader) {
				t.Fatalf("the forged split: %v, want %v", err, c.refused)
			}
		})
	}
}

// Standard Webhooks forbids "." in an id: it separates the signed parts.
// Verify refuses one, and Sign (`oncehook send`) refuses to make one.
func TestStandardIDWithADot(t *testing.T) {
	secret := []byte("whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	for _, name := range []string{"standard", "svix"} {
		s := mustLookup(t, name)
		if _, err := s.Sign([]byte("{}"), secret, unix(1700000000), "msg.1", nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Sign with a dotted id: %v, want ErrBadConfig", name, err)
		}
		// A delivery whose id holds a dot is refused before its MAC counts.
		hs, err := s.Sign([]byte("{}"), secret, unix(1700000000), "msg", nil)
		if err != nil {
			t.Fatal(err)
		}
		h := headersOf(hs)
		idHeader := "webhook-id"
		if name == "svix" {
			idHeader = "svix-id"
		}
		v := mustVerifier(t, name, Options{Secrets: [][]byte{secret}})
		if err := v.Verify(&Request{Header: h.with(idHeader, "msg.1"), Body: []byte("{}"), Now: unix(1700000000)}); !errors.Is(err, errIDDot) {
			t.Errorf("%s: id with a dot: %v, want %v", name, err, errIDDot)
		}
	}
}

// For each template shape, every id, timestamp and body of up to three
// characters over a small alphabet of separators and letters that
// splitsOnce accepts is the only accepted split of its signed string.
func TestSplitsOnceExhaustively(t *testing.T) {
	alpha := []string{".", "a", "b", ":"}
	var strs []string
	var gen func(p string, n int)
	gen = func(p string, n int) {
		strs = append(strs, p)
		if n == 0 {
			return
		}
		for _, c := range alpha {
			gen(p+c, n-1)
		}
	}
	gen("", 3)
	for _, tmpl := range []string{
		"{id}.{body}", "{body}.{id}", "x{id}..{body}y", "{id}.{timestamp}.{body}",
		"{timestamp}:{body}:{id}", "{id}ab{body}", "{id}aba{body}", "{body}aba{id}",
		"{id}.{body}.{id}", "a{timestamp}.{id}.{body}.{timestamp}b", "{id}.a{body}", "{body}a.{id}",
		"{timestamp}.{id}:{body}", "{id}:.{timestamp}.:{body}", ".{id}.{body}.", "{body}.{timestamp}.{id}",
	} {
		tt, err := compileTemplate(tmpl)
		if err != nil {
			t.Fatal(tmpl, err)
		}
		seen := map[string][3]string{}
		for _, id := range strs {
			if tt.uses(segID) && id == "" {
				continue
			}
			if !tt.uses(segID) && id != "" {
				continue
			}
			for _, ts := range strs {
				if tt.uses(segTimestamp) && ts == "" {
					continue
				}
				if !tt.uses(segTimestamp) && ts != "" {
					continue
				}
				var idb, tsb []byte
				if tt.uses(segID) {
					idb = []byte(id)
				}
				if tt.uses(segTimestamp) {
					tsb = []byte(ts)
				}
				if _, err := tt.splitsOnce(idb, tsb, nil); err != nil {
					continue
				}
				for _, body := range strs {
					s := strings.NewReplacer("{id}", id, "{timestamp}", ts, "{body}", body).Replace(tmpl)
					if prev, ok := seen[s]; ok && prev != [3]string{id, ts, body} {
						t.Errorf("%s: %q signs like %q (%q vs %q)", tmpl, s, s, prev, [3]string{id, ts, body})
					}
					seen[s] = [3]string{id, ts, body}
				}
			}
		}
	}
}
