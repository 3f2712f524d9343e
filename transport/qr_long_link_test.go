package transport_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
)

// TestLinkTooLongForAQRCode: a device link or a share link too long for
// a QR code (a request whose Host is thousands of bytes) is answered
// without "qr", never "qr": "", which the bundle's pattern
// (^data:image/png;base64,) refuses: an outside probe's answer failed
// the normative schema. A link that fits still has its QR code.
func TestLinkTooLongForAQRCode(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	for _, path := range []string{chatrelay.PathDevices, chatrelay.PathParticipants} {
		for _, host := range []string{"", strings.Repeat("x", 3000) + ".example"} {
			req, err := http.NewRequest(http.MethodPost, e.url(path), strings.NewReader(`{"name":"Phone"}`))
			assert.Success(t, err)
			req.Header.Set("X-Chat-Token", owner)
			if host != "" {
				req.Host = host // Go's client sends req.Host, not a Host header
			}
			resp, err := e.client.Do(req)
			assert.Success(t, err)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Success(t, err)
			status, h := resp.StatusCode, resp.Header
			assert.Equal(t, path+": status "+string(b[:min(len(b), 200)]), status, http.StatusCreated)
			schematest.Answer(t, http.MethodPost, path, status, h, b)
			assert.Equal(t, path+fmt.Sprintf(" with a Host of %d bytes: a qr", len(host)), strings.Contains(string(b), `"qr":"data:image/png;base64,`), host == "")
		}
	}
}
