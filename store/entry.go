package store

import (
	"context"
	"time"

	"github.com/chatrelay/chatrelay"
)

// What every backend and the transport do with an Entry the same way.

// NewEntry returns m with its v1 and v2 JSON encoded once. A zero Rev is
// the epoch (a message that never changed).
func NewEntry(m chatrelay.Message) Entry {
	if m.Rev == 0 {
		m.Rev = m.Epoch
	}
	return Entry{Message: m, JSON: chatrelay.MarshalMessage(m), JSON2: chatrelay.MarshalMessageV2(m)}
}

// ReplayOf answers m, a post that carries the client_id of the stored
// message e: e again (Replayed) if m is what e stores, else
// ClientIDConflict about e. Every backend and the transport answer a
// repeated client_id with it, so that their answers agree.
func ReplayOf(e Entry, m NewMessage) (Entry, error) {
	if !chatrelay.SameContent(e.Message, m) {
		return Entry{}, Conflict(e)
	}
	e.Replayed = true
	return e, nil
}

// Conflict is ClientIDConflict about e, the stored message whose
// client_id a post repeats with another content.
func Conflict(e Entry) error {
	return &chatrelay.Error{Code: chatrelay.ClientIDConflict, About: e.JSON2,
		Message: "this client_id names another message of the thread; use a new client_id for a new message"}
}

// StoredWith finds the retained message of thread that carries
// clientID: a write refused for its rate window is answered as a repeat
// (ReplayOf) if it repeats a stored one, by the HTTP routes and MCP alike.
func StoredWith(ctx context.Context, st Store, thread, clientID string) (Entry, bool) {
	if clientID == "" {
		return Entry{}, false
	}
	p, err := st.Changes(ctx, thread, 0, 0)
	if err != nil {
		return Entry{}, false
	}
	for _, e := range p.Messages {
		if e.ClientID == clientID {
			return e, true
		}
	}
	return Entry{}, false
}

// WouldChange reports whether c would change the stored message e at now,
// and the refusal it would get (about e), without changing anything: what
// the store would answer now, for a caller that decides before it writes
// (a change that would change nothing spends no rate window).
func WouldChange(e Entry, c Change, now time.Time) (bool, error) {
	m := chatrelay.CloneMessage(e.Message)
	changed, err := chatrelay.ApplyChange(&m, c, now)
	if err != nil {
		err = chatrelay.WithAbout(err, e.JSON2)
	}
	return changed, err
}
