package intake

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// jsonValidCases are inputs where a validator can go wrong; the want is
// encoding/json.Valid's.
var jsonValidCases = []string{
	``, ` `, `{}`, `[]`, ` {"a" : [true, false, null, 1e5, -0.5, 0, "x"]} `,
	`{"id":"evt_1","data":{"object":{"id":"o"}}}`, `"s"`, `1`, `-0`, `0.1e+3`, `1E-3`,
	`{`, `[`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a":1 "b":2}`, `{1:2}`, `{"a":1]`, `[1}`,
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`, `0x10`, `1.5.5`, `NaN`, `Infinity`,
	`tru`, `true1`, `nul`, `nulll`, `falsee`, `True`,
	`"\u00zz"`, `"\u12"`, `"\u1234"`, `"\ud800"`, `"\x"`, `"\'"`, `"\/"`, `"\`, `"abc`, `"a` + "\x01" + `"`, `"a` + "\x7f" + `"`,
	"\"\xff\xfe\"", "\"\xc3\x28\"", `{"id":"evt_1"} trailing`, `{"id":"evt_1"}{}`, `1 2`, "\x00", "\ufeff{}",
	`[[[[]]]]`, `[[[[]]]`, `{"a":{"b":{"c":[1,{"d":null}]}}}`,
	strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth),
	strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1),
	strings.Repeat(`{"a":`, maxJSONDepth) + "1" + strings.Repeat("}", maxJSONDepth),
	strings.Repeat(`{"a":`, maxJSONDepth+1) + "1" + strings.Repeat("}", maxJSONDepth+1),
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range jsonValidCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.60q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// TestInvalidJSONMessage: a body refused for its nesting alone is told so,
// with the limit, not "not valid JSON": it may be well-formed. Nesting at
// the limit is accepted; everything else refused keeps "not valid JSON".
func TestInvalidJSONMessage(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	for _, tc := range []struct {
		name  string
		body  string
		valid bool
		msg   string
	}{
		{"depth 1000", deep(1000), true, ""},
		{"at the limit", deep(maxJSONDepth), true, ""},
		{"objects at the limit", deepObj(maxJSONDepth), true, ""},
		{"one past the limit", deep(maxJSONDepth + 1), false, msgJSONTooDeep},
		{"objects past the limit", deepObj(maxJSONDepth + 1), false, msgJSONTooDeep},
		{"far past the limit", deep(3 * maxJSONDepth), false, msgJSONTooDeep},
		// Too deep before it is broken: the depth is what refused it.
		{"too deep and truncated", strings.Repeat("[", maxJSONDepth+1), false, msgJSONTooDeep},
		{"broken within the limit", strings.Repeat("[", 1000), false, msgInvalidJSON},
		{"broken", `{"a":}`, false, msgInvalidJSON},
		{"empty", ``, false, msgInvalidJSON},
		{"trailing", `{} {}`, false, msgInvalidJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := validJSON([]byte(tc.body)); got != tc.valid {
				t.Fatalf("validJSON = %v, want %v", got, tc.valid)
			}
			if tc.valid {
				return
			}
			if got := invalidJSONMessage([]byte(tc.body)); got != tc.msg {
				t.Errorf("message %q, want %q", got, tc.msg)
			}
		})
	}
	if want := "deeper than " + strconv.Itoa(maxJSONDepth) + " levels"; !strings.Contains(msgJSONTooDeep, want) {
		t.Errorf("message %q does not say the limit (%q)", msgJSONTooDeep, want)
	}
}

// FuzzValidJSON: validJSON decides what encoding/json.Valid decides.
func FuzzValidJSON(f *testing.F) {
	for _, c := range jsonValidCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// BenchmarkValidJSON: the check on the intake benchmark's 1 KiB body.
func BenchmarkValidJSON(b *testing.B) {
	body := []byte(fmt.Sprintf(`{"id":%q,"pad":"%s"}`, "msg_1", strings.Repeat("x", 1024-64)))
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"validJSON", validJSON}, {"encoding-json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !v.valid(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
