package transport_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// TestPushClosedInteractionNotAskedAgain: an approval's push that the
// push service refuses (503) is to be tried again; the approval is
// answered before the retry is due, and its closing push ("Approved")
// sent. The retry of the opening push is then not sent (counted
// "superseded"): sent after the closing one, with the same Topic, it
// would replace "Approved" with Approve and Deny for an answered
// approval.
func TestPushClosedInteractionNotAskedAgain(t *testing.T) {
	t.Parallel()
	svc, e, owner, m := approvalRefusedOnce(t)
	awaitPushes(t, svc, "/push/phone", 1) // refused: 503
	status, _, b := e.do(http.MethodPost, chatrelay.PathRespond, owner, fmt.Sprintf(`{"interaction_id":%q,"decision":"approve"}`, m.Interaction.ID), nil)
	assert.Equal(t, "approve "+string(b), status, 200)
	_, pls := awaitPushes(t, svc, "/push/phone", 2)
	assert.Equal(t, "the second push", pls[1].Type, chatrelay.PushTypeInteractionClosed)
	assert.Eventually(t, 10*time.Second, "the opening push's retry given up", func() bool {
		return opsScrape(t, e.client, e.ts.URL+"/metrics")[`chatrelay_push_total{result="superseded"}`] == 1
	})
	ps := pushesTo(svc, "/push/phone")
	assert.Equal(t, "pushes received", len(ps), 2)
}

// approvalRefusedOnce is a server whose owner's thread (of owner) has
// one push subscription, "phone", at a push service that refuses the
// first push (503) and takes the others; retries come 2 s after. hermes
// then opens an approval (m) there, whose first push is so refused.
func approvalRefusedOnce(t *testing.T) (svc *pushtest.Service, e *pushEnv, owner string, m store.Entry) {
	t.Helper()
	svc = pushtest.NewService(t)
	failFirst(svc)
	e = startPush(t, pushOptions{config: withPush(svc, func(c *transport.PushConfig) { c.Backoff = []time.Duration{2 * time.Second} })})
	owner = tokenN(1)
	e.mustPost(owner, "hello")
	status, a := e.subscribe(owner, nil, svc.Subscribe(t, "phone"))
	assert.Equal(t, "subscribe "+a.Code, status, 201)
	m, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, MustExist: true,
		Ask: &chatrelay.Ask{Type: chatrelay.Approval, Title: "deploy", Prompt: "Deploy?", Timeout: time.Hour}})
	assert.Success(t, err)
	return svc, e, owner, m
}
