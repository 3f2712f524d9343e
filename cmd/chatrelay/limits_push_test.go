package main

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/transport"
	"github.com/chatrelay/chatrelay/webpush"
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
	walks["push.subscriptions_participants"] = walk{custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// On a thread of its own: l.Max of participants' subscriptions
		// are taken, one more is push_limit, and the owner's still are.
		ps := store.PushOf(w.st)
		assert.True(t, ps != nil, "the file store keeps no push subscriptions")
		thread := "00000000000000c1"
		_, err := w.st.Append(t.Context(), thread, store.NewMessage{Text: "push me"})
		assert.Success(t, err)
		p256 := make([]byte, 65)
		p256[0] = 4
		sub := func(i int, subscriber string) error {
			_, _, err := ps.PushSubscribe(t.Context(), thread, chatrelay.PushSubscription{
				ID: chatrelay.NewPushID(), Endpoint: fmt.Sprint("https://push.example.com/p", i),
				P256dh: base64.RawURLEncoding.EncodeToString(p256), Auth: base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
				Events: []chatrelay.PushEvent{chatrelay.PushReply}, Subscriber: subscriber,
			})
			return err
		}
		for i := range l.Max + 1 {
			err := sub(i, fmt.Sprintf("p:p_%08x", i%3))
			if i < l.Max {
				assert.Success(t, err)
			} else {
				assert.Code(t, err, chatrelay.PushLimit)
			}
		}
		assert.Success(t, sub(l.Max+1, chatrelay.SubscriberOwner))
	}}
	walks["push.endpoint"] = walk{custom: func(t *testing.T, w *walkEnv, l chatrelay.Limit) {
		// Over HTTP, on a server of its own with push on, its endpoint
		// host allowed the way --push-allow-host allows it (no name is
		// resolved, nothing is dialled): an endpoint of l.Max bytes is
		// subscribed, one byte more is invalid_push_endpoint, and the
		// bundle's body entry agrees on both (an ASCII URL: its code
		// points are its bytes).
		pw := &walkEnv{data: t.TempDir(), token: w.token, thread: w.thread}
		st, err := filestore.OpenFile(pw.data, filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
		assert.Success(t, err)
		t.Cleanup(func() { st.Close() })
		_, err = st.Append(t.Context(), pw.thread, store.NewMessage{Text: "push me"})
		assert.Success(t, err)
		hs := httptest.NewServer(transport.NewServer(transport.Config{Store: st, Log: slog.New(slog.DiscardHandler),
			Push: &transport.PushConfig{Contact: "mailto:ops@example.com", Guard: &webpush.Guard{Allow: []string{"push.test"}}}}))
		t.Cleanup(hs.Close)
		pw.url = hs.URL
		key, err := ecdh.P256().GenerateKey(rand.Reader)
		assert.Success(t, err)
		keys := map[string]any{"p256dh": base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
			"auth": base64.RawURLEncoding.EncodeToString(make([]byte, 16))}
		const base = "https://push.test/"
		wk := walk{code: chatrelay.InvalidPushEndpoint}
		for _, n := range []int{l.Max + 1, l.Max} {
			body := jsonOf(map[string]any{"subscription": map[string]any{"endpoint": base + ascii(n-len(base)), "keys": keys}})
			pw.checkHTTP(t, l, wk, n, n > l.Max, chatrelay.PathPush, body)
		}
		subs, err := store.PushOf(st).PushSubscriptions(t.Context(), pw.thread)
		assert.Success(t, err)
		assert.True(t, len(subs) == 1 && len(subs[0].Endpoint) == l.Max, "the subscriptions kept: %+v", subs)
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
