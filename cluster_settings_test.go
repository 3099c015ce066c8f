package main

import (
	"testing"
	"time"

	"oncehook/cluster"
	"oncehook/config"
)

// TestClusterSettings: the [cluster] table reaches the cluster's config,
// Raft's timing included: the leader's lease follows the heartbeat timeout
// (half of it), so raising one on a slow host raises the other.
func TestClusterSettings(t *testing.T) {
	var ccfg cluster.Config
	clusterSettings(&ccfg, &config.Cluster{
		RaftListen: "127.0.0.1:7070", Advertise: "127.0.0.1:7070",
		Peers:            []config.Peer{{ID: "node1", Addr: "127.0.0.1:7070"}, {ID: "node2", Addr: "127.0.0.2:7070"}},
		HeartbeatTimeout: config.Duration(4 * time.Second), ElectionTimeout: config.Duration(6 * time.Second),
	})
	if ccfg.HeartbeatTimeout != 4*time.Second || ccfg.ElectionTimeout != 6*time.Second || ccfg.LeaderLeaseTimeout != 2*time.Second {
		t.Fatalf("timing heartbeat %v election %v lease %v, want 4s 6s 2s", ccfg.HeartbeatTimeout, ccfg.ElectionTimeout, ccfg.LeaderLeaseTimeout)
	}
	if ccfg.Bind != "127.0.0.1:7070" || len(ccfg.Peers) != 2 || ccfg.Peers[1].Addr != "127.0.0.2:7070" || ccfg.TLS != nil {
		t.Fatalf("cluster config %+v", ccfg)
	}
}
