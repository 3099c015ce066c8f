package intake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// orderSchema is a schema_file as a source would name it.
const orderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["id", "type", "data"],
  "properties": {
    "id": {"type": "string", "pattern": "^evt_"},
    "type": {"enum": ["order.created", "order.paid"]},
    "data": {
      "type": "object",
      "required": ["amount"],
      "properties": {
        "amount": {"type": "integer", "minimum": 1},
        "email": {"type": "string", "format": "email"}
      }
    }
  }
}`

func TestSchemaValidateMessages(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	mustWrite(t, path, orderSchema)
	ps, err := compileSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ body, want string }{
		{`{"id":"evt_1","type":"order.paid","data":{"amount":5}}`, ""},
		{`{"id":"evt_1","type":"order.paid","data":{"amount":"5"}}`, "schema: /data/amount: got string, want integer"},
		{`{"id":"evt_1","type":"order.paid","data":{"amount":0}}`, "schema: /data/amount: minimum: got 0, want 1"},
		{`{"id":"evt_1","type":"order.paid","data":{}}`, "schema: /data: missing property 'amount'"},
		{`{"id":"evt_1","type":"order.paid"}`, "schema: /: missing property 'data'"},
		{`{"id":"x1","type":"order.paid","data":{"amount":5}}`, "schema: /id: "},
		{`{"id":"evt_1","type":"order.paid","data":{"amount":5,"email":"not an email"}}`, "schema: /data/email: "},
		// Two violations: the smaller instance path is reported, whatever the
		// validator's order.
		{`{"id":7,"type":"nope","data":{"amount":"x"}}`, "schema: /data/amount: "},
		{`[1,2]`, "schema: /: got array, want object"},
		{`{"id":`, "schema: /: body is not JSON"},
		{`{"id":"evt_1"} trailing`, "schema: /: body is not JSON"},
	}
	for _, c := range cases {
		got := ps.validate([]byte(c.body))
		if c.want == "" && got != "" || c.want != "" && !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, want %q", c.body, got, c.want)
		}
	}
	// The same body always names the same violation.
	body := []byte(`{"id":7,"type":"nope","data":{"amount":"x","email":3}}`)
	first := ps.validate(body)
	for i := 0; i < 50; i++ {
		if got := ps.validate(body); got != first {
			t.Fatalf("violation changed between runs: %q then %q", first, got)
		}
	}
	for _, bad := range []string{`{"type": 12}`, `{"$ref": "https://example.com/remote.json"}`, `not json`} {
		mustWrite(t, path, bad)
		if _, err := compileSchema(path); err == nil {
			t.Errorf("schema %s compiled", bad)
		}
	}
	if _, err := compileSchema(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing schema file compiled")
	}
	// A file that is not JSON (a secret's, by a mistyped path) is refused
	// without a character of it in the message.
	mustWrite(t, path, "dQw4-secret-value\n")
	if _, err := compileSchema(path); err == nil || strings.Contains(err.Error(), "'d'") || strings.Contains(err.Error(), "dQw") ||
		!strings.Contains(err.Error(), "not JSON") {
		t.Errorf("a secret's file as schema: %v, want \"not JSON\" and none of its text", err)
	}
}

func BenchmarkSchemaValidate(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "s.json")
	if err := os.WriteFile(path, []byte(orderSchema), 0o600); err != nil {
		b.Fatal(err)
	}
	ps, err := compileSchema(path)
	if err != nil {
		b.Fatal(err)
	}
	head := `{"id":"evt_1","type":"order.paid","data":{"amount":5,"email":"a@example.com","note":"`
	tail := `"}}`
	body := []byte(head + strings.Repeat("p", 1024-len(head)-len(tail)) + tail)
	if len(body) != 1024 {
		b.Fatalf("body is %d bytes", len(body))
	}
	if msg := ps.validate(body); msg != "" {
		b.Fatal(msg)
	}
	b.Run("valid-1KiB", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if msg := ps.validate(body); msg != "" {
				b.Fatal(msg)
			}
		}
	})
	bad := []byte(strings.Replace(string(body), `"amount":5`, `"amount":"5"`, 1))
	b.Run("invalid-1KiB", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if msg := ps.validate(bad); msg == "" {
				b.Fatal("valid")
			}
		}
	})
}
