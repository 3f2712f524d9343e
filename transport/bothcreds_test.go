package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestOwnerTokenBesideAuthorization: a request with X-Chat-Token is the
// owner's whatever its Authorization says (api.md's decision): the
// owner's page behind HTTP basic authentication still works, and a share
// token sent beside the owner's token changes nothing: the owner's role,
// its post stored as the owner's, no first_use in the audit.
func TestOwnerTokenBesideAuthorization(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		viewer := e.invite(owner, `{"name":"Vee","role":"viewer"}`)

		for _, auth := range []string{"Basic YWxpY2U6cHc=", "Bearer " + viewer.Token} {
			status, _, b := e.do(http.MethodGet, "/api/chat/whoami", owner, "", map[string]string{"Authorization": auth})
			assert.Equal(t, auth+": whoami "+string(b), status, http.StatusOK)
			var who struct{ Role string }
			assert.Success(t, json.Unmarshal(b, &who))
			assert.Equal(t, auth+": role", who.Role, "owner")
		}
		status, _, b := e.do(http.MethodPost, "/api/chat/post", owner, `{"text":"both"}`, bearer(viewer.Token))
		assert.Equal(t, "a post with both "+string(b), status, http.StatusCreated)

		status, _, b = e.do(http.MethodGet, "/api/chat/poll", owner, "", nil)
		assert.Equal(t, "poll", status, http.StatusOK)
		var page struct {
			Messages []struct{ Author, Text string }
		}
		assert.Success(t, json.Unmarshal(b, &page))
		last := page.Messages[len(page.Messages)-1]
		assert.Equal(t, "the post's author", last.Author+" "+last.Text, "operator both")

		status, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
		assert.Equal(t, "audit", status, http.StatusOK)
		var audit struct{ Events []chatrelay.AuditEvent }
		assert.Success(t, json.Unmarshal(b, &audit))
		for _, ev := range audit.Events {
			assert.True(t, ev.Event == "issued", "the viewer's token was not used, yet the audit holds %+v", ev)
		}
	})
}
