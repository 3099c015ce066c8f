package intake

import (
	"testing"

	"github.com/valyala/fasthttp"

	"oncehook/providers"
)

// TestTypeFilterAllocs: reading and matching the type allocates nothing, so
// a filtered source's delivery that is claimed costs no more allocations.
func TestTypeFilterAllocs(t *testing.T) {
	var h fasthttp.RequestHeader
	h.Set("X-GitHub-Event", "push")
	body := []byte(`{"id":"evt_1","type":"charge.succeeded","data":{"object":{"id":"ch_1"}}}`)
	for _, c := range []struct {
		spec   string
		accept bool
		list   []string
		drop   bool
	}{
		{"json:type", false, []string{"charge.updated"}, false},
		{"json:type", true, []string{"charge.succeeded"}, false},
		{"header:X-GitHub-Event", true, []string{"push"}, false},
		{"header:X-GitHub-Event", false, []string{"push"}, true},
		{"json:missing", true, []string{"push"}, true},
	} {
		f, err := providers.NewField(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		src := &Source{typeField: f, acceptTypes: c.accept, types: map[string]struct{}{}}
		for _, typ := range c.list {
			src.types[typ] = struct{}{}
		}
		if _, drop, _ := src.filter(&h, body); drop != c.drop {
			t.Errorf("%s accept=%v %q: drop = %v, want %v", c.spec, c.accept, c.list, drop, c.drop)
		}
		if n := testing.AllocsPerRun(100, func() { src.filter(&h, body) }); n != 0 {
			t.Errorf("%s: %v allocations per filter", c.spec, n)
		}
	}
}
