package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestWSRefusedPostFramesAudited: a participant's post frame that is
// refused 403 or 429 (a viewer's post, a commenter past its cap) is in the
// thread's audit as "refused" with its code and address, as the same post
// over POST /api/chat/post is (contract Part 3: refused is any request
// with a grant's token refused 401, 403 or 429). Before, an outside probe
// (probe10) found the socket's refusals missing from the audit: a viewer
// could try to post over the WebSocket as often as it liked and the owner
// saw nothing.
func TestWSRefusedPostFramesAudited(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		viewer := e.invite(owner, `{"name":"Vi","role":"viewer"}`)
		al := e.invite(owner, `{"name":"Al","role":"commenter","cap":1}`)

		post := func(tok, text string) wsFrame {
			t.Helper()
			path, hdr := "/api/chat/ws", http.Header{"Authorization": {"Bearer " + tok}}
			if strings.HasPrefix(tok, "t") { // a ticket
				path, hdr = path+"?ticket="+url.QueryEscape(tok), nil
			}
			c, _, err := e.dialWS(t.Context(), path, "", hdr)
			assert.Success(t, err)
			defer c.CloseNow()
			assert.Equal(t, "first frame", nextWS(t, c).Type, "ready")
			for range 2 { // one post frame and its answer at a time
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				b, _ := json.Marshal(map[string]string{"type": "post", "text": text})
				assert.Success(t, c.Write(ctx, websocket.MessageText, b))
				cancel()
				for {
					f := nextWS(t, c)
					if f.Type == "message" {
						continue
					}
					if f.Type == "error" {
						return f
					}
					break // posted: Al's first, within its cap
				}
			}
			t.Fatalf("no refusal for %s", text)
			return wsFrame{}
		}
		f := post(viewer.Token, "a viewer's post")
		assert.Equal(t, "the viewer's frame "+string(f.raw), f.Code, string(chatrelay.NotPermitted))
		f = post(al.Token, "past the cap")
		assert.Equal(t, "Al's second frame "+string(f.raw), f.Code, string(chatrelay.CapReached))
		// A ticket never posts (401 invalid_ticket), over HTTP either: not
		// a refusal the contract's audit names.
		_, _, tb := e.do(http.MethodPost, "/api/chat/ticket", "", "", bearer(viewer.Token))
		var tk struct{ Ticket string }
		assert.Success(t, json.Unmarshal(tb, &tk))
		f = post(tk.Ticket, "with a ticket")
		assert.Equal(t, "the ticket's frame "+string(f.raw), f.Code, string(chatrelay.InvalidTicket))

		status, _, b := e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
		assert.Equal(t, "audit", status, http.StatusOK)
		var audit struct{ Events []chatrelay.AuditEvent }
		assert.Success(t, json.Unmarshal(b, &audit))
		var refused []string
		for _, ev := range audit.Events {
			if ev.Event == chatrelay.AuditRefused {
				assert.True(t, ev.IP != "", "a refusal without its address: %+v", ev)
				refused = append(refused, ev.Participant+" "+string(ev.Code))
			}
		}
		assert.Equal(t, "refused events", refused, []string{
			viewer.Participant.ID + " " + string(chatrelay.NotPermitted),
			al.Participant.ID + " " + string(chatrelay.CapReached)})
	})
}
