package config

import (
	"fmt"
	"net"
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
