package testcluster

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// NodeConfig is the TOML config of one test node: the keys the system and
// chaos tests set, nothing else (the rest keeps its default). Relative file
// names are resolved by oncehook against the config file's directory.
type NodeConfig struct {
	ID       string
	DataDir  string
	Listen   string // intake address
	LogLevel string // "" is "info"

	// Cluster; RaftListen "" leaves the [cluster] section out (one node).
	RaftListen       string
	Advertise        string   // "" leaves the default (RaftListen)
	Peers            []string // "id=host:port", every node's, the same on each
	ClusterTokenFile string
	ClusterExtra     string // raw TOML lines appended to [cluster] (e.g. tls_cert)

	AdminListen    string
	AdminTokenName string // "" is "test"
	AdminTokenFile string

	Sources []SourceConfig
}

// SourceConfig is one [[source]]; an empty duration or a zero MaxAttempts
// leaves oncehook's default.
type SourceConfig struct {
	Name, Provider, SecretFile, Forward string

	Lease, ForwardTimeout, BackoffMin, BackoffMax string
	MaxAttempts                                   int

	Extra string // raw TOML lines appended to the source's table
}

// TOML renders the config.
func (c NodeConfig) TOML() string {
	var b strings.Builder
	q := strconv.Quote
	kv := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%s = %s\n", k, q(v))
		}
	}
	b.WriteString("[node]\n")
	kv("id", c.ID)
	kv("data_dir", c.DataDir)
	kv("listen", c.Listen)
	kv("log_level", cmp(c.LogLevel, "info"))
	if c.RaftListen != "" {
		b.WriteString("\n[cluster]\n")
		kv("raft_listen", c.RaftListen)
		kv("advertise", c.Advertise)
		var peers []string
		for _, p := range c.Peers {
			peers = append(peers, q(p))
		}
		fmt.Fprintf(&b, "peers = [%s]\n", strings.Join(peers, ", "))
		kv("token_file", c.ClusterTokenFile)
		if c.ClusterExtra != "" {
			b.WriteString(strings.TrimRight(c.ClusterExtra, "\n") + "\n")
		}
	}
	b.WriteString("\n[admin]\n")
	kv("listen", c.AdminListen)
	if c.AdminTokenFile != "" {
		fmt.Fprintf(&b, "tokens = [{ name = %s, token_file = %s }]\n", q(cmp(c.AdminTokenName, "test")), q(c.AdminTokenFile))
	}
	for _, s := range c.Sources {
		b.WriteString("\n[[source]]\n")
		kv("name", s.Name)
		kv("provider", s.Provider)
		if s.SecretFile != "" {
			fmt.Fprintf(&b, "secret_files = [%s]\n", q(s.SecretFile))
		}
		kv("forward", s.Forward)
		kv("lease", s.Lease)
		kv("forward_timeout", s.ForwardTimeout)
		kv("backoff_min", s.BackoffMin)
		kv("backoff_max", s.BackoffMax)
		if s.MaxAttempts > 0 {
			fmt.Fprintf(&b, "max_attempts = %d\n", s.MaxAttempts)
		}
		if s.Extra != "" {
			b.WriteString(strings.TrimRight(s.Extra, "\n") + "\n")
		}
	}
	return b.String()
}

// Write writes the config to path, readable by its owner only.
func (c NodeConfig) Write(path string) error {
	return WriteSecret(path, c.TOML())
}

// WriteSecret writes a file readable by its owner only (oncehook refuses a
// secret or token file others can read).
func WriteSecret(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func cmp(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
