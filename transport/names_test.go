package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestNameNotTextRefused: a participant's or a device's name that is not
// text (invalid UTF-8, a lone UTF-16 surrogate escape) is 400
// invalid_name, as a post's text that is not is invalid_text; the decoder
// would quietly store U+FFFD, a name the client never sent. A name that
// holds U+FFFD itself, sent as such, is a name like any other.
func TestNameNotTextRefused(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	for _, path := range []string{"/api/chat/participants", "/api/chat/devices"} {
		for _, body := range []string{"{\"name\":\"ok\xff\"}", `{"name":"ok\ud83d"}`, `{"name":"\udc00ok"}`} {
			status, _, b := e.do(http.MethodPost, path, owner, body, nil)
			var out struct {
				Code string `json:"code"`
			}
			assert.Success(t, json.Unmarshal(b, &out))
			assert.True(t, status == 400 && out.Code == "invalid_name", "%s %q: %d %s", path, body, status, b)
		}
		status, _, b := e.do(http.MethodPost, path, owner, `{"name":"ok \ufffd"}`, nil)
		assert.True(t, status == 201, "%s with U+FFFD sent as such: %d %s", path, status, b)
	}
	// Nothing refused was kept.
	status, _, b := e.do(http.MethodGet, "/api/chat/participants", owner, "", nil)
	var list struct {
		Participants []struct{ Name string } `json:"participants"`
	}
	assert.Success(t, json.Unmarshal(b, &list))
	assert.True(t, status == 200 && len(list.Participants) == 1 && list.Participants[0].Name == "ok \ufffd", "participants: %d %s", status, b)
}
