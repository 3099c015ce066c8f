package admin

import (
	"crypto/subtle"

	"oncehook/config"
)

// matchToken returns the index in tokens of the first token equal to got, or
// -1 when none is. It compares got against every token and picks the index
// without branching on a comparison, so its timing tells nothing about which
// token matched or how much of one did. The admin API's bearer check and the
// admin UI's sign-in both go through it.
func matchToken(tokens []config.AdminToken, got []byte) int {
	match := -1
	for i, t := range tokens {
		eq := subtle.ConstantTimeCompare(got, t.Token)
		first := eq & subtle.ConstantTimeEq(int32(match), -1)
		match = subtle.ConstantTimeSelect(first, i, match)
	}
	return match
}
