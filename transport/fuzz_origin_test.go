package transport

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzCheckOrigin: a request's Origin header is untrusted, and one
// matcher decides CORS and the WebSocket check by its canonical form.
// The check never panics; its canonical form is an http or https origin
// (scheme://host[:port], nothing else, lower case) that is its own
// canonical form, so that a listed origin and a request's compare equal
// exactly when they are the same origin.
func FuzzCheckOrigin(f *testing.F) {
	for _, s := range []string{"https://app.example.com", "https://APP.example.com:443/", "http://app.example.com:80", "http://127.0.0.1:47400",
		"https://[::1]:8443", "https://[0:0::1]", "https://[fe80::1%25eth0]", "https://*.example.com", "null", "", "https://a.example.com/x",
		"https://a.example.com?", "https://u@a.example.com", "https://a.example.com:", "https://a.example.com:0", "https://a.example.com:65536",
		"https://xn--bcher-kva.example", "https://bücher.example", "https://%41.example.com", "HTTPS://a.example.com", "https://a.example.com:+443",
		"https://a.example.com:0443", "ws://a.example.com", "https:a.example.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, o string) {
		c, err := CheckOrigin(o)
		if err != nil {
			return
		}
		again, err := CheckOrigin(c)
		if err != nil || again != c {
			t.Fatalf("CheckOrigin(%q) = %q, whose own form is %q, %v", o, c, again, err)
		}
		u, err := url.Parse(c)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" || u.RawQuery != "" || u.User != nil ||
			u.Host == "" || c != strings.ToLower(c) || c != u.Scheme+"://"+u.Host {
			t.Fatalf("CheckOrigin(%q) = %q, not an origin", o, c)
		}
	})
}
