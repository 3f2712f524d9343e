package transport_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestInvitesHaveARateWindow: an owner who made 60 share links in the
// hour (revoked ones count) gets 429 rate_limited, retryable, with
// Retry-After and retry_after_ms, as a post over its window does; the
// refused invite leaves nothing behind.
func TestInvitesHaveARateWindow(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		var made []invited
		for i := range chatrelay.LimitInvites.Max {
			if i == chatrelay.LimitActiveGrants.Max { // make room among the active ones
				for _, in := range made[:chatrelay.LimitInvites.Max-chatrelay.LimitActiveGrants.Max] {
					status, _, b := e.do(http.MethodDelete, "/api/chat/participants/"+in.Participant.ID, owner, "", nil)
					assert.Equal(t, "revoke "+string(b), status, http.StatusOK)
				}
			}
			made = append(made, e.invite(owner, `{"name":"n`+strconv.Itoa(i)+`","role":"viewer"}`))
		}
		status, _, b := e.do(http.MethodDelete, "/api/chat/participants/"+made[len(made)-1].Participant.ID, owner, "", nil)
		assert.Equal(t, "revoke "+string(b), status, http.StatusOK) // under 50 active: the window alone refuses
		status, h, b := e.do(http.MethodPost, "/api/chat/participants", owner, `{"name":"one more"}`, nil)
		assert.Equal(t, "status "+string(b), status, http.StatusTooManyRequests)
		var a struct {
			errorAnswer
			RetryMS int64 `json:"retry_after_ms"`
		}
		assert.Success(t, json.Unmarshal(b, &a))
		assert.True(t, a.Code == "rate_limited" && a.Retryable && a.RetryMS > 0, "answer %s", b)
		secs, err := strconv.Atoi(h.Get("Retry-After"))
		assert.True(t, err == nil && secs > 0 && secs <= 3600, "Retry-After %q", h.Get("Retry-After"))

		status, _, b = e.do(http.MethodGet, "/api/chat/participants", owner, "", nil)
		assert.Equal(t, "list", status, http.StatusOK)
		var list struct{ Participants []chatrelay.Participant }
		assert.Success(t, json.Unmarshal(b, &list))
		assert.Equal(t, "grants after the refusal", len(list.Participants), chatrelay.LimitInvites.Max)
	})
}
