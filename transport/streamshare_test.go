package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestParticipantsLeaveTheOwnerRoom: a viewer opens every stream the
// thread's participants may hold (SSE and WebSocket, with its share token
// and with a ticket minted from it); the owner still gets a stream of each
// kind, and the viewer's next stream, of either kind, is 429
// too_many_streams with Retry-After, though the thread is under its
// limit. On Redis the share is counted in Redis, as every node counts it.
func TestParticipantsLeaveTheOwnerRoom(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		lim := chatrelay.StreamLimits{}.WithDefaults()
		assert.Equal(t, "the participants' share of the default 20", [2]int{lim.Participants(), lim.OwnerReserve()}, [2]int{15, 5})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		vi := e.invite(owner, `{"name":"Vi","role":"viewer"}`)
		auth := bearer(vi.Token)
		viewerTicket := func() string {
			t.Helper()
			status, _, b := e.do(http.MethodPost, "/api/chat/ticket", "", "", auth)
			assert.Equal(t, "the viewer's ticket "+string(b), status, http.StatusCreated)
			var a struct{ Ticket string }
			assert.Success(t, json.Unmarshal(b, &a))
			return a.Ticket
		}

		for i := range lim.Participants() {
			switch i % 3 {
			case 0:
				e.mustSSE("/api/chat/stream", "", auth).nextEvent(t)
			case 1:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				c, _, err := e.dialWS(ctx, "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + vi.Token}})
				cancel()
				assert.Success(t, err)
				t.Cleanup(func() { c.CloseNow() })
				assert.Equal(t, "the viewer's WebSocket", nextWS(t, c).Type, "ready")
			case 2:
				e.mustSSE("/api/chat/stream?ticket="+url.QueryEscape(viewerTicket()), "", nil).nextEvent(t)
			}
		}

		// The owner is not locked out, on either transport.
		s := e.mustSSE("/api/chat/stream", owner, nil)
		assert.Equal(t, "the owner's SSE", s.nextEvent(t).Event, "ready")
		w := e.mustWS("/api/chat/ws", owner)
		assert.Equal(t, "the owner's WebSocket", nextWS(t, w).Type, "ready")

		// The viewer's next stream is refused, however it asks.
		refused := func(what string, resp *http.Response, code string) {
			t.Helper()
			assert.Equal(t, what+": status", resp.StatusCode, http.StatusTooManyRequests)
			assert.Equal(t, what+": code", code, "too_many_streams")
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			assert.True(t, err == nil && secs > 0, "%s: Retry-After %q", what, resp.Header.Get("Retry-After"))
		}
		st, resp, body, err := e.openSSE(context.Background(), "/api/chat/stream", "", auth)
		assert.Success(t, err)
		if st != nil {
			st.Close()
			t.Fatal("the viewer opened one SSE stream more than the participants' share")
		}
		refused("SSE", resp, decodeError(t, body).Code)
		resp, eb := e.refusedWS("/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + vi.Token}})
		refused("WebSocket", resp, eb.Code)
		resp, eb = e.refusedWS("/api/chat/ws?ticket="+url.QueryEscape(viewerTicket()), "", nil)
		refused("WebSocket with a ticket", resp, eb.Code)

		// The rest of the thread's streams are the owner's.
		for range lim.OwnerReserve() - 2 {
			e.mustSSE("/api/chat/stream", owner, nil).nextEvent(t)
		}
		resp, eb = e.refusedWS("/api/chat/ws", owner, nil)
		refused("the owner past the thread's limit", resp, eb.Code)
	})
}
