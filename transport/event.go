package transport

import (
	"strconv"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// kind is what a stream sends of a change, in its view.
type kind uint8

const (
	v1Message kind = iota // v1: a new message, its v1 object
	v2Message             // v2: a message the client has not seen (its epoch is past the client's cursor)
	v2Update              // v2: a change of a message the client has
	numKinds
)

// name is the SSE event name and the WebSocket frame type of k.
func (k kind) name() string {
	if k == v2Update {
		return "update"
	}
	return "message"
}

// Event is one change of a thread on its way to the thread's subscribers:
// the hub's event type. It is built once per change by NewEvent and then
// shared, read-only, by every subscriber: each frame (per kind and
// transport) is encoded once, by the first stream that needs it, and every
// other stream writes the same bytes.
type Event struct {
	Thread string
	Entry  store.Entry // the message in its state as of this change
	// Stored is when the store's change feed delivered the change (for
	// the server's own writes, the end of the write); zero if unknown.
	// The transports measure the fan-out delay from it.
	Stored time.Time
	// batch is the feed batch the change came in, shared by its events;
	// nil when the change came alone.
	batch *eventBatch

	redactOnce sync.Once              // builds redacted and plain
	redacted   store.Entry            // the message as a participant sees it
	plain      bool                   // redaction changed nothing: participants share the owner's frames
	sse, ws    [2][numKinds]lazyFrame // [redacted][kind]
}

// lazyFrame is a frame encoded on first use.
type lazyFrame struct {
	once sync.Once
	b    []byte
}

func (f *lazyFrame) get(make func() []byte) []byte {
	f.once.Do(func() { f.b = make() })
	return f.b
}

// NewEvent returns the event of a change whose message is now e.
func NewEvent(thread string, e store.Entry) *Event {
	return &Event{Thread: thread, Entry: e}
}

// eventBatch is the events of one feed batch, which the hub hands to a
// subscriber together (Publish), in change order.
type eventBatch struct {
	// byEpoch is the batch's messages in epoch order, each once
	// (store.EpochOrder): what a v1 stream sends of the batch.
	byEpoch []*Event
}

// NewEvents returns the events of a feed batch's messages (in change
// order), each knowing the others: a stream takes the batch as a whole
// (see session.send).
func NewEvents(thread string, msgs []store.Entry, stored time.Time) []*Event {
	events := make([]*Event, len(msgs))
	for i, e := range msgs {
		events[i] = &Event{Thread: thread, Entry: e, Stored: stored}
	}
	if len(events) > 1 {
		b := &eventBatch{byEpoch: store.EpochOrder(events, func(ev *Event) store.Entry { return ev.Entry })}
		for _, ev := range events {
			ev.batch = b
		}
	}
	return events
}

// entry is the message as a view sees it: redacted for a participant
// (built once per event).
func (ev *Event) entry(redact bool) store.Entry {
	if !redact {
		return ev.Entry
	}
	ev.redactOnce.Do(func() { ev.redacted, ev.plain = redactEntry(ev.Entry) })
	return ev.redacted
}

// frames is the index of the frames a view uses: the redacted ones only
// if redaction changed the message.
func (ev *Event) frames(redact bool) int {
	if !redact {
		return 0
	}
	ev.entry(true)
	return b2i(!ev.plain)
}

// redactEntry is e with every string a participant reads redacted, and
// whether that left it as it was (then e itself, encoded nothing again).
func redactEntry(e store.Entry) (store.Entry, bool) {
	m, changed := chatrelay.RedactMessage(e.Message)
	if !changed {
		return e, true
	}
	r := store.NewEntry(m)
	r.Replayed = e.Replayed
	return r, false
}

// json is the message object a frame of kind k carries.
func (ev *Event) json(k kind, redact bool) []byte {
	e := ev.entry(redact)
	if k == v1Message {
		return e.JSON
	}
	return e.JSON2
}

// id is the SSE id of a frame of kind k: the cursor it moves the client
// to (the message's epoch in v1, the change's in v2).
func (ev *Event) id(k kind) int64 {
	if k == v1Message {
		return ev.Entry.Epoch
	}
	return ev.Entry.Rev
}

// SSE is the event's SSE frame of kind k (redacted for a participant).
func (ev *Event) SSE(k kind, redact bool) []byte {
	return ev.sse[ev.frames(redact)][k].get(func() []byte {
		js := ev.json(k, redact)
		return AppendSSE(make([]byte, 0, len(js)+48), ev.id(k), k.name(), js) // 41 bytes of framing with a 13-digit id
	})
}

// WS is the event's WebSocket frame of kind k (redacted for a participant).
func (ev *Event) WS(k kind, redact bool) []byte {
	return ev.ws[ev.frames(redact)][k].get(func() []byte {
		js := ev.json(k, redact)
		return AppendWS(make([]byte, 0, len(js)+32), k.name(), js)
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// AppendSSE appends an SSE frame to b: "id: <id>\nevent: <name>\ndata:
// <js>\n\n". encoding/json never writes a raw newline, so js fits one
// data line.
func AppendSSE(b []byte, id int64, name string, js []byte) []byte {
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, "\nevent: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, js...)
	return append(b, "\n\n"...)
}

// AppendWS appends a WebSocket frame to b: {"type":"<typ>","message":<js>}.
func AppendWS(b []byte, typ string, js []byte) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","message":`...)
	b = append(b, js...)
	return append(b, '}')
}
