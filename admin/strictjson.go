package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"oncehook/engine"
)

// errEmptyBody is decodeRequest's answer to a request without a body.
var errEmptyBody = errors.New("empty body")

// decodeRequest reads r's JSON body, at most limit bytes, into the struct v
// points to. encoding/json alone would let through what a person reading
// the request would take differently from the server: a key that names a
// field only case-insensitively ("DRY_RUN" for dry_run), a key given twice
// (the last wins), and more data after the object (ignored). A reviewer of
// `{"dry_run":true,"DRY_RUN":false}` sees a dry run; the server would
// purge. Each is refused, as an unknown field is. errEmptyBody says there
// was no body at all.
func decodeRequest(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return errEmptyBody
	}
	if err := checkKeys(raw, jsonFields(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// jsonFields returns the JSON names of the fields of the struct v points to.
func jsonFields(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// checkKeys checks the top-level keys of the JSON object in raw: each must
// be one of names, spelled exactly, and given once. What is not an object
// is left to the decoder to refuse.
func checkKeys(raw []byte, names map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	seen := make(map[string]bool, len(names))
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil // malformed: the decoder says how
		}
		key, _ := t.(string)
		switch {
		case seen[key]:
			return fmt.Errorf("key %q given twice", key)
		case !names[key]:
			return fmt.Errorf("unknown key %q (keys are exact, lower case)", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// reasonProblem says what is wrong with an operator's reason (replay,
// purge, pause): it is required, and the audit keeps engine.MaxTextLen
// bytes of it, so a longer one is refused rather than cut without a word.
func reasonProblem(reason string) string {
	switch {
	case strings.TrimSpace(reason) == "":
		return "reason is required"
	case len(reason) > engine.MaxTextLen:
		return fmt.Sprintf("reason is %d bytes; at most %d are kept", len(reason), engine.MaxTextLen)
	}
	return ""
}
