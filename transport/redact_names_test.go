package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestParticipantSeesNamesRedacted: a participant's name is the owner's
// words, and a participant sees it as every other string of the owner's:
// redacted (contract Part 3), in whoami and as a v2 message's
// author_name; the owner sees it as given.
func TestParticipantSeesNamesRedacted(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{backend: storetest.File})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	secret := "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	named := e.invite(owner, `{"name":"`+secret+`","role":"commenter"}`)
	bo := e.invite(owner, `{"name":"Bo","role":"viewer"}`)
	status, b := e.asParticipant(http.MethodPost, "/api/chat/post", named.Token, `{"text":"from the named one"}`)
	assert.Equal(t, "the named participant posts "+string(b), status, http.StatusCreated)

	for _, who := range []string{named.Token, bo.Token} {
		status, b = e.asParticipant(http.MethodGet, "/api/chat/whoami", who, "")
		assert.Equal(t, "whoami", status, http.StatusOK)
		assert.True(t, !strings.Contains(string(b), "abcdefghijkl") && strings.Contains(string(b), "[redacted]"), "a participant's whoami: %s", b)
		status, b = e.asParticipant(http.MethodGet, "/api/chat/poll?v=2", who, "")
		assert.Equal(t, "poll", status, http.StatusOK)
		var page struct{ Messages []map[string]any }
		assert.Success(t, json.Unmarshal(b, &page))
		last := page.Messages[len(page.Messages)-1]
		assert.Equal(t, "the author's name a participant sees", last["author_name"], any("[redacted]"))
	}
	_, _, b = e.do(http.MethodGet, "/api/chat/poll?v=2", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"author_name":"`+secret+`"`), "the owner sees the name as given: %s", b)
	_, _, b = e.do(http.MethodGet, "/api/chat/whoami", owner, "", nil)
	assert.True(t, strings.Contains(string(b), secret), "the owner's whoami: %s", b)
}
