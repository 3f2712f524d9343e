package transport

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Origins: --allowed-origin lists other origins, exactly, and one matcher
// (originAllowed) decides for CORS and for the WebSocket origin check
// alike. There are no patterns: an origin is scheme://host[:port], and
// "*.example.com" or "*" are refused at start (CheckOrigin), because a
// pattern that lets a page read a thread it holds a ticket for must be
// written out, not guessed. Both sides of the comparison, the listed
// origin and the request's Origin, are put in one canonical form first
// (CheckOrigin), so that https://a.example.com:443 is https://a.example.com.

// CheckOrigin returns the canonical form of an origin (an --allowed-origin
// value, or a request's Origin header): the scheme and the host in lower
// case, an IPv6 literal in brackets in its shortest form, the port only
// when it is not the scheme's default (443 for https, 80 for http), no
// trailing slash. Anything else is an error saying, on one line, why it
// is not an origin: another scheme, a path, a query or user info, a
// pattern, a host that is not ASCII (browsers send the punycode form), or
// a port outside 1 … 65535.
func CheckOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not an origin: %v", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q is not an origin: want http://host or https://host[:port]", o)
	case u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery:
		return "", fmt.Errorf("%q is not an origin: want scheme://host[:port] and nothing else", o)
	case strings.ContainsAny(u.Host, "*?"):
		return "", fmt.Errorf("%q: patterns are not allowed; list each origin", o)
	}
	scheme, host, port := strings.ToLower(u.Scheme), u.Hostname(), u.Port()
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", fmt.Errorf("%q is not an origin: %q in brackets is not an IPv6 address", o, host)
		}
		host = "[" + a.String() + "]"
	} else {
		switch {
		case host == "":
			return "", fmt.Errorf("%q is not an origin: it has no host", o)
		case strings.ContainsAny(host, "[]%"):
			return "", fmt.Errorf("%q is not an origin: %q is not a host name", o, host)
		case !ascii(host):
			return "", fmt.Errorf("%q is not an origin: write the host in its ASCII (punycode, xn--…) form, as browsers send it", o)
		}
		host = strings.ToLower(host)
	}
	if strings.HasSuffix(u.Host, ":") && port == "" {
		return "", fmt.Errorf("%q is not an origin: the port after ':' is missing", o)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q is not an origin: the port %s is not in 1 … 65535", o, port)
		}
		if scheme == "https" && n == 443 || scheme == "http" && n == 80 {
			return scheme + "://" + host, nil // the default port: browsers leave it out
		}
		return scheme + "://" + host + ":" + strconv.Itoa(n), nil
	}
	return scheme + "://" + host, nil
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// originAllowed reports whether a page of origin may use the API: an
// origin listed in Config.AllowedOrigins, or, when host is given (the
// request's Host), the server's own origin (the same host and port; a
// browser sends Origin on every WebSocket). Both are compared in
// CheckOrigin's canonical form; an Origin that is not an origin ("null",
// garbage) is never allowed.
func (s *Server) originAllowed(origin, host string) bool {
	o, err := CheckOrigin(origin)
	if err != nil {
		return false
	}
	if s.origins[o] {
		return true
	}
	if host == "" {
		return false
	}
	// The request's Host as an origin of the Origin's scheme: a Host that
	// names the scheme's default port matches an Origin without one.
	scheme, _, _ := strings.Cut(o, "://")
	own, err := CheckOrigin(scheme + "://" + host)
	return err == nil && own == o
}
