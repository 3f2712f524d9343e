package transport

import (
	"strconv"
	"time"
)

// Event is one change on its way to a thread's subscribers (the hub's
// event type). It is built once per
// message by NewEvent and then shared, read-only, by every subscriber of the
// thread: the transports write SSE or WS as they are, with no per-subscriber
// encoding.
type Event struct {
	Thread string
	Epoch  int64
	JSON   []byte // the message object as poll returns it
	SSE    []byte // "id: <epoch>\nevent: message\ndata: <JSON>\n\n"
	WS     []byte // {"type":"message","message":<JSON>}
	// Stored is when the store's change feed delivered the message (for
	// the server's own posts, the end of the append); zero if unknown.
	// The transports measure the fan-out delay from it.
	Stored time.Time
}

// NewEvent builds the shared frames of a message whose v1 JSON is js.
func NewEvent(thread string, epoch int64, js []byte) *Event {
	return &Event{
		Thread: thread, Epoch: epoch, JSON: js,
		SSE: AppendSSE(make([]byte, 0, len(js)+64), epoch, js), // 41 bytes of framing with a 13-digit epoch
		WS:  AppendWS(make([]byte, 0, len(js)+32), js),
	}
}

// AppendSSE appends the SSE frame of a message to b:
// "id: <epoch>\nevent: message\ndata: <js>\n\n". encoding/json never
// writes a raw newline, so js fits one data line.
func AppendSSE(b []byte, epoch int64, js []byte) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, epoch, 10)
	b = append(b, "\nevent: message\ndata: "...)
	b = append(b, js...)
	return append(b, "\n\n"...)
}

// AppendWS appends the WebSocket frame of a message to b:
// {"type":"message","message":<js>}.
func AppendWS(b []byte, js []byte) []byte {
	b = append(b, `{"type":"message","message":`...)
	b = append(b, js...)
	return append(b, '}')
}
