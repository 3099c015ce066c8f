package config

import (
	"fmt"
	"strings"
	"testing"

	"oncehook/providers"
)

// TestClusterAuthRequired: the cluster port is never open. Any [cluster],
// even a cluster of one, needs a token of at least MinTokenLen bytes or
// mutual TLS, and a token that is set must be long enough either way.
func TestClusterAuthRequired(t *testing.T) {
	cert, key, ca := writeTLS(t, t.TempDir())
	one := []Peer{{"node1", "10.0.0.1:7070"}}
	three := []Peer{{"node1", "10.0.0.1:7070"}, {"node2", "10.0.0.2:7070"}, {"node3", "10.0.0.3:7070"}}
	long := Secret(strings.Repeat("k", MinTokenLen))
	short := Secret(strings.Repeat("k", MinTokenLen-1))
	const required = "cluster.token_file: required: the cluster port needs authentication: set token_file (a shared token of at least 32 bytes) or tls_cert, tls_key and tls_ca (mutual TLS)"
	const tooShort = "cluster.token_file: the token in /etc/oncehook/cluster.token is 31 bytes: at least 32 are required; make one with `oncehook keygen -provider hmac` or `head -c 32 /dev/urandom | base64`"
	for _, tt := range []struct {
		name  string
		peers []Peer
		token Secret
		tls   bool
		want  string // "" = valid
	}{
		{"one peer, no token, no TLS", one, nil, false, required},
		{"three peers, no token, no TLS", three, nil, false, required},
		{"short token", three, short, false, tooShort},
		{"short token with TLS", three, short, true, tooShort},
		{"32-byte token", three, long, false, ""},
		{"32-byte token, one peer", one, long, false, ""},
		{"TLS, no token", three, nil, true, ""},
		{"TLS and token", three, long, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Cluster = &Cluster{RaftListen: "10.0.0.1:7070", Peers: tt.peers, Token: tt.token}
			if tt.token != nil {
				c.Cluster.TokenFile = "/etc/oncehook/cluster.token"
			}
			if tt.tls {
				c.Cluster.TLSCert, c.Cluster.TLSKey, c.Cluster.TLSCA = cert, key, ca
			}
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v\nwant %s", err, tt.want)
			}
			if tt.token != nil && strings.Contains(err.Error(), string(tt.token)) {
				t.Fatal("error shows the token")
			}
		})
	}
}

// TestAdminTokenLength: admin tokens shorter than MinTokenLen bytes are
// refused at the key that holds them, saying how to make a long one; what
// keygen makes is long enough.
func TestAdminTokenLength(t *testing.T) {
	dir := t.TempDir()
	shortFile := writeFile(t, dir, "short.token", strings.Repeat("a", MinTokenLen-1)+"\n", 0o600)
	longFile := writeFile(t, dir, "long.token", strings.Repeat("b", MinTokenLen)+"\n", 0o600)
	// Raw random bytes, as `head -c 40 /dev/urandom` writes them.
	binFile := writeFile(t, dir, "binary.token", "\x8f\x01\xd2"+strings.Repeat("a", MinTokenLen)+"\x1b\x7f\xe4", 0o600)
	for _, tt := range []struct {
		name, toml, want string
	}{
		{"inline 31 bytes", `tokens = [{ name = "ops", token = "` + strings.Repeat("a", MinTokenLen-1) + `" }]`,
			":2: admin.tokens[0].token: the token is 31 bytes: at least 32 are required; make one with `oncehook keygen -provider hmac`"},
		{"file of 31 bytes", `tokens = [{ name = "ops", token_file = "` + shortFile + `" }]`,
			":2: admin.tokens[0].token_file: the token in " + shortFile + " is 31 bytes: at least 32 are required; make one with"},
		{"inline 32 bytes", `tokens = [{ name = "ops", token = "` + strings.Repeat("a", MinTokenLen) + `" }]`, ""},
		{"file of 32 bytes", `tokens = [{ name = "ops", token_file = "` + longFile + `" }]`, ""},
		{"a binary file", `tokens = [{ name = "ops", token_file = "` + binFile + `" }]`,
			":2: admin.tokens[0].token_file: the token in " + binFile + " holds control bytes (a binary file?), which no client can send in an Authorization header; make one with"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, dir, "c.toml", "[admin]\n"+tt.toml+"\n", 0o600)
			_, err := Load(path)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), path+tt.want) {
				t.Fatalf("err = %v\nwant prefix %s", err, path+tt.want)
			}
			if strings.Contains(err.Error(), strings.Repeat("a", MinTokenLen-1)) {
				t.Fatal("error shows the token")
			}
		})
	}
	for _, p := range []string{"hmac", "standard"} { // `oncehook keygen [-provider hmac]`
		if s, err := providers.GenerateSecret(p); err != nil || len(s) < MinTokenLen {
			t.Errorf("keygen -provider %s makes %d bytes (%v): too short for a token", p, len(s), err)
		}
	}
}

// TestWarnClearTextCluster: peers off loopback without TLS is allowed but
// warned about (webhook bodies cross the network in clear); loopback-only
// clusters and TLS clusters are not.
func TestWarnClearTextCluster(t *testing.T) {
	cert, key, ca := writeTLS(t, t.TempDir())
	tok := Secret(clusterToken)
	for _, tt := range []struct {
		name  string
		peers []Peer
		tls   bool
		want  string // "" = no warning
	}{
		{"no cluster", nil, false, ""},
		{"loopback v4", []Peer{{"node1", "127.0.0.1:7070"}, {"node2", "127.0.0.2:7070"}}, false, ""},
		{"loopback v6 and localhost", []Peer{{"node1", "[::1]:7070"}, {"node2", "localhost:7071"}}, false, ""},
		{"one remote peer", []Peer{{"node1", "127.0.0.1:7070"}, {"node2", "10.0.0.2:7070"}}, false,
			"cluster: peer node2=10.0.0.2:7070 is not on loopback and TLS is off: webhook bodies cross the network in clear"},
		{"host name", []Peer{{"node1", "db1.internal:7070"}}, false, "cluster: peer node1=db1.internal:7070 is not on loopback"},
		{"remote with TLS", []Peer{{"node1", "10.0.0.1:7070"}, {"node2", "10.0.0.2:7070"}}, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			if tt.peers != nil {
				c.Cluster = &Cluster{RaftListen: tt.peers[0].Addr, Peers: tt.peers, Token: tok}
				if tt.tls {
					c.Cluster.TLSCert, c.Cluster.TLSKey, c.Cluster.TLSCA = cert, key, ca
				}
				if err := c.Validate(); err != nil {
					t.Fatalf("a warning is not an error: %v", err)
				}
			}
			var w []string // this check's: two peers are warned of besides (TestWarnClusterShape)
			for _, line := range c.Warnings() {
				if strings.HasPrefix(line, "cluster: ") {
					w = append(w, line)
				}
			}
			if tt.want == "" {
				if len(w) != 0 {
					t.Fatalf("warnings %q, want none", w)
				}
				return
			}
			if len(w) != 1 || !strings.HasPrefix(w[0], tt.want) {
				t.Fatalf("warnings %q, want one starting %q", w, tt.want)
			}
		})
	}
}

// TestWarnForwardedAdvertise: without TLS, an advertise address of this
// host that reaches another socket than raft_listen's (a local proxy) is
// warned about: the token handshake refuses the peers that dial it. The
// node's own socket (or a wildcard on the same port), a name, an address
// a NAT forwards from elsewhere, and TLS are not.
func TestWarnForwardedAdvertise(t *testing.T) {
	cert, key, ca := writeTLS(t, t.TempDir())
	for _, tt := range []struct {
		listen, advertise string
		tls, warn         bool
	}{
		{"127.0.0.1:7070", "127.0.0.1:7070", false, false},
		{"0.0.0.0:7070", "127.0.0.2:7070", false, false},
		{"[::]:7070", "127.0.0.1:7070", false, false},
		{"127.0.0.1:7070", "127.0.0.2:7070", false, true},
		{"127.0.0.1:7070", "127.0.0.1:17070", false, true},
		{"0.0.0.0:7070", "127.0.0.1:17070", false, true},
		{"127.0.0.1:7070", "localhost:7070", false, false},
		{"127.0.0.1:7070", "192.0.2.1:17070", false, false}, // TEST-NET-1: a NAT's, not this host's
		{"127.0.0.1:7070", "127.0.0.2:7070", true, false},
	} {
		c := Default()
		c.Node.ID = "node1"
		c.Cluster = &Cluster{RaftListen: tt.listen, Advertise: tt.advertise, Token: Secret(clusterToken),
			Peers: []Peer{{"node1", tt.advertise}}}
		if tt.tls {
			c.Cluster.TLSCert, c.Cluster.TLSKey, c.Cluster.TLSCA = cert, key, ca
		}
		got := forwardedAdvertise(c)
		if (len(got) > 0) != tt.warn {
			t.Errorf("listen %s, advertise %s, tls %v: warnings %q, want a warning: %v", tt.listen, tt.advertise, tt.tls, got, tt.warn)
		}
		if tt.warn && !strings.HasPrefix(got[0], "cluster.advertise: "+tt.advertise+" is an address of this host") {
			t.Errorf("warning %q", got[0])
		}
	}
}

// TestWarnClusterShape: an even number of members (no more failures
// survived than one member fewer) and a cluster token that is also an admin
// token are warned of; three members with a token of their own are not.
func TestWarnClusterShape(t *testing.T) {
	peers := func(n int) []Peer {
		var ps []Peer
		for i := range n {
			ps = append(ps, Peer{fmt.Sprintf("node%d", i+1), fmt.Sprintf("127.0.0.%d:7070", i+1)})
		}
		return ps
	}
	for _, tt := range []struct {
		name  string
		peers int
		admin string // an admin token's secret
		want  []string
	}{
		{"three", 3, "another-admin-token-0123456789abcdef", nil},
		{"one", 1, "another-admin-token-0123456789abcdef", nil},
		{"two", 2, "another-admin-token-0123456789abcdef", []string{"cluster.peers: 2 members need both up to commit"}},
		{"four", 4, "another-admin-token-0123456789abcdef", []string{"cluster.peers: 4 members need 3 up to commit, so the cluster survives 1 down, as 3 members would"}},
		{"shared token", 3, clusterToken, []string{`cluster.token_file: the same secret as admin token "ops"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Cluster = &Cluster{RaftListen: "127.0.0.1:7070", Peers: peers(tt.peers), Token: Secret(clusterToken)}
			c.Admin.Tokens = []AdminToken{{Name: "ops", Token: Secret(tt.admin)}}
			w := c.Warnings()
			if len(w) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", w, len(tt.want))
			}
			for i := range w {
				if !strings.HasPrefix(w[i], tt.want[i]) {
					t.Errorf("warning %q, want one starting %q", w[i], tt.want[i])
				}
			}
		})
	}
}
