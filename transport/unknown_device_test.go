package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestUnknownDeviceTokenWords: a chd_ token no device has is 401
// unauthorized in words that fit it: it was told "this share link is not
// known here", though no share link was sent.
func TestUnknownDeviceTokenWords(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	e.mustPost(tokenN(1), "hello")
	for _, tok := range []string{"chd_" + strings.Repeat("A", 43), "chp_" + strings.Repeat("A", 43)} {
		status, _, b := e.do(http.MethodGet, chatrelay.PathPoll, "", "", bearer(tok))
		var out struct{ Code, Error string }
		assert.Success(t, json.Unmarshal(b, &out))
		assert.True(t, status == 401 && out.Code == "unauthorized", "%s: %d %s", tok[:4], status, b)
		if strings.HasPrefix(tok, "chd_") {
			assert.True(t, strings.Contains(out.Error, "device"), "an unknown device token: %s", b)
		}
	}
}
