package connlimit

// Caps are the node's listener caps for a process allowed fds file
// descriptors.
type Caps struct {
	Intake Limits
	Admin  Limits
	// ClusterUnauthenticated caps the cluster port's connections that have
	// not proved membership yet; members' own are not capped.
	ClusterUnauthenticated Limits
}

// CapsFor divides a file descriptor limit between the listeners: a quarter
// (at most 4,096) is kept for what is not a listener's (the Raft log and
// snapshots, the engine, outgoing deliveries and relays); the admin
// listener and the cluster port's unauthenticated connections get an eighth
// each of the rest, at most 256; the intake the remainder. perNetwork is the
// intake's per-network cap (node.max_conns_per_ip); the admin listener
// allows 16 per network (a browser opens six, Prometheus and the CLI one
// each) and the cluster port 64 (a member's pools), so that a few clients
// cannot take them whole. fds <= 0 (unknown) is taken as 65,536, what the systemd unit
// sets.
func CapsFor(fds, perNetwork int) Caps {
	if fds <= 0 {
		fds = 65536
	}
	reserve := min(fds/4, 4096)
	avail := fds - reserve
	side := min(avail/8, 256)
	return Caps{
		Intake:                 Limits{Total: avail - 2*side, PerNetwork: perNetwork},
		Admin:                  Limits{Total: side, PerNetwork: min(16, side)},
		ClusterUnauthenticated: Limits{Total: side, PerNetwork: min(64, side)},
	}
}
