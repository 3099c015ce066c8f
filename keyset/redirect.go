package keyset

// The redirect policy of the keys_url fetcher. A published key set decides who
// may sign, so where a fetch may be redirected is bounded (docs/security.md):
//
//   - every URL is https://, or http:// to a loopback host (keysFetchURLOK);
//   - once on https, never back to http;
//   - never to a loopback, link-local, private or otherwise internal address,
//     unless the configured URL itself is of that same class (a key server on
//     the private network may redirect within it, never to this host or to a
//     cloud metadata address). The redirect's host is resolved when the
//     redirect is followed, and the address actually connected is checked
//     again when the connection is made, so that a name that resolves to a
//     public address for the check and to an internal one for the connection
//     (DNS rebinding) is refused.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"oncehook/config"
)

// addrClass is the kind of network an address is on.
type addrClass uint8

const (
	classPublic addrClass = iota
	classLoopback
	classLinkLocal
	classPrivate
	classOther // multicast, reserved: never a key server
)

func (c addrClass) String() string {
	switch c {
	case classPublic:
		return "public"
	case classLoopback:
		return "loopback"
	case classLinkLocal:
		return "link-local"
	case classPrivate:
		return "private"
	}
	return "non-unicast"
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// classOf classifies an address; IPv4-mapped IPv6 addresses count as IPv4.
func classOf(a netip.Addr) addrClass {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return classOther
	case a.IsLoopback(), a.IsUnspecified(): // 0.0.0.0 and :: reach this host
		return classLoopback
	case a.IsLinkLocalUnicast():
		return classLinkLocal
	case a.IsPrivate(), cgnat.Contains(a):
		return classPrivate
	case a.IsMulticast(), a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast():
		return classOther
	}
	return classPublic
}

// keysRedirectTargetOK is the address rule: a redirect may reach a public
// address, or an address of the same class as the configured URL's.
func keysRedirectTargetOK(configured addrClass, target netip.Addr) error {
	c := classOf(target)
	if c == classPublic || c == configured {
		return nil
	}
	return fmt.Errorf("redirect to a %s address (the configured keys_url is %s)", c, configured)
}

// hostClass resolves host (a name or an IP literal) and returns its
// addresses and the class of the configured URL they make: the first
// non-public class among them, else public.
func hostClass(ctx context.Context, host string) (addrClass, []netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if config.IsLoopbackHost(host) {
		return classLoopback, nil, nil
	} else {
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return 0, nil, fmt.Errorf("resolve %s: %w", host, err)
		}
	}
	for _, a := range addrs {
		if c := classOf(a); c != classPublic {
			return c, addrs, nil
		}
	}
	return classPublic, addrs, nil
}

// keysDialPolicy travels in a fetch's context to the dialer: the configured
// URL's address (dialled freely) and, once a redirect was followed, the class
// every other connection's address is checked against.
type keysDialPolicy struct {
	configuredAddr string // host:port of the configured URL
	proxyAddr      string // host:port of the environment's proxy, "" for none
	redirected     atomic.Bool
	class          atomic.Uint32 // addrClass of the configured URL
}

type keysDialPolicyKey struct{}

// withKeysDialPolicy returns ctx carrying the policy of a fetch of rawURL.
func withKeysDialPolicy(ctx context.Context, rawURL string) context.Context {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ctx
	}
	p := &keysDialPolicy{configuredAddr: hostPort(u)}
	req := &http.Request{URL: u}
	if pu, err := http.ProxyFromEnvironment(req); err == nil && pu != nil {
		p.proxyAddr = hostPort(pu)
	}
	return context.WithValue(ctx, keysDialPolicyKey{}, p)
}

// hostPort is u's host with its scheme's default port when it names none.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// keysCheckRedirect is the fetcher's http.Client.CheckRedirect.
func keysCheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("too many redirects")
	}
	if !keysFetchURLOK(req.URL) {
		return errors.New("redirect to a URL that is neither https nor loopback")
	}
	for _, v := range via {
		if v.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return errors.New("redirect from https to http")
		}
	}
	ctx := req.Context()
	configured, _, err := hostClass(ctx, via[0].URL.Hostname())
	if err != nil {
		return err
	}
	_, targets, err := hostClass(ctx, req.URL.Hostname())
	if err != nil {
		return err
	}
	if targets == nil { // "localhost"
		targets = []netip.Addr{netip.IPv6Loopback()}
	}
	for _, a := range targets {
		if err := keysRedirectTargetOK(configured, a); err != nil {
			return err
		}
	}
	if p, ok := ctx.Value(keysDialPolicyKey{}).(*keysDialPolicy); ok {
		p.class.Store(uint32(configured))
		p.redirected.Store(true)
	}
	return nil
}

// keysDialControl checks the address a redirected fetch actually connects to.
func (p *keysDialPolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: not an IP address", address)
	}
	return keysRedirectTargetOK(addrClass(p.class.Load()), ap.Addr())
}

// newKeysClient is the keys_url fetcher's client: the redirect policy above,
// no connection reuse (a connection checked for one fetch never serves
// another), the environment's proxy.
func newKeysClient() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			p, ok := ctx.Value(keysDialPolicyKey{}).(*keysDialPolicy)
			if !ok || !p.redirected.Load() || addr == p.configuredAddr || addr == p.proxyAddr {
				return dialer.DialContext(ctx, network, addr)
			}
			d := *dialer
			d.Control = p.control
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: keysFetchLimit,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Timeout: keysFetchLimit, Transport: tr, CheckRedirect: keysCheckRedirect}
}
