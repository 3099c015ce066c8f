package forward

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// A delivery to a plain-HTTP handler, when the forwarder uses its own
// client (Options.Client nil), skips http.Client and http.Request: the
// request is written straight into the connection's buffer
// (transport.post). http.NewRequest, Client.Do's bookkeeping, a context
// per request and Request.Write were about a quarter of a delivery's CPU on
// a busy leader. The bytes written are those Request.Write writes for the
// same request (TestDirectRequestBytes, FuzzDirectRequest); anything
// unusual in the URL takes the ordinary path.

// plainTarget is a handler URL that deliveries may take without an
// http.Request.
type plainTarget struct {
	addr string // host:port to dial
	host string // the Host header
	uri  string // the request target: path and query
}

// plainTargets caches parsePlain by URL; a nil *plainTarget marks a URL
// that takes the ordinary path. Targets only change with a reload, but the
// map is cleared past maxPlainTargets URLs so that reloads cannot grow it
// for ever.
type plainTargets struct {
	mu sync.RWMutex
	m  map[string]*plainTarget
}

const maxPlainTargets = 256

func (p *plainTargets) get(rawURL string) *plainTarget {
	p.mu.RLock()
	pt, ok := p.m[rawURL]
	p.mu.RUnlock()
	if ok {
		return pt
	}
	pt = parsePlain(rawURL)
	p.mu.Lock()
	if p.m == nil || len(p.m) >= maxPlainTargets {
		p.m = make(map[string]*plainTarget)
	}
	p.m[rawURL] = pt
	p.mu.Unlock()
	return pt
}

// parsePlain returns the plain target of rawURL, or nil when a request to
// it takes the ordinary path: not http, user info, or a host that
// Request.Write would change (an IPv6 zone, non-ASCII) or reject.
func parsePlain(rawURL string) *plainTarget {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Host == "" || u.Opaque != "" {
		return nil
	}
	for i := 0; i < len(u.Host); i++ {
		switch c := u.Host[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '-', c == ':', c == '[', c == ']':
		default:
			return nil
		}
	}
	uri := u.RequestURI()
	for i := 0; i < len(uri); i++ {
		if c := uri[i]; c < ' ' || c == 0x7f {
			return nil
		}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	// http.NewRequest drops the colon of an empty port from the Host
	// header.
	host := strings.TrimSuffix(u.Host, ":")
	return &plainTarget{addr: addr, host: host, uri: uri}
}

// writeRequest writes a POST of body to pt with the User-Agent ua and the
// other headers h, as Request.Write writes it: request line, Host,
// User-Agent, Content-Length, then h sorted by name (Header.Write cleans
// the values the same way). h must hold none of the headers Request.Write
// writes itself (forwardable keeps them out, and the caller takes the
// User-Agent out of it). It changes nothing, so a request sent again on a
// new connection (transport.post) is the same.
func writeRequest(w *bufio.Writer, pt *plainTarget, ua string, h http.Header, body []byte) error {
	w.WriteString("POST ")
	w.WriteString(pt.uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(pt.host)
	w.WriteString("\r\nUser-Agent: ")
	w.WriteString(cleanValue(ua))
	w.WriteString("\r\nContent-Length: ")
	var nb [20]byte
	w.Write(strconv.AppendInt(nb[:0], int64(len(body)), 10))
	w.WriteString("\r\n")
	if err := h.Write(w); err != nil {
		return err
	}
	w.WriteString("\r\n")
	_, err := w.Write(body)
	return err
}

// cleanValue is what Header.Write makes of a header value: line breaks
// become spaces, and surrounding spaces, tabs and line breaks go.
func cleanValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
	}
	return strings.Trim(v, " \t\r\n")
}
