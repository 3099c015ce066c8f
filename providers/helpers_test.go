package providers

import (
	"strings"
	"testing"
	"time"
)

// hdrs is a Headers over a small slice; lookup is case-insensitive and does
// not allocate, so benchmarks measure the verifier, not the helper.
type hdrs []hdr

type hdr struct {
	name  string
	value []byte
}

func (h hdrs) Peek(name string) []byte {
	for i := range h {
		if strings.EqualFold(h[i].name, name) {
			return h[i].value
		}
	}
	return nil
}

func headersOf(hs []Header) hdrs {
	out := make(hdrs, 0, len(hs))
	for _, h := range hs {
		out = append(out, hdr{h.Name, []byte(h.Value)})
	}
	return out
}

func headerMap(m map[string]string) hdrs {
	out := make(hdrs, 0, len(m))
	for k, v := range m {
		out = append(out, hdr{k, []byte(v)})
	}
	return out
}

// with returns a copy of h with name set to value (added when absent).
func (h hdrs) with(name, value string) hdrs {
	out := make(hdrs, 0, len(h)+1)
	set := false
	for _, x := range h {
		if strings.EqualFold(x.name, name) {
			x = hdr{x.name, []byte(value)}
			set = true
		}
		out = append(out, x)
	}
	if !set {
		out = append(out, hdr{name, []byte(value)})
	}
	return out
}

// without returns a copy of h without name.
func (h hdrs) without(name string) hdrs {
	out := make(hdrs, 0, len(h))
	for _, x := range h {
		if !strings.EqualFold(x.name, name) {
			out = append(out, x)
		}
	}
	return out
}

func (h hdrs) get(name string) string { return string(h.Peek(name)) }

func mustLookup(t testing.TB, name string) Scheme {
	t.Helper()
	s, ok := Lookup(name)
	if !ok {
		t.Fatalf("Lookup(%q) failed", name)
	}
	return s
}

func mustVerifier(t testing.TB, scheme string, opts Options) Verifier {
	t.Helper()
	v, err := mustLookup(t, scheme).NewVerifier(opts)
	if err != nil {
		t.Fatalf("%s: NewVerifier: %v", scheme, err)
	}
	return v
}

func secrets(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func unix(sec int64) time.Time { return time.Unix(sec, 0) }
