package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"oncehook/providers"
)

var (
	sourceNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	nodeIDRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// headerNameRe is an RFC 9110 token.
	headerNameRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// reSecretNumber is a provider's "#N " numbering of secrets in an error.
	reSecretNumber = regexp.MustCompile(`#[0-9]+ `)
)

// Validate checks the whole configuration and returns every problem found,
// joined with errors.Join, each an *Error naming the key (and its line when
// the Config came from Load). The one thing it derives is the cluster's
// advertise address (from raft_listen); it leaves the sources as they are.
// It builds each source's verifier once, the way intake.CompileSource does,
// only to report a malformed secret as a problem naming its key, and drops
// it. It is idempotent: calling it twice gives the same result.
//
// Validate reads the TLS files named in [cluster] and [admin]; it does not read secret or
// token files, which Load does.
func (c *Config) Validate() error {
	p := &problems{file: c.Path, lines: c.lines}
	c.validate(p)
	return p.err()
}

func (c *Config) validate(p *problems) {
	c.validateNode(p)
	if c.Cluster != nil {
		c.validateCluster(p)
	}
	c.validateAdmin(p)
	c.validateAdminServer(p)
	c.validateListeners(p)
	names := map[string]int{}
	for i := range c.Sources {
		s := &c.Sources[i]
		key := "source[" + strconv.Itoa(i) + "]"
		if j, dup := names[s.Name]; dup && s.Name != "" {
			p.add(key+".name", nil, fmt.Sprintf("duplicate source name %q (also source[%d])", s.Name, j))
		} else {
			names[s.Name] = i
		}
		validateSource(p, key, s)
	}
	twilioNames(p, c.Sources)
}

// twilioNames refuses a twilio source whose name begins another's. Twilio
// signs a URL followed by its parameters with nothing between them, so the
// string signed for /in/twilio-sms is also /in/twilio followed by a form
// field "-sms..." of the resender's making: a captured callback of one
// source would verify at the other, as another event (the replay guard is
// per source). Source names are lower case and Twilio's parameter names
// start upper case, so only a name that begins another's is reachable.
func twilioNames(p *problems, sources []Source) {
	for i := range sources {
		for j := range sources {
			a, b := &sources[i], &sources[j]
			if i == j || a.Provider != "twilio" || b.Provider != "twilio" || a.Name == "" || a.Name == b.Name || !strings.HasPrefix(b.Name, a.Name) {
				continue
			}
			p.add("source["+strconv.Itoa(i)+"].name", nil, fmt.Sprintf(
				"twilio source %q begins the name of twilio source %q (source[%d]): Twilio's signature has no separator after the URL, so a callback signed for /in/%s would also verify at /in/%s; rename one (e.g. %q)",
				a.Name, b.Name, j, b.Name, a.Name, a.Name+"-main"))
		}
	}
}

func (c *Config) validateNode(p *problems) {
	n := &c.Node
	if !nodeIDRe.MatchString(n.ID) {
		p.add("node.id", nil, fmt.Sprintf("invalid id %q: want 1-64 letters, digits, '_', '.', '-'", n.ID))
	}
	if n.DataDir == "" {
		p.add("node.data_dir", nil, "required")
	}
	checkListen(p, "node.listen", n.Listen)
	if n.MaxConnsPerIP < 1 || n.MaxConnsPerIP > MaxMaxConnsPerIP {
		p.add("node.max_conns_per_ip", nil, fmt.Sprintf("must be 1..%d, got %d", MaxMaxConnsPerIP, n.MaxConnsPerIP))
	}
	switch n.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.add("node.log_level", nil, fmt.Sprintf("invalid log level %q: want debug, info, warn or error", n.LogLevel))
	}
	switch n.LogFormat {
	case "text", "json":
	default:
		p.add("node.log_format", nil, fmt.Sprintf("invalid log format %q: want text or json", n.LogFormat))
	}
}

func (c *Config) validateCluster(p *problems) {
	cl := c.Cluster
	checkListen(p, "cluster.raft_listen", cl.RaftListen)
	if cl.Advertise == "" && !p.has("cluster.raft_listen") {
		host, _, _ := net.SplitHostPort(cl.RaftListen)
		if unspecified(host) {
			p.add("cluster.advertise", nil, fmt.Sprintf(
				"required: raft_listen %q binds all interfaces; set advertise to the address the other nodes dial", cl.RaftListen),
				"cluster.raft_listen")
		} else {
			cl.Advertise = cl.RaftListen
		}
	}
	if cl.Advertise != "" {
		checkDial(p, "cluster.advertise", cl.Advertise)
	}

	for _, d := range []struct {
		key string
		v   *Duration
	}{{"cluster.heartbeat_timeout", &cl.HeartbeatTimeout}, {"cluster.election_timeout", &cl.ElectionTimeout}} {
		switch t := time.Duration(*d.v); {
		case t == 0: // unset, as everywhere: the default
			*d.v = Duration(DefaultRaftTimeout)
		case t < minRaftTimeout || t > maxRaftTimeout:
			p.add(d.key, nil, fmt.Sprintf("%s is out of range: want %s to %s (default %s)",
				*d.v, Duration(minRaftTimeout), Duration(maxRaftTimeout), Duration(DefaultRaftTimeout)))
		}
	}
	// raft refuses to start with an election timeout shorter than the
	// heartbeat timeout: caught here, the file is refused by validate and by
	// a reload, not by the node's next restart.
	if !p.has("cluster.heartbeat_timeout") && !p.has("cluster.election_timeout") && cl.ElectionTimeout < cl.HeartbeatTimeout {
		election := cl.ElectionTimeout.String()
		if cl.ElectionTimeout == Duration(DefaultRaftTimeout) && !p.lines.has("cluster.election_timeout") {
			election += " (the default)"
		}
		p.add("cluster.election_timeout", nil, fmt.Sprintf(
			"%s is less than heartbeat_timeout %s: raft would refuse to start; raise election_timeout to at least heartbeat_timeout (raise the two together)",
			election, cl.HeartbeatTimeout), "cluster.heartbeat_timeout")
	}

	// Peers: every voter, this node included, the same list on every node.
	var self *Peer
	ids, addrs := map[string]int{}, map[string]int{}
	for i := range cl.Peers {
		pe := &cl.Peers[i]
		key := "cluster.peers[" + strconv.Itoa(i) + "]"
		if p.has(key) {
			continue
		}
		if !nodeIDRe.MatchString(pe.ID) {
			p.add(key, nil, fmt.Sprintf("invalid peer id %q: want 1-64 letters, digits, '_', '.', '-'", pe.ID))
		} else if j, dup := ids[pe.ID]; dup {
			p.add(key, nil, fmt.Sprintf("duplicate peer id %q (also peers[%d])", pe.ID, j))
		} else {
			ids[pe.ID] = i
		}
		checkDial(p, key, pe.Addr)
		if j, dup := addrs[pe.Addr]; dup {
			p.add(key, nil, fmt.Sprintf("duplicate peer address %q (also peers[%d])", pe.Addr, j))
		} else {
			addrs[pe.Addr] = i
		}
		if pe.ID == c.Node.ID && self == nil {
			self = pe
		}
	}
	switch {
	case p.has("cluster.peers"):
	case len(cl.Peers) == 0:
		p.add("cluster.peers", nil, `required: list every node as "id=host:port", this one included (or remove [cluster] for a single node)`, "cluster")
	case self == nil:
		p.add("cluster.peers", nil, fmt.Sprintf("does not include this node's id %q (node.id)", c.Node.ID))
	case cl.Advertise != "" && self.Addr != cl.Advertise && !p.has("cluster.advertise"):
		p.add("cluster.advertise", nil, fmt.Sprintf("%q differs from this node's peers entry %q", cl.Advertise, self.String()),
			"cluster.raft_listen", "cluster.peers")
	}

	// Authentication between nodes: mutual TLS, a shared token, or both. The
	// cluster port is never open, even for a cluster of one: a join or an
	// apply on it changes who votes and what is stored (docs/security.md).
	set := 0
	for _, f := range []string{cl.TLSCert, cl.TLSKey, cl.TLSCA} {
		if f != "" {
			set++
		}
	}
	switch set {
	case 0:
		if len(cl.Token) == 0 && !p.has("cluster.token_file") {
			p.add("cluster.token_file", nil,
				"required: the cluster port needs authentication: set token_file (a shared token of at least "+
					strconv.Itoa(MinTokenLen)+" bytes) or tls_cert, tls_key and tls_ca (mutual TLS)", "cluster")
		}
	case 3:
		validateTLS(p, cl)
	default:
		p.add("cluster.tls_cert", nil, "tls_cert, tls_key and tls_ca go together: set all three or none",
			"cluster.tls_key", "cluster.tls_ca")
	}
	if n := len(cl.Token); n > 0 && n < MinTokenLen {
		p.add("cluster.token_file", nil, shortToken(cl.TokenFile, n))
	}
}

// MinTokenLen is the shortest cluster or admin token accepted, in bytes.
const MinTokenLen = 32

// makeToken says how to make a token long enough; both give more than
// MinTokenLen bytes.
const makeToken = "make one with `oncehook keygen -provider hmac` or `head -c 32 /dev/urandom | base64`"

// checkTLSFileModes refuses a TLS key that others may read or write (like a
// secret file), and a certificate or CA file that others may write: whoever
// can write the CA chooses which certificates the node takes as a member's,
// and the file is read again on every reload. Its group may, as it may
// write the config file that names it. An empty path is skipped; one that
// cannot be read is reported where it is opened.
func checkTLSFileModes(p *problems, table, cert, key, ca string) {
	if fi, err := os.Stat(key); key != "" && err == nil {
		if what, chmod := unsafeMode(fi.Mode().Perm()); what != "" {
			p.add(table+".tls_key", ErrSecretFileMode, fmt.Sprintf(
				"key file %s has mode %#o: it must not be %s (chmod %s %s)", key, fi.Mode().Perm(), what, chmod, key))
		}
	}
	for _, f := range []struct{ key, path string }{{table + ".tls_cert", cert}, {table + ".tls_ca", ca}} {
		if f.path == "" {
			continue
		}
		if fi, err := os.Stat(f.path); err == nil && fi.Mode().Perm()&0o002 != 0 {
			what, chmod := unsafeMode(fi.Mode().Perm() & 0o002) // readable is fine: certificates are public
			p.add(f.key, ErrSecretFileMode, fmt.Sprintf(
				"certificate file %s has mode %#o: it must not be %s, who would choose whom the node trusts (chmod %s %s)",
				f.path, fi.Mode().Perm(), what, chmod, f.path))
		}
	}
}

// shortToken is the message for a token of n bytes, read from file (empty
// for an inline token). It never shows the token.
func shortToken(file string, n int) string {
	what := "the token"
	if file != "" {
		what = "the token in " + file
	}
	return fmt.Sprintf("%s is %d bytes: at least %d are required; %s", what, n, MinTokenLen, makeToken)
}

func validateTLS(p *problems, cl *Cluster) {
	checkTLSFileModes(p, "cluster", cl.TLSCert, cl.TLSKey, cl.TLSCA)
	for _, f := range []struct{ key, path string }{
		{"cluster.tls_cert", cl.TLSCert}, {"cluster.tls_key", cl.TLSKey}, {"cluster.tls_ca", cl.TLSCA},
	} {
		if fh, err := os.Open(f.path); err != nil {
			p.add(f.key, err, "cannot read: "+errText(err))
		} else {
			fh.Close()
		}
	}
	if p.has("cluster.tls_cert") || p.has("cluster.tls_key") || p.has("cluster.tls_ca") {
		return
	}
	pair, err := tls.LoadX509KeyPair(cl.TLSCert, cl.TLSKey)
	if err != nil {
		p.add("cluster.tls_cert", err, "unusable certificate and key: "+err.Error())
	}
	ca, caErr := os.ReadFile(cl.TLSCA)
	pool := x509.NewCertPool()
	if caErr == nil && !pool.AppendCertsFromPEM(ca) {
		p.add("cluster.tls_ca", nil, fmt.Sprintf("%s holds no PEM certificate", cl.TLSCA))
		return
	}
	if err != nil || caErr != nil {
		return
	}
	// The peers accept only a certificate that tls_ca signed: one from
	// another CA would have every new connection refused, in and out.
	// Expiry is the warnings' (certwarn.go): only the chain is checked here.
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if leaf := pair.Leaf; leaf != nil {
		// At a time each certificate of the chain is valid: now, or the
		// leaf's first or last moment.
		var first error
		for _, at := range []time.Time{time.Now(), leaf.NotBefore, leaf.NotAfter.Add(-time.Second)} {
			_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
				CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
			if err == nil {
				return
			}
			if first == nil {
				first = err
			}
		}
		p.add("cluster.tls_cert", nil, fmt.Sprintf("%s is not signed by tls_ca %s (the peers would refuse this node): %v", cl.TLSCert, cl.TLSCA, first),
			"cluster.tls_ca")
	}
}

func (c *Config) validateAdmin(p *problems) {
	checkListen(p, "admin.listen", c.Admin.Listen)
	names := map[string]int{}
	for i, t := range c.Admin.Tokens {
		key := "admin.tokens[" + strconv.Itoa(i) + "]"
		if t.Name == "" || strings.TrimSpace(t.Name) != t.Name || !printable(t.Name) {
			p.add(key+".name", nil, fmt.Sprintf("invalid name %q: want a printable name without surrounding spaces", t.Name))
		} else if j, dup := names[t.Name]; dup {
			p.add(key+".name", nil, fmt.Sprintf("duplicate token name %q (also admin.tokens[%d])", t.Name, j))
		} else {
			names[t.Name] = i
		}
		if p.has(key+".token") || p.has(key+".token_file") {
			continue
		}
		if len(t.Token) == 0 {
			p.add(key+".token_file", nil, "required: a token_file (or an inline token)", key+".token")
			continue
		}
		if len(t.Token) < MinTokenLen {
			if t.TokenFile != "" {
				p.add(key+".token_file", nil, shortToken(t.TokenFile, len(t.Token)))
			} else {
				p.add(key+".token", nil, shortToken("", len(t.Token)))
			}
			continue
		}
		if bytes.ContainsFunc(t.Token, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			// Raw random bytes (head -c 32 /dev/urandom without base64):
			// no client can send them in an Authorization header.
			where, file := key+".token", "the token"
			if t.TokenFile != "" {
				where, file = key+".token_file", "the token in "+t.TokenFile
			}
			p.add(where, nil, file+" holds control bytes (a binary file?), which no client can send in an Authorization header; "+makeToken)
			continue
		}
		for j := range i {
			if bytes.Equal(c.Admin.Tokens[j].Token, t.Token) {
				p.add(key+".token_file", nil, fmt.Sprintf("same token as admin.tokens[%d]: each name needs its own token", j), key+".token")
				break
			}
		}
	}
}

// validateListeners refuses two listeners on one address.
func (c *Config) validateListeners(p *problems) {
	type l struct{ key, addr string }
	ls := []l{{"node.listen", c.Node.Listen}, {"admin.listen", c.Admin.Listen}}
	if c.Cluster != nil {
		ls = append(ls, l{"cluster.raft_listen", c.Cluster.RaftListen})
	}
	for i := range ls {
		for j := range i {
			if ls[i].addr == ls[j].addr && !strings.HasSuffix(ls[i].addr, ":0") && !p.has(ls[i].key) {
				p.add(ls[i].key, nil, fmt.Sprintf("%q is also %s", ls[i].addr, ls[j].key))
			}
		}
	}
}

// sourceCheck is one [[source]] under validation: where its problems go, its
// key ("source[3]"), and what the earlier steps learned that later ones need.
type sourceCheck struct {
	p   *problems
	key string
	s   *Source
	// scheme is the provider's; nil when the provider is missing or unknown.
	scheme providers.Scheme
	// secretKey is where a secret's problem is reported: secret_files when
	// the secrets came from files, else secrets. secretsBad: one was
	// reported, so no verifier is tried.
	secretKey  string
	secretsBad bool
}

// k is the full key of the source's key name ("source[3].lease").
func (c *sourceCheck) k(name string) string { return c.key + "." + name }

// validateSource checks one source, step by step; the steps run in this
// order, which is the order of its problems on one line.
func validateSource(p *problems, key string, s *Source) {
	c := &sourceCheck{p: p, key: key, s: s}
	c.identity()
	c.secrets()
	c.signature()
	c.keyRule()
	c.retention()
	c.delivery()
	c.retry()
	c.addresses()
	c.keysURL()
	c.order()
	validateTypeFilter(p, c.k, s)
	c.secretReads()
	hmacBad := validateHMAC(p, c.k, s)
	c.verifier(hmacBad)
}

// identity checks the name (the URL path /in/{name}) and the provider.
func (c *sourceCheck) identity() {
	p, s := c.p, c.s
	if !sourceNameRe.MatchString(s.Name) {
		p.add(c.k("name"), nil, fmt.Sprintf("invalid name %q: want 1-64 of a-z 0-9 _ . - starting with a letter or digit (it is the URL path /in/{name})", s.Name))
	}
	switch sch, ok := providers.Lookup(s.Provider); {
	case s.Provider == "":
		p.add(c.k("provider"), nil, "required")
	case !ok:
		p.add(c.k("provider"), nil, fmt.Sprintf("unknown provider %q (known: %s)", s.Provider, strings.Join(knownProviders(), ", ")))
	default:
		c.scheme = sch
	}
}

// secrets checks that there is a secret (or a keys_url) and that none is
// empty; whether each is usable is the verifier step's.
func (c *sourceCheck) secrets() {
	p, s := c.p, c.s
	c.secretKey = c.k("secrets")
	if len(s.SecretFiles) > 0 {
		c.secretKey = c.k("secret_files")
	}
	c.secretsBad = p.has(c.k("secrets")) || p.has(c.k("secret_files"))
	if c.secretsBad {
		return
	}
	// With keys_url the keys may all come from the published document.
	if len(s.Secrets) == 0 && s.KeysURL == "" {
		p.add(c.secretKey, nil, "at least one secret is required (secret_files, or secrets inline, or keys_url)", c.k("secret_files"))
		c.secretsBad = true
	}
	for j, sec := range s.Secrets {
		if len(sec) == 0 {
			p.add(c.secretKey+"["+strconv.Itoa(j)+"]", nil, "empty secret")
			c.secretsBad = true
		}
	}
}

// signature checks what a verified delivery must also pass: the replay
// guard and the timestamp tolerance.
func (c *sourceCheck) signature() {
	switch c.s.ReplayGuard {
	case ReplayGuardBody, ReplayGuardOff:
	case "":
		// Unknown provider: no default to apply; the provider error says it.
	default:
		c.p.add(c.k("replay_guard"), nil, fmt.Sprintf("invalid replay_guard %q: want \"body\" or \"off\"", c.s.ReplayGuard))
	}
	switch {
	case c.s.TwilioBody == "":
	case c.s.Provider != "twilio":
		c.p.add(c.k("twilio_body"), nil, "for twilio sources only", c.k("provider"))
	case c.s.TwilioBody != TwilioBodyForm && c.s.TwilioBody != TwilioBodyJSON:
		c.p.add(c.k("twilio_body"), nil, fmt.Sprintf("invalid twilio_body %q: want \"form\" (SMS, voice and other form callbacks) or \"json\" (JSON bodies with bodySHA256 in the URL)", c.s.TwilioBody))
	}
	positive(c.p, c.k("tolerance"), c.s.Tolerance)
}

// keyRule checks the key: required unless the provider has a default, and
// each part readable by the providers package's parser.
func (c *sourceCheck) keyRule() {
	p, s := c.p, c.s
	if len(s.Key) == 0 {
		msg := fmt.Sprintf("required: provider %q has no default key", s.Provider)
		if s.Provider == "hmac" {
			msg = `required for provider "hmac": e.g. key = ["header:X-Request-Id"] or ["json:id"]`
		} else if c.scheme != nil && len(c.scheme.Defaults().Key) > 0 {
			// key = [] in the file: an empty list, not the default.
			msg = fmt.Sprintf("empty: leave key out for %s's default (%s), or name at least one part",
				s.Provider, strings.Join(c.scheme.Defaults().Key, " + "))
		}
		if c.scheme != nil || s.Provider == "hmac" {
			p.add(c.k("key"), nil, msg, c.k("provider"))
		}
	}
	for j, part := range s.Key {
		if err := checkKeyPart(part); err != nil {
			p.add(c.k("key")+"["+strconv.Itoa(j)+"]", nil, err.Error(), c.k("key"))
		}
	}
}

// secretReads refuses a key, type or order part that reads the header a
// token provider sends its secret in (GitLab's X-Gitlab-Token): the value
// would be stored in every event's key, type or order object, replicated,
// backed up, logged, shown by the admin API and sent to the handler, and,
// being the same on every delivery, it would make every event a duplicate
// of the first.
func (c *sourceCheck) secretReads() {
	if c.scheme == nil {
		return
	}
	secret := c.scheme.Defaults().SecretHeader
	if secret == "" {
		return
	}
	check := func(key, part string) {
		for _, alt := range strings.Split(part, "|") {
			kind, name, _ := strings.Cut(strings.TrimSpace(alt), ":")
			if kind == "header" && strings.EqualFold(name, secret) {
				c.p.add(key, nil, fmt.Sprintf(
					"header:%s carries the source's secret (%s sends its token in it): it would be stored, logged and shown with every event, and every delivery would be a duplicate of the first; read the event's id or type from the body or another header",
					name, c.s.Provider))
				return
			}
		}
	}
	for j, part := range c.s.Key {
		check(c.k("key")+"["+strconv.Itoa(j)+"]", part)
	}
	check(c.k("type"), c.s.Type)
	if o := c.s.Order; o != nil {
		check(c.k("order.object"), o.Object)
		check(c.k("order.time"), o.Time)
	}
}

// retention checks how long keys, payloads and dead letters are kept.
func (c *sourceCheck) retention() {
	p, s := c.p, c.s
	// With an unknown provider, zero retention and ack_status are missing
	// defaults, not mistakes: the provider error says it all.
	if c.scheme != nil || s.Retention != 0 {
		positive(p, c.k("retention"), s.Retention)
	}
	// Unset (or 0, the default), payload_retention is derived from retention
	// (min(72h, retention)): a retention that is not positive is reported
	// once, at retention, not again at a key the file does not set.
	derived := s.Retention <= 0 && s.PayloadRetention == min(Duration(DefaultPayloadRetention), s.Retention)
	if (c.scheme != nil || s.PayloadRetention != 0) && !derived {
		positive(p, c.k("payload_retention"), s.PayloadRetention)
		if s.PayloadRetention > s.Retention {
			p.add(c.k("payload_retention"), nil, fmt.Sprintf("%s is longer than retention %s: a payload is never kept longer than its key", s.PayloadRetention, s.Retention), c.k("retention"))
		}
	}
	positive(p, c.k("dead_retention"), s.DeadRetention)
}

// delivery checks what is taken in and handed on: max_body, the handler's
// URL and headers, the mode and the status of the answer.
func (c *sourceCheck) delivery() {
	p, s := c.p, c.s
	switch {
	case s.MaxBody <= 0:
		p.add(c.k("max_body"), nil, fmt.Sprintf("must be positive, got %s", s.MaxBody))
	case s.MaxBody > MaxMaxBody:
		p.add(c.k("max_body"), nil, fmt.Sprintf("%s is over the limit of %s", s.MaxBody, Size(MaxMaxBody)))
	}
	if s.Forward == "" {
		p.add(c.k("forward"), nil, `required: the handler's URL, e.g. "http://127.0.0.1:9000/hook"`)
	} else if err := checkURL(s.Forward); err != nil {
		p.add(c.k("forward"), nil, err.Error())
	}
	for j, h := range s.ForwardHeaders {
		if !headerNameRe.MatchString(h) {
			p.add(c.k("forward_headers")+"["+strconv.Itoa(j)+"]", nil, fmt.Sprintf("invalid header name %q", h), c.k("forward_headers"))
			continue
		}
		// The provider's token is the source's secret: forwarded, it would be
		// stored with every event, replicated, backed up and shown by the
		// admin API and the dead-letter page.
		if c.scheme != nil {
			if sh := c.scheme.Defaults().SecretHeader; sh != "" && strings.EqualFold(h, sh) {
				p.add(c.k("forward_headers")+"["+strconv.Itoa(j)+"]", nil, fmt.Sprintf(
					"%s carries the source's secret (%s sends its token in it): it is never stored nor forwarded; the handler can trust oncehook's verification instead",
					h, s.Provider), c.k("forward_headers"))
			}
		}
	}
	switch s.Mode {
	case "async", "sync":
	default:
		p.add(c.k("mode"), nil, fmt.Sprintf("invalid mode %q: want async or sync", s.Mode))
	}
	if (s.AckStatus < 200 || s.AckStatus > 299) && (c.scheme != nil || s.AckStatus != 0) {
		p.add(c.k("ack_status"), nil, fmt.Sprintf("%d is not a 2xx status (200..299)", s.AckStatus))
	}
}

// retry checks the delivery attempts: lease, attempts, backoff, the
// handler's timeout and the rate limit.
func (c *sourceCheck) retry() {
	p, s := c.p, c.s
	positive(p, c.k("lease"), s.Lease)
	if s.MaxAttempts < 1 {
		p.add(c.k("max_attempts"), nil, fmt.Sprintf("must be at least 1, got %d", s.MaxAttempts))
	}
	positive(p, c.k("backoff_min"), s.BackoffMin)
	if s.BackoffMax < s.BackoffMin {
		p.add(c.k("backoff_max"), nil, fmt.Sprintf("%s is less than backoff_min %s", s.BackoffMax, s.BackoffMin), c.k("backoff_min"))
	} else if time.Duration(s.BackoffMax) > MaxEventDuration {
		positive(p, c.k("backoff_max"), s.BackoffMax)
	}
	positive(p, c.k("forward_timeout"), s.ForwardTimeout)
	if s.ForwardTimeout > 0 && s.Lease > 0 && s.ForwardTimeout >= s.Lease {
		// The operator may have set only one of the two: say which is the default.
		ft, lease := s.ForwardTimeout.String(), s.Lease.String()
		if s.ForwardTimeout == Duration(DefaultForwardTimeout) && !p.lines.has(c.k("forward_timeout")) {
			ft += " (the default)"
		}
		if s.Lease == Duration(DefaultLease) && !p.lines.has(c.k("lease")) {
			lease += " (the default)"
		}
		p.add(c.k("forward_timeout"), nil, fmt.Sprintf(
			"%s must be less than lease %s: a handler still running when its lease ends could be run twice at once; lower forward_timeout or raise lease",
			ft, lease), c.k("lease"))
	}
	if math.IsNaN(s.MaxRate) || s.MaxRate < 0 || s.MaxRate > maxRate {
		p.add(c.k("max_rate"), nil, fmt.Sprintf("must be 0 (no limit) or a positive number of deliveries per second up to %g, got %g", float64(maxRate), s.MaxRate))
	}
	// A burst left unset under a max_rate refused above is that refusal's,
	// not a second mistake.
	burstUnset := s.MaxRateBurst == 0 && (math.IsNaN(s.MaxRate) || s.MaxRate > maxRate)
	if !burstUnset && (s.MaxRate > 0 && s.MaxRateBurst < 1 || s.MaxRateBurst < 0 || s.MaxRateBurst > maxRateBurst) {
		p.add(c.k("max_rate_burst"), nil, fmt.Sprintf("must be from 1 to %d, got %d", maxRateBurst, s.MaxRateBurst), c.k("max_rate"))
	}
}

// addresses checks allow_ips and trusted_proxies (an unparsable prefix was
// reported by Load already).
func (c *sourceCheck) addresses() {
	for _, list := range []struct {
		key      string
		prefixes []netip.Prefix
	}{{"allow_ips", c.s.AllowIPs}, {"trusted_proxies", c.s.TrustedProxies}} {
		for j, a := range list.prefixes {
			if key := c.k(list.key) + "[" + strconv.Itoa(j) + "]"; !a.IsValid() && !c.p.has(key) {
				c.p.add(key, nil, "invalid prefix")
			}
		}
	}
}

// keysURL checks where published keys come from and how often.
func (c *sourceCheck) keysURL() {
	if c.s.KeysURL != "" {
		if err := checkKeysURL(c.s.KeysURL); err != nil {
			c.p.add(c.k("keys_url"), nil, err.Error())
		}
	}
	positive(c.p, c.k("keys_refresh"), c.s.KeysRefresh)
	if d := time.Duration(c.s.KeysRefresh); d > 0 && d < MinKeysRefresh {
		c.p.add(c.k("keys_refresh"), nil, fmt.Sprintf("%s is under the minimum of %s: the node would fetch the sender's keys endpoint that often", c.s.KeysRefresh, Duration(MinKeysRefresh)))
	}
}

// order checks the ordering guard's fields and its missing policy.
func (c *sourceCheck) order() {
	o := c.s.Order
	if o == nil {
		return
	}
	p := c.p
	if o.Object == "" || o.Time == "" {
		p.add(c.k("order"), nil, "object and time go together: set both, or remove order")
	} else {
		if err := checkKeyPart(o.Object); err != nil {
			p.add(c.k("order.object"), nil, err.Error())
		}
		if err := checkKeyPart(o.Time); err != nil {
			p.add(c.k("order.time"), nil, err.Error())
		}
	}
	switch o.Missing {
	case "", OrderMissingReject, OrderMissingUnordered:
	default:
		p.add(c.k("order.missing"), nil, fmt.Sprintf("invalid missing %q: want %q (the default: 400) or %q (claimed without the guard)", o.Missing, OrderMissingReject, OrderMissingUnordered), c.k("order"))
	}
}

// verifier tries to build the source's verifier from its secrets, when
// every step before found them and the scheme's options sound, so that a
// malformed secret is a config error naming its key rather than a refused
// start. The verifier is dropped: intake.CompileSource builds the one that
// serves, from the same VerifierOptions.
func (c *sourceCheck) verifier(hmacBad bool) {
	p, s := c.p, c.s
	if c.scheme == nil || c.secretsBad || hmacBad || p.has(c.k("tolerance")) {
		return
	}
	if len(s.Secrets) == 0 {
		// keys_url only: the verifier is built from the fetched keys (serve).
		return
	}
	_, err := c.scheme.NewVerifier(s.VerifierOptions())
	if err == nil {
		return
	}
	// Name the culprit: the first secret that fails on its own, else the scheme's options.
	if errors.Is(err, providers.ErrBadSecret) || len(s.Secrets) > 1 {
		for j, sec := range s.Secrets {
			if _, e := c.scheme.NewVerifier(s.options([]Secret{sec})); e != nil {
				// The provider numbers secrets in its own call ("secret #1"); the key says which.
				msg := "unusable secret: " + reSecretNumber.ReplaceAllString(scrub(e.Error(), s.Secrets), "")
				if j < len(s.SecretFiles) {
					msg = s.SecretFiles[j] + ": " + msg
				}
				p.add(c.secretKey+"["+strconv.Itoa(j)+"]", e, msg, c.secretKey)
				return
			}
		}
	}
	at := c.k("provider")
	if s.HMAC != nil {
		at = c.k("hmac")
	}
	p.add(at, err, scrub(err.Error(), s.Secrets))
}

// VerifierOptions are the options the source's provider builds its verifier
// from (providers.Scheme.NewVerifier): its secrets, tolerance and hmac table
// (a copy, its defaults filled). Validate, intake.CompileSource and the
// keys_url key sets all build from them.
func (s *Source) VerifierOptions() providers.Options { return s.options(s.Secrets) }

// options are the verifier options for secrets.
func (s *Source) options(secrets []Secret) providers.Options {
	o := providers.Options{Tolerance: time.Duration(s.Tolerance), TwilioJSON: s.TwilioBody == TwilioBodyJSON}
	if s.HMAC != nil {
		h := *s.HMAC
		normaliseHMAC(&h)
		o.HMAC = &h
	}
	for _, sec := range secrets {
		o.Secrets = append(o.Secrets, []byte(sec))
	}
	return o
}

// validateHMAC checks the hmac table against the provider, its defaults
// filled in a copy (the source is left as it is). It reports whether a
// problem was found.
func validateHMAC(p *problems, k func(string) string, s *Source) bool {
	if s.Provider != "hmac" {
		if s.HMAC != nil {
			p.add(k("hmac"), nil, fmt.Sprintf(`only for provider "hmac"; provider %q has its own scheme`, s.Provider))
			return true
		}
		return false
	}
	if s.HMAC == nil {
		p.add(k("hmac"), nil,
			`required for provider "hmac": e.g. hmac = { header = "X-Signature", algorithm = "sha256", encoding = "hex" }`,
			k("provider"))
		return true
	}
	h := *s.HMAC
	normaliseHMAC(&h)
	bad := false
	fail := func(key, msg string) {
		p.add(k("hmac."+key), nil, msg, k("hmac"))
		bad = true
	}
	if !headerNameRe.MatchString(h.Header) {
		fail("header", fmt.Sprintf("invalid header name %q", h.Header))
	}
	switch h.Algorithm {
	case "sha1", "sha256", "sha512":
	default:
		fail("algorithm", fmt.Sprintf("invalid algorithm %q: want sha1, sha256 or sha512", h.Algorithm))
	}
	switch h.Encoding {
	case "hex", "base64":
	default:
		fail("encoding", fmt.Sprintf("invalid encoding %q: want hex or base64", h.Encoding))
	}
	if h.TimestampHeader != "" && !headerNameRe.MatchString(h.TimestampHeader) {
		fail("timestamp_header", fmt.Sprintf("invalid header name %q", h.TimestampHeader))
	}
	if h.IDHeader != "" && !headerNameRe.MatchString(h.IDHeader) {
		fail("id_header", fmt.Sprintf("invalid header name %q", h.IDHeader))
	}
	if h.TimestampHeader != "" && !strings.Contains(h.Template, "{timestamp}") {
		fail("timestamp_header", fmt.Sprintf("%q is set but template %q does not sign {timestamp}: the tolerance check would read a value anyone can change; add {timestamp} to the template or remove timestamp_header", h.TimestampHeader, h.Template))
	}
	switch {
	case !strings.Contains(h.Template, "{body}"):
		fail("template", fmt.Sprintf("%q does not include {body}: the signature would not cover the payload", h.Template))
	case strings.Contains(h.Template, "{timestamp}") && h.TimestampHeader == "":
		fail("template", "uses {timestamp} but timestamp_header is not set")
	case strings.Contains(h.Template, "{id}") && h.IDHeader == "":
		fail("template", "uses {id} but id_header is not set")
	default:
		// Unknown placeholders, {body} twice, and placeholders with no
		// separator between them ("{id}{body}": the boundary between the
		// parts is not signed, so one signed string splits two ways).
		if err := providers.CheckTemplate(h.Template); err != nil {
			fail("template", strings.TrimPrefix(err.Error(), providers.ErrBadConfig.Error()+": "))
		}
	}
	return bad
}

// normaliseHMAC fills the hmac table's defaults: sha256, hex, "{body}".
func normaliseHMAC(h *providers.HMACSpec) {
	h.Algorithm = strings.ToLower(h.Algorithm)
	h.Encoding = strings.ToLower(h.Encoding)
	if h.Algorithm == "" {
		h.Algorithm = "sha256"
	}
	if h.Encoding == "" {
		h.Encoding = "hex"
	}
	if h.Template == "" {
		h.Template = "{body}"
	}
}

// MaxEventDuration bounds every duration of a source: those an event
// carries (retention, payload_retention, dead_retention, lease, backoff,
// forward_timeout), which the state machine refuses when it cannot add them
// to a time without overflow (about 73 years: a refused claim would be an
// answer of 400 to every delivery of the source), and the others
// (tolerance, keys_refresh), where more is meaningless. Fifty years stands
// for "forever".
const MaxEventDuration = 50 * 365 * 24 * time.Hour

// positive checks a source's duration: above zero, at most MaxEventDuration.
func positive(p *problems, key string, d Duration) {
	switch {
	case d <= 0:
		p.add(key, nil, fmt.Sprintf("must be positive, got %s", d))
	case time.Duration(d) > MaxEventDuration:
		p.add(key, nil, fmt.Sprintf("%s is over the limit of %s (50 years)", d, Duration(MaxEventDuration)))
	}
}

// validateTypeFilter checks type, accept_types and drop_types: at most one
// list, each entry a non-empty printable string, and a type part to read when
// a list is set.
func validateTypeFilter(p *problems, k func(string) string, s *Source) {
	if len(s.AcceptTypes) > 0 && len(s.DropTypes) > 0 {
		p.add(k("drop_types"), nil, "accept_types and drop_types exclude each other: set one of them", k("accept_types"))
	}
	for _, list := range []struct {
		key   string
		types []string
	}{{"accept_types", s.AcceptTypes}, {"drop_types", s.DropTypes}} {
		for j, t := range list.types {
			if !printableType(t) {
				p.add(k(list.key)+"["+strconv.Itoa(j)+"]", nil, fmt.Sprintf("invalid event type %q: want a non-empty printable string", t), k(list.key))
			}
		}
	}
	if s.Type != "" {
		if err := checkKeyPart(s.Type); err != nil {
			p.add(k("type"), nil, err.Error())
		} else if slices.ContainsFunc(strings.Split(s.Type, "|"), func(alt string) bool {
			kind, _, _ := strings.Cut(strings.TrimSpace(alt), ":")
			return kind == "body"
		}) {
			p.add(k("type"), nil, fmt.Sprintf("%s is a hash of the whole body, not an event type: name a header:NAME or json:PATH that holds the type", s.Type))
		}
	} else if len(s.AcceptTypes) > 0 || len(s.DropTypes) > 0 {
		if _, known := providers.Lookup(s.Provider); known {
			p.add(k("type"), nil, fmt.Sprintf(`required with accept_types or drop_types: provider %q sends no event type; e.g. type = "header:X-Event-Type" or "json:type"`, s.Provider), k("provider"))
		}
	}
}

// printableType: non-empty, printable UTF-8 text, no space at either end:
// what the intake reads as an event's type (providers.NewTextField), so that
// every listed type can match a delivery's. It becomes a metric label and a
// JSON answer.
func printableType(t string) bool {
	return t != "" && providers.PrintableText(t) && t[0] != ' ' && t[len(t)-1] != ' '
}

// checkKeyPart checks a key part or order field spec with the providers
// package's own parser: "header:NAME", "json:PATH", "body:sha256", or
// alternatives separated by '|'.
func checkKeyPart(part string) error {
	if _, err := providers.NewField(part); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), providers.ErrBadConfig.Error()+": "))
	}
	return nil
}

// checkURL accepts an absolute http or https URL with a host.
func checkURL(raw string) error {
	return checkURLLike(raw, `want "http://HOST:PORT/PATH" or https://, e.g. "http://127.0.0.1:9000/hook"`)
}

// checkURLLike is checkURL with want, what the key wants, in its hints.
func checkURLLike(raw, want string) error {
	if strings.TrimSpace(raw) != raw {
		return fmt.Errorf("invalid URL: a space at its start or end; %s", want)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid URL %s; %s", shownURL(raw), want)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("invalid URL %s: %s", shownURL(raw), want)
	}
	if u.Host == "" {
		return fmt.Errorf("invalid URL %s: no host", shownURL(raw))
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("invalid URL %s: port must be a number 1..65535", shownURL(raw))
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("invalid URL %s: no port after the ':'", shownURL(raw))
	}
	return nil
}

// shownURL is raw quoted for an error message, its user info and query
// (either may carry a credential) replaced by <redacted>. A URL that does
// not parse is not shown: the message's file:line points at it.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(not shown: it does not parse, and may hold a credential)"
	}
	if u.User == nil && u.RawQuery == "" {
		return strconv.Quote(raw)
	}
	if u.User != nil {
		u.User = url.User(redacted)
	}
	if u.RawQuery != "" {
		u.RawQuery = redacted
	}
	s := u.String()
	// url.URL escapes the placeholder; show it as written.
	s = strings.Replace(s, url.User(redacted).String()+"@", redacted+"@", 1)
	s = strings.Replace(s, "?"+url.QueryEscape(redacted), "?"+redacted, 1)
	return strconv.Quote(s)
}

// checkKeysURL accepts an https:// URL, or an http:// one whose host is a
// loopback address or "localhost": a published key set decides who may sign,
// so it is never fetched in the clear over a network.
func checkKeysURL(raw string) error {
	if err := checkURLLike(raw, `want "https://HOST/PATH"`); err != nil {
		return err
	}
	u, _ := url.Parse(raw)
	if u.Scheme == "https" || IsLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("invalid URL %s: want https:// (http:// only to a loopback address)", shownURL(raw))
}

// IsLoopbackHost reports whether host (no port) is "localhost" or a loopback
// IP address.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// checkListen accepts host:port with an empty or named host and a numeric port
// (0 lets the system choose, for tests).
func checkListen(p *problems, key, addr string) {
	if _, err := splitAddr(addr); err != nil {
		p.add(key, nil, err.Error())
	}
}

// checkDial accepts host:port that another machine can dial: a host that is
// not empty or 0.0.0.0/::, and a port other than 0.
func checkDial(p *problems, key, addr string) {
	port, err := splitAddr(addr)
	if err != nil {
		p.add(key, nil, err.Error())
		return
	}
	host, _, _ := net.SplitHostPort(addr)
	if unspecified(host) || port == 0 {
		p.add(key, nil, fmt.Sprintf("%q cannot be dialled: give a specific host and port", addr))
	}
}

func splitAddr(addr string) (int, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("invalid address %q: want host:port", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("invalid address %q: port must be a number 0..65535", addr)
	}
	return n, nil
}

// unspecified reports whether host binds every interface.
func unspecified(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// knownProviders lists the names providers.Lookup accepts.
func knownProviders() []string { return providers.Names() }

// minScrub is the shortest secret scrub redacts. A shorter value is too
// short to be a real secret, and likely to be a word of the message itself:
// the secret "whsec_" made "secret is not whsec_ followed by base64" read
// "secret is not <redacted> followed by base64".
const minScrub = 8

// scrub removes any secret that a provider's error text might quote.
func scrub(msg string, secrets []Secret) string {
	for _, s := range secrets {
		if len(s) >= minScrub {
			msg = strings.ReplaceAll(msg, string(s), redacted)
		}
	}
	return msg
}
