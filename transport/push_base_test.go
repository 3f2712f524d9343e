package transport_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/store"
)

// TestPushRefusesALongPageAddress: a subscription is stored with the
// page's address as its subscriber reached it (the Host header, without
// --public-url), the link its pushes carry. A Host longer than an
// endpoint may be (2 048 bytes) is refused (400 invalid_push_endpoint)
// and stores nothing: taken, 20 such subscriptions of ~1 MiB each made
// a thread's record 20 MiB, read at every change, and each push's link
// left no room for the message in the payload.
func TestPushRefusesALongPageAddress(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner, thread := tokenN(1), threadN(1)
	e.mustPost(owner, "hello")
	subscribeAs := func(host string, sub pushtest.Subscription) (int, string) {
		b, _ := json.Marshal(map[string]any{"subscription": sub.JSON()})
		req, err := http.NewRequest(http.MethodPost, e.url(chatrelay.PathPush), strings.NewReader(string(b)))
		assert.Success(t, err)
		req.Host = host
		req.Header.Set("X-Chat-Token", owner)
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.client.Do(req)
		assert.Success(t, err)
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		var a struct {
			Code string `json:"code"`
		}
		json.Unmarshal(out, &a)
		return resp.StatusCode, a.Code
	}
	status, code := subscribeAs("h"+strings.Repeat("a", 200000), svc.Subscribe(t, "long"))
	assert.Equal(t, "a Host of 200 000 bytes", []any{status, code}, []any{400, "invalid_push_endpoint"})
	subs, err := store.PushOf(e.store).PushSubscriptions(t.Context(), thread)
	assert.Success(t, err)
	assert.Equal(t, "subscriptions stored", len(subs), 0)

	host := strings.TrimPrefix(e.ts.URL, "http://")
	status, code = subscribeAs(host, svc.Subscribe(t, "short"))
	assert.Equal(t, "the server's own Host", []any{status, code}, []any{201, ""})
	_, err = e.store.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, MustExist: true, Text: "the build is green"})
	assert.Success(t, err)
	_, pls := awaitPushes(t, svc, "/push/short", 1)
	assert.Equal(t, "the push's link and text", []string{pls[0].URL, pls[0].Message.Text}, []string{e.ts.URL + "/", "the build is green"})
}
