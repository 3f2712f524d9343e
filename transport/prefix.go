package transport

import (
	"fmt"
	"net/url"
	"strings"
)

// CheckPrefix checks a mount point (--prefix): "" or a clean absolute path
// of literal segments, such as "/spaces/newos4". Each segment is made of
// letters, digits and "-._~" (no wildcard, no method, no host, no space,
// no "." or ".." segment). A trailing slash is dropped.
func CheckPrefix(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("--prefix %q: want an absolute path such as /spaces/newos4", p)
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("--prefix %q: empty, \".\" or \"..\" segment", p)
		}
		for _, c := range seg {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._~", c)
			if !ok {
				return "", fmt.Errorf("--prefix %q: %q is not allowed in a path segment (letters, digits and -._~ only)", p, c)
			}
		}
	}
	return p, nil
}

// CheckPublicURL checks a --public-url: an http or https URL with a host
// and a clean path (the prefix, if any), no query, no fragment. It
// returns it without a trailing slash.
func CheckPublicURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	switch {
	case err != nil:
		return "", fmt.Errorf("%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return "", fmt.Errorf("%q: want http://host or https://host[:port][/prefix]", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", fmt.Errorf("%q: no user, query or fragment", s)
	}
	if _, err := CheckPrefix(u.Path); err != nil {
		return "", fmt.Errorf("%q: its path: %v", s, err)
	}
	return strings.TrimSuffix(s, "/"), nil
}
