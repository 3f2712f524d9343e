package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestPushEndpointEscaped: an endpoint within push.endpoint's bytes as
// sent, but past them as the server writes it back (a space in its path
// is %20), is refused 400 invalid_push_endpoint and stores nothing: the
// thread's subscriptions still list, and a subscription still takes.
// (Taken, it was stored longer than a stored record may be, and every
// later read of the thread's subscriptions failed 500.)
func TestPushEndpointEscaped(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		svc := pushtest.NewService(t)
		e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		a := svc.Subscribe(t, "a")

		spaced := a
		spaced.Endpoint = a.Endpoint + "/a b"
		spaced.Endpoint += strings.Repeat("c", chatrelay.LimitPushEndpoint.Max-len(spaced.Endpoint))
		assert.Equal(t, "the endpoint's bytes as sent", len(spaced.Endpoint), chatrelay.LimitPushEndpoint.Max)
		status, out := e.subscribe(owner, nil, spaced)
		assert.True(t, status == 400 && out.Code == string(chatrelay.InvalidPushEndpoint), "past the limit once escaped: %d %+v", status, out)

		status, _, b := e.do(http.MethodGet, chatrelay.PathPush, owner, "", nil)
		var list pushAnswer
		assert.Success(t, json.Unmarshal(b, &list))
		assert.True(t, status == 200 && len(list.Subscriptions) == 0, "the list after the refusal: %d %s", status, b)
		status, out = e.subscribe(owner, nil, a)
		assert.True(t, status == 201, "a subscription after the refusal: %d %+v", status, out)
	})
}
