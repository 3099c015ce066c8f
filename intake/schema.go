package intake

// Payload schemas: a source's schema_file is a JSON Schema that a
// verified body must satisfy before anything is keyed or stored. The schema is
// compiled once per (re)load by CompileSource; a schema that does not compile
// is a load or reload error (and an `oncehook validate` error), so a running
// node never serves with a broken one.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaPrinter renders violation messages (in English).
var schemaPrinter = message.NewPrinter(language.English)

// maxSchemaMessage bounds the violation text in a 400 answer.
const maxSchemaMessage = 200

// payloadSchema is one source's compiled schema_file. It is immutable and safe
// for concurrent use.
type payloadSchema struct {
	path string
	sch  *jsonschema.Schema
}

// compileSchema reads and compiles the JSON Schema at path (absolute, as config
// resolves it). Drafts 4 to 2020-12 are recognised by "$schema"; without one
// the schema is read as 2020-12. "format" is asserted, not just annotated.
// $ref may name other local files relative to the schema; remote URLs are not
// fetched (the compiler's default loader reads file: URLs only), so a schema
// never makes a load depend on the network.
func compileSchema(path string) (*payloadSchema, error) {
	// A file that is not JSON is refused here, by offset: the JSON
	// decoder's message quotes the character it stopped at, and a path
	// mistyped to name a secret's file would print a piece of it.
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema_file %s: %w", path, err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("schema_file %s: not JSON (syntax error at byte %d)", path, se.Offset)
		}
		return nil, fmt.Errorf("schema_file %s: not JSON", path)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	sch, err := c.Compile(path)
	if err != nil {
		return nil, fmt.Errorf("schema_file %s: %w", path, err)
	}
	return &payloadSchema{path: path, sch: sch}, nil
}

// validate checks body against the schema. It returns "" when the body is
// valid, else the text of the 400 answer: "schema: <path>: <message>", where
// path is the JSON pointer of the first violation in the instance ("/" for the
// document itself). Among several violations, "first" is the smallest instance
// path, then the smallest keyword path, so that the answer does not depend on
// the validator's map iteration order.
func (p *payloadSchema) validate(body []byte) string {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return "schema: /: body is not JSON"
	}
	err = p.sch.Validate(doc)
	if err == nil {
		return ""
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return clipMessage("schema: /: " + err.Error())
	}
	leaf := firstViolation(ve)
	ptr := jsonPointer(leaf.InstanceLocation)
	return clipMessage("schema: " + ptr + ": " + leaf.ErrorKind.LocalizedString(schemaPrinter))
}

// firstViolation returns the leaf error (one without causes) with the
// smallest instance location, then keyword path.
func firstViolation(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	return slices.MinFunc(leaves, func(a, b *jsonschema.ValidationError) int {
		if c := slices.Compare(a.InstanceLocation, b.InstanceLocation); c != 0 {
			return c
		}
		return slices.Compare(a.ErrorKind.KeywordPath(), b.ErrorKind.KeywordPath())
	})
}

// jsonPointer renders instance path tokens as an RFC 6901 pointer, "/" for
// the document itself.
func jsonPointer(tokens []string) string {
	if len(tokens) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

func clipMessage(s string) string {
	if len(s) <= maxSchemaMessage {
		return s
	}
	n := maxSchemaMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
