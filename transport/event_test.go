package transport

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/store"
)

func TestEventFrames(t *testing.T) {
	t.Parallel()
	m := chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123, TS: "2026-10-23T18:40:00+00:00",
		Author: chatrelay.Agent, Text: "line 1\nline 2 <b>&</b>", Rev: 1792778400999, Reactions: chatrelay.Reactions{"👍": {chatrelay.Hermes}}}
	ev := NewEvent("a1b2c3d4e5f60718", store.NewEntry(m))
	v1 := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792778400123,"ts":"2026-10-23T18:40:00+00:00","author":"agent","text":"line 1\nline 2 <b>&</b>"}`
	v2 := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792778400123,"ts":"2026-10-23T18:40:00+00:00","author":"agent","text":"line 1\nline 2 <b>&</b>","rev":1792778400999,"reactions":{"👍":["hermes"]}}`
	for _, tc := range []struct {
		k       kind
		sse, ws string
	}{
		{v1Message, "id: 1792778400123\nevent: message\ndata: " + v1 + "\n\n", `{"type":"message","message":` + v1 + `}`},
		{v2Message, "id: 1792778400999\nevent: message\ndata: " + v2 + "\n\n", `{"type":"message","message":` + v2 + `}`},
		{v2Update, "id: 1792778400999\nevent: update\ndata: " + v2 + "\n\n", `{"type":"update","message":` + v2 + `}`},
	} {
		assert.Equal(t, "SSE", string(ev.SSE(tc.k, false)), tc.sse)
		assert.Equal(t, "WS", string(ev.WS(tc.k, false)), tc.ws)
		assert.Equal(t, "SSE frame lines", bytes.Count(ev.SSE(tc.k, false), []byte("\n")), 4) // the text's newline is escaped
		first, again := ev.SSE(tc.k, false), ev.SSE(tc.k, false)
		assert.True(t, &first[0] == &again[0], "a frame encoded twice")
	}
}

// TestRedactedFrames: a participant's frame of a message with a secret
// hides it; one of a message with none is the owner's frame itself
// (encoded once for both).
func TestRedactedFrames(t *testing.T) {
	t.Parallel()
	m := chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123, TS: "2026-10-23T18:40:00+00:00",
		Author: chatrelay.Operator, Text: "the key is sk-proj-AbCdEfGhIjKlMnOpQrStUv123", Rev: 1792778400123}
	secret := NewEvent("a1b2c3d4e5f60718", store.NewEntry(m))
	m.Text = "nothing to hide"
	plain := NewEvent("a1b2c3d4e5f60718", store.NewEntry(m))
	for _, k := range []kind{v1Message, v2Message, v2Update} {
		for name, f := range map[string]func(*Event, kind, bool) []byte{"SSE": (*Event).SSE, "WS": (*Event).WS} {
			assert.True(t, !bytes.Contains(f(secret, k, true), []byte("AbCdEfGh")) && bytes.Contains(f(secret, k, true), []byte(chatrelay.Redacted)),
				"%s %d: the participant's frame %s", name, k, f(secret, k, true))
			assert.True(t, bytes.Contains(f(secret, k, false), []byte("AbCdEfGh")), "%s %d: the owner's frame lost the text", name, k)
			assert.True(t, &f(plain, k, true)[0] == &f(plain, k, false)[0], "%s %d: a frame with nothing to redact encoded twice", name, k)
		}
	}
}

// BenchmarkSSEFrame builds a change's event and writes its SSE frame, as
// the first stream of a thread does.
func BenchmarkSSEFrame(b *testing.B) {
	benchmarkFrame(b, func(ev *Event) []byte { return ev.SSE(v1Message, false) })
}

// BenchmarkWSFrame is BenchmarkSSEFrame for the WebSocket frame.
func BenchmarkWSFrame(b *testing.B) {
	benchmarkFrame(b, func(ev *Event) []byte { return ev.WS(v1Message, false) })
}

func benchmarkFrame(b *testing.B, frame func(*Event) []byte) {
	e := store.NewEntry(chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123,
		TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Operator, Text: "a typical chat line of about eighty characters, asking the agent something"})
	b.ReportAllocs()
	for b.Loop() {
		ev := NewEvent("a1b2c3d4e5f60718", e)
		if _, err := io.Discard.Write(frame(ev)); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRefusalsShowTheView: a refusal that carries the message it is about
// (409 interaction_closed, client_id_conflict, too_many_reactions) shows
// it as the asker's view shows a message: the owner's as stored, a
// participant's redacted and without its client_id. A request gate did
// not let in as the owner is shown a participant's view.
func TestRefusalsShowTheView(t *testing.T) {
	t.Parallel()
	m := chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123, TS: "2026-10-23T18:40:00+00:00",
		Author: chatrelay.Hermes, Text: "Approval requested\n- password: hunter2hunter2", ClientID: "tab-1:1",
		Interaction: &chatrelay.Interaction{ID: "ix_3f9a0c7e21b4", Type: chatrelay.Approval, Prompt: "Deploy?", State: chatrelay.Approved,
			Details: []chatrelay.Detail{{Label: "password", Value: "hunter2hunter2"}}}}
	js := chatrelay.MarshalMessageV2(m)
	for _, code := range []chatrelay.Code{chatrelay.InteractionClosed, chatrelay.ClientIDConflict, chatrelay.TooManyReactions} {
		err := &chatrelay.Error{Code: code, Message: "refused", About: js}
		_, owner := errorOf(err, view{v2: true})
		assert.Equal(t, string(code)+": the owner's message", string(owner.Message), string(js))
		_, p := errorOf(err, view{v2: true, redact: true})
		assert.True(t, len(p.Message) > 0 && !bytes.Contains(p.Message, []byte("hunter2")) && bytes.Contains(p.Message, []byte(chatrelay.Redacted)) &&
			!bytes.Contains(p.Message, []byte("client_id")), "%s: the participant's message %s", code, p.Message)
	}
	r := httptest.NewRequest(http.MethodPost, "/api/chat/post", nil)
	assert.True(t, errorView(r).redact, "a request with no principal is shown the owner's view")
	assert.True(t, errorView(withPrincipal(r, principal{grant: &chatrelay.Grant{ID: "p_1a2b3c4d"}})).redact, "a participant is shown the owner's view")
	assert.True(t, !errorView(withPrincipal(r, principal{role: chatrelay.Owner})).redact, "the owner is shown a participant's view")
}
