package transport_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestPushOwnerReserve: a thread's participants together hold at most 15
// of its 20 push subscriptions; the rest are kept for the owner (its
// token and its devices), as a thread's streams are. An outside probe
// had a viewer subscribe 20 endpoints, after which the owner's own
// browser was 409 push_limit: no approval reached the owner. A
// participant's refusal says nothing of how many the owner holds.
func TestPushOwnerReserve(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		viewer := e.invite(owner, `{"name":"V","role":"viewer"}`).Token
		other := e.invite(owner, `{"name":"W","role":"viewer"}`).Token
		for i := range chatrelay.LimitPushParticipants.Max {
			status, out := e.subscribe("", bearer(viewer), svc.Subscribe(t, fmt.Sprint("v", i)))
			assert.True(t, status == http.StatusCreated, "the viewer's subscription %d: %d %+v", i, status, out)
		}
		for _, tok := range []string{viewer, other} {
			status, _, b := e.do(http.MethodPost, chatrelay.PathPush, "", subBody(svc.Subscribe(t, "more")), bearer(tok))
			assert.True(t, status == http.StatusConflict && strings.Contains(string(b), `"code":"push_limit"`), "a participant past the participants' share: %d %s", status, b)
		}
		for i := range chatrelay.LimitPushSubscriptions.Max - chatrelay.LimitPushParticipants.Max {
			status, out := e.subscribe(owner, nil, svc.Subscribe(t, fmt.Sprint("o", i)))
			assert.True(t, status == http.StatusCreated, "the owner's subscription %d beside the participants' 15: %d %+v", i, status, out)
		}
		status, out := e.subscribe(owner, nil, svc.Subscribe(t, "past"))
		assert.True(t, status == http.StatusConflict && out.Code == "push_limit", "the thread's 21st: %d %+v", status, out)
		// Full by the owner's too: a participant's refusal reads the same.
		status, _, full := e.do(http.MethodPost, chatrelay.PathPush, "", subBody(svc.Subscribe(t, "again")), bearer(other))
		_, _, share := e.do(http.MethodPost, chatrelay.PathPush, "", subBody(svc.Subscribe(t, "again2")), bearer(viewer))
		assert.True(t, status == http.StatusConflict && string(full) == string(share), "a participant's refusal: %s, %s", full, share)
	})
}

// subBody is the body of a subscribe of sub.
func subBody(sub pushtest.Subscription) string {
	b, _ := json.Marshal(map[string]any{"subscription": sub.JSON()})
	return string(b)
}
