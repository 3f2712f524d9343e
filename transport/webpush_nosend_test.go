package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushNoSendServesRoutesOnly: a server with PushConfig.NoSend (serve
// --push-sender=process) answers the push routes (the key, a
// subscription) and neither claims nor sends a push; another server on
// the same store whose pusher runs (chatrelay push send) sends the
// approval's push, once, decrypted by the push service.
func TestPushNoSendServesRoutesOnly(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		routes := startPush(t, pushOptions{backend: backend, config: withPush(svc, func(p *transport.PushConfig) { p.NoSend = true })})
		sender := startPush(t, pushOptions{on: routes.backend.Another(t, storetest.Options{}), config: withPush(svc, nil)})
		tok := tokenN(1)
		routes.mustPost(tok, "hello")
		status, _, _ := routes.do(http.MethodGet, chatrelay.PathPushKey, "", "", nil)
		assert.Equal(t, "GET the key", status, http.StatusOK)
		status, _ = routes.subscribe(tok, nil, svc.Subscribe(t, "phone"))
		assert.Equal(t, "subscribe", status, http.StatusCreated)
		ask := routes.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour})
		_, pls := awaitPushes(t, svc, "/push/phone", 1)
		assert.Equal(t, "the push's approval", pls[0].Message.Interaction.ID, ask.Message.Interaction.ID)
		assert.Eventually(t, 10*time.Second, "the sender counted it sent", func() bool {
			return opsScrape(t, sender.client, sender.url("/metrics"))[`chatrelay_push_total{result="sent"}`] == 1
		})
		m := opsScrape(t, routes.client, routes.url("/metrics"))
		assert.Equal(t, "the routes-only server's pushes sent, claims won and lost", []float64{
			m[`chatrelay_push_total{result="sent"}`], m[`chatrelay_push_claims_total{won="true"}`], m[`chatrelay_push_claims_total{won="false"}`],
		}, []float64{0, 0, 0})
		assert.Equal(t, "pushes received", len(pushesTo(svc, "/push/phone")), 1)
	})
}
