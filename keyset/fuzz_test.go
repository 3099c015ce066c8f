package keyset

import (
	"encoding/json"
	"strings"
	"testing"

	"oncehook/providers"
)

// FuzzParseKeysDoc: a keys document is fetched from keys_url, so its bytes
// are whatever that server sends. Any document is either refused with an
// error that quotes none of its key material, or read into keys that each
// have a kid, a known alg and material; it never panics.
func FuzzParseKeysDoc(f *testing.F) {
	const fuzzNow = 1_750_000_000
	f.Add([]byte(`{"keys":[{"kid":"a","alg":"hmac-sha256","key":"whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ="}]}`), "standard")
	f.Add([]byte(`{"keys":[{"kid":"a","alg":"ed25519","key":"whpk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","nbf":1,"exp":2}]}`), "svix")
	f.Add([]byte(`{"keys":[{"kid":"b","alg":"es256","key":"x"},{"kid":"b","alg":"hmac-sha256","key":"y"}]}`), "stripe")
	f.Add([]byte(`{"keys":[{"kid":"c","alg":"hmac-sha256","key":"whsk_not-for-hmac-verification"}]}`), "github")
	f.Add([]byte(`{"keys":null}`), "standard")
	f.Add([]byte(`[]`), "nope")
	f.Fuzz(func(t *testing.T, doc []byte, provider string) {
		keys, skipped, err := parseKeysDoc(doc, provider, providers.Options{}, fuzzNow)
		if err != nil {
			if keys != nil || skipped != nil {
				t.Fatalf("refused with keys %d and skipped %d", len(keys), len(skipped))
			}
			var d Document
			if json.Unmarshal(doc, &d) != nil {
				return
			}
			for _, k := range d.Keys {
				if len(k.Key) >= 12 && strings.Contains(err.Error(), k.Key[4:]) {
					t.Fatalf("error quotes key material: %v", err)
				}
			}
			return
		}
		if n := mostInForce(keys, fuzzNow); n > maxKeysInForce {
			t.Fatalf("accepted %d keys in force at once", n)
		}
		for _, k := range keys {
			if !validKid(k.Kid) || k.Key == "" || (k.Alg != AlgEd25519 && k.Alg != AlgHMACSHA256) {
				t.Fatalf("accepted key %q alg %q with %d bytes of material", k.Kid, k.Alg, len(k.Key))
			}
			if k.Exp != 0 && k.Exp <= k.Nbf {
				t.Fatalf("accepted key %q valid from %d to %d", k.Kid, k.Nbf, k.Exp)
			}
		}
	})
}
