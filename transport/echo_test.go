package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestRefusalsDoNotEchoALongID: an id that names nothing is refused with
// words of its own size, not the id sent back whole. An outside probe
// sent a react's message_id of 32 000 bytes, an attachment path and a
// push subscription id of 100 000 bytes and more, and got each back in
// the 404's error words (a respond's interaction_id, a participant's or a
// device's id were already cut). A participant's secret-shaped id came
// back as sent too.
func TestRefusalsDoNotEchoALongID(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		guest := e.invite(owner, `{"name":"Guest","role":"commenter"}`)
		long := "sk-" + strings.Repeat("a", 20000)
		react, _ := json.Marshal(map[string]any{"message_id": long, "emoji": "👍"})
		for _, c := range []struct {
			name, method, path, body string
		}{
			{"react", http.MethodPost, "/api/chat/react", string(react)},
			{"attachment", http.MethodGet, "/api/chat/attachments/" + long, ""},
			{"push", http.MethodDelete, "/api/chat/push/" + long, ""},
		} {
			for _, who := range []struct {
				name  string
				token string
				hdr   map[string]string
			}{{"owner", owner, nil}, {"participant", "", bearer(guest.Token)}} {
				status, _, b := e.do(c.method, c.path, who.token, c.body, who.hdr)
				what := c.name + " by the " + who.name
				assert.Equal(t, what+": status", status, http.StatusNotFound)
				assert.Equal(t, what+": code", decodeError(t, b).Code, "not_found")
				assert.True(t, len(b) < 1024, "%s: a refusal of %d bytes echoes the id: %.300s…", what, len(b), b)
			}
		}
	})
}
