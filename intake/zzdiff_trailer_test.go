package intake

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"oncehook/providers"
)

func TestZZDiffTrailers(t *testing.T) {
	f := newIntakeFixture(t)
	srv := f.in.HTTPServer()
	sign := func(body, id string) string {
		s, _ := providers.Lookup("standard")
		hs, err := s.Sign([]byte(body), []byte(f.secret), time.Now(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, h := range hs {
			fmt.Fprintf(&b, "%s: %s\r\n", h.Name, h.Value)
		}
		return b.String()
	}
	small := `{"a":1}`
	big := `{"a":"` + strings.Repeat("x", 12000) + `"}`
	run := func(name, proto, extraHead, body, trailer, id string) {
		head := "POST /in/filtered " + proto + "\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" + extraHead + sign(body, id) + "\r\n"
		raw := head + fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, trailer)
		c := &fuzzConn{in: bytes.NewReader([]byte(raw)), remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}
		_ = srv.ServeConn(c)
		out := c.out.String()
		line, _, _ := strings.Cut(out, "\r\n")
		_, b, _ := strings.Cut(out, "\r\n\r\n")
		t.Logf("%-40s %s %.90s", name, line, b)
	}
	run("small + trailer", "HTTP/1.1", "", small, "X-Extra: 1\r\n", "m1")
	run("big + trailer", "HTTP/1.1", "", big, "X-Extra: 1\r\n", "m2")
	run("HTTP/1.0 small + trailer", "HTTP/1.0", "", small, "X-Extra: 1\r\n", "m3")
	run("declared, sent as header, no trailer", "HTTP/1.1", "Trailer: X-Foo\r\nX-Foo: bar\r\n", small, "", "m4")
	run("declared only, no trailer", "HTTP/1.1", "Trailer: X-Foo\r\n", small, "", "m5")
	run("plain chunked", "HTTP/1.1", "", small, "", "m6")
}
