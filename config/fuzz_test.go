package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: whatever a config file holds, loading it either fails with an
// error that says where (the file, and a key or line when there is one) or
// gives a config that validates its own sources; it never panics, and a
// syntax error never quotes the text it found (it may be a secret written
// without quotes).
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(filepath.Join("..", "config.example.toml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	f.Add("[node]\nid = \"n1\"\n[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s3cret-s3cret-s3cret\"]\nforward = \"http://127.0.0.1:9000/gh\"\n")
	f.Add("[[source]]\nname = \"x\"\nprovider = \"hmac\"\nsecrets = [\"k\"]\nkey = [\"header:X-Id\"]\nhmac = { header = \"X-Sig\", template = \"{body}\" }\n")
	f.Add("[cluster]\npeers = [{ id = \"a\", address = \"127.0.0.1:7000\" }]\n")
	f.Add("secrets = [whsec_unquoted]\n")
	f.Add("[[source]]\nname = \"s\"\ntolerance = \"-1s\"\nmax_body = \"1ZB\"\n")
	dir := f.TempDir()
	path := filepath.Join(dir, "oncehook.toml")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := parse(path, []byte(text))
		if err != nil {
			if !strings.HasPrefix(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c == nil {
			t.Fatal("no error and no config")
		}
		_ = c.Warnings()
	})
}
