package providers

import "testing"

func TestReadsJSON(t *testing.T) {
	cases := []struct {
		parts []string
		want  bool
	}{
		{[]string{"header:webhook-id"}, false},
		{[]string{"body:sha256"}, false},
		{[]string{"json:id"}, true},
		{[]string{"header:X-Id", "json:data.id"}, true},
		{[]string{"header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id"}, false},
		{[]string{"header:X-Id|json:id"}, true},
	}
	for _, c := range cases {
		k, err := NewKeyer("src", c.parts)
		if err != nil {
			t.Fatalf("%v: %v", c.parts, err)
		}
		if got := k.ReadsJSON(); got != c.want {
			t.Errorf("Keyer%v.ReadsJSON() = %v, want %v", c.parts, got, c.want)
		}
		if len(c.parts) != 1 {
			continue
		}
		f, err := NewField(c.parts[0])
		if err != nil {
			t.Fatalf("%v: %v", c.parts, err)
		}
		if got := f.ReadsJSON(); got != c.want {
			t.Errorf("Field(%s).ReadsJSON() = %v, want %v", c.parts[0], got, c.want)
		}
	}
}
