package transport_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestWSRefusedOverHTTP2 asks for the WebSocket route over HTTP/2, as curl,
// a fetch or a proxy does on an https connection that negotiated h2. The
// answer is the JSON 426, well formed for HTTP/2: no Upgrade or Connection
// header, which RFC 9113 (8.2.2) forbids, so that clients read it (curl
// and browsers reset a stream that carries one: PROTOCOL_ERROR, no answer).
func TestWSRefusedOverHTTP2(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	ts := httptest.NewUnstartedServer(e.srv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, ts.URL+"/api/chat/ws", nil)
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", tokenN(1))
	resp, err := ts.Client().Do(req)
	assert.Success(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Success(t, err)
	assert.Equal(t, "protocol", resp.Proto, "HTTP/2.0")
	assert.Equal(t, "status", resp.StatusCode, 426)
	assert.Equal(t, "code", decodeError(t, body).Code, "upgrade_required")
	for _, h := range []string{"Upgrade", "Connection"} {
		assert.Equal(t, h+" header over HTTP/2", resp.Header.Values(h), []string(nil))
	}
}
