package webpush

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is the error of an endpoint, or a connection, to an address
// the server must not reach.
var ErrBlocked = errors.New("webpush: the push endpoint's address is loopback, private, link-local, shared or unspecified")

// blockedPrefixes are the ranges beside what netip.Addr's predicates
// name (loopback, private and ULA, link-local, unspecified, multicast)
// that a push service is never in.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT, RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated, RFC 7526)
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated, RFC 4291): ::7f00:1 carries 127.0.0.1
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT, RFC 2765)
	netip.MustParsePrefix("3fff::/20"),       // documentation (RFC 9637)
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs (RFC 9602)
}

// Blocked reports whether ip is an address a push request must never be
// sent to: loopback, private (RFC 1918, and IPv6 unique local fc00::/7),
// link-local, unspecified, multicast, shared (CGNAT 100.64.0.0/10), or
// reserved (IPv4-compatible ::/96 and IPv4-translated ::ffff:0:0:0/96
// among them); an IPv4-mapped, 6to4 or well-known NAT64 IPv6 address by
// the IPv4 address it carries.
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case b[0] == 0x20 && b[1] == 0x02: // 6to4: 2002:AABB:CCDD::/48
			return Blocked(netip.AddrFrom4([4]byte(b[2:6])))
		case netip.MustParsePrefix("64:ff9b::/96").Contains(ip): // NAT64
			return Blocked(netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
	if !ip.IsValid() || !ip.IsGlobalUnicast() || ip.IsLoopback() || ip.IsPrivate() ||
		ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control: it refuses to connect to a Blocked
// address. It runs after resolution, on the address actually dialled.
func Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webpush: dial %s: %w", address, ErrBlocked)
	}
	if Blocked(ap.Addr()) {
		return fmt.Errorf("webpush: dial %s: %w", address, ErrBlocked)
	}
	return nil
}

// Resolver resolves a host name (net.DefaultResolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard decides which endpoints the server may reach, and dials them.
// The zero value allows no Blocked address; its methods are safe for
// concurrent use (its fields are set before use).
type Guard struct {
	// Allow names hosts (as in a URL, "127.0.0.1" or "push.test")
	// exempt from the address check: --push-allow-host, for tests.
	Allow []string
	// Resolver resolves names; nil is net.DefaultResolver.
	Resolver Resolver
	// Dial connects to an address already resolved and checked ("ip:port");
	// nil is a net.Dialer whose Control refuses a Blocked address again.
	// Tests give one that records what would be dialled.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// MaxEndpoint is the longest endpoint CheckEndpoint takes, in
	// bytes, as given and as the URL it answers writes it (escaped: the
	// form that is stored); 0 takes any length. It is the caller's limit: package
	// transport sets the contract's (chatrelay.LimitPushEndpoint), which
	// this package, importing nothing of the module, does not know.
	MaxEndpoint int
}

func (g *Guard) allowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, a := range g.Allow {
		if strings.EqualFold(strings.TrimSuffix(a, "."), host) {
			return true
		}
	}
	return false
}

func (g *Guard) resolver() Resolver {
	if g.Resolver == nil {
		return net.DefaultResolver
	}
	return g.Resolver
}

// CheckEndpoint parses a subscription's endpoint and checks it: an
// absolute https URL with a host, no user information and no fragment,
// at most MaxEndpoint bytes (as given and escaped), whose host (unless
// allowed) is not a Blocked address and resolves to none. A name that resolves to nothing is
// refused too. The check is repeated where it counts, in DialContext.
func (g *Guard) CheckEndpoint(ctx context.Context, raw string) (*url.URL, error) {
	if g.MaxEndpoint > 0 && len(raw) > g.MaxEndpoint {
		return nil, fmt.Errorf("the endpoint is longer than %d bytes", g.MaxEndpoint)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("the endpoint is not a URL")
	case g.MaxEndpoint > 0 && len(u.String()) > g.MaxEndpoint:
		return nil, fmt.Errorf("the endpoint is longer than %d bytes once escaped (%d)", g.MaxEndpoint, len(u.String()))
	case u.Scheme != "https":
		return nil, errors.New("the endpoint must be an https URL")
	case u.Hostname() == "" || u.User != nil || u.Fragment != "" || u.Opaque != "":
		return nil, errors.New("the endpoint must be https://host/path, with no user and no fragment")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("the endpoint's port must be 1 … 65535")
		}
	}
	if g.allowed(u.Hostname()) {
		return u, nil
	}
	addrs, err := g.lookup(ctx, u.Hostname())
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if Blocked(a) {
			return nil, ErrBlocked
		}
	}
	return u, nil
}

// lookup resolves host (an IP literal is itself), with a bound of its own.
func (g *Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("the endpoint's host %q does not resolve", host)
	}
	return addrs, nil
}

// DialContext is an http.Transport's DialContext: it resolves the host
// itself, drops every Blocked address (an allowed host excepted) and
// dials the others, one after the other, by their address, through a
// dialer whose Control refuses a Blocked one again. So the addresses
// checked are the addresses dialled: a name that answered a public
// address at subscribe time and a private one now is refused now.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if g.allowed(host) {
		return g.dial(ctx, network, address, nil)
	}
	addrs, err := g.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		if Blocked(a) {
			errs = append(errs, fmt.Errorf("%s: %w", a, ErrBlocked))
			continue
		}
		c, err := g.dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port), Control)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("webpush: dial %s: %w", host, errors.Join(errs...))
}

func (g *Guard) dial(ctx context.Context, network, address string, control func(string, string, syscall.RawConn) error) (net.Conn, error) {
	if g.Dial != nil {
		return g.Dial(ctx, network, address)
	}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: control}
	return d.DialContext(ctx, network, address)
}
