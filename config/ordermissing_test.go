package config

import "testing"

// TestOrderMissing: order.missing is "reject" (the default, also when
// unset) or "unordered"; anything else is refused at its line.
func TestOrderMissing(t *testing.T) {
	const fields = `object = "json:data.object.id", time = "json:created"`
	tests := []struct {
		name, line, want, err string
	}{
		{"unset", `order = { ` + fields + ` }`, "", ""},
		{"reject", `order = { ` + fields + `, missing = "reject" }`, OrderMissingReject, ""},
		{"unordered", `order = { ` + fields + `, missing = "unordered" }`, OrderMissingUnordered, ""},
		{"any case, as mode and provider", `order = { ` + fields + `, missing = "Unordered" }`, OrderMissingUnordered, ""},
		{"unknown", `order = { ` + fields + `, missing = "skip" }`, "",
			`oncehook.toml:5: source[0].order.missing: invalid missing "skip": want "reject"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadOneSource(t, tt.line, tt.err)
			if s == nil {
				return
			}
			if s.Order == nil || s.Order.Missing != tt.want {
				t.Fatalf("order = %+v, want missing %q", s.Order, tt.want)
			}
		})
	}
}
