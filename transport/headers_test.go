package transport_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/transport"
)

// TestJSONAnswersAreNosniff: every JSON answer, success or error, and the
// schema and limits artifacts carry X-Content-Type-Options: nosniff, so
// that no browser reads one as a script or a page.
func TestJSONAnswersAreNosniff(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "hello")
	for _, tc := range []struct {
		method, path, token, body string
		hdr                       map[string]string
		status                    int
	}{
		{"GET", "/api/chat/poll", tok, "", nil, 200},
		{"GET", "/api/chat/poll?v=2", tok, "", nil, 200},
		{"POST", "/api/chat/post", tok, `{"text":"hi"}`, nil, 201},
		{"POST", "/api/chat/ticket", tok, "", nil, 201},
		{"GET", "/api/chat/participants", tok, "", nil, 200},
		{"GET", "/api/chat/whoami", tok, "", nil, 200},
		{"GET", "/api/chat/poll", "", "", nil, 401},
		{"POST", "/api/chat/post", tok, `{"text":""}`, nil, 400},
		{"POST", "/api/chat/post", tok, `{"text":"` + strings.Repeat("x", 40000) + `"}`, nil, 413},
		{"GET", "/api/chat/post", tok, "", nil, 405},
		{"GET", "/api/nope", "", "", nil, 404},
		{"POST", "/api/debug/agent-replies", "", "", nil, 410},
		{"GET", "/api/chat/stream", "", "", nil, 401},
		{"GET", "/api/chat/ws", tok, "", nil, 426},
		{"GET", "/api/schema.json", "", "", nil, 200},
		{"GET", "/api/limits.json", "", "", nil, 200},
		{"HEAD", "/api/limits.json", "", "", nil, 200},
		{"GET", "/healthz", "", "", nil, 200},
		{"GET", "/readyz", "", "", nil, 200},
	} {
		status, h, _ := e.do(tc.method, tc.path, tc.token, tc.body, tc.hdr)
		what := tc.method + " " + tc.path
		assert.Equal(t, what+": status", status, tc.status)
		assert.Equal(t, what+": X-Content-Type-Options", h.Get("X-Content-Type-Options"), "nosniff")
	}
	// A revalidated artifact too.
	_, h, _ := e.do("GET", "/api/schema.json", "", "", nil)
	status, h, _ := e.do("GET", "/api/schema.json", "", "", map[string]string{"If-None-Match": h.Get("ETag")})
	assert.Equal(t, "304", status, http.StatusNotModified)
	assert.Equal(t, "304: X-Content-Type-Options", h.Get("X-Content-Type-Options"), "nosniff")
}

// TestStreamIsNosniff: the SSE stream, which carries the conversation (and
// is opened with a ticket in its address, which a person may paste into a
// tab), is nosniff like every other answer of the API, opened with the
// token or with a ticket.
func TestStreamIsNosniff(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "<html><script>alert(1)</script>")
	for _, tc := range []struct{ name, path, token string }{
		{"with the token", "/api/chat/stream?v=2", tok},
		{"with a ticket", "/api/chat/stream?v=2&ticket=" + e.ticket(tok), ""},
	} {
		s := e.mustSSE(tc.path, tc.token, nil)
		assert.Equal(t, tc.name+": Content-Type", s.resp.Header.Get("Content-Type"), "text/event-stream")
		assert.Equal(t, tc.name+": X-Content-Type-Options", s.resp.Header.Get("X-Content-Type-Options"), "nosniff")
		s.Close()
	}
}

// TestPagesRefuseFraming: the pages (the owner's, holding the token and
// the Approve buttons, and the participant's) may not be framed by any
// other page: Content-Security-Policy frame-ancestors 'none' and
// X-Frame-Options: DENY. With --allowed-origin, exactly those origins may
// frame them (frame-ancestors names them; X-Frame-Options cannot, and is
// left out), and no other.
func TestPagesRefuseFraming(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, e *pushEnv, ancestors, xfo string) {
		t.Helper()
		for _, path := range []string{"/", "/p", "/index.html", "/app.js", "/chat.js"} {
			status, h, _ := e.do(http.MethodGet, path, "", "", nil)
			assert.Equal(t, path+": status", status, http.StatusOK)
			var got []string
			for d := range strings.SplitSeq(h.Get("Content-Security-Policy"), ";") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(d), "frame-ancestors "); ok {
					got = append(got, v)
				}
			}
			assert.Equal(t, path+": frame-ancestors", got, []string{ancestors})
			assert.Equal(t, path+": X-Frame-Options", h.Get("X-Frame-Options"), xfo)
			assert.Equal(t, path+": X-Content-Type-Options", h.Get("X-Content-Type-Options"), "nosniff")
		}
	}
	t.Run("by default", func(t *testing.T) {
		t.Parallel()
		check(t, startPush(t, pushOptions{}), "'none'", "DENY")
	})
	t.Run("with allowed origins", func(t *testing.T) {
		t.Parallel()
		e := startPush(t, pushOptions{config: func(c *transport.Config) {
			c.AllowedOrigins = []string{"https://b.example.com:443", "https://a.example.com:8443", "http://[::1]:8080"}
		}})
		check(t, e, "https://a.example.com:8443 https://b.example.com", "")
	})
}

// TestEscapedAPIPathIsNotFound: a path under /api/ once decoded, but not
// as sent (/api%2Fchat/poll: the mux matches escaped segments), is the
// API's JSON 404, with or without a prefix, whatever the method; it fell
// through to the page, whose 404 is plain text, and a POST to it
// (/api%2Fchat%2Fpost) was the page's 405 with Allow: GET, naming a
// method for a route that is not there.
func TestEscapedAPIPathIsNotFound(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/spaces/newos4"} {
		e := startPush(t, pushOptions{config: func(c *transport.Config) { c.Prefix = prefix }})
		for _, path := range []string{"/api%2Fchat/poll", "/api%2fchat%2Fstream", "/api/chat%2Fpoll", "/api%2Fchat%2Fpost"} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				status, h, body := e.do(method, prefix+path, tokenN(1), `{"text":"hi"}`, nil)
				assert.Equal(t, method+" "+prefix+path+": status", status, http.StatusNotFound)
				assert.Equal(t, method+" "+prefix+path+": code", decodeError(t, body).Code, "not_found")
				assert.Equal(t, method+" "+prefix+path+": Allow", h.Get("Allow"), "")
			}
		}
	}
}

// TestMCPPathWithASlashIsNotFound: a path under /mcp/ (an agent's MCP URL
// written with a trailing slash, https://chat.example.com/mcp/) is the
// API's JSON 404, with or without a prefix, whatever the method: it fell
// through to the page, so the agent's POST got the page's 405 with
// Allow: GET, and its GET the page's plain-text 404, neither saying that
// MCP is at /mcp.
func TestMCPPathWithASlashIsNotFound(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "/spaces/newos4"} {
		e := startPush(t, pushOptions{config: func(c *transport.Config) { c.Prefix = prefix }})
		for _, path := range []string{"/mcp/", "/mcp/x", "/mcp%2F"} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
				status, h, body := e.do(method, prefix+path, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
				assert.Equal(t, method+" "+prefix+path+": status", status, http.StatusNotFound)
				assert.Equal(t, method+" "+prefix+path+": code", decodeError(t, body).Code, "not_found")
				assert.Equal(t, method+" "+prefix+path+": Allow", h.Get("Allow"), "")
				assert.True(t, strings.Contains(string(body), prefix+"/mcp"), "%s %s: the words name where MCP is: %s", method, prefix+path, body)
			}
		}
	}
}
