package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

// The walks of Web Push's limits (contract Part 5). transport's
// TestPushRoutes walks push.subscriptions over HTTP too.
func init() {
	walks["push.subscriptions"] = walk{custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		ps := store.PushOf(w.st)
		assert.True(t, ps != nil, "the file store keeps no push subscriptions")
		p256 := make([]byte, 65)
		p256[0] = 4
		for i := range l.Max + 1 {
			_, _, err := ps.PushSubscribe(t.Context(), w.thread, chatrelay.PushSubscription{
				ID: chatrelay.NewPushID(), Endpoint: fmt.Sprint("https://push.example.com/", i),
				P256dh: base64.RawURLEncoding.EncodeToString(p256), Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
				Events: chatrelay.PushEvents, Subscriber: chatrelay.SubscriberOwner,
			})
			if i < l.Max {
				assert.Success(t, err)
			} else {
				assert.Code(t, err, chatrelay.PushLimit)
			}
		}
	}}
	walks["push.string"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		for _, n := range []int{l.Max, l.Max + 1} {
			b := chatrelay.MarshalPushPayload(chatrelay.PushTypeReply, "000000000000000a", chatrelay.Message{ID: "m", Author: chatrelay.Hermes, Text: cp(n)}, "https://x/")
			var p struct{ Message chatrelay.Message }
			assert.Success(t, json.Unmarshal(b, &p))
			want := cp(n)
			if n > l.Max {
				want = cp(l.Max-1) + "…"
			}
			assert.Equal(t, fmt.Sprint("text of ", n), p.Message.Text, want)
		}
	}}
	walks["push.payload"] = walk{custom: func(t *testing.T, _ *walkEnv, l chatrelay.Limit) {
		// An approval whose strings, each within its own limit, make a
		// payload far past the limit: it is cut to fit, keeping its id
		// and state.
		ix := &chatrelay.Interaction{ID: "ix_0123456789ab", Type: chatrelay.Approval, Title: cp(128), Prompt: cp(1000), State: chatrelay.Pending}
		for range 8 {
			ix.Details = append(ix.Details, chatrelay.Detail{Label: cp(80), Value: cp(500)})
		}
		m := chatrelay.Message{ID: "MSG-20261201-120000-abcdef", Epoch: 1, Author: chatrelay.Hermes, Text: cp(4000), Interaction: ix}
		b := chatrelay.MarshalPushPayload(chatrelay.PushTypeInteraction, "000000000000000a", m, "https://x/")
		assert.True(t, len(b) <= l.Max, "a payload of %d bytes", len(b))
		var p struct{ Message chatrelay.Message }
		assert.Success(t, json.Unmarshal(b, &p))
		assert.True(t, p.Message.Interaction.ID == ix.ID && p.Message.Interaction.State == chatrelay.Pending && strings.HasPrefix(p.Message.Text, "é"), "cut: %s", b)
	}}
}
