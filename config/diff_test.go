package config

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestDiff(t *testing.T) {
	_, path, err := loadTestdata(t, "valid.toml")
	if err != nil {
		t.Fatal(err)
	}
	load := func() *Config {
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tt := range []struct {
		name              string
		change            func(c *Config)
		reload, restarted []string
	}{
		{"nothing", func(*Config) {}, nil, nil},
		{"log level", func(c *Config) { c.Node.LogLevel = "warn" }, []string{"node.log_level"}, nil},
		{"log format", func(c *Config) { c.Node.LogFormat = "text" }, nil, []string{"node.log_format"}},
		{"node", func(c *Config) { c.Node.ID, c.Node.DataDir, c.Node.Listen = "n9", "/d", ":1" }, nil,
			[]string{"node.id", "node.data_dir", "node.listen"}},
		{"cluster removed", func(c *Config) { c.Cluster = nil }, nil, []string{"cluster"}},
		{"peers", func(c *Config) { c.Cluster.Peers = c.Cluster.Peers[:2] }, nil, []string{"cluster.peers"}},
		{"cluster token", func(c *Config) { c.Cluster.Token = Secret("other") }, nil, []string{"cluster.token"}},
		{"cluster addresses", func(c *Config) { c.Cluster.RaftListen, c.Cluster.Advertise = "1.2.3.4:1", "1.2.3.4:1" }, nil,
			[]string{"cluster.raft_listen", "cluster.advertise"}},
		{"raft timing", func(c *Config) {
			c.Cluster.HeartbeatTimeout, c.Cluster.ElectionTimeout = Duration(3*time.Second), Duration(5*time.Second)
		}, nil,
			[]string{"cluster.heartbeat_timeout", "cluster.election_timeout"}},
		{"admin listen", func(c *Config) { c.Admin.Listen = "127.0.0.1:1" }, nil, []string{"admin.listen"}},
		{"admin token", func(c *Config) { c.Admin.Tokens[0].Token = Secret("rotated") }, []string{"admin.tokens"}, nil},
		{"admin max_restore", func(c *Config) { c.Admin.MaxRestore = 1 * GiB }, []string{"admin.max_restore"}, nil},
		{"cluster tls turned on", func(c *Config) { c.Cluster.TLSCert, c.Cluster.TLSKey, c.Cluster.TLSCA = "/c.crt", "/c.key", "/ca.crt" }, nil,
			[]string{"cluster.tls_cert", "cluster.tls_key", "cluster.tls_ca"}},
		{"admin tls turned on", func(c *Config) { c.Admin.TLSCert, c.Admin.TLSKey = "/a.crt", "/a.key" }, nil,
			[]string{"admin.tls_cert", "admin.tls_key"}},
		{"source fields", func(c *Config) {
			c.Sources[0].Forward = "http://127.0.0.1:1/new"
			c.Sources[0].Secrets = append(c.Sources[0].Secrets, Secret("next"))
			c.Sources[2].HMAC.Prefix = ""
		}, []string{"source[stripe-live].secrets", "source[stripe-live].forward", "source[legacy].hmac"}, nil},
		{"type filters", func(c *Config) {
			c.Sources[0].DropTypes = []string{"charge.updated"}
			c.Sources[1].Type, c.Sources[1].AcceptTypes = "header:X-Event", []string{"order.paid"}
		}, []string{"source[stripe-live].drop_types", "source[orders].type", "source[orders].accept_types"}, nil},
		{"sources added and removed", func(c *Config) {
			c.Sources[1].Name = "orders2"
			c.Sources = c.Sources[1:]
		}, []string{"source[orders2] (added)", "source[orders] (removed)", "source[stripe-live] (removed)"}, nil},
		{"sources reordered", func(c *Config) { slices.Reverse(c.Sources) }, nil, nil},
		{"everything at once", func(c *Config) {
			c.Node.LogLevel = "error"
			c.Node.Listen = ":2"
		}, []string{"node.log_level"}, []string{"node.listen"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old, new := load(), load()
			tt.change(new)
			reload, restart := Diff(old, new)
			if !reflect.DeepEqual(reload, tt.reload) || !reflect.DeepEqual(restart, tt.restarted) {
				t.Errorf("Diff = %q, %q; want %q, %q", reload, restart, tt.reload, tt.restarted)
			}
			// What the node runs after the reload: every change that
			// applies live, none that needs a restart.
			run := Running(old, new)
			if reload, restart := Diff(old, run); !reflect.DeepEqual(reload, tt.reload) || restart != nil {
				t.Errorf("Running applies %q and %q of the restart-only keys; want %q and none", reload, restart, tt.reload)
			}
			if reload, _ := Diff(new, run); reload != nil {
				t.Errorf("Running differs from the loaded file in %q, which apply live", reload)
			}
		})
	}

	// SIGHUP after a secret file was rewritten: the new Load sees it.
	old := load()
	writeFile(t, filepath.Dir(path), "stripe.secret", "whsec_rotated\n", 0o600)
	reload, restart := Diff(old, load())
	if !reflect.DeepEqual(reload, []string{"source[stripe-live].secrets"}) || restart != nil {
		t.Errorf("after rotation: %q, %q", reload, restart)
	}

	// With TLS on both sides, new certificate paths are applied live; turning
	// it off needs a restart.
	tlsOn := load()
	tlsOn.Admin.TLSCert, tlsOn.Admin.TLSKey = "/a.crt", "/a.key"
	renewed := load()
	renewed.Admin.TLSCert, renewed.Admin.TLSKey = "/b.crt", "/a.key"
	if reload, restart := Diff(tlsOn, renewed); !reflect.DeepEqual(reload, []string{"admin.tls_cert"}) || restart != nil {
		t.Errorf("admin certificate renewed: %q, %q", reload, restart)
	}
	if reload, restart := Diff(tlsOn, load()); reload != nil || !reflect.DeepEqual(restart, []string{"admin.tls_cert", "admin.tls_key"}) {
		t.Errorf("admin tls turned off: %q, %q", reload, restart)
	}

	clusterTLS := load()
	clusterTLS.Cluster.TLSCert, clusterTLS.Cluster.TLSKey, clusterTLS.Cluster.TLSCA = "/c.crt", "/c.key", "/ca.crt"
	renewed = load()
	renewed.Cluster.TLSCert, renewed.Cluster.TLSKey, renewed.Cluster.TLSCA = "/c2.crt", "/c2.key", "/ca.crt"
	if reload, restart := Diff(clusterTLS, renewed); !reflect.DeepEqual(reload, []string{"cluster.tls_cert", "cluster.tls_key"}) || restart != nil {
		t.Errorf("cluster certificate renewed: %q, %q", reload, restart)
	}
	if run := Running(clusterTLS, renewed); run.Cluster.TLSCert != "/c2.crt" || run.Cluster.TLSKey != "/c2.key" {
		t.Errorf("the running config after a cluster certificate renewal: %q, %q", run.Cluster.TLSCert, run.Cluster.TLSKey)
	}
	adminRenewed := load()
	adminRenewed.Admin.TLSCert, adminRenewed.Admin.TLSKey = "/b.crt", "/a.key"
	if run := Running(tlsOn, adminRenewed); run.Admin.TLSCert != "/b.crt" {
		t.Errorf("the running config after an admin certificate renewal: %q", run.Admin.TLSCert)
	}

	// nil counts as Default().
	if r, s := Diff(nil, Default()); r != nil || s != nil {
		t.Errorf("Diff(nil, Default()) = %q, %q", r, s)
	}
}

// TestDiffCoversSourceFields: a field added to Source must be compared by
// Diff (or consciously left out here).
func TestDiffCoversSourceFields(t *testing.T) {
	listed := map[string]bool{"Name": true}
	for _, k := range sourceKeys {
		listed[k.field] = true
		if _, ok := reflect.TypeFor[Source]().FieldByName(k.field); !ok {
			t.Errorf("sourceKeys names %s, which Source lacks", k.field)
		}
	}
	st := reflect.TypeFor[Source]()
	for i := range st.NumField() {
		if f := st.Field(i); !listed[f.Name] {
			t.Errorf("Source.%s is not compared by Diff", f.Name)
		}
	}
	// And every key named is a key of the file.
	fields := tomlFields(reflect.TypeFor[rawSource]())
	for _, k := range sourceKeys {
		if _, ok := fields[k.key]; !ok {
			t.Errorf("sourceKeys key %q is not a [[source]] key", k.key)
		}
	}
}
