package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/chatrelay/chatrelay"
)

// Webhook events (contract Part 5, "Events out: webhooks"): a backend
// that is opened with Options.Webhooks queues an Event for every change
// of the contract's table in the same write as the change (the file
// store: a queue file per destination; Redis: a stream), so that an event
// is queued if and only if its change is stored. The server's deliverer
// (package webhook) takes them from the backend's Outbox.

// The event types of the contract's table.
const (
	EventMessageCreated     = "message.created"
	EventInteractionOpened  = "interaction.opened"
	EventInteractionClosed  = "interaction.closed"
	EventParticipantJoined  = "participant.joined"
	EventParticipantRevoked = "participant.revoked"
)

// Event is one queued webhook event.
type Event struct {
	// ID is the event's webhook-id: unique per event, the same on every
	// attempt (and at every destination).
	ID     string
	Type   string // EventMessageCreated, …
	Thread string
	// At is when the change happened: the epoch of the new message, or
	// the rev of the change.
	At time.Time
	// Message is the message's v2 object as the change left it (the
	// stored text: the receiver is the operator's); nil for a
	// participant's event.
	Message []byte
	// Participant is the participant object (chatrelay.Participant) as
	// the change left it, for a participant's event.
	Participant []byte
}

// Due is a queued event handed to a deliverer, with the attempts made
// before this one.
type Due struct {
	Event
	Attempts int
	token    any // the backend's handle of the event
}

// WithToken returns d carrying a backend's handle (for backends).
func (d Due) WithToken(t any) Due { d.token = t; return d }

// Token is the backend's handle (for backends).
func (d Due) Token() any { return d.token }

// Outbox is the queue of webhook events of a backend opened with
// Options.Webhooks (Backend.Outbox). Its methods are safe for concurrent
// use; on a shared backend (Redis) several nodes take from the same
// queue, and each event is handed to one caller at a time.
type Outbox interface {
	// Take returns up to max events queued for destination dest whose
	// next attempt is due at now, each leased to the caller: no other
	// caller is handed it until the caller settles it (Done or Retry) or,
	// if the caller went away, until its lease of chatrelay.WebhookLease
	// has passed.
	Take(ctx context.Context, dest string, now time.Time, max int) ([]Due, error)
	// Done settles an event for good: delivered, or dropped.
	Done(ctx context.Context, dest string, d Due) error
	// Retry settles an attempt that failed: the event is due again at at.
	Retry(ctx context.Context, dest string, d Due, at time.Time) error
}

// Disabler is an Outbox that remembers the destinations whose receiver
// answered 410 Gone (Standard Webhooks: the receiver wants no more events,
// and the sender disables the endpoint), in the store: a restart, or
// another node, finds the destination disabled, until the operator
// enables it again (Enable; by hand, see docs/operations.md). The
// deliverers of every Outbox of the store read it before they send.
type Disabler interface {
	// Disable records that destination dest wants no more events.
	Disable(ctx context.Context, dest string) error
	// Disabled reports whether dest is disabled.
	Disabled(ctx context.Context, dest string) (bool, error)
	// Enable removes the record: dest is sent events again.
	Enable(ctx context.Context, dest string) error
}

// DestinationID names a webhook destination in a store (its queue file,
// its consumer group): the first 16 hex digits of the SHA-256 of its
// URL, so that the URL, which may carry a secret, is never written.
func DestinationID(url string) string {
	sum := sha256.Sum256([]byte(url))
	return hex.EncodeToString(sum[:8])
}

// ValidDestinationID reports whether id has DestinationID's shape (16
// lowercase hex digits): it names a file, so nothing else may pass as one.
func ValidDestinationID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewEventID returns a fresh webhook-id ("evt_" and 24 hex digits).
func NewEventID() string {
	var b [12]byte
	rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// EventOf says which event a write of message m causes, "" for none:
// was is the message as it was before the write (nil for a new message).
// A new message not by hermes is message.created; a new interaction is
// interaction.opened; an interaction that leaves pending is
// interaction.closed. Every backend decides with it.
func EventOf(was, m *chatrelay.Message) string {
	if was == nil {
		switch {
		case m.Interaction != nil && m.Interaction.State == chatrelay.Pending:
			return EventInteractionOpened
		case m.Author != chatrelay.Hermes:
			return EventMessageCreated
		}
		return ""
	}
	if was.Interaction != nil && was.Interaction.State == chatrelay.Pending &&
		m.Interaction != nil && m.Interaction.State != chatrelay.Pending {
		return EventInteractionClosed
	}
	return ""
}

// DroppedInteraction is the message of the interaction.closed event of
// m, a message whose interaction retention drops (or the sweep removes
// with its thread) while it is pending, at epoch ms at: expired then (a
// receiver that asked would otherwise wait for an answer that can no
// longer come), with at as its answered_at and rev. ok is false for a
// message with no pending interaction: no event.
func DroppedInteraction(m chatrelay.Message, at int64) (json2 []byte, ok bool) {
	e, ok := DroppedEntry(m, at)
	return e.JSON2, ok
}

// DroppedEntry is DroppedInteraction's message as an Entry: what a
// backend's feed announces in Batch.Closed.
func DroppedEntry(m chatrelay.Message, at int64) (Entry, bool) {
	if m.Interaction == nil || m.Interaction.State != chatrelay.Pending {
		return Entry{}, false
	}
	m = chatrelay.CloneMessage(m)
	m.Interaction.State, m.Interaction.AnsweredAt = chatrelay.Expired, at
	m.Rev = max(at, m.Rev)
	return NewEntry(m), true
}

// RemovedGrant is the participant object of the participant.revoked
// event of g, a grant of a thread the sweep removes at now: revoked then
// (its token answers 401 from then on). ok is false for a device (no
// participant), and for a grant revoked or whose expiry was noticed
// before: its event came then.
func RemovedGrant(g chatrelay.Grant, now time.Time) (participant []byte, ok bool) {
	if g.Device() || g.RevokedAt != 0 || g.ExpiryNoted {
		return nil, false
	}
	g.RevokedAt = now.UnixMilli()
	p, _ := json.Marshal(g.Participant(now))
	return p, true
}

// GrantEventOf says which event a write of grant g causes, "" for none:
// was is the grant as it was before the write. Its first use is
// participant.joined; its revoke, or its expiry once noticed, is
// participant.revoked. A device (the owner's, on the same record) is no
// participant: none.
func GrantEventOf(was, g *chatrelay.Grant) string {
	switch {
	case g.Device():
		return ""
	case !was.Used && g.Used:
		return EventParticipantJoined
	case was.RevokedAt == 0 && !was.ExpiryNoted && (g.RevokedAt != 0 || g.ExpiryNoted):
		return EventParticipantRevoked // once: a revoke after the expiry was noticed is none
	}
	return ""
}
