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
	// Name lookups end with the node, not after their own timeout.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stopObserve:
		case <-ctx.Done():
		}
		cancel()
	}()
	var resolved memberLookup
	n.refreshMemberAddrs(ctx, &resolved)
	ticks := 0
	for {
		select {
		case <-n.stopObserve:
			return
		case <-t.C:
		}
		n.refreshMemberAddrs(ctx, &resolved)
		if addr, _ := n.raft.LeaderWithID(); addr != "" || n.removed() {
			since = time.Time{}
			n.removedBy.Store(nil)
			if ticks++; addr != "" && ticks%identityCheckEvery == 1 {
				n.checkLeaderIdentity(ctx, string(addr))
			}
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

// memberLookup is what refreshMemberAddrs resolved last: the members'
// hosts, and when.
type memberLookup struct {
	hosts  string
	at     time.Time
	names  bool // some host is a name, not an address
	failed bool // a name's lookup failed
	// byName is each name's addresses as last resolved: a name whose
	// lookup fails (a DNS outage) keeps them until one succeeds.
	byName map[string][]netip.Addr
}

// memberLookupEvery is how often members named by DNS are looked up again
// with the same names: a peer restarted under its name may come back with
// another address.
const memberLookupEvery = 30 * time.Second

// refreshMemberAddrs gives the cluster port the IP addresses of the
// members, so that their connections count apart from strangers'
// (mux.memberAuth): the raft configuration's servers, or the bootstrap
// peers while there is no configuration (a member removed since keeps no
// place). A name is resolved here, never on the accept path, again when the
// hosts change, a lookup failed or memberLookupEvery passed; last is the
// lookup before.
func (n *Node) refreshMemberAddrs(ctx context.Context, last *memberLookup) {
	if n.mux == nil {
		return
	}
	var hosts []string
	add := func(addr string) {
		if host, _, err := net.SplitHostPort(addr); err == nil && !slices.Contains(hosts, host) {
			hosts = append(hosts, host)
		}
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			add(string(s.Address))
		}
	}
	if len(hosts) == 0 {
		for _, p := range n.cfg.Peers {
			add(p.Addr)
		}
	}
	slices.Sort(hosts)
	key := strings.Join(hosts, " ")
	now := time.Now()
	if !last.due(key, now) {
		return
	}
	set, next := resolveMembers(ctx, hosts, last.byName, net.DefaultResolver.LookupNetIP)
	n.mux.members.Store(&set)
	next.hosts, next.at = key, now
	*last = next
}

// due reports whether the members' hosts must be looked up (again): they
// changed, or names among them were looked up memberLookupEvery ago, or
// a lookup failed (retried after memberLookupRetry).
func (l *memberLookup) due(hosts string, now time.Time) bool {
	switch {
	case hosts != l.hosts:
		return true
	case l.failed:
		return now.Sub(l.at) >= memberLookupRetry
	case l.names:
		return now.Sub(l.at) >= memberLookupEvery
	}
	return false
}

// memberLookupRetry is how soon a failed lookup of a member's name is tried
// again (each try may take memberStatsTimeout of the membership watch).
const memberLookupRetry = 5 * time.Second

// resolveMembers turns hosts (addresses or names) into the members' IP
// addresses, without zones, v4-mapped ones as IPv4. The lookup it returns
// says whether any host was a name and whether a lookup failed; a name
// whose lookup failed keeps its addresses in before, the last lookup's.
func resolveMembers(ctx context.Context, hosts []string, before map[string][]netip.Addr,
	lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)) (memberAddrs, memberLookup) {
	set := make(memberAddrs, len(hosts))
	l := memberLookup{byName: map[string][]netip.Addr{}}
	for _, h := range hosts {
		if ip, err := netip.ParseAddr(h); err == nil {
			set[ip.Unmap().WithZone("")] = struct{}{}
			continue
		}
		l.names = true
		lctx, cancel := context.WithTimeout(ctx, memberStatsTimeout)
		ips, err := lookup(lctx, "ip", h)
		cancel()
		if err != nil {
			l.failed = true
			ips = before[h]
		}
		l.byName[h] = ips
		for _, ip := range ips {
			set[ip.Unmap().WithZone("")] = struct{}{}
		}
	}
	return set, l
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
