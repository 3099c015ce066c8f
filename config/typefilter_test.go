package config

import (
	"strings"
	"testing"
)

// TestTypeDefaults: each provider names where its event type is read; twilio
// and hmac send none.
func TestTypeDefaults(t *testing.T) {
	c := mustLoadTestdata(t, "providers.toml")
	want := map[string]string{
		"stripe":        "json:type",
		"github":        "header:X-GitHub-Event",
		"shopify":       "header:X-Shopify-Topic",
		"standard":      "json:type",
		"svix":          "json:type",
		"slack":         "json:event.type",
		"gitlab":        "header:X-Gitlab-Event",
		"paddle":        "json:event_type",
		"linear":        "json:type",
		"zoom":          "json:event",
		"asaas":         "json:event",
		"twilio":        "",
		"hmac":          "",
		"stripe-custom": "json:type",
	}
	if len(c.Sources) != len(want) {
		t.Fatalf("%d sources, want %d", len(c.Sources), len(want))
	}
	for _, s := range c.Sources {
		if w, ok := want[s.Name]; !ok || s.Type != w {
			t.Errorf("source %s: type = %q, want %q", s.Name, s.Type, w)
		}
		if s.AcceptTypes != nil || s.DropTypes != nil {
			t.Errorf("source %s: a filter by default: %q %q", s.Name, s.AcceptTypes, s.DropTypes)
		}
	}
}

// TestTypeFilterConfig: accept_types and drop_types exclude each other, hold
// non-empty printable types, and need a type part to read; an explicit type
// wins over the provider's.
func TestTypeFilterConfig(t *testing.T) {
	tests := []struct {
		name, source string
		typ          string
		accept, drop []string
		err          string
	}{
		{"no filter", `provider = "stripe"`, "json:type", nil, nil, ""},
		{"drop", `provider = "stripe"` + "\ndrop_types = [\"charge.updated\", \"charge.refunded\"]", "json:type", nil, []string{"charge.updated", "charge.refunded"}, ""},
		{"accept on github", `provider = "github"` + "\naccept_types = [\"push\"]", "header:X-GitHub-Event", []string{"push"}, nil, ""},
		{"explicit type", `provider = "stripe"` + "\ntype = \"json:data.object.object\"\naccept_types = [\"charge\"]", "json:data.object.object", []string{"charge"}, nil, ""},
		{"twilio with a type", `provider = "twilio"` + "\ntype = \"header:X-Event\"\ndrop_types = [\"ping\"]", "header:X-Event", nil, []string{"ping"}, ""},
		{"empty lists", `provider = "stripe"` + "\naccept_types = []\ndrop_types = []", "json:type", []string{}, []string{}, ""},
		{"both lists", `provider = "stripe"` + "\naccept_types = [\"a\"]\ndrop_types = [\"b\"]", "", nil, nil, "drop_types: accept_types and drop_types exclude each other"},
		{"twilio without a type", `provider = "twilio"` + "\naccept_types = [\"sms\"]", "", nil, nil, `type: required with accept_types or drop_types: provider "twilio" sends no event type`},
		{"hmac without a type", `provider = "hmac"` + "\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\" }\ndrop_types = [\"ping\"]", "", nil, nil, `type: required with accept_types or drop_types: provider "hmac"`},
		{"invalid type part", `provider = "stripe"` + "\ntype = \"query:type\"\ndrop_types = [\"x\"]", "", nil, nil, "type: "},
		{"empty type entry", `provider = "stripe"` + "\ndrop_types = [\"ok\", \"\"]", "", nil, nil, `drop_types[1]: invalid event type ""`},
		{"unprintable type entry", `provider = "github"` + "\naccept_types = [\"push\\n\"]", "", nil, nil, `accept_types[0]: invalid event type "push\n"`},
		{"type entry with a space at an end", `provider = "github"` + "\naccept_types = [\"push \"]", "", nil, nil, `accept_types[0]: invalid event type "push "`},
		{"type entry not ASCII", `provider = "stripe"` + "\ndrop_types = [\"commande.créée\"]", "json:type", nil, []string{"commande.créée"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.source, tt.err)
			if s == nil {
				return
			}
			if s.Type != tt.typ || strings.Join(s.AcceptTypes, ",") != strings.Join(tt.accept, ",") ||
				strings.Join(s.DropTypes, ",") != strings.Join(tt.drop, ",") {
				t.Fatalf("type %q accept %q drop %q, want %q %q %q", s.Type, s.AcceptTypes, s.DropTypes, tt.typ, tt.accept, tt.drop)
			}
		})
	}
}
