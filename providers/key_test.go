package providers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

// Each provider's default key, on a delivery signed the way the provider sends it.
func TestDefaultKeys(t *testing.T) {
	now := unix(testT)
	body := testJSONBody(now)
	cases := []struct {
		scheme string
		body   string
		extra  hdrs // headers a real sender adds that Sign does not produce
		want   string
	}{
		{"github", body, nil, "src:" + testID},
		{"stripe", body, nil, "src:evt_1NG8Du2eZvKYlo2C"},
		{"shopify", body, nil, "src:" + testID},
		{"standard", body, nil, "src:" + testID},
		{"svix", body, nil, "src:" + testID},
		{"slack", body, nil, "src:Ev0001"},
		{"gitlab", body, nil, "src:" + testID},
		{"paddle", body, nil, "src:Ev0001"},
		{"twilio", testFormBody, nil, "src:" + testID},
		{"linear", body, nil, "src:" + testID},
		{"zoom", body, nil, "src:meeting.started:1626230691572"},
		{"asaas", body, nil, "src:evt_1NG8Du2eZvKYlo2C"},
	}
	for _, c := range cases {
		s := mustLookup(t, c.scheme)
		secret := []byte("secret")
		if c.scheme == "standard" || c.scheme == "svix" {
			secret = []byte(whsecA)
		}
		hs, err := SignURL(s, "https://example.com/in/src", []byte(c.body), secret, now, testID, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.scheme, err)
		}
		k, err := NewKeyer("src", s.Defaults().Key)
		if err != nil {
			t.Fatalf("%s: %v", c.scheme, err)
		}
		h := headersOf(hs)
		if c.scheme == "twilio" {
			h = h.with("I-Twilio-Idempotency-Token", testID)
		}
		got, err := k.Key(nil, h, []byte(c.body))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: Key = %q, %v; want %q", c.scheme, got, err, c.want)
		}
	}
}

func TestKeyFallbacks(t *testing.T) {
	body := []byte(`{}`)
	cases := []struct {
		scheme string
		h      hdrs
		want   string
	}{
		{"shopify", hdrs{{"X-Shopify-Webhook-Id", []byte("wh-1")}}, "s:wh-1"},
		{"shopify", hdrs{{"X-Shopify-Webhook-Id", []byte("wh-1")}, {"X-Shopify-Event-Id", []byte("ev-1")}}, "s:ev-1"},
		{"shopify", hdrs{{"X-Shopify-Event-Id", []byte("")}, {"X-Shopify-Webhook-Id", []byte("wh-1")}}, "s:wh-1"},
		{"gitlab", hdrs{{"X-Gitlab-Event-UUID", []byte("uuid-1")}}, "s:uuid-1"},
		{"gitlab", hdrs{{"X-Gitlab-Event-UUID", []byte("uuid-1")}, {"Idempotency-Key", []byte("ik-1")}}, "s:ik-1"},
		{"svix", hdrs{{"webhook-id", []byte("msg_1")}}, "s:msg_1"},
		{"svix", hdrs{{"svix-id", []byte("msg_2")}, {"webhook-id", []byte("msg_1")}}, "s:msg_2"},
	}
	for _, c := range cases {
		k, err := NewKeyer("s", mustLookup(t, c.scheme).Defaults().Key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := k.Key(nil, c.h, body)
		if err != nil || string(got) != c.want {
			t.Errorf("%s %v: %q, %v; want %q", c.scheme, c.h, got, err, c.want)
		}
	}
	k, _ := NewKeyer("s", mustLookup(t, "shopify").Defaults().Key)
	_, err := k.Key(nil, hdrs{}, body)
	if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), `"header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id"`) {
		t.Errorf("all alternatives missing: %v", err)
	}
}

func TestKeyExtraction(t *testing.T) {
	body := `{"id":"evt_1","n":42,"f":-1.5e3,"t":true,"nul":null,"empty":"","obj":{"a":1},"arr":[1,2],
	"esc":"a\u0041\/b","ctl":"a\u0001b","uni":"caf\u00e9","raw_uni":"café","sp":"a b","trail":"evt_1 ","lead":" evt_1","esc_sp":"evt_1\u0020",
	"data":{"object":{"id":"pi_9","items":[{"id":"it_0"},{"id":"it_1","tags":["x","y"]}]}},
	"long":"` + strings.Repeat("L", 600) + `"}`
	h := hdrs{
		{"X-Id", []byte("hdr-1")},
		{"X-Ctl", []byte("a\tb")},
		{"X-Hi", []byte("caf\xc3\xa9")},
		{"X-Empty", []byte("")},
	}
	sum := sha256.Sum256([]byte(body))
	cases := []struct {
		parts []string
		want  string
		err   error
		msg   string // substring of the error
	}{
		{[]string{"json:id"}, "src:evt_1", nil, ""},
		{[]string{"json:n"}, "src:42", nil, ""},
		{[]string{"json:f"}, "src:-1.5e3", nil, ""},
		{[]string{"json:data.object.id"}, "src:pi_9", nil, ""},
		{[]string{"json:data.object.items.0.id"}, "src:it_0", nil, ""},
		{[]string{"json:data.object.items.1.tags.1"}, "src:y", nil, ""},
		{[]string{"json:arr.1"}, "src:2", nil, ""},
		{[]string{"json:esc"}, "src:aA/b", nil, ""},
		{[]string{"json:sp"}, "src:a b", nil, ""},
		{[]string{"header:X-Id"}, "src:hdr-1", nil, ""},
		{[]string{"header:x-id"}, "src:hdr-1", nil, ""},
		{[]string{"header:X-Id", "json:id", "json:data.object.items.1.id"}, "src:hdr-1:evt_1:it_1", nil, ""},
		{[]string{"json:missing|header:X-Id"}, "src:hdr-1", nil, ""},
		{[]string{"json:empty|json:nul|json:id"}, "src:evt_1", nil, ""},
		{[]string{" json:missing | json:id "}, "src:evt_1", nil, ""},
		{[]string{"body:sha256"}, "src:" + hex.EncodeToString(sum[:]), nil, ""},
		{[]string{"json:id", "body:sha256"}, "src:evt_1:" + hex.EncodeToString(sum[:]), nil, ""},

		{[]string{"json:missing"}, "", ErrNoKey, `key part "json:missing": missing`},
		{[]string{"json:id", "json:missing"}, "", ErrNoKey, `"json:missing"`},
		{[]string{"json:nul"}, "", ErrNoKey, "missing"},
		{[]string{"json:empty"}, "", ErrNoKey, "missing or empty"},
		{[]string{"json:data.object.items.5.id"}, "", ErrNoKey, "missing"},
		{[]string{"json:obj"}, "", ErrNoKey, "not a string or number"},
		{[]string{"json:arr"}, "", ErrNoKey, "not a string or number"},
		{[]string{"json:t"}, "", ErrNoKey, "not a string or number"},
		{[]string{"json:obj|json:id"}, "", ErrNoKey, "not a string or number"},
		{[]string{"json:ctl"}, "", ErrNoKey, "printable ASCII"},
		{[]string{"json:uni"}, "", ErrNoKey, "printable ASCII"},
		{[]string{"json:raw_uni"}, "", ErrNoKey, "printable ASCII"},
		{[]string{"header:X-Ctl"}, "", ErrNoKey, "printable ASCII"},
		{[]string{"header:X-Hi"}, "", ErrNoKey, "printable ASCII"},
		{[]string{"json:trail"}, "", ErrNoKey, `key part "json:trail": starts or ends with a space`},
		{[]string{"json:lead"}, "", ErrNoKey, "starts or ends with a space"},
		{[]string{"json:esc_sp"}, "", ErrNoKey, "starts or ends with a space"},
		{[]string{"json:trail", "json:id"}, "", ErrNoKey, "starts or ends with a space"},
		{[]string{"json:trail|json:id"}, "", ErrNoKey, "starts or ends with a space"},
		{[]string{"header:X-Empty"}, "", ErrNoKey, "missing"},
		{[]string{"header:X-Absent"}, "", ErrNoKey, `"header:X-Absent"`},
		{[]string{"json:long"}, "", ErrKeyTooLong, ""},
		{[]string{"json:id", "json:long"}, "", ErrKeyTooLong, ""},
	}
	for _, c := range cases {
		k, err := NewKeyer("src", c.parts)
		if err != nil {
			t.Fatalf("%v: %v", c.parts, err)
		}
		dst := []byte("keep")
		got, err := k.Key(dst, h, []byte(body))
		if c.err != nil {
			if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%v: %v, want %v containing %q", c.parts, err, c.err, c.msg)
			}
			if string(got) != "keep" {
				t.Errorf("%v: dst changed on error: %q", c.parts, got)
			}
			continue
		}
		if err != nil || string(got) != "keep"+c.want {
			t.Errorf("%v: %q, %v; want %q", c.parts, got, err, c.want)
		}
	}
}

// TestKeyRefusesDuplicateMembers: a member named twice on a key's path
// makes readers disagree (the first copy here, the last in most handlers),
// so the key is refused rather than read from one copy; a name repeated off
// the path, or in another object, is no concern.
func TestKeyRefusesDuplicateMembers(t *testing.T) {
	for _, c := range []struct {
		body, part string
		want       string // "" : refused as a duplicate
	}{
		{`{"id":"A","id":"B"}`, "json:id", ""},
		{`{"id":"A","i\u0064":"B"}`, "json:id", ""},
		{`{"i\u0064":"A","id":"B"}`, "json:id", ""},
		{`{"data":{"object":{"id":"A"}},"data":{"object":{"id":"B"}}}`, "json:data.object.id", ""},
		{`{"data":{"object":{"id":"A","id":"B"}}}`, "json:data.object.id", ""},
		{`{"items":[{"id":"A","id":"B"}]}`, "json:items.0.id", ""},
		{`{"id":"A","data":{"id":"B"},"other":{"id":"C","id":"D"}}`, "json:id", "src:A"},
		{`{"id":"A","name":"x","name":"y"}`, "json:id", "src:A"},
		{`{"data":{"id":"A"},"items":[{"id":"B"},{"id":"C"}]}`, "json:items.1.id", "src:C"},
		{`{"id":"A","ID":"B"}`, "json:id", "src:A"},
	} {
		k, err := NewKeyer("src", []string{c.part})
		if err != nil {
			t.Fatal(err)
		}
		got, err := k.Key(nil, nil, []byte(c.body))
		if c.want == "" {
			if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "appears twice") {
				t.Errorf("%s in %s: %q, %v; want the duplicate refused", c.part, c.body, got, err)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s in %s: %q, %v; want %q", c.part, c.body, got, err, c.want)
		}
	}
}

func TestKeyNotJSON(t *testing.T) {
	k, _ := NewKeyer("src", []string{"json:id"})
	for _, body := range []string{"", "id=1", "  \"id\"", "null", "12", "<xml/>"} {
		if _, err := k.Key(nil, hdrs{}, []byte(body)); !errors.Is(err, ErrNotJSON) {
			t.Errorf("%q: %v, want ErrNotJSON", body, err)
		}
	}
	// Broken JSON yields no key (which error depends on where it breaks).
	for _, body := range []string{`{"id":"abc`, `{"id":`, `{"id"`, `{`} {
		if got, err := k.Key(nil, hdrs{}, []byte(body)); err == nil {
			t.Errorf("%q: key %q from broken JSON", body, got)
		}
	}
	// A fallback to a header still works for a non-JSON body.
	k, _ = NewKeyer("src", []string{"json:id|header:X-Id"})
	if got, err := k.Key(nil, hdrs{{"X-Id", []byte("h")}}, []byte("a=b")); err != nil || string(got) != "src:h" {
		t.Errorf("fallback: %q, %v", got, err)
	}
	if _, err := k.Key(nil, hdrs{}, []byte("a=b")); !errors.Is(err, ErrNotJSON) {
		t.Errorf("fallback, header missing too: %v, want ErrNotJSON", err)
	}
	// Leading white space is fine.
	k, _ = NewKeyer("src", []string{"json:id"})
	if got, err := k.Key(nil, hdrs{}, []byte(" \n{\"id\":\"x\"}")); err != nil || string(got) != "src:x" {
		t.Errorf("leading space: %q, %v", got, err)
	}
	if got, err := k.Key(nil, nil, []byte(`[{"id":"x"}]`)); err == nil {
		t.Errorf("array body, object path: %q", got)
	}
	k, _ = NewKeyer("src", []string{"json:0.id"})
	if got, err := k.Key(nil, nil, []byte(`[{"id":"x"}]`)); err != nil || string(got) != "src:x" {
		t.Errorf("array body: %q, %v", got, err)
	}
}

// TestCompositeKeysDoNotCollide: parts holding ':' or '%' are escaped in a
// key of several parts, so that two different events never share a key; a
// key of one part keeps its value as it is.
func TestCompositeKeysDoNotCollide(t *testing.T) {
	two, _ := NewKeyer("comp", []string{"json:a", "json:b"})
	one, _ := NewKeyer("comp", []string{"json:a"})
	cases := []struct {
		k    *Keyer
		body string
		want string
	}{
		{two, `{"a":"x:y","b":"z"}`, "comp:x%3Ay:z"},
		{two, `{"a":"x","b":"y:z"}`, "comp:x:y%3Az"},
		{two, `{"a":"x%3Ay","b":"z"}`, "comp:x%253Ay:z"},
		{two, `{"a":"plain","b":"7"}`, "comp:plain:7"},
		{one, `{"a":"x:y%z"}`, "comp:x:y%z"},
	}
	seen := map[string]string{}
	for _, c := range cases {
		got, err := c.k.Key(nil, nil, []byte(c.body))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %q, %v; want %q", c.body, got, err, c.want)
			continue
		}
		if c.k == two {
			if other, dup := seen[string(got)]; dup {
				t.Errorf("%s and %s make one key %q", other, c.body, got)
			}
			seen[string(got)] = c.body
		}
	}
	// The escaped key is bounded like any other.
	long := `{"a":"` + strings.Repeat(":", MaxKeyLen/3) + `","b":"z"}`
	if _, err := two.Key(nil, nil, []byte(long)); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("a key over MaxKeyLen once escaped: %v, want ErrKeyTooLong", err)
	}
}

func TestKeyLengthLimit(t *testing.T) {
	k, _ := NewKeyer("src", []string{"header:X-Id"})
	exact := strings.Repeat("k", MaxKeyLen-len("src:"))
	if got, err := k.Key(nil, hdrs{{"X-Id", []byte(exact)}}, nil); err != nil || len(got) != MaxKeyLen {
		t.Errorf("key of exactly MaxKeyLen: %d, %v", len(got), err)
	}
	if _, err := k.Key(nil, hdrs{{"X-Id", []byte(exact + "k")}}, nil); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("MaxKeyLen+1: %v", err)
	}
}

func TestNewKeyerErrors(t *testing.T) {
	bad := [][]string{
		nil, {}, {""}, {"id"}, {"json:"}, {"json:a..b"}, {"json:.a"}, {"json:a."}, {"json:a.*"}, {"json:a.#"},
		{"json:@this"}, {"json:a|b"}, {"json:a b"}, {"json:a\\.b"}, {"header:"}, {"header:X Y"}, {"header:X:Y"},
		{"body:md5"}, {"body:"}, {"foo:bar"}, {"json:id", ""}, {"json:id|"},
	}
	for _, parts := range bad {
		if _, err := NewKeyer("src", parts); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%q: %v, want ErrBadConfig", parts, err)
		}
	}
	for _, src := range []string{"", "a:b", "a b", "caf\u00e9", "a\x00"} {
		if _, err := NewKeyer(src, []string{"json:id"}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("source %q: %v, want ErrBadConfig", src, err)
		}
	}
	k, err := NewKeyer("stripe-live", []string{"json:id", "header:X-A|header:X-B"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.Parts(), ","); got != "json:id,header:X-A|header:X-B" {
		t.Errorf("Parts = %q", got)
	}
}

func TestFieldAndParseTime(t *testing.T) {
	body := []byte(`{"created":1700000000,"ms":1700000000123,"iso":"2023-11-14T22:13:20.5Z","ts":"1531420618.123456",` +
		`"data":{"object":{"id":"pi_1"}},"esc":"x\"y"}`)
	obj, err := NewField("json:data.object.id")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := obj.Value(nil, body); err != nil || string(v) != "pi_1" {
		t.Errorf("object: %q, %v", v, err)
	}
	if obj.String() != "json:data.object.id" {
		t.Errorf("String = %q", obj.String())
	}
	esc, _ := NewField("json:esc")
	if v, err := esc.Value(nil, body); err != nil || string(v) != `x"y` {
		t.Errorf("escaped: %q, %v", v, err)
	}
	times := map[string]int64{
		"json:created": 1700000000 * 1e9,
		"json:ms":      1700000000123 * 1e6,
		"json:iso":     1700000000*1e9 + 5e8,
		"json:ts":      1531420618*1e9 + 123456000,
	}
	for spec, want := range times {
		f, err := NewField(spec)
		if err != nil {
			t.Fatal(err)
		}
		v, err := f.Value(nil, body)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if got, err := ParseTime(v); err != nil || got != want {
			t.Errorf("%s: ParseTime(%q) = %d, %v; want %d", spec, v, got, err, want)
		}
	}
	missing, _ := NewField("json:nope")
	if _, err := missing.Value(nil, body); !errors.Is(err, ErrNoField) {
		t.Errorf("missing field: %v", err)
	}
	if _, err := missing.Value(nil, []byte("a=b")); !errors.Is(err, ErrNotJSON) {
		t.Errorf("non-JSON: %v", err)
	}
	hf, _ := NewField("header:X-Time")
	if v, err := hf.Value(hdrs{{"X-Time", []byte("1700000000")}}, nil); err != nil || string(v) != "1700000000" {
		t.Errorf("header field: %q, %v", v, err)
	}
	bf, _ := NewField("body:sha256")
	v1, _ := bf.Value(nil, body)
	v2, _ := bf.Value(nil, []byte("other"))
	if len(v1) != 64 || string(v1) == string(v2) {
		t.Errorf("body:sha256 field: %q %q", v1, v2)
	}
	if _, err := NewField("json:a.*"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("bad field spec: %v", err)
	}
}

func TestParseTime(t *testing.T) {
	good := map[string]int64{
		"0":                                   0,
		"1700000000":                          1700000000 * 1e9,
		"9223372036":                          9223372036 * 1e9,
		"1700000000123":                       1700000000123 * 1e6,
		"1700000000123456":                    1700000000123456 * 1e3,
		"1700000000123456789":                 1700000000123456789,
		"1700000000.5":                        1700000000*1e9 + 5e8,
		"1700000000.1234567891":               1700000000*1e9 + 123456789,
		"2023-11-14T22:13:20Z":                1700000000 * 1e9,
		"2023-11-14T22:13:20.123456789Z":      1700000000*1e9 + 123456789,
		"2023-11-15T00:13:20+02:00":           1700000000 * 1e9,
		"2024-03-20T10:07:35.590857Z":         time.Date(2024, 3, 20, 10, 7, 35, 590857000, time.UTC).UnixNano(),
		"1970-01-01T00:00:00Z":                0,
		"2023-11-14T22:13:20.000000000Z":      1700000000 * 1e9,
		"2023-11-14T22:13:20.1Z":              1700000000*1e9 + 1e8,
		"2023-11-14T22:13:20.12345678Z":       1700000000*1e9 + 123456780,
		"2023-11-14T22:13:20.123456789+00:00": 1700000000*1e9 + 123456789,
	}
	for in, want := range good {
		if got, err := ParseTime([]byte(in)); err != nil || got != want {
			t.Errorf("ParseTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	bad := []string{"", "-1", "+1", "abc", "1.", ".5", "1.5.5", "1e9", "9223372037", "92233720368547758070",
		"9999999999999999999", "1700000000.x", "2023-11-14", "2023-11-14 22:13:20Z", "3000-01-01T00:00:00Z",
		"1600-01-01T00:00:00Z", " 1700000000", "99999999999.5"}
	for _, in := range bad {
		if got, err := ParseTime([]byte(in)); !errors.Is(err, ErrBadTime) {
			t.Errorf("ParseTime(%q) = %d, %v; want ErrBadTime", in, got, err)
		}
	}
}

// TestTextField: an event type may be any printable UTF-8 text, escaped in
// JSON or raw, in the body or a header; a key's part stays printable ASCII.
func TestTextField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		header string
		want   string // "": refused
		key    bool   // a key part (NewField) reads it too
	}{
		{"ASCII", `{"type":"order.paid"}`, "", "order.paid", true},
		{"raw UTF-8", `{"type":"commande.créée"}`, "", "commande.créée", false},
		{"JSON escapes", `{"type":"commande.cr\u00e9\u00e9e"}`, "", "commande.créée", false},
		{"a header", `{}`, "événement", "événement", false},
		{"a control character", `{"type":"a\u0007b"}`, "", "", false},
		{"a C1 control character", `{"type":"a\u0085b"}`, "", "", false},
		{"invalid UTF-8 in a header", `{}`, "caf\xe9", "", false},
		{"a space at an end", `{"type":"créée "}`, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := "json:type"
			var h hdrs
			if tc.header != "" {
				spec = "header:X-Type"
				h = hdrs{{"X-Type", []byte(tc.header)}}
			}
			text, err := NewTextField(spec)
			if err != nil {
				t.Fatal(err)
			}
			v, err := text.Value(h, []byte(tc.body))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("read %q, want a refusal", v)
				}
			} else if err != nil || string(v) != tc.want {
				t.Fatalf("read %q, %v; want %q", v, err, tc.want)
			}
			if tc.want != "" && !PrintableText(tc.want) {
				t.Errorf("PrintableText(%q) = false for a value the field reads", tc.want)
			}
			key, _ := NewField(spec)
			if _, err := key.Value(h, []byte(tc.body)); (err == nil) != tc.key {
				t.Errorf("as a key part: %v, want ok %v", err, tc.key)
			}
		})
	}
}
