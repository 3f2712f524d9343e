package transport

import (
	"fmt"
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
