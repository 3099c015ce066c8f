package config

import (
	"fmt"
	"net"
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
	retriesOutliveRetention,
	keyPartChangesPerDelivery,
	reservedForwardHeaders,
	certificatesExpiring, // certwarn.go
	subSecondBackoff,     // sourcewarn.go
	wideTolerance,
	deadRetentionBelowRetention,
	largeBodies,  // sourcewarn.go
	weakSecrets,  // secretwarn.go
	unsignedKeys, // secretwarn.go
	unguardedUnsignedKeys,
}

// ownHeaders are the headers the forwarder sets on every delivery, or that
// describe the connection or the message's framing: a provider's value of
// one of them is never passed on (the forward package's setHeaders and
// forwardable decide; this list must follow them).
var ownHeaders = []string{
	"Idempotency-Key", "Oncehook-Event-Key", "Oncehook-Source", "Oncehook-Attempt",
	"Oncehook-Fencing-Token", "Oncehook-Last-Step",
	"Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
	"Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect",
}

// reservedForwardHeaders warns of a forward_headers entry the handler will
// never receive from the provider, since the forwarder sets or drops it.
func reservedForwardHeaders(c *Config) []string {
	var w []string
	for i := range c.Sources {
		for j, h := range c.Sources[i].ForwardHeaders {
			for _, own := range ownHeaders {
				if strings.EqualFold(h, own) {
					w = append(w, fmt.Sprintf("%s: %s is set or dropped by oncehook on every delivery: the provider's value never reaches the handler",
						sourceKey(i, "forward_headers")+"["+strconv.Itoa(j)+"]", h))
					break
				}
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
				"cluster: peer %s is not on loopback and TLS is off: webhook bodies and the cluster token cross the network in clear; set tls_cert, tls_key and tls_ca (mutual TLS) or keep the nodes on a private network",
				p.String())}
		}
	}
	return nil
}
