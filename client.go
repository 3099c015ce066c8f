package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"oncehook/admin"
)

// adminClient talks to a node's admin API for the client commands.
type adminClient struct {
	base  string
	token string
	http  *http.Client
}

// clientFlags adds -addr, -token-file and -ca to fs and returns a
// constructor. The client speaks https when the address says https:// or
// when a CA bundle is given (an address without a scheme then means https).
func clientFlags(fs *flag.FlagSet) func() (*adminClient, error) {
	addr := fs.String("addr", os.Getenv("ONCEHOOK_ADDR"), "admin address (env ONCEHOOK_ADDR; default 127.0.0.1:7071; https://host:port for TLS)")
	tokenFile := fs.String("token-file", os.Getenv("ONCEHOOK_TOKEN_FILE"), "file holding the admin token (env ONCEHOOK_TOKEN_FILE, or ONCEHOOK_TOKEN)")
	caFile := fs.String("ca", os.Getenv("ONCEHOOK_CA"), "PEM bundle of the CAs to trust for an https admin address (env ONCEHOOK_CA; implies https)")
	return func() (*adminClient, error) {
		a := *addr
		if a == "" {
			a = "127.0.0.1:7071"
		}
		switch {
		case !strings.Contains(a, "://") && *caFile != "":
			a = "https://" + a
		case !strings.Contains(a, "://"):
			a = "http://" + a
		case strings.HasPrefix(a, "http://") && *caFile != "":
			return nil, usageError{fmt.Sprintf("-ca (or ONCEHOOK_CA) is for https, but the address is %s", a)}
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
		tok := os.Getenv("ONCEHOOK_TOKEN")
		if *tokenFile != "" {
			b, err := os.ReadFile(*tokenFile)
			if err != nil {
				return nil, fmt.Errorf("token file: %w", err)
			}
			tok = strings.TrimSpace(string(b))
		}
		return &adminClient{base: strings.TrimRight(a, "/"), token: tok, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
	}
}

func (c *adminClient) do(ctx context.Context, method, path string, body any, out any) error {
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
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, errorText(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// errorText is the "error" of an admin API JSON error, or the body as is.
func errorText(body []byte) string {
	var e struct{ Error string }
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

func (c *adminClient) raw(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

func (c *adminClient) send(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if req.Body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin API %s: %w", c.base, err)
	}
	return resp, nil
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	mk := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := mk()
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/status", nil, &raw); err != nil {
		return err
	}
	if *asJSON {
		return printAnswer(stdout, raw)
	}
	var st statusAnswer
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("GET /v1/status: %w", err)
	}
	printStatus(stdout, &st)
	return nil
}

func cmdEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "show" {
		return cmdEventShow(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("events", stderr)
	mk := clientFlags(fs)
	state := fs.String("state", "", "pending|processing|done|dead|stale")
	source := fs.String("source", "", "source name")
	limit := fs.Int("limit", 100, "most events to list (a page holds at most 1000)")
	after := fs.String("after", "", "start after this cursor (the \"next\" a previous page printed)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c, err := mk()
	if err != nil {
		return err
	}
	q := url.Values{}
	if *state != "" {
		q.Set("state", *state)
	}
	if *source != "" {
		q.Set("source", *source)
	}
	q.Set("limit", fmt.Sprint(*limit))
	if *after != "" {
		q.Set("after", *after)
	}
	var out struct {
		Events []admin.Event `json:"events"`
		Next   string        `json:"next"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &out); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tATTEMPTS\tSTEP\tUPDATED\tLAST ERROR")
	for _, e := range out.Events {
		step := e.Step
		if step == "" {
			step = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", e.Key, e.State, e.Attempts, step, e.UpdatedAt, e.LastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if out.Next != "" {
		fmt.Fprintf(stderr, "more events: add -after %q\n", out.Next)
	}
	return nil
}

func cmdEventShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("events show", stderr)
	mk := clientFlags(fs)
	body := fs.Bool("body", false, "include headers, cached response and payload")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"events show needs one KEY (e.g. stripe-live:evt_123)"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	path := "/v1/events/" + url.PathEscape(fs.Arg(0))
	if *body {
		path += "?body=1"
	}
	var ev json.RawMessage
	if err := c.do(ctx, http.MethodGet, path, nil, &ev); err != nil {
		return err
	}
	return printAnswer(stdout, ev)
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	mk := clientFlags(fs)
	var keys multiFlag
	fs.Var(&keys, "key", "full scoped key to replay (repeatable)")
	source := fs.String("source", "", "source name (with -state)")
	state := fs.String("state", "", "replay every event in this state: dead|done|stale")
	since := fs.String("since", "", "with -state: only events updated since (duration like 24h, or RFC3339)")
	reason := fs.String("reason", "", "why (recorded in the audit trail; required)")
	dry := fs.Bool("dry-run", false, "show what would be replayed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *reason == "" {
		return usageError{"replay needs -reason"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	var out json.RawMessage
	req := admin.ReplayRequest{Source: *source, Keys: keys, State: *state, Since: *since, Reason: *reason, DryRun: *dry}
	if err := c.do(ctx, http.MethodPost, "/v1/replay", req, &out); err != nil {
		return err
	}
	return printAnswer(stdout, out)
}

// cmdPause is oncehook pause and oncehook resume: POST
// /v1/sources/{name}/pause or .../resume.
func cmdPause(ctx context.Context, args []string, stdout, stderr io.Writer, pause bool) error {
	verb := "resume"
	if pause {
		verb = "pause"
	}
	fs := newFlags(verb, stderr)
	mk := clientFlags(fs)
	source := fs.String("source", "", "source name (required)")
	reason := fs.String("reason", "", "why (recorded with the pause; required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *source == "" || *reason == "" {
		return usageError{verb + " needs -source and -reason"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	var out json.RawMessage
	path := "/v1/sources/" + url.PathEscape(*source) + "/" + verb
	if err := c.do(ctx, http.MethodPost, path, admin.PauseRequest{Reason: *reason}, &out); err != nil {
		return err
	}
	return printAnswer(stdout, out)
}

func cmdRaft(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"raft needs list-peers or remove-peer"}
	}
	fs := newFlags("raft "+args[0], stderr)
	mk := clientFlags(fs)
	id := fs.String("id", "", "server id (remove-peer)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	c, err := mk()
	if err != nil {
		return err
	}
	switch args[0] {
	case "list-peers":
		var st struct {
			Nodes []struct{ ID, Address, Suffrage, State string } `json:"nodes"`
		}
		if err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "Node\tID\tAddress\tState\tVoter")
		for _, n := range st.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", n.ID, n.ID, n.Address, n.State, n.Suffrage == "Voter")
		}
		return tw.Flush()
	case "remove-peer":
		if *id == "" {
			return usageError{"remove-peer needs -id"}
		}
		if err := c.do(ctx, http.MethodDelete, "/v1/cluster/peers/"+url.PathEscape(*id), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s\n", *id)
		return nil
	}
	return usageError{fmt.Sprintf("unknown raft command %q", args[0])}
}

func cmdSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{"snapshot needs save FILE or restore FILE"}
	}
	fs := newFlags("snapshot "+args[0], stderr)
	mk := clientFlags(fs)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"snapshot " + args[0] + " needs one FILE"}
	}
	c, err := mk()
	if err != nil {
		return err
	}
	file := fs.Arg(0)
	// A backup streams for as long as the state takes; ctx bounds it.
	c.http.Timeout = 0
	switch args[0] {
	case "save":
		resp, err := c.raw(ctx, http.MethodGet, "/v1/backup", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return fmt.Errorf("backup: %d: %s", resp.StatusCode, errorText(b))
		}
		tmp := file + ".tmp"
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, resp.Body)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
			return fmt.Errorf("write snapshot: %w", err)
		}
		if err := os.Rename(tmp, file); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "saved %s (%d bytes)\n", file, n)
		return nil
	case "restore":
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/restore", f)
		if err != nil {
			return err
		}
		// The length lets the node refuse a backup over admin.max_restore
		// before any of it is sent.
		req.ContentLength = fi.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Expect", "100-continue")
		resp, err := c.send(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("restore: %d: %s", resp.StatusCode, errorText(b))
		}
		fmt.Fprintf(stdout, "restored %s\n", file)
		return nil
	}
	return usageError{fmt.Sprintf("unknown snapshot command %q", args[0])}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
