package transport

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// clientIP is the TCP peer's address, or, when the peer is a trusted proxy,
// the nearest address in X-Forwarded-For that is not a trusted proxy.
func clientIP(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	peer = peer.Unmap()
	if !isTrusted(peer, trusted) {
		// host itself when it is written as String would write it (the
		// usual case): no new string a request.
		var buf [64]byte
		if string(peer.AppendTo(buf[:0])) == host {
			return host
		}
		return peer.String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a malformed hop: trust nothing further left
		}
		a = a.Unmap()
		if !isTrusted(a, trusted) {
			return a.String()
		}
		peer = a
	}
	return peer.String()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// limitKey is the key of a client address in the per-address limits (rate
// windows and open streams): an IPv4 address as it is, an IPv6 address by
// its /64, the block one host or one customer is usually given, so that
// rotating through the addresses of one's own /64 does not multiply one's
// allowance.
func limitKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is6() || a.Is4In6() {
		return ip
	}
	return netip.PrefixFrom(a, 64).Masked().String()
}

// fromTrusted reports whether the request's TCP peer is a trusted proxy.
func fromTrusted(r *http.Request, trusted []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	return err == nil && isTrusted(peer.Unmap(), trusted)
}
