package config

import (
	"reflect"
	"slices"
)

// sourceKeys maps each compared Source field to its key in the file. Name
// identifies a source, so it is not listed; a test checks that every other
// field is.
var sourceKeys = []struct{ field, key string }{
	{"Provider", "provider"},
	{"Secrets", "secrets"},
	{"SecretFiles", "secret_files"},
	{"Tolerance", "tolerance"},
	{"Key", "key"},
	{"Retention", "retention"},
	{"DeadRetention", "dead_retention"},
	{"PayloadRetention", "payload_retention"},
	{"MaxBody", "max_body"},
	{"Forward", "forward"},
	{"ForwardHeaders", "forward_headers"},
	{"Mode", "mode"},
	{"AckStatus", "ack_status"},
	{"Lease", "lease"},
	{"MaxAttempts", "max_attempts"},
	{"BackoffMin", "backoff_min"},
	{"BackoffMax", "backoff_max"},
	{"ForwardTimeout", "forward_timeout"},
	{"MaxRate", "max_rate"},
	{"MaxRateBurst", "max_rate_burst"},
	{"AllowIPs", "allow_ips"},
	{"TrustedProxies", "trusted_proxies"},
	{"TwilioBody", "twilio_body"},
	{"KeysURL", "keys_url"},
	{"KeysRefresh", "keys_refresh"},
	{"SchemaFile", "schema_file"},
	{"Order", "order"},
	{"HMAC", "hmac"},
	{"ReplayGuard", "replay_guard"},
	{"Type", "type"},
	{"AcceptTypes", "accept_types"},
	{"DropTypes", "drop_types"},
}

// Running is what a node runs after a reload of loaded that it started
// with started: loaded, but with every setting that applies only after a
// restart (the restart list of Diff) kept as started had it, so that
// whatever reads the running config (the admin API's node id, the restore's
// spool directory in data_dir) never sees a value the node does not run.
func Running(started, loaded *Config) *Config {
	if started == nil || loaded == nil {
		return loaded
	}
	run := *loaded
	run.Node.ID = started.Node.ID
	run.Node.DataDir = started.Node.DataDir
	run.Node.Listen = started.Node.Listen
	run.Node.LogFormat = started.Node.LogFormat
	run.Node.MaxConnsPerIP = started.Node.MaxConnsPerIP
	switch sc, lc := started.Cluster, loaded.Cluster; {
	case sc == nil || lc == nil || sc.TLS() != lc.TLS():
		run.Cluster = sc
	default:
		c := *sc
		c.TLSCert, c.TLSKey, c.TLSCA = lc.TLSCert, lc.TLSKey, lc.TLSCA
		run.Cluster = &c
	}
	run.Admin.Listen = started.Admin.Listen
	if started.Admin.TLS() != loaded.Admin.TLS() {
		run.Admin.TLSCert, run.Admin.TLSKey = started.Admin.TLSCert, started.Admin.TLSKey
	}
	return &run
}

// Diff compares the running config with a newly loaded one, for SIGHUP. It
// returns the keys that changed, split into those the running process applies
// live (sources and their secrets, admin tokens, admin.max_restore, the admin
// TLS files while TLS stays on, node.log_level) and those it applies only
// after a restart (node id, listen addresses, data_dir, log_format, the whole
// [cluster] table, admin.listen, turning admin TLS on or off). Sources are named by
// name, not position: "source[stripe-live].forward", "source[github] (added)",
// "source[old] (removed)". Secret values never appear, only the key. Both
// lists are nil when nothing changed. A nil argument counts as Default().
func Diff(old, new *Config) (reloadable, restartNeeded []string) {
	if old == nil {
		old = Default()
	}
	if new == nil {
		new = Default()
	}
	restart := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			restartNeeded = append(restartNeeded, key)
		}
	}
	restart("node.id", old.Node.ID, new.Node.ID)
	restart("node.data_dir", old.Node.DataDir, new.Node.DataDir)
	restart("node.listen", old.Node.Listen, new.Node.Listen)
	if old.Node.LogLevel != new.Node.LogLevel {
		reloadable = append(reloadable, "node.log_level")
	}
	restart("node.log_format", old.Node.LogFormat, new.Node.LogFormat)
	restart("node.max_conns_per_ip", old.Node.MaxConnsPerIP, new.Node.MaxConnsPerIP)

	switch oc, nc := old.Cluster, new.Cluster; {
	case oc == nil && nc == nil:
	case oc == nil || nc == nil:
		restartNeeded = append(restartNeeded, "cluster")
	default:
		restart("cluster.raft_listen", oc.RaftListen, nc.RaftListen)
		restart("cluster.advertise", oc.Advertise, nc.Advertise)
		restart("cluster.peers", oc.Peers, nc.Peers)
		restart("cluster.token_file", oc.TokenFile, nc.TokenFile)
		restart("cluster.token", oc.Token, nc.Token)
		restart("cluster.heartbeat_timeout", oc.HeartbeatTimeout, nc.HeartbeatTimeout)
		restart("cluster.election_timeout", oc.ElectionTimeout, nc.ElectionTimeout)
		// As for the admin listener: TLS stays on or off from the start,
		// and with TLS on both sides the files (paths and content) are
		// re-read live.
		clusterTLS := &reloadable
		if oc.TLS() != nc.TLS() {
			clusterTLS = &restartNeeded
		}
		for _, k := range []struct{ key, a, b string }{
			{"cluster.tls_cert", oc.TLSCert, nc.TLSCert},
			{"cluster.tls_key", oc.TLSKey, nc.TLSKey},
			{"cluster.tls_ca", oc.TLSCA, nc.TLSCA},
		} {
			if k.a != k.b {
				*clusterTLS = append(*clusterTLS, k.key)
			}
		}
	}

	restart("admin.listen", old.Admin.Listen, new.Admin.Listen)
	if !reflect.DeepEqual(old.Admin.Tokens, new.Admin.Tokens) {
		reloadable = append(reloadable, "admin.tokens")
	}
	// The admin listener is TLS or not from its start; with TLS on both
	// sides, the certificate files (paths and content) are re-read live.
	adminTLS := &reloadable
	if old.Admin.TLS() != new.Admin.TLS() {
		adminTLS = &restartNeeded
	}
	if old.Admin.TLSCert != new.Admin.TLSCert {
		*adminTLS = append(*adminTLS, "admin.tls_cert")
	}
	if old.Admin.TLSKey != new.Admin.TLSKey {
		*adminTLS = append(*adminTLS, "admin.tls_key")
	}
	if old.Admin.MaxRestore != new.Admin.MaxRestore {
		reloadable = append(reloadable, "admin.max_restore")
	}

	olds := map[string]*Source{}
	for i := range old.Sources {
		olds[old.Sources[i].Name] = &old.Sources[i]
	}
	seen := map[string]bool{}
	for i := range new.Sources {
		n := &new.Sources[i]
		seen[n.Name] = true
		o, ok := olds[n.Name]
		if !ok {
			reloadable = append(reloadable, "source["+n.Name+"] (added)")
			continue
		}
		ov, nv := reflect.ValueOf(o).Elem(), reflect.ValueOf(n).Elem()
		for _, f := range sourceKeys {
			if !reflect.DeepEqual(ov.FieldByName(f.field).Interface(), nv.FieldByName(f.field).Interface()) {
				reloadable = append(reloadable, "source["+n.Name+"]."+f.key)
			}
		}
	}
	var removed []string
	for name := range olds {
		if !seen[name] {
			removed = append(removed, "source["+name+"] (removed)")
		}
	}
	slices.Sort(removed)
	reloadable = append(reloadable, removed...)
	return reloadable, restartNeeded
}
