package config

import (
	"testing"
)

// keys_url stands in for secrets (the keys may all be published), and is
// fetched only over https or from a loopback address.
func TestKeysURL(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://keys.example.com/jwks.json", true},
		{"http://127.0.0.1:8123/keys", true},
		{"http://[::1]:8123/keys", true},
		{"http://localhost/keys", true},
		{"http://10.0.0.1/keys", false},
		{"http://keys.example.com/keys", false},
		{"ftp://127.0.0.1/keys", false},
	} {
		path := writeFile(t, dir, "c.toml", `[[source]]
name = "pub"
provider = "standard"
forward = "http://127.0.0.1:9000/x"
keys_url = "`+c.url+`"
`, 0o644)
		if _, err := Load(path); c.ok != (err == nil) {
			t.Errorf("%s: %v", c.url, err)
		}
	}
}
