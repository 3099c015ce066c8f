package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Warnings lists what the config allows but an operator should know about,
// one line each: settings that work yet weaken a guarantee (docs/security.md).
// `oncehook validate` prints them and exits 0; `serve` logs each at start and
// on reload. Warnings never refuse a config: Validate does that.
func (c *Config) Warnings() []string {
	var w []string
	for _, check := range warningChecks {
		w = append(w, check(c)...)
	}
	return w
}

// WarningLine is the line of the file a warning is about (the line of the
// key it starts with, "key: message", or of its table), 0 when unknown: for
// `validate` to print it as `file:line: warning: key: message`.
func (c *Config) WarningLine(w string) int {
	key, _, ok := strings.Cut(w, ": ")
	if !ok || strings.ContainsAny(key, " \t") {
		return 0
	}
	return c.lines.find(key)
}

// warningChecks are run in order by Warnings; each returns zero or more
// lines, each "key: message".
var warningChecks = []func(*Config) []string{
	clearTextCluster,
	adminPlaintextWarning,     // admin.go
	retentionBelowRetryWindow, // retentionwarn.go
	retentionBelowTolerance,   // retentionwarn.go
	retriesOutliveRetention,
	keyPartChangesPerDelivery,
	reservedForwardHeaders,
	credentialForwardHeaders,
	certificatesExpiring, // certwarn.go
	subSecondBackoff,     // sourcewarn.go
	wideTolerance,
	deadRetentionBelowRetention,
	largeBodies,  // sourcewarn.go
	weakSecrets,  // secretwarn.go
	inlinePaths,  // secretwarn.go
	unsignedKeys, // secretwarn.go
	unguardedUnsignedKeys,
	forwardedAdvertise,
	ineffectiveKeys, // sourcewarn.go
	smallBodies,     // sourcewarn.go
	evenCluster,
	sharedClusterToken,
}

// evenCluster warns of a peers list of an even size: a majority of 2n
// members is n+1, so it survives no more failures than 2n-1 members (two
// members survive none: either one down stops every commit).
func evenCluster(c *Config) []string {
	cl := c.Cluster
	if cl == nil || len(cl.Peers)%2 != 0 {
		return nil
	}
	n := len(cl.Peers)
	if n == 2 {
		return []string{"cluster.peers: 2 members need both up to commit: either one down stops every commit, so two survive no more failures than one; add a third"}
	}
	return []string{fmt.Sprintf(
		"cluster.peers: %d members need %d up to commit, so the cluster survives %d down, as %d members would: add or remove one (3 or 5 members)",
		n, n/2+1, n/2-1, n-1)}
}

// sharedClusterToken warns of a cluster token that is also an admin token:
// whoever holds it for the admin API can also speak to the cluster port as
// a member (and the other way round), and rotating one rotates both.
func sharedClusterToken(c *Config) []string {
	cl := c.Cluster
	if cl == nil || len(cl.Token) == 0 {
		return nil
	}
	for _, t := range c.Admin.Tokens {
		if len(t.Token) > 0 && string(t.Token) == string(cl.Token) {
			return []string{fmt.Sprintf(
				"cluster.token_file: the same secret as admin token %q: whoever holds it for the admin API can speak to the cluster port as a member; give each its own (oncehook keygen -provider hmac)",
				t.Name)}
		}
	}
	return nil
}

// forwardedAdvertise warns, without TLS, about an advertise address that
// is this host's but reaches another socket than raft_listen's (a proxy on
// this host forwarding it): the token handshake refuses every peer that
// dials it, since a stranger relaying would look the same
// (cluster/handshake.go).
func forwardedAdvertise(c *Config) []string {
	cl := c.Cluster
	if cl == nil || cl.TLS() || cl.Advertise == "" || cl.Advertise == cl.RaftListen {
		return nil
	}
	aHost, aPort, err1 := net.SplitHostPort(cl.Advertise)
	lHost, lPort, err2 := net.SplitHostPort(cl.RaftListen)
	adv, err3 := netip.ParseAddr(aHost)
	if err1 != nil || err2 != nil || err3 != nil || !hostAddress(adv) {
		return nil // a name, or an address a NAT forwards from elsewhere
	}
	lis, err := netip.ParseAddr(lHost)
	wildcard := lHost == "" || err == nil && lis.IsUnspecified()
	if aPort == lPort && (wildcard || err == nil && lis.Unmap() == adv.Unmap()) {
		return nil
	}
	return []string{fmt.Sprintf(
		"cluster.advertise: %s is an address of this host, but the node listens on %s: without TLS the peers' connections to it are refused, as a stranger relaying them would be; advertise the address the node listens on, or use TLS",
		cl.Advertise, cl.RaftListen)}
}

// hostAddress reports whether ip is one of this host's: loopback or an
// address of one of its interfaces.
func hostAddress(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if p, ok := a.(*net.IPNet); ok {
			if mine, ok := netip.AddrFromSlice(p.IP); ok && mine.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// ownHeaders are the headers the forwarder sets on every delivery (all of
// Oncehook-*: a name ending in '*' is a prefix), or that describe the
// connection or the message's framing: a provider's value of one of them is
// never passed on (the forward package's setHeaders and forwardable decide;
// this list must follow them).
var ownHeaders = []string{
	"Idempotency-Key", "Oncehook-*",
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect",
}

// reservedForwardHeaders warns of a forward_headers entry the handler will
// never receive from the provider, since the forwarder sets or drops it.
func reservedForwardHeaders(c *Config) []string {
	return forwardHeadersNamed(c, ownHeaders,
		"is set or dropped by oncehook on every delivery: the provider's value never reaches the handler")
}

// credentialHeaders carry a caller's credentials in any provider's request.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// credentialForwardHeaders warns of a forward_headers entry that carries
// credentials: a forwarded header is stored with the event, so the
// credential would be replicated, kept in backups and shown by the admin
// API and the dead-letter page. (A provider whose token is its secret is
// refused outright by validation.)
func credentialForwardHeaders(c *Config) []string {
	return forwardHeadersNamed(c, credentialHeaders,
		"carries the sender's credentials: forwarded, it is stored with every event, replicated, kept in backups and shown by the admin API and the dead-letter page; forward it only if the handler needs it")
}

// forwardHeadersNamed returns a warning, "key: header why", for every
// forward_headers entry that is one of names (in any case).
func forwardHeadersNamed(c *Config, names []string, why string) []string {
	var w []string
	for i := range c.Sources {
		for j, h := range c.Sources[i].ForwardHeaders {
			if slices.ContainsFunc(names, func(n string) bool {
				if p, ok := strings.CutSuffix(n, "*"); ok { // a prefix
					return len(h) >= len(p) && strings.EqualFold(h[:len(p)], p)
				}
				return strings.EqualFold(h, n)
			}) {
				w = append(w, sourceKey(i, "forward_headers")+"["+strconv.Itoa(j)+"]: "+h+" "+why)
			}
		}
	}
	return w
}

// clearTextCluster warns when cluster traffic leaves the machine unencrypted:
// a token authenticates the nodes but does not encrypt what they exchange,
// and the raft log carries every webhook body.
func clearTextCluster(c *Config) []string {
	cl := c.Cluster
	if cl == nil || cl.TLS() {
		return nil
	}
	for _, p := range cl.Peers {
		host, _, err := net.SplitHostPort(p.Addr)
		if err != nil || !IsLoopbackHost(host) {
			return []string{fmt.Sprintf(
				"cluster: peer %s is not on loopback and TLS is off: webhook bodies cross the network in clear, and whoever is on the path between two nodes can alter their streams; set tls_cert, tls_key and tls_ca (mutual TLS) or keep the nodes on a private network",
				p.String())}
		}
	}
	return nil
}
