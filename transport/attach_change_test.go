package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestAReactionLeavesAFileLineOnce: after a reaction to a message with a
// file, a v1 poll shows the file's line once, the owner's and a
// participant's alike (its name redacted), and a v2 poll shows the text
// as posted. An outside probe reacted on Redis and a viewer's v1 poll then
// showed the line twice ("[attachment: token=[redacted]\n[attachment:
// token=[redacted] (3 B)]"), and the v2 text carried it beside the
// attachments.
func TestAReactionLeavesAFileLineOnce(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		viewer := e.invite(tok, `{"name":"Vic","role":"viewer"}`)
		a := e.mustUpload(tok, "token=abc.txt", "text/plain", []byte("abc"))
		body, _ := json.Marshal(map[string]any{"text": "see file", "attachments": []string{a.ID}})
		status, _, b := e.do(http.MethodPost, "/api/chat/post", tok, string(body), nil)
		assert.Equal(t, "post "+string(b), status, http.StatusCreated)
		id := decodeMessage(t, b).ID
		s, b := e.react(tok, id, "👍", false)
		assert.Equal(t, "react "+string(b), s, http.StatusOK)

		for _, who := range []struct {
			name, token string
			hdr         map[string]string
			want        string
		}{
			{"owner", tok, nil, "see file\n[attachment: token=abc.txt (3 B)]"},
			{"viewer", "", bearer(viewer.Token), "see file\n[attachment: token=[redacted] (3 B)]"},
		} {
			status, _, b := e.do(http.MethodGet, "/api/chat/poll", who.token, "", who.hdr)
			assert.Equal(t, who.name+": poll "+string(b), status, http.StatusOK)
			var p pollPage
			assert.Success(t, json.Unmarshal(b, &p))
			last := decodeMessage(t, p.Messages[len(p.Messages)-1])
			assert.Equal(t, who.name+": v1 text", last.Text, who.want)
		}
		p := e.pollV2(tok, 0)
		assert.Equal(t, "v2 text", p.Messages[len(p.Messages)-1].Text, "see file")
	})
}
