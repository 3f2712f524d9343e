package transport

import (
	"fmt"
	"net/url"
	"strings"
)

// Origins: --allowed-origin lists other origins, exactly, and one matcher
// (originAllowed) decides for CORS and for the WebSocket origin check
// alike. There are no patterns: an origin is scheme://host[:port], and
// "*.example.com" or "*" are refused at start (CheckOrigin), because a
// pattern that lets a page read a thread it holds a ticket for must be
// written out, not guessed.

// CheckOrigin returns the canonical form of an --allowed-origin value
// (lower case, no trailing slash), or an error saying why it is not an
// origin.
func CheckOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(o, "/"))
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not an origin: %v", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q is not an origin: want http://host or https://host[:port]", o)
	case u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", fmt.Errorf("%q is not an origin: want scheme://host[:port] and nothing else", o)
	case strings.ContainsAny(u.Host, "*?[]"):
		return "", fmt.Errorf("%q: patterns are not allowed; list each origin", o)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// originAllowed reports whether a page of origin may use the API: an
// origin listed in Config.AllowedOrigins (compared exactly, ignoring
// case), or, when host is given (the request's Host), the server's own
// origin (the same host; a browser sends Origin on every WebSocket).
func (s *Server) originAllowed(origin, host string) bool {
	o := strings.ToLower(origin)
	if s.origins[o] {
		return true
	}
	if host == "" {
		return false
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}
