package transport

import (
	"bytes"
	"io"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

func TestNewEventFrames(t *testing.T) {
	t.Parallel()
	m := chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123, TS: "2026-10-23T18:40:00+00:00",
		Author: chatrelay.Agent, Text: "line 1\nline 2 <b>&</b>"}
	js := chatrelay.MarshalMessage(m)
	ev := NewEvent("a1b2c3d4e5f60718", m.Epoch, js)
	wantJSON := `{"id":"MSG-20261023-184000-a1b2c3","epoch":1792778400123,"ts":"2026-10-23T18:40:00+00:00","author":"agent","text":"line 1\nline 2 <b>&</b>"}`
	assert.Equal(t, "JSON", string(ev.JSON), wantJSON)
	assert.Equal(t, "SSE", string(ev.SSE), "id: 1792778400123\nevent: message\ndata: "+wantJSON+"\n\n")
	assert.Equal(t, "WS", string(ev.WS), `{"type":"message","message":`+wantJSON+`}`)
	assert.Equal(t, "SSE frame lines", bytes.Count(ev.SSE, []byte("\n")), 4) // the text's newline is escaped
}

// BenchmarkSSEFrame builds a message's shared frames once and writes its
// SSE frame, as a stream does per subscriber.
func BenchmarkSSEFrame(b *testing.B) {
	benchmarkFrame(b, func(ev *Event) []byte { return ev.SSE })
}

// BenchmarkWSFrame is BenchmarkSSEFrame for the WebSocket frame.
func BenchmarkWSFrame(b *testing.B) {
	benchmarkFrame(b, func(ev *Event) []byte { return ev.WS })
}

func benchmarkFrame(b *testing.B, frame func(*Event) []byte) {
	js := chatrelay.MarshalMessage(chatrelay.Message{ID: "MSG-20261023-184000-a1b2c3", Epoch: 1792778400123,
		TS: "2026-10-23T18:40:00+00:00", Author: chatrelay.Operator, Text: "a typical chat line of about eighty characters, asking the agent something"})
	b.ReportAllocs()
	for b.Loop() {
		ev := NewEvent("a1b2c3d4e5f60718", 1792778400123, js)
		if _, err := io.Discard.Write(frame(ev)); err != nil {
			b.Fatal(err)
		}
	}
}
