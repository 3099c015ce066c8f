package config

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Sentinels callers and tests can branch on with errors.Is. Each problem Load
// or Validate reports is an *Error; those listed here wrap the sentinel.
var (
	// ErrUnknownKey: the file sets a key this version does not know (a typo,
	// or a key of a newer version). Never ignored: typos in ops configs are the
	// common failure.
	ErrUnknownKey = errors.New("unknown key")
	// ErrSecretFileMode: a secret, token or TLS key file is readable by
	// others (mode & 0o004) or writable by group or others (mode & 0o022), or
	// a config file holding credentials inline is readable by others; refused
	// like ssh refuses an unprotected private key.
	ErrSecretFileMode = errors.New("secret file mode is unsafe")
)

// Error is one problem in a config: `file:line: key: message`. File is empty
// for a Config that was not loaded from a file; Line is 0 when the key's line
// is unknown (the key is absent from the file, or the config was built in
// code). Err, when set, is the underlying cause (an *os.PathError, a sentinel).
type Error struct {
	File    string
	Line    int
	Key     string // e.g. "source[1].tolerance"; empty for whole-file problems
	Message string
	Err     error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// problems collects Errors for one Load or Validate, locating keys with the
// file's key lines.
type problems struct {
	file  string
	lines *keyLines // nil for a Config built in code
	list  []*Error
	// skip: keys whose value did not decode (reported then, left unset):
	// a later check of the unset value would report the same mistake again.
	skip map[string]bool
}

// undecoded records that key's value did not decode.
func (p *problems) undecoded(key string) {
	if p.skip == nil {
		p.skip = map[string]bool{}
	}
	p.skip[key] = true
}

// add records a problem at key. The line is that of the first of key and
// lineKeys found in the file, else that of the nearest enclosing table.
func (p *problems) add(key string, cause error, msg string, lineKeys ...string) {
	if p.skip[key] {
		return
	}
	line := 0
	if p.lines != nil {
		line = p.lines.find(append([]string{key}, lineKeys...)...)
	}
	p.list = append(p.list, &Error{File: p.file, Line: line, Key: key, Message: msg, Err: cause})
}

// has reports whether a problem was recorded at key or below it, so that a
// later check does not report the same root cause twice.
func (p *problems) has(key string) bool {
	for _, e := range p.list {
		if e.Key == key || strings.HasPrefix(e.Key, key+".") || strings.HasPrefix(e.Key, key+"[") {
			return true
		}
	}
	return false
}

// err joins the problems in file order (problems without a line last), or nil.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	list := slices.Clone(p.list)
	slices.SortStableFunc(list, func(a, b *Error) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = int(^uint(0) >> 1)
		}
		if lb == 0 {
			lb = int(^uint(0) >> 1)
		}
		return cmp.Compare(la, lb)
	})
	errs := make([]error, len(list))
	for i, e := range list {
		errs[i] = e
	}
	return errors.Join(errs...)
}
