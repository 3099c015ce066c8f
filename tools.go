package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"oncehook/cluster"
	"oncehook/config"
	"oncehook/intake"
	"oncehook/providers"
)

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stdout, stderr)
	path := fs.String("config", os.Getenv("ONCEHOOK_CONFIG"), "config file to check")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, "give the file with -config F"); err != nil {
		return err
	}
	if *path == "" {
		return usageError{"validate needs -config FILE (or ONCEHOOK_CONFIG in the environment)"}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	// The warnings come first, also when a source does not compile: an
	// operator fixing the error should not meet them only on the next run.
	// In the file's order, as an editor walks it; those of no line last.
	ws := cfg.Warnings()
	line := func(w string) int {
		if n := cfg.WarningLine(w); n > 0 {
			return n
		}
		return math.MaxInt
	}
	slices.SortStableFunc(ws, func(a, b string) int { return cmp.Compare(line(a), line(b)) })
	for _, w := range ws {
		at := *path
		if n := cfg.WarningLine(w); n > 0 {
			at += ":" + strconv.Itoa(n)
		}
		fmt.Fprintf(stdout, "%s: warning: %s\n", at, w)
	}
	// The data dir as serve finds it: what serve refuses, refused here, so
	// that ExecStartPre fails with the reason.
	err = cluster.CheckDataDir(cfg.Node.DataDir)
	if err == nil {
		err = cluster.CheckDataDirOwner(cfg.Node.DataDir, cfg.Node.ID)
	}
	if err != nil {
		return dataDirError(*path, cfg, err)
	}
	if note := rootOwnerNote(cfg.Node.DataDir); note != "" {
		fmt.Fprintf(stdout, "%s: note: %s\n", *path, note)
	}
	// Compile the sources as serve and a reload do (schemas, verifiers, key
	// rules, fields): what would refuse the start is refused here.
	if _, _, err := compileSources(cfg); err != nil {
		return sourceErrorAt(*path, cfg, err)
	}
	mode := "single node"
	if cfg.Cluster != nil {
		mode = fmt.Sprintf("cluster of %d", len(cfg.Cluster.Peers))
	}
	sources := fmt.Sprintf("%d sources", len(cfg.Sources))
	if len(cfg.Sources) == 1 {
		sources = "1 source"
	}
	fmt.Fprintf(stdout, "%s: ok (%s, %s); data in %s\n", *path, mode, sources, cfg.Node.DataDir)
	return nil
}

// dataDirError places an error about the data dir in the file, as Load's
// errors are: file:line: node.data_dir: message (no line when the file
// leaves the key to its default).
func dataDirError(path string, cfg *config.Config, err error) error {
	at := path
	if n := cfg.WarningLine("node.data_dir: "); n > 0 {
		at += ":" + strconv.Itoa(n)
	}
	return fmt.Errorf("%s: node.data_dir: %w", at, err)
}

// sourceErrorAt places a compileSources error in the file, as Load's
// errors are: file:line: key: message. validate, serve and a reload print
// the same.
func sourceErrorAt(path string, cfg *config.Config, err error) error {
	var se *intake.SourceError
	if errors.As(err, &se) {
		key := fmt.Sprintf("source[%d]", se.Index)
		if se.Setting != "" {
			key += "." + se.Setting
		}
		at := path
		if line := cfg.WarningLine(key + ": "); line > 0 {
			at += ":" + strconv.Itoa(line)
		}
		return fmt.Errorf("%s: %s: %w", at, key, err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

func cmdKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("keygen", stdout, stderr)
	provider := fs.String("provider", "standard", "provider whose secret format to use")
	asymmetric := fs.Bool("asymmetric", false, "standard/svix: print an ed25519 key pair for v1a signatures (whsk_ private, whpk_ public) instead of a whsec_ secret")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	*provider = strings.ToLower(*provider) // as the config reads provider
	if _, ok := providers.Lookup(*provider); !ok {
		return usageError{fmt.Sprintf("unknown provider %q (known: %s)", *provider, strings.Join(providers.Names(), ", "))}
	}
	if *asymmetric {
		if *provider != "standard" && *provider != "svix" {
			return usageError{fmt.Sprintf("-asymmetric is for standard and svix (v1a ed25519 signatures), not %q", *provider)}
		}
		priv, pub, err := providers.GenerateKeyPair(*provider)
		if err != nil {
			return err
		}
		// Two labelled lines: the sender keeps the private key; the source
		// lists the public key among its secrets.
		fmt.Fprintln(stdout, "private:", priv)
		fmt.Fprintln(stdout, "public:", pub)
		return nil
	}
	s, err := providers.GenerateSecret(*provider)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	return nil
}

// keyReadsHeader reports whether any part of a source's key reads a
// header (where send puts its -id).
func keyReadsHeader(key []string) bool {
	for _, part := range key {
		for _, alt := range strings.Split(part, "|") {
			if strings.HasPrefix(alt, "header:") {
				return true
			}
		}
	}
	return false
}

// cmdSend signs a file the way the source's provider does and posts it to the
// node's intake: the quickest way to test a config end to end.
func cmdSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("send", stdout, stderr)
	path := fs.String("config", os.Getenv("ONCEHOOK_CONFIG"), "config file that names the source")
	name := fs.String("source", "", "source name")
	file := fs.String("file", "", "payload file to send ('-' for stdin)")
	id := fs.String("id", "", "event/delivery id: in the provider's id header, and in each header the source's key reads that -header does not set (default: random)")
	target := fs.String("url", "", "intake URL (default: http://<node.listen>/in/<source>)")
	contentType := fs.String("content-type", "", "Content-Type (default: application/json, or application/x-www-form-urlencoded for a .form file)")
	keyFile := fs.String("key-file", "", "sign with the secret in this file instead of the source's first secret (e.g. a whsk_ private key for a source that holds only its whpk_ public key)")
	var extra multiFlag
	fs.Var(&extra, "header", "add the header \"Name: value\" (repeatable; e.g. the one an hmac source's key reads); a header the signing sets, with another value, is refused (give the delivery id with -id)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs, ""); err != nil {
		return err
	}
	if *path == "" || *name == "" || *file == "" {
		return usageError{"send needs -config, -source and -file"}
	}
	var added [][2]string
	for _, h := range extra {
		k, v, ok := strings.Cut(h, ":")
		if k = strings.TrimSpace(k); !ok || k == "" || strings.ContainsAny(k, " \t") {
			return usageError{fmt.Sprintf("-header %q: want \"Name: value\"", h)}
		}
		added = append(added, [2]string{k, strings.TrimSpace(v)})
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	var src *config.Source
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == *name {
			src = &cfg.Sources[i]
		}
	}
	if src == nil {
		return fmt.Errorf("source %q is not in %s", *name, *path)
	}
	scheme, ok := providers.Lookup(src.Provider)
	if !ok {
		return fmt.Errorf("source %q: unknown provider %q", *name, src.Provider)
	}
	var body []byte
	if *file == "-" {
		body, err = io.ReadAll(os.Stdin)
	} else {
		body, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("read payload: %w", err)
	}
	if *id != "" && !keyReadsHeader(src.Key) {
		// The id still goes in the provider's id header, but the key is
		// taken from the payload: say so rather than let a resend with
		// another -id come back a duplicate with no word why.
		fmt.Fprintf(stderr, "note: -id does not make the key of source %q, which comes from the payload (key = %s): change the id in the file to send another event\n",
			src.Name, strings.Join(src.Key, ", "))
	}
	if *id == "" {
		var b [12]byte
		rand.Read(b[:])
		*id = "msg_" + hex.EncodeToString(b[:])
	}
	var signWith []byte
	switch {
	case *keyFile != "":
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("read key file: %w", err)
		}
		signWith = bytes.TrimSpace(b)
	case len(src.Secrets) == 0:
		return fmt.Errorf("source %q has no secret to sign with: give one with -key-file", *name)
	default:
		signWith = src.Secrets[0]
	}
	url := *target
	if url == "" {
		url = "http://" + dialable(cfg.Node.Listen) + "/in/" + src.Name
	}
	if src.TwilioBody == config.TwilioBodyJSON && !strings.Contains(url, "bodySHA256=") {
		// As Twilio sends a JSON body: its hash in the URL, which is signed.
		sum := sha256.Sum256(body)
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + "bodySHA256=" + hex.EncodeToString(sum[:])
	}
	// SignURL covers schemes that sign the URL too (twilio) and is Sign otherwise.
	headers, err := providers.SignURL(scheme, url, body, signWith, time.Now(), *id, src.HMAC)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	// A -header the signing sets too would be overwritten without a word:
	// refuse it, and point at -id for the provider's id header.
	for _, a := range added {
		for _, h := range headers {
			if strings.EqualFold(a[0], h.Name) && a[1] != h.Value {
				// Not its value: a token provider's signing header is the secret.
				return usageError{fmt.Sprintf("-header %s: %s's signing sets this header; give the delivery id with -id", a[0], src.Provider)}
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ct := *contentType
	if ct == "" {
		ct = "application/json"
		if filepath.Ext(*file) == ".form" {
			ct = "application/x-www-form-urlencoded"
		}
	}
	req.Header.Set("Content-Type", ct)
	for _, h := range added {
		req.Header.Add(h[0], h[1])
	}
	for _, h := range headers {
		req.Header.Set(h.Name, h.Value)
	}
	// A source keyed on a header of the sender's choosing (an hmac source's
	// X-Request-Id) gets the id there, so that -id alone makes a key. A
	// part of alternatives ("header:X-Shopify-Event-Id|header:X-Shopify-Webhook-Id")
	// gets it in the first header it names, unless one of them is set.
	for _, part := range src.Key {
		first, set := "", false
		for _, alt := range strings.Split(part, "|") {
			if name, ok := strings.CutPrefix(alt, "header:"); ok && name != "" {
				set = set || req.Header.Get(name) != ""
				if first == "" {
					first = name
				}
			}
		}
		if first != "" && !set {
			req.Header.Set(first, *id)
		}
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Fprintf(stdout, "%s %s\n%s", resp.Proto, resp.Status, answer)
	if len(answer) > 0 && answer[len(answer)-1] != '\n' {
		fmt.Fprintln(stdout)
	}
	if resp.StatusCode == http.StatusOK && src.ReplayGuard == config.ReplayGuardBody && len(src.Key) == 1 && keyReadsHeader(src.Key) {
		// The replay guard answers a body seen before under another id
		// as a duplicate of that id's key: say why a new -id did not
		// make a new event. (A key of one part is its value as it is.)
		var a struct{ Status, Key string }
		if json.Unmarshal(answer, &a) == nil && a.Status == "duplicate" && a.Key != src.Name+":"+*id {
			fmt.Fprintf(stderr, "note: source %q has replay_guard = \"body\": this body was seen before under %s, so it is a duplicate of that event whatever -id says; change the body to send another event\n",
				src.Name, a.Key)
		}
	}
	if resp.StatusCode/100 != 2 {
		if resp.StatusCode == http.StatusUnauthorized && bytes.Contains(answer, []byte("bearer token")) {
			return fmt.Errorf("intake answered %d, asking for a bearer token: %s is the admin listener, not the intake ([node] listen)", resp.StatusCode, url)
		}
		return fmt.Errorf("intake answered %d", resp.StatusCode)
	}
	return nil
}

// dialable turns a listen address into one a client can dial (0.0.0.0 -> 127.0.0.1).
func dialable(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// rootOwnerNote says, when validate runs as root, that a data dir another
// user owns is judged for that user: serve run as that user (the systemd
// unit's) takes it, serve run as root refuses it. "" otherwise.
func rootOwnerNote(dir string) string {
	if os.Geteuid() != 0 {
		return ""
	}
	info, err := os.Stat(dir)
	if err != nil {
		return ""
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return ""
	}
	who := fmt.Sprintf("uid %d", st.Uid)
	if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
		who = fmt.Sprintf("user %s (uid %d)", u.Username, st.Uid)
	}
	return fmt.Sprintf("node.data_dir %s is owned by %s and was checked for that user: serve must run as it (the systemd unit does); run as root, serve refuses a data dir another user owns", dir, who)
}
