package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"oncehook/providers"
)

// Defaults of the keys that do not depend on the provider (config.example.toml
// documents each one).
const (
	DefaultNodeID         = "node1"
	DefaultDataDir        = "./data"
	DefaultListen         = "127.0.0.1:8080"
	DefaultLogLevel       = "info"
	DefaultLogFormat      = "text"
	DefaultRaftListen     = "127.0.0.1:7070"
	DefaultAdminListen    = "127.0.0.1:7071"
	DefaultTolerance      = 5 * time.Minute
	DefaultMaxBody        = 1 * MiB
	MaxMaxBody            = 64 * MiB // the largest max_body accepted
	DefaultMode           = "async"
	DefaultLease          = 30 * time.Second
	DefaultMaxAttempts    = 8
	DefaultBackoffMin     = 1 * time.Second
	DefaultBackoffMax     = 10 * time.Minute
	DefaultForwardTimeout = 10 * time.Second
	DefaultKeysRefresh    = 5 * time.Minute
	MinKeysRefresh        = 10 * time.Second // as often as a fetch may come early (keyset)
	// DefaultDeadRetention is how long a dead letter is kept after it went
	// dead; DefaultPayloadRetention how long a done event keeps its payload
	// (at most the source's retention).
	DefaultDeadRetention    = 720 * time.Hour
	DefaultPayloadRetention = 72 * time.Hour
	// maxRate and maxRateBurst bound max_rate and max_rate_burst: far above
	// any handler, low enough that the token bucket's arithmetic stays exact.
	maxRate              = 1e6
	maxRateBurst         = 1_000_000
	DefaultMaxConnsPerIP = 512 // a provider's fan-out fits; one client cannot take every fd
	MaxMaxConnsPerIP     = 65536
	DemoSourceName       = "demo"
	ReplayGuardBody      = "body" // replay_guard: a body seen under another key is a duplicate
	ReplayGuardOff       = "off"
	TwilioBodyForm       = "form" // twilio_body: form parameters signed with the URL
	TwilioBodyJSON       = "json" // twilio_body: a JSON body hashed into the URL's bodySHA256
	// order.missing: a delivery without the order fields is refused (400),
	// or claimed without the guard.
	OrderMissingReject    = "reject"
	OrderMissingUnordered = "unordered"
)

// Config is one oncehook.toml, defaults applied, normalised and (after Load)
// validated. A Config is not modified after Load returns it; a reload builds a
// new one and swaps it in whole.
type Config struct {
	// Path is the file it was loaded from; empty for Default and Demo.
	Path    string   `json:"path,omitempty"`
	Node    Node     `json:"node"`
	Cluster *Cluster `json:"cluster,omitempty"` // nil: no [cluster] table, single node
	Admin   Admin    `json:"admin"`
	Sources []Source `json:"sources"`

	lines *keyLines // where each key is in the file, for Validate's messages
}

// Node is the [node] table.
type Node struct {
	ID        string `json:"id"`
	DataDir   string `json:"data_dir"`  // a relative one is the config file's directory's (Load makes it absolute)
	Listen    string `json:"listen"`    // intake listener, host:port
	LogLevel  string `json:"log_level"` // debug|info|warn|error; reloadable
	LogFormat string `json:"log_format"`
	// MaxConnsPerIP caps the intake connections one client address may hold
	// open; more are refused at accept.
	MaxConnsPerIP int `json:"max_conns_per_ip"`
}

// Cluster is the [cluster] table.
type Cluster struct {
	RaftListen string `json:"raft_listen"`
	// Advertise is the address peers dial; defaults to RaftListen unless that
	// binds all interfaces.
	Advertise string `json:"advertise"`
	Peers     []Peer `json:"peers"` // includes this node
	TokenFile string `json:"token_file,omitempty"`
	Token     Secret `json:"token,omitempty"` // content of TokenFile; nil when unset
	TLSCert   string `json:"tls_cert,omitempty"`
	TLSKey    string `json:"tls_key,omitempty"`
	TLSCA     string `json:"tls_ca,omitempty"`
	// HeartbeatTimeout is how long a follower waits without hearing from
	// the leader before it calls an election; ElectionTimeout how long a
	// candidate waits for votes. The leader steps down when it has not heard
	// from a majority for half the heartbeat timeout. Raising them on a busy
	// or slow network trades slower failover for fewer spurious elections.
	HeartbeatTimeout Duration `json:"heartbeat_timeout"`
	ElectionTimeout  Duration `json:"election_timeout"`
}

// Raft timing defaults and bounds ([cluster] heartbeat_timeout and
// election_timeout).
const (
	DefaultRaftTimeout = time.Second
	minRaftTimeout     = 100 * time.Millisecond
	maxRaftTimeout     = time.Minute
)

// TLS reports whether mutual TLS between nodes is configured.
func (c *Cluster) TLS() bool { return c.TLSCert != "" }

// Peer is one "id=host:port" entry of [cluster] peers.
type Peer struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

func (p Peer) String() string { return p.ID + "=" + p.Addr }

// Admin is the [admin] table.
type Admin struct {
	Listen string       `json:"listen"`
	Tokens []AdminToken `json:"tokens"`
	// TLSCert and TLSKey (both or neither) serve the admin listener over
	// TLS; the files are re-read on reload, so a renewed certificate needs
	// no restart.
	TLSCert string `json:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty"`
	// MaxRestore is the largest backup POST /v1/restore accepts.
	MaxRestore Size `json:"max_restore"`
}

// TLS reports whether the admin listener serves TLS.
func (a *Admin) TLS() bool { return a.TLSCert != "" && a.TLSKey != "" }

// AdminToken is one bearer token of the admin API. Name is recorded as "who"
// in audit records.
type AdminToken struct {
	Name      string `json:"name"`
	TokenFile string `json:"token_file,omitempty"` // empty when given inline
	Token     Secret `json:"token"`
}

// Order is a source's optional ordering guard: key parts naming the object an
// event is about and the event's time.
type Order struct {
	Object string `json:"object"`
	Time   string `json:"time"`
	// Missing is what a delivery without the object or a readable time gets:
	// OrderMissingReject (400; "" means it too) or OrderMissingUnordered
	// (claimed without the guard).
	Missing string `json:"missing,omitempty"`
}

// Source is one [[source]]: a URL /in/{Name}, how to verify it, how to key it,
// and where to forward it. It is plain data: the verifier, key rule, order
// fields and schema it describes are built from it by intake.CompileSource.
type Source struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	// Secrets are the active secrets, in file order; any one verifies.
	Secrets []Secret `json:"secrets"`
	// SecretFiles are the resolved paths the secrets were read from; empty when
	// they were given inline. Load re-reads them every time.
	SecretFiles    []string `json:"secret_files,omitempty"`
	Tolerance      Duration `json:"tolerance"`
	Key            []string `json:"key"`
	Retention      Duration `json:"retention"`
	MaxBody        Size     `json:"max_body"`
	Forward        string   `json:"forward"`
	ForwardHeaders []string `json:"forward_headers,omitempty"`
	Mode           string   `json:"mode"` // async|sync
	AckStatus      int      `json:"ack_status"`
	Lease          Duration `json:"lease"`
	MaxAttempts    int      `json:"max_attempts"`
	BackoffMin     Duration `json:"backoff_min"`
	BackoffMax     Duration `json:"backoff_max"`
	ForwardTimeout Duration `json:"forward_timeout"`
	// MaxRate is the most deliveries per second started to the handler; 0:
	// no limit. MaxRateBurst is how many may start at once after a quiet
	// spell; Load sets it to ceil(MaxRate) when the file leaves it out.
	MaxRate      float64        `json:"max_rate"`
	MaxRateBurst int            `json:"max_rate_burst"`
	AllowIPs     []netip.Prefix `json:"allow_ips,omitempty"` // empty: any
	// TrustedProxies are the peers whose X-Forwarded-Proto and
	// X-Forwarded-Host are believed when the public URL a sender signed is
	// rebuilt (twilio); from any other peer those headers are ignored.
	TrustedProxies []netip.Prefix      `json:"trusted_proxies,omitempty"`
	KeysURL        string              `json:"keys_url,omitempty"`
	KeysRefresh    Duration            `json:"keys_refresh"`
	SchemaFile     string              `json:"schema_file,omitempty"` // resolved path
	Order          *Order              `json:"order,omitempty"`
	HMAC           *providers.HMACSpec `json:"hmac,omitempty"` // provider "hmac" only
	// TwilioBody is what a twilio source's deliveries carry: "form" (the
	// default: parameters Twilio signs with the URL) or "json" (a body
	// whose SHA-256 Twilio puts in the URL's bodySHA256 and signs the URL
	// alone). One source takes one: a form delivery's signed string can
	// be read as a JSON delivery's URL (docs/security.md, Twilio).
	TwilioBody string `json:"twilio_body,omitempty"`
	// ReplayGuard is "body" (a verified body seen before under another key
	// is a duplicate of that key's event) or "off"; the default is the
	// provider's (docs/security.md).
	ReplayGuard string `json:"replay_guard"`
	// Type is the key part (header:NAME or json:PATH) the event type is read
	// from; the default is the provider's (none for twilio and hmac).
	// AcceptTypes and DropTypes filter verified deliveries by it: with
	// AcceptTypes only those types are claimed, with DropTypes those types
	// are not; the others are answered 200 "filtered" and nothing is stored.
	// At most one of the two is set; neither means no filter.
	Type        string   `json:"type,omitempty"`
	AcceptTypes []string `json:"accept_types,omitempty"`
	DropTypes   []string `json:"drop_types,omitempty"`
	// DeadRetention: a dead letter is kept this long after it went dead
	// (never less than Retention). PayloadRetention: a done event's payload
	// is dropped this long after it completed; the key, state and audit stay
	// until Retention (docs/architecture.md, Event states).
	DeadRetention    Duration `json:"dead_retention"`
	PayloadRetention Duration `json:"payload_retention"`
}

// Format prints the source; its Secrets print "<redacted>" through Secret's
// own methods. See formatSafe.
func (s Source) Format(f fmt.State, verb rune) {
	type source Source // no methods: no recursion
	formatSafe(f, verb, source(s))
}

// Format prints the config without its internal line table. See formatSafe.
func (c Config) Format(f fmt.State, verb rune) {
	type config Config
	p := config(c)
	p.lines = nil
	formatSafe(f, verb, p)
}

// Format prints the cluster table; its Token prints "<redacted>". See
// formatSafe.
func (c Cluster) Format(f fmt.State, verb rune) {
	type cluster Cluster
	formatSafe(f, verb, cluster(c))
}

// Format prints the token; its Token prints "<redacted>". See formatSafe.
func (t AdminToken) Format(f fmt.State, verb rune) {
	type adminToken AdminToken
	formatSafe(f, verb, adminToken(t))
}

// formatSafe prints v (a method-less copy of a config struct) with verb,
// except that every verb but %v (with its + and # flags) prints as %v. fmt
// prints a mismatched verb's operand ("%!s(*T=...)") with every Format and
// String method turned off, which would show a Secret's bytes; answering
// every verb here keeps fmt from ever taking that path through a config.
func formatSafe(f fmt.State, verb rune, v any) {
	if verb != 'v' {
		fmt.Fprintf(f, "%v", v)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), v)
}

// Default returns the configuration of a single node with no sources: what
// `oncehook serve` starts from before a file is applied.
func Default() *Config {
	return &Config{
		Node: Node{
			ID:            DefaultNodeID,
			DataDir:       DefaultDataDir,
			Listen:        DefaultListen,
			LogLevel:      DefaultLogLevel,
			LogFormat:     DefaultLogFormat,
			MaxConnsPerIP: DefaultMaxConnsPerIP,
		},
		Admin:   Admin{Listen: DefaultAdminListen, MaxRestore: DefaultMaxRestore},
		Sources: []Source{},
	}
}

// defaultCluster returns a [cluster] table's defaults; Advertise is derived
// from RaftListen later.
func defaultCluster() Cluster {
	return Cluster{RaftListen: DefaultRaftListen,
		HeartbeatTimeout: Duration(DefaultRaftTimeout), ElectionTimeout: Duration(DefaultRaftTimeout)}
}

// newSource returns a source with every default that does not depend on the
// provider. applyProviderDefaults fills the rest once the provider is known.
func newSource() Source {
	return Source{
		Tolerance:      Duration(DefaultTolerance),
		MaxBody:        DefaultMaxBody,
		Mode:           DefaultMode,
		Lease:          Duration(DefaultLease),
		MaxAttempts:    DefaultMaxAttempts,
		BackoffMin:     Duration(DefaultBackoffMin),
		BackoffMax:     Duration(DefaultBackoffMax),
		ForwardTimeout: Duration(DefaultForwardTimeout),
		KeysRefresh:    Duration(DefaultKeysRefresh),
		DeadRetention:  Duration(DefaultDeadRetention),
	}
}

// applyProviderDefaults fills Key, Retention and AckStatus from the provider's
// Defaults where the file left them unset (nil Key, zero Retention/AckStatus),
// and PayloadRetention (when zero) from Retention.
// An unknown provider is left alone; Validate reports it.
func applyProviderDefaults(s *Source, keySet, retentionSet, ackSet, toleranceSet bool) {
	sch, ok := providers.Lookup(s.Provider)
	if !ok {
		return
	}
	d := sch.Defaults()
	if s.ReplayGuard == "" {
		s.ReplayGuard = ReplayGuardOff
		// A generic sender whose template signs an id is keyed by it; else
		// the body is all the signature proves.
		signsID := s.HMAC != nil && s.HMAC.IDHeader != "" && strings.Contains(s.HMAC.Template, "{id}")
		if d.ReplayGuard && !signsID {
			s.ReplayGuard = ReplayGuardBody
		}
		// A key of the operator's that reads what the signature does not
		// cover (a header the sender writes) lets a captured delivery be
		// resent as a new event: the body then decides (secretwarn.go's
		// neighbour, keyWarnings, says so). Shopify's own key is unsigned
		// and its guard off by choice (docs/security.md).
		if keySet && unsignedKeyPart(s) >= 0 && !defaultKeyUnsigned(s.Provider, d.Key) {
			s.ReplayGuard = ReplayGuardBody
		}
	}
	if s.Type == "" {
		s.Type = d.Type
	}
	if s.TwilioBody == "" && s.Provider == "twilio" {
		s.TwilioBody = TwilioBodyForm
	}
	if !toleranceSet && d.Tolerance > 0 {
		s.Tolerance = Duration(d.Tolerance) // linear: 60 s, not the general 5m
	}
	if !keySet && len(d.Key) > 0 {
		s.Key = append([]string(nil), d.Key...)
	}
	if !retentionSet {
		s.Retention = Duration(d.Retention)
	}
	if s.PayloadRetention == 0 {
		s.PayloadRetention = min(Duration(DefaultPayloadRetention), s.Retention)
	}
	if !ackSet {
		s.AckStatus = d.AckStatus
		if s.AckStatus == 0 {
			s.AckStatus = 202
		}
	}
}

// Demo returns the configuration `oncehook serve` runs without a file: a
// single node keeping its data in dataDir (DefaultDataDir when empty) with one
// source "demo" of provider "standard", signed with secret (a whsec_ string,
// as `oncehook keygen` prints) and forwarded to forward. Demo does not
// validate: call Validate to learn whether the secret is well-formed.
func Demo(dataDir, secret, forward string) *Config {
	c := Default()
	if dataDir != "" {
		c.Node.DataDir = dataDir
	}
	s := newSource()
	s.Name = DemoSourceName
	s.Provider = "standard"
	s.Secrets = []Secret{Secret(secret)}
	s.Forward = forward
	applyProviderDefaults(&s, false, false, false, false)
	c.Sources = []Source{s}
	return c
}

// unsignedKeyPart is the index of the first part of s's key that reads data
// its provider's signature does not cover, -1 when every part is signed.
func unsignedKeyPart(s *Source) int {
	for j, part := range s.Key {
		if !providers.KeyPartSigned(s.Provider, part, s.HMAC) {
			return j
		}
	}
	return -1
}

// defaultKeyUnsigned reports whether a provider's own default key reads
// unsigned data (shopify: its ids are headers it does not sign).
func defaultKeyUnsigned(provider string, key []string) bool {
	for _, part := range key {
		if !providers.KeyPartSigned(provider, part, nil) {
			return true
		}
	}
	return false
}
