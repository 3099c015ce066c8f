package main

import (
	"net"
	"testing"

	"oncehook/config"
)

func TestAdminURL(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	cl := func(listen, adv string) *config.Cluster { return &config.Cluster{RaftListen: listen, Advertise: adv} }
	for _, tt := range []struct {
		name    string
		ln      string
		cluster *config.Cluster
		tls     bool
		want    string
	}{
		{"loopback", "127.0.0.1:7071", nil, false, "http://127.0.0.1:7071"},
		{"one interface, TLS", "10.0.0.2:7071", cl("10.0.0.2:7070", ""), true, "https://10.0.0.2:7071"},
		{"every interface: the advertised host", "0.0.0.0:7071", cl("0.0.0.0:7070", "10.0.0.3:7070"), false, "http://10.0.0.3:7071"},
		{"every interface: the cluster's own host", "[::]:7071", cl("10.0.0.4:7070", ""), false, "http://10.0.0.4:7071"},
		{"every interface: a host name", "0.0.0.0:7071", cl("0.0.0.0:7070", "node2.internal:7070"), false, "http://node2.internal:7071"},
		{"IPv6", "[fd00::2]:7071", nil, false, "http://[fd00::2]:7071"},
		{"every interface, nothing to name it by", "0.0.0.0:7071", nil, false, ""},
		{"every interface, cluster on every interface", "0.0.0.0:7071", cl("0.0.0.0:7070", ""), false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Cluster = tt.cluster
			if tt.tls {
				cfg.Admin.TLSCert, cfg.Admin.TLSKey = "admin.crt", "admin.key"
			}
			if got := adminURL(cfg, tcp(tt.ln)); got != tt.want {
				t.Errorf("adminURL(%s) = %q, want %q", tt.ln, got, tt.want)
			}
		})
	}
}
