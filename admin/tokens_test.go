package admin

import (
	"testing"

	"oncehook/config"
)

func TestMatchToken(t *testing.T) {
	a := config.AdminToken{Name: "ops", Token: config.Secret("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")}
	b := config.AdminToken{Name: "ci", Token: config.Secret("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")}
	dup := config.AdminToken{Name: "ops-again", Token: a.Token}
	tests := []struct {
		name   string
		tokens []config.AdminToken
		got    string
		want   int
	}{
		{"no tokens", nil, string(a.Token), -1},
		{"empty token given", []config.AdminToken{a, b}, "", -1},
		{"first", []config.AdminToken{a, b}, string(a.Token), 0},
		{"last", []config.AdminToken{a, b}, string(b.Token), 1},
		{"none", []config.AdminToken{a, b}, "cccccccccccccccccccccccccccccccc", -1},
		{"prefix is not a match", []config.AdminToken{a, b}, string(a.Token[:31]), -1},
		{"longer is not a match", []config.AdminToken{a, b}, string(a.Token) + "a", -1},
		{"first of two equal tokens wins", []config.AdminToken{b, a, dup}, string(a.Token), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := matchToken(tc.tokens, []byte(tc.got)); got != tc.want {
				t.Errorf("matchToken = %d, want %d", got, tc.want)
			}
		})
	}
}
