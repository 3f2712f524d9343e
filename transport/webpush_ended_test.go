package transport_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestPushLimitCountsNoEndedGrant: a participant's or a device's
// subscriptions die with its grant, so once the grant is revoked they
// hold none of the thread's 20 places: the owner subscribes at once,
// with no push in between (which would delete them), instead of meeting
// 409 push_limit for as long as hermes stays silent. While the grant is
// active the 21st is still refused, and a refusal stores nothing.
func TestPushLimitCountsNoEndedGrant(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		for _, kind := range []string{"participant", "device"} {
			t.Run(kind, func(t *testing.T) {
				svc := pushtest.NewService(t)
				e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
				owner := tokenN(1)
				e.mustPost(owner, "hello")
				var tok, revoke string
				if kind == "participant" {
					in := e.invite(owner, `{"name":"Guest"}`)
					tok, revoke = in.Token, chatrelay.PathParticipants+"/"+in.Participant.ID
				} else {
					d := e.issueDevice(owner, `{"name":"Phone"}`)
					tok, revoke = d.Token, chatrelay.PathDevices+"/"+d.Device.ID
				}
				n := chatrelay.LimitPushSubscriptions.Max // a device's: the owner's, all of them
				if kind == "participant" {
					n = chatrelay.LimitPushParticipants.Max // the participants' share; the owner takes the rest
				}
				for i := range n {
					status, out := e.subscribe("", bearer(tok), svc.Subscribe(t, fmt.Sprint(kind, i)))
					assert.True(t, status == 201, "the grant's subscription %d: %d %+v", i, status, out)
				}
				for i := range chatrelay.LimitPushSubscriptions.Max - n {
					status, out := e.subscribe(owner, nil, svc.Subscribe(t, fmt.Sprint("owner", i)))
					assert.True(t, status == 201, "the owner's subscription %d: %d %+v", i, status, out)
				}
				status, out := e.subscribe(owner, nil, svc.Subscribe(t, "owner-full"))
				assert.True(t, status == 409 && out.Code == "push_limit", "the 21st, the grant active: %d %+v", status, out)

				status, _, b := e.do(http.MethodDelete, revoke, owner, "", nil)
				assert.Equal(t, "revoke "+string(b), status, 200)
				status, out = e.subscribe(owner, nil, svc.Subscribe(t, "owner"))
				assert.True(t, status == 201, "the owner subscribes once the grant is revoked: %d %+v", status, out)
				_, mine := e.pushCall(http.MethodGet, chatrelay.PathPush, owner, nil)
				k := chatrelay.LimitPushSubscriptions.Max - n
				assert.True(t, len(mine.Subscriptions) == k+1 && mine.Subscriptions[k].ID == out.Push.ID, "the owner's list: %+v", mine)
			})
		}
	})
}
