package providers

import (
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
