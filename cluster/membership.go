package cluster

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// A node removed from the configuration while it was behind (under load, or
// cut off) may never receive the entry that removes it: the leader stops
// sending it anything once the removal commits, so the node keeps standing
// for election, its /readyz saying it waits for a quorum. Its former peers
// know better: while it has no leader, it asks them (docs/operations.md,
// Three nodes).

// watchMembership asks the other members, every election timeout while this
// node has had no leader for two of them, whether it is still in their
// configuration; Ready reports what one that knows a leader says.
func (n *Node) watchMembership() {
	defer close(n.memberDone)
	every := orDur(n.cfg.ElectionTimeout, time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	var since time.Time // when this node last knew a leader, or started
	var resolved string // the member addresses last resolved
	n.refreshMemberAddrs(&resolved)
	for {
		select {
		case <-n.stopObserve:
			return
		case <-t.C:
		}
		n.refreshMemberAddrs(&resolved)
		if addr, _ := n.raft.LeaderWithID(); addr != "" || n.removed() {
			since = time.Time{}
			n.removedBy.Store(nil)
			continue
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < 2*every {
			continue
		}
		by := n.askRemoved()
		switch {
		case by == "":
			n.removedBy.Store(nil)
		case n.removedBy.Load() == nil:
			n.log.Warn("this node is not in the cluster's configuration (removed); it takes no part in commits", "says", by)
			n.removedBy.Store(&by)
		}
	}
}

// refreshMemberAddrs gives the cluster port the IP addresses of the
// members (the bootstrap peers and the raft configuration's servers), so
// that their connections count apart from strangers' (mux.memberAuth). A
// name is resolved here, never on the accept path, and again only when the
// set of addresses changes or a lookup failed; last is the set last
// resolved.
func (n *Node) refreshMemberAddrs(last *string) {
	if n.mux == nil {
		return
	}
	var hosts []string
	add := func(addr string) {
		if host, _, err := net.SplitHostPort(addr); err == nil && !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	for _, p := range n.cfg.Peers {
		add(p.Addr)
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			add(string(s.Address))
		}
	}
	slices.Sort(hosts)
	key := strings.Join(hosts, " ")
	if key == *last {
		return
	}
	set := make(memberAddrs, len(hosts))
	complete := true
	for _, h := range hosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			set[ip.Unmap()] = struct{}{}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
		cancel()
		if err != nil {
			complete = false
			continue
		}
		for _, ip := range ips {
			set[ip.Unmap()] = struct{}{}
		}
	}
	n.mux.members.Store(&set)
	if complete {
		*last = key
	}
}

// askRemoved asks the other members of this node's configuration and returns
// the id of the first that knows a leader and whose configuration lacks this
// node ("": none says so, or none answered).
func (n *Node) askRemoved() string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), memberStatsTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.stopObserve: // shutting down: do not hold it up
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.ID {
			continue
		}
		ms, err := n.askStats(ctx, string(s.Address))
		if err != nil || ms.ID != string(s.ID) || ms.Leader == "" || len(ms.Members) == 0 {
			continue // unreachable, another node, leaderless itself, or a binary that does not say
		}
		if !slices.Contains(ms.Members, n.cfg.ID) {
			return ms.ID
		}
	}
	return ""
}
