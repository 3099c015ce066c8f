package adminclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// UsageError is a mistake in how a command was called: the CLI exits 2.
type UsageError struct{ Msg string }

func (e UsageError) Error() string { return e.Msg }

// Client talks to a node's admin API for the client commands.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// DefaultAdminPort is the admin listener's port when [admin] listen gives
// none of its own (config.example.toml: 127.0.0.1:7071).
const DefaultAdminPort = "7071"

// withAdminPort gives a bare host (no scheme written: "10.0.0.2",
// "node1:", "[::1]") the admin listener's default port, not the one http
// would take (80), where no node listens. An address with a scheme is kept
// as written: https://admin.example.com is a proxy's or an ingress's 443.
func withAdminPort(a string) string {
	host, path, _ := strings.Cut(a, "/")
	if h, p, err := net.SplitHostPort(host); err == nil {
		if p != "" {
			return a
		}
		host = h // "node1:"
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return a
	}
	a = net.JoinHostPort(host, DefaultAdminPort)
	if path != "" {
		a += "/" + path
	}
	return a
}

// Flags adds -addr, -token-file and -ca to fs and returns a constructor, to
// call once fs is parsed. The client speaks https when the address says
// https:// or when a CA bundle is given (an address without a scheme then
// means https).
func Flags(fs *flag.FlagSet) func() (*Client, error) {
	addr := fs.String("addr", os.Getenv("ONCEHOOK_ADDR"), "admin address (env ONCEHOOK_ADDR; default 127.0.0.1:7071; a host alone means port 7071; https://host:port for TLS)")
	tokenFile := fs.String("token-file", os.Getenv("ONCEHOOK_TOKEN_FILE"), "file holding the admin token (env ONCEHOOK_TOKEN_FILE, or ONCEHOOK_TOKEN)")
	caFile := fs.String("ca", os.Getenv("ONCEHOOK_CA"), "PEM bundle of the CAs to trust for an https admin address (env ONCEHOOK_CA; implies https)")
	return func() (*Client, error) {
		a := *addr
		if a == "" {
			a = "127.0.0.1:7071"
		}
		if !strings.Contains(a, "://") {
			a = withAdminPort(a)
		}
		switch {
		case !strings.Contains(a, "://") && *caFile != "":
			a = "https://" + a
		case !strings.Contains(a, "://"):
			a = "http://" + a
		case strings.HasPrefix(a, "http://") && *caFile != "":
			return nil, UsageError{fmt.Sprintf("-ca (or ONCEHOOK_CA) is for https, but the address is %s", a)}
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				return nil, fmt.Errorf("ca file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("ca file %s holds no PEM certificate", *caFile)
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		// Trimmed as the node trims its token files: `export
		// ONCEHOOK_TOKEN=$(cat f)` keeps no newline, but other ways do.
		tok, from := strings.TrimSpace(os.Getenv("ONCEHOOK_TOKEN")), "ONCEHOOK_TOKEN"
		if *tokenFile != "" {
			b, err := os.ReadFile(*tokenFile)
			if err != nil {
				return nil, fmt.Errorf("token file: %w", err)
			}
			// The node refuses its own token files when others can read
			// them; the CLI only warns, as the token is already out.
			if fi, err := os.Stat(*tokenFile); err == nil && fi.Mode().Perm()&0o004 != 0 {
				fmt.Fprintf(fs.Output(), "warning: token file %s has mode %#o: anyone on this machine can read the admin token (chmod o-rwx %s)\n",
					*tokenFile, fi.Mode().Perm(), *tokenFile)
			}
			// A token file saved by Notepad starts with a byte order mark:
			// it is not part of the token (config reads its token files so).
			tok, from = strings.TrimSpace(strings.TrimPrefix(string(b), "\ufeff")), "token file "+*tokenFile
			if tok == "" {
				return nil, fmt.Errorf("%s is empty: put the admin token in it (one of [admin] tokens)", from)
			}
		}
		if strings.ContainsFunc(tok, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%s holds control bytes, which cannot be sent in an Authorization header (a binary file? the node refuses such a token too)", from)
		}
		return &Client{base: strings.TrimRight(a, "/"), token: tok, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
	}
}

// Do sends body (if any) as JSON and decodes a 2xx answer into out (if
// any); any other status is an error with the API's error text.
func (c *Client) Do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := c.raw(ctx, method, path, rd)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if resp.StatusCode/100 != 2 {
		return c.statusError(method+" "+path, resp.StatusCode, data)
	}
	if err != nil {
		return fmt.Errorf("%s %s at %s: reading the answer: %w", method, path, c.base, err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("%s %s at %s: the answer is larger than %d MiB, more than the admin API sends", method, path, c.base, maxAnswer>>20)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s at %s: the answer (Content-Type %q) is not the admin API's JSON; is this the admin address? %w",
			method, path, c.base, resp.Header.Get("Content-Type"), err)
	}
	return nil
}

// maxAnswer bounds what Do reads of an answer. The largest the admin API
// sends is an event with its payload: up to 64 MiB (the largest max_body),
// which JSON's escapes (\u003c for "<") can make six times as long.
const maxAnswer = 6*64<<20 + 1<<20

// statusError is the error for an answer that is not a success: what was
// asked, the status and the API's error text, with a hint on what to change
// for the two mistakes an operator makes first, which the answer alone does
// not name:
//   - a 401 to a client that sent no token: none was configured here;
//   - a 404 that says only "not found": the intake's answer to any path but
//     /in/, /livez and /readyz (every admin 404 names what it did not find:
//     "no event with key ...", "unknown source ..."): the address is the
//     intake listener, not the admin one.
func (c *Client) statusError(what string, status int, body []byte) error {
	return &AnswerError{What: what, Status: status, Body: body, hint: c.hint(status, errorText(body))}
}

// AnswerError is an answer of the admin API that is not a success: what
// was asked, the status, and the body as it came (an answer may say more
// than its error, as a purge cut short names what it deleted).
type AnswerError struct {
	What   string
	Status int
	Body   []byte
	hint   string
}

func (e *AnswerError) Error() string {
	return fmt.Sprintf("%s: %d: %s%s", e.What, e.Status, errorText(e.Body), e.hint)
}

// hint says what to change for an answer the operator's first mistakes
// give (statusError).
func (c *Client) hint(status int, text string) string {
	hint := ""
	switch {
	case status == http.StatusUnauthorized && c.token == "":
		hint = " (no admin token given: set -token-file, ONCEHOOK_TOKEN_FILE or ONCEHOOK_TOKEN)"
	case status == http.StatusBadRequest && strings.Contains(text, "HTTP request to an HTTPS server"):
		hint = fmt.Sprintf(" (the admin listener speaks TLS: use https:// in the address, and -ca or ONCEHOOK_CA for its CA; the address was %s)", c.base)
	case status == http.StatusNotFound && text == "not found":
		hint = fmt.Sprintf(" (is %s the admin listener ([admin] listen)? this looks like the intake's answer)", c.base)
	case status == http.StatusNotFound && strings.HasPrefix(text, "no such route") && hasPath(c.base):
		hint = fmt.Sprintf(" (the address %s has a path: give the listener's address alone, the client adds /v1/...)", c.base)
	}
	return hint
}

// errorText is the "error" of an admin API JSON error, or the body as is.
func errorText(body []byte) string {
	var e struct{ Error string }
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

func (c *Client) raw(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

func (c *Client) send(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if req.Body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		hint := tlsHint(err)
		if hint == "" && errors.Is(err, syscall.ECONNRESET) && (req.Method == http.MethodGet || !wrote.Load()) {
			// What the cluster port does to an HTTP request; nothing was
			// asked of the node that could have taken effect.
			hint = " (the connection was reset without an answer: is this the [admin] listen address, not the cluster port? give it with -addr or ONCEHOOK_ADDR)"
		}
		if hint == "" && req.Method != http.MethodGet && wrote.Load() {
			// Sent, then no answer (the connection broke, or the wait
			// ended): the node may have acted on it (a replay run twice
			// runs the handler twice).
			hint = " (no answer after the request was sent: it may have taken effect; check with oncehook status or events before running it again)"
		}
		return nil, fmt.Errorf("admin API %s: %w%s", c.base, err, hint)
	}
	return resp, nil
}

// hasPath reports whether an address holds a path past its host.
func hasPath(base string) bool {
	_, rest, _ := strings.Cut(base, "://")
	_, path, ok := strings.Cut(rest, "/")
	return ok && path != ""
}

// tlsHint says what to give for a certificate the client cannot check.
func tlsHint(err error) string {
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	switch {
	case errors.As(err, &unknown):
		return " (give the CA that signed the admin certificate with -ca or ONCEHOOK_CA)"
	case errors.As(err, &host):
		return " (the admin certificate does not name this host: use an address it names)"
	case errors.As(err, &invalid):
		return " (the admin certificate is not valid now, or not for a server)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return " (is the node running, and is this its [admin] listen address? give it with -addr or ONCEHOOK_ADDR)"
	}
	return ""
}

// printJSON prints v as indented JSON, keys and text as they are ("a&b",
// not "a\u0026b": a key copied from it must find the event).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
