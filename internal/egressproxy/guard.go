package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"airlock.dev/airlock/internal/allowlist"
)

// blockedRanges are never dialled whatever a name resolves to: loopback, link-local (the cloud metadata
// address 169.254.169.254 among them), private and shared (CGNAT) ranges, multicast, reserved and unspecified
// addresses, and IPv6 forms that embed IPv4 (NAT64, 6to4). Cluster ranges outside these are added by the
// operator (--blocked-cidrs).
var blockedRanges = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2002::/16", "fc00::/7", "fe80::/10", "ff00::/8",
)

func mustPrefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

// Guard decides which addresses the proxy may connect to.
type Guard struct {
	blocked []netip.Prefix
	// permitted are exceptions to blocked, e.g. an internal package mirror; they win.
	permitted []netip.Prefix
}

// NewGuard blocks the built-in ranges plus extra (the cluster's pod and service ranges, the nodes), except
// the permitted prefixes.
func NewGuard(extra, permitted []netip.Prefix) *Guard {
	return &Guard{blocked: append(append([]netip.Prefix{}, blockedRanges...), extra...), permitted: permitted}
}

// ErrBlockedAddress is returned for a destination the guard refuses.
var ErrBlockedAddress = errors.New("blocked address")

// Check returns an ErrBlockedAddress error for an address the proxy must not connect to.
func (g *Guard) Check(ip netip.Addr) error {
	ip = ip.Unmap() // ::ffff:10.0.0.1 is 10.0.0.1
	if !ip.IsValid() || ip.Zone() != "" {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, ip)
	}
	for _, p := range g.permitted {
		if p.Contains(ip) {
			return nil
		}
	}
	for _, p := range g.blocked {
		if p.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s (loopback, link-local, private or cluster addresses are never reached)", ErrBlockedAddress, ip, p)
		}
	}
	return nil
}

// Resolver looks names up; *net.Resolver is one, Hosts another.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Hosts resolves only the names it lists, and fails the rest without sending a query: for tests whose traffic
// must stay on the machine, and for operators who pin their mirrors.
type Hosts map[string][]netip.Addr

// LookupNetIP implements Resolver.
func (h Hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if ips, ok := h[allowlist.NormalizeHost(host)]; ok {
		return ips, nil
	}
	return nil, &net.DNSError{Err: "not in the proxy's hosts list", Name: host, IsNotFound: true}
}

// Dialer resolves a destination itself, checks every address with the guard, and connects only to an address
// it checked: a name that resolves differently the next time (DNS rebinding) is never resolved again.
type Dialer struct {
	Guard    *Guard
	Resolver Resolver
	Timeout  time.Duration
}

// Dial connects to host (a name or an IP literal) on port. A name is refused if any of its addresses is
// blocked: one blocked answer means it points where no sandbox may go.
func (d *Dialer) Dial(ctx context.Context, host string, port int) (net.Conn, error) {
	addrs, err := d.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := d.Guard.Check(a); err != nil {
			if allowlist.NormalizeHost(host) != a.Unmap().String() {
				return nil, fmt.Errorf("%s resolves to %w", host, err)
			}
			return nil, err
		}
	}
	nd := net.Dialer{Timeout: d.Timeout}
	var errs []error
	for _, a := range addrs {
		c, err := nd.DialContext(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("connecting to %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), errors.Join(errs...))
}

func (d *Dialer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	addrs, err := d.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolving %s: no addresses", host)
	}
	return addrs, nil
}

// HostsThen resolves names in Hosts first and asks Next for the rest.
type HostsThen struct {
	Hosts Hosts
	Next  Resolver
}

// LookupNetIP implements Resolver.
func (h HostsThen) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ips, ok := h.Hosts[allowlist.NormalizeHost(host)]; ok {
		return ips, nil
	}
	return h.Next.LookupNetIP(ctx, network, host)
}
