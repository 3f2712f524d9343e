package transport_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestCheckOrigin: an origin is put in the one form browsers send (the
// scheme's default port left out, IPv6 literals in brackets, lower case),
// and what is not an origin is refused on one line.
func TestCheckOrigin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://a.example.com", "https://a.example.com"},
		{"https://a.example.com/", "https://a.example.com"},
		{"https://A.Example.COM", "https://a.example.com"},
		{"HTTPS://a.example.com", "https://a.example.com"},
		{"https://a.example.com:443", "https://a.example.com"},
		{"https://a.example.com:443/", "https://a.example.com"},
		{"http://a.example.com:80", "http://a.example.com"},
		{"http://a.example.com:443", "http://a.example.com:443"},
		{"https://a.example.com:80", "https://a.example.com:80"},
		{"https://a.example.com:8443", "https://a.example.com:8443"},
		{"https://a.example.com:08443", "https://a.example.com:8443"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://[::1]", "http://[::1]"},
		{"https://[::1]:443", "https://[::1]"},
		{"http://[0:0:0:0:0:0:0:1]:8080", "http://[::1]:8080"},
		{"http://[2001:DB8::A]:8080", "http://[2001:db8::a]:8080"},
		{"http://localhost:1", "http://localhost:1"},
		{"http://localhost:65535", "http://localhost:65535"},
		{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example"},
	} {
		got, err := transport.CheckOrigin(tc.in)
		if err != nil {
			t.Errorf("CheckOrigin(%q): %v", tc.in, err)
			continue
		}
		assert.Equal(t, tc.in, got, tc.want)
	}
	for _, in := range []string{
		"", "*", "null", "https://*.example.com", "https://a.example.com/path", "a.example.com", "ftp://a.example.com",
		"https://user@a.example.com", "https://a.example.com?x", "https://a.example.com#x",
		"https://a.example.com:0", "https://a.example.com:99999", "https://a.example.com:65536", "https://a.example.com:",
		"http://[::1%25eth0]:8080", "http://[127.0.0.1]:8080", "http://[zz]:8080", "http://[::1", "http://::1:8080",
		"https://bücher.example", "https://:443",
	} {
		got, err := transport.CheckOrigin(in)
		if err == nil {
			t.Errorf("CheckOrigin(%q) = %q; want an error", in, got)
			continue
		}
		assert.True(t, !strings.Contains(err.Error(), "\n"), "a message of several lines: %q", err)
	}
}

// TestAllowedOriginsMatchAsBrowsersSendThem: an origin listed with its
// scheme's default port, or as an IPv6 literal, matches the Origin a
// browser sends, for CORS and for the WebSocket alike; another port or
// scheme does not.
func TestAllowedOriginsMatchAsBrowsersSendThem(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{config: func(c *transport.Config) {
		c.AllowedOrigins = []string{"https://a.example.com:443", "http://b.example.com:80/", "http://[::1]:8080", "http://[0:0::2]:8080"}
	}})
	tok := tokenN(1)
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"https://a.example.com", true},
		{"https://a.example.com:443", true},
		{"http://b.example.com", true},
		{"http://[::1]:8080", true},
		{"http://[::2]:8080", true},
		{"https://a.example.com:8443", false},
		{"http://a.example.com", false},
		{"http://[::1]:8081", false},
		{"http://[::1]", false},
		{"null", false},
	} {
		_, h, _ := e.do(http.MethodGet, "/api/chat/poll", tok, "", map[string]string{"Origin": tc.origin})
		want := ""
		if tc.ok {
			want = tc.origin
		}
		assert.Equal(t, tc.origin+": Access-Control-Allow-Origin", h.Get("Access-Control-Allow-Origin"), want)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, resp, err := e.dialWS(ctx, "/api/chat/ws", tok, http.Header{"Origin": {tc.origin}})
		cancel()
		if tc.ok {
			if err != nil {
				t.Errorf("a WebSocket from %s was refused: %v", tc.origin, err)
				continue
			}
			assert.Equal(t, tc.origin+": first frame", nextWS(t, c).Type, "ready")
			c.CloseNow()
			continue
		}
		if err == nil {
			c.CloseNow()
			t.Errorf("a WebSocket from %s was accepted", tc.origin)
			continue
		}
		assert.Equal(t, tc.origin+": WebSocket status", resp.StatusCode, http.StatusForbidden)
	}
}
