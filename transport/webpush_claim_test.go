package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushNoClaimForNobody: a change that none of the thread's
// subscriptions gets makes no claim (no write to the store): here an
// approval in a thread whose only subscriptions are the owner's, for
// replies only, and a participant's (a participant never gets an
// approval). The reply after it is claimed and pushed (one worker: the
// changes are taken in order, so the reply shows the approval was taken).
func TestPushNoClaimForNobody(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, func(c *transport.PushConfig) { c.Workers = 1 })})
		owner, thread := tokenN(1), threadN(1)
		e.mustPost(owner, "hello")
		status, _ := e.subscribe(owner, nil, svc.Subscribe(t, "replies"), "reply")
		assert.Equal(t, "replies only", status, http.StatusCreated)
		guest := e.invite(owner, `{"name":"Guest","role":"commenter"}`)
		status, _ = e.subscribe("", bearer(guest.Token), svc.Subscribe(t, "guest"))
		assert.Equal(t, "the participant subscribes", status, http.StatusCreated)

		_, err := e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
			Ask: &chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Hour}})
		assert.Success(t, err)
		_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "done"})
		assert.Success(t, err)
		awaitPushes(t, svc, "/push/replies", 1)
		awaitPushes(t, svc, "/push/guest", 1)
		m := opsScrape(t, e.client, e.ts.URL+"/metrics")
		assert.Equal(t, "claims won, lost", []float64{m[`chatrelay_push_claims_total{won="true"}`], m[`chatrelay_push_claims_total{won="false"}`]}, []float64{1, 0})
		assert.Equal(t, "pushes", len(svc.Pushes()), 2)
	})
}
