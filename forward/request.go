package forward

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"oncehook/engine"
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

// headerLine is one header of a delivery as writeDelivery writes it: a
// canonical name and either a value or, for the attempt and the fencing
// token, a number.
type headerLine struct {
	name  string
	value string
	num   uint64
	isNum bool
}

// ownHeader reports whether a canonical name is one setHeaders sets (or
// removes) on every delivery, replacing a stored header of that name.
func ownHeader(name string) bool {
	switch name {
	case HeaderIdempotencyKey, HeaderEventKey, HeaderSource, HeaderAttempt, HeaderFencingToken, HeaderLastStep, HeaderReplayedAt:
		return true
	}
	return false
}

// writeDelivery writes the request a delivery of ev (attempt n) to pt is:
// the bytes writeRequest writes for the headers setHeaders puts in a map,
// without the map. Building and sorting the map was 15 allocations and
// about 2 µs per delivery; here the lines stay in an array on the stack
// for the usual dozen headers.
func writeDelivery(w *bufio.Writer, pt *plainTarget, ev *engine.Event, attempt int) error {
	var stack [16]headerLine
	lines := stack[:0]
	ua, uaSeen := "", false
	for _, kv := range ev.Headers {
		if !forwardable(kv.Name, kv.Value) {
			continue
		}
		name := http.CanonicalHeaderKey(kv.Name)
		switch {
		case name == "User-Agent":
			if !uaSeen {
				ua, uaSeen = kv.Value, true // the first one counts, as Header.Get's
			}
			continue
		case ownHeader(name):
			continue
		}
		lines = append(lines, headerLine{name: name, value: kv.Value})
	}
	if ua == "" {
		ua = "oncehook"
	}
	lines = append(lines,
		headerLine{name: HeaderIdempotencyKey, value: ev.Key},
		headerLine{name: HeaderEventKey, value: ev.Key},
		headerLine{name: HeaderSource, value: ev.Source},
		headerLine{name: HeaderAttempt, num: uint64(attempt), isNum: true},
		headerLine{name: HeaderFencingToken, num: ev.Token, isNum: true})
	if ev.Step != "" {
		lines = append(lines, headerLine{name: HeaderLastStep, value: ev.Step})
	}
	if at := replayedAt(ev); at != "" {
		lines = append(lines, headerLine{name: HeaderReplayedAt, value: at})
	}
	// Header.Write's order: by name, and a name's values in the order added
	// (an insertion sort is stable, and there are a dozen lines).
	for i := 1; i < len(lines); i++ {
		for j := i; j > 0 && lines[j].name < lines[j-1].name; j-- {
			lines[j], lines[j-1] = lines[j-1], lines[j]
		}
	}

	writeRequestHead(w, pt, ua, len(ev.Payload))
	for i := range lines {
		l := &lines[i]
		w.WriteString(l.name)
		w.WriteString(": ")
		if l.isNum {
			w.Write(strconv.AppendUint(w.AvailableBuffer(), l.num, 10))
		} else {
			w.WriteString(cleanValue(l.value))
		}
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	_, err := w.Write(ev.Payload)
	return err
}

// writeRequestHead writes what Request.Write writes before the other
// headers of a POST: the request line, Host, User-Agent and Content-Length.
func writeRequestHead(w *bufio.Writer, pt *plainTarget, ua string, bodyLen int) {
	w.WriteString("POST ")
	w.WriteString(pt.uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(pt.host)
	w.WriteString("\r\nUser-Agent: ")
	w.WriteString(cleanValue(ua))
	w.WriteString("\r\nContent-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(bodyLen), 10)) // in place: no allocation
	w.WriteString("\r\n")
}

// cleanValue is what Header.Write makes of a header value: line breaks
// become spaces, and surrounding spaces, tabs and line breaks go.
func cleanValue(v string) string {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v)
	}
	return strings.Trim(v, " \t\r\n")
}
