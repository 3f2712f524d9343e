package chatrelay

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Web Push (contract Part 5): a thread's subscriptions, and what a push
// carries. Package webpush signs and encrypts; the transport decides when
// to push and to whom; the stores keep the subscriptions (store.Push).

// PushEvent names what a subscription asks to be pushed.
type PushEvent string

// The push events.
const (
	// PushInteraction: an interaction opens (the owner's and devices'
	// subscriptions only) or closes.
	PushInteraction PushEvent = "interaction"
	// PushReply: hermes posts a message or a card (every subscription;
	// a participant's payload redacted).
	PushReply PushEvent = "reply"
)

// PushEvents is every event, the default of a subscription.
var PushEvents = []PushEvent{PushInteraction, PushReply}

// The payload types of a push.
const (
	PushTypeInteraction       = "interaction"
	PushTypeInteractionClosed = "interaction_closed"
	PushTypeReply             = "reply"
)

// SubscriberOwner is the Subscriber of the subscriptions made with the
// owner's token; a device's is SubscriberDevicePrefix and its id
// ("d:d_1a2b3c4d"), a participant's its author ("p:p_1a2b3c4d").
const (
	SubscriberOwner        = "owner"
	SubscriberDevicePrefix = "d:"
)

// PushSubscription is one Web Push subscription of a thread, as stored.
type PushSubscription struct {
	ID         string      `json:"id"` // "w_" + 8 lowercase hex, unique in its thread
	Endpoint   string      `json:"endpoint"`
	P256dh     string      `json:"p256dh"` // base64url (no padding) of the uncompressed P-256 point
	Auth       string      `json:"auth"`   // base64url of 16 bytes
	Events     []PushEvent `json:"events"`
	CreatedAt  int64       `json:"created_at"`     // epoch ms
	Subscriber string      `json:"subscriber"`     // SubscriberOwner or a participant's author ("p:<id>")
	Base       string      `json:"base,omitempty"` // the page's base URL as the subscriber reached it (the payload's url)
}

// Participant reports whether s is a participant's (its Subscriber is
// the participant's author, "p:<id>"), not the owner's or a device's.
func (s PushSubscription) Participant() bool { return strings.HasPrefix(s.Subscriber, "p:") }

// Wants reports whether s asks for event e.
func (s PushSubscription) Wants(e PushEvent) bool { return slices.Contains(s.Events, e) }

// ValidPushID reports whether id has a subscription id's shape.
func ValidPushID(id string) bool { return PushIDPattern.MatchString(id) }

// NewPushID makes a fresh subscription id.
func NewPushID() string {
	return newID("w_", 4)
}

// CheckPushSubscription checks a stored subscription's shape (a record
// that does not is refused whole by its store).
func CheckPushSubscription(s PushSubscription) error {
	switch {
	case !ValidPushID(s.ID):
		return fmt.Errorf("id %q", s.ID)
	case len(s.Endpoint) < LimitPushEndpoint.Min || len(s.Endpoint) > LimitPushEndpoint.Max:
		return fmt.Errorf("endpoint of %d bytes", len(s.Endpoint))
	case s.Subscriber == "":
		return fmt.Errorf("no subscriber")
	}
	if _, err := PushEventsOf(s.Events); err != nil {
		return err
	}
	return CheckPushKeys(s.P256dh, s.Auth)
}

// CheckPushKeys checks the shapes of a subscription's keys: p256dh an
// uncompressed P-256 point (65 bytes, starting 4), auth 16 bytes, both
// base64url without padding (padding is tolerated and dropped by the
// caller).
func CheckPushKeys(p256dh, auth string) error {
	p, err := base64.RawURLEncoding.DecodeString(p256dh)
	if err != nil || len(p) != 65 || p[0] != 4 {
		return fmt.Errorf("keys.p256dh must be the base64url of an uncompressed P-256 point (65 bytes)")
	}
	a, err := base64.RawURLEncoding.DecodeString(auth)
	if err != nil || len(a) != 16 {
		return fmt.Errorf("keys.auth must be the base64url of 16 bytes")
	}
	return nil
}

// PushEventsOf checks a subscription's events: nil or empty is every
// event; each must be known, and none twice. The answer is in
// PushEvents' order.
func PushEventsOf(in []PushEvent) ([]PushEvent, error) {
	if len(in) == 0 {
		return slices.Clone(PushEvents), nil
	}
	var out []PushEvent
	for _, e := range PushEvents {
		if slices.Contains(in, e) {
			out = append(out, e)
		}
	}
	for _, e := range in {
		if !slices.Contains(PushEvents, e) {
			return nil, fmt.Errorf("unknown push event %q: events are interaction and reply", e)
		}
	}
	return out, nil
}

// PushPayload is the JSON a push carries (before encryption): its type,
// the thread, the message (v2, as the subscriber may see it: redacted for
// a participant) and the link that opens the thread.
type PushPayload struct {
	Type    string          `json:"type"`
	Thread  string          `json:"thread"`
	Message json.RawMessage `json:"message"`
	URL     string          `json:"url"`
}

// MarshalPushPayload encodes a push's payload within LimitPushPayload
// bytes: every string of the message but its id cut to LimitPushString
// code points (with "…"), and, if that is still too long, to fewer, until
// it fits; an input's choice values are never cut (the service worker answers a
// choice with the value the push carries): a message that cannot fit with
// them whole is tried again without its choices; a message that cannot
// fit even so keeps only its id, epoch, rev, author and its interaction's
// id, type, state and deadline.
func MarshalPushPayload(typ, thread string, msg Message, url string) []byte {
	v2 := MarshalMessageV2(msg)
	var tree any
	json.Unmarshal(v2, &tree)
	for _, whole := range []bool{true, false} {
		if !whole {
			if !dropChoices(tree) {
				break
			}
		}
		for _, n := range []int{LimitPushString.Max, 200, 100, 50, 20} {
			cut := cutStrings(tree, n)
			keepChoiceValues(cut, tree)
			keepID(cut, tree)
			b := marshal(PushPayload{typ, thread, marshal(cut), url})
			if len(b) <= LimitPushPayload.Max {
				return b
			}
		}
	}
	min := map[string]any{"id": msg.ID, "epoch": msg.Epoch, "rev": max(msg.Rev, msg.Epoch), "author": cut(string(msg.Author), 20)}
	if ix := msg.Interaction; ix != nil {
		min["interaction"] = map[string]any{"id": ix.ID, "type": ix.Type, "state": ix.State, "deadline": ix.Deadline}
	}
	return marshal(PushPayload{typ, thread, marshal(min), cut(url, 1000)})
}

// choicesOf is the "choices" list of a decoded v2 message's interaction,
// and the interaction (nil, nil if none).
func choicesOf(msg any) ([]any, map[string]any) {
	m, _ := msg.(map[string]any)
	ix, _ := m["interaction"].(map[string]any)
	cs, _ := ix["choices"].([]any)
	return cs, ix
}

// keepChoiceValues puts back, in cut (cutStrings of orig), the whole
// value of each of orig's choices.
func keepChoiceValues(cut, orig any) {
	oc, _ := choicesOf(orig)
	cc, _ := choicesOf(cut)
	for i := range min(len(oc), len(cc)) {
		o, _ := oc[i].(map[string]any)
		c, _ := cc[i].(map[string]any)
		if v, ok := o["value"]; ok && c != nil {
			c["value"] = v
		}
	}
}

// keepID puts back, in cut (cutStrings of orig), the message's whole id
// ("MSG-…", 26 code points): a cut one names no message.
func keepID(cut, orig any) {
	o, _ := orig.(map[string]any)
	c, _ := cut.(map[string]any)
	if id, ok := o["id"]; ok && c != nil {
		c["id"] = id
	}
}

// dropChoices removes the choices of a decoded v2 message's interaction,
// and reports whether it had any.
func dropChoices(msg any) bool {
	cs, ix := choicesOf(msg)
	if len(cs) == 0 {
		return false
	}
	delete(ix, "choices")
	return true
}

// cutStrings is v (a decoded JSON value) with every string value, and
// every object key, cut to n code points.
func cutStrings(v any, n int) any {
	switch x := v.(type) {
	case string:
		return cut(x, n)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cutStrings(e, n)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[cut(k, n)] = cutStrings(e, n)
		}
		return out
	}
	return v
}

// AdmitPush adds sub to a thread's subscriptions subs (a store's rule,
// the same on every backend): a subscription with sub's endpoint takes
// sub's keys, events and subscriber and keeps its id and created_at
// (created false; write false if nothing changed); else sub is appended
// unless the thread has LimitPushSubscriptions already, or sub is a
// participant's and the participants hold LimitPushParticipants (PushLimit), or
// sub's id is taken (then it gets another).
func AdmitPush(subs []PushSubscription, sub PushSubscription) (out []PushSubscription, got PushSubscription, created, write bool, err error) {
	if i := slices.IndexFunc(subs, func(p PushSubscription) bool { return p.Endpoint == sub.Endpoint }); i >= 0 {
		old := subs[i]
		if sub.Participant() && !old.Participant() {
			// The owner's (or a device's) browser, where a participant's
			// page is open too: taken over, its approvals would no longer
			// reach the owner, and the participant could delete it.
			return nil, PushSubscription{}, false, false, Errorf(NotPermitted, "this browser gets this conversation's notifications as its owner: a participant's page cannot take them over")
		}
		sub.ID, sub.CreatedAt = old.ID, old.CreatedAt
		if old.P256dh == sub.P256dh && old.Auth == sub.Auth && old.Subscriber == sub.Subscriber && slices.Equal(old.Events, sub.Events) {
			return subs, old, false, false, nil
		}
		out = slices.Clone(subs)
		out[i] = sub
		return out, sub, false, true, nil
	}
	if sub.Participant() {
		// The participants hold LimitPushParticipants together, the rest
		// is the owner's; a participant's refusal reads the same whoever
		// holds the places. Its timing does not: past 5 of the owner's,
		// the thread's 20 refuse a participant first (docs/api.md).
		held := 0
		for _, p := range subs {
			if p.Participant() {
				held++
			}
		}
		if held >= LimitPushParticipants.Max || len(subs) >= LimitPushSubscriptions.Max {
			return nil, PushSubscription{}, false, false, Errorf(PushLimit, "this conversation's participants may subscribe no more browsers to its notifications (at most %d together)", LimitPushParticipants.Max)
		}
	}
	if len(subs) >= LimitPushSubscriptions.Max {
		return nil, PushSubscription{}, false, false, Errorf(PushLimit, "this thread has %d push subscriptions, the most it keeps", LimitPushSubscriptions.Max)
	}
	for slices.ContainsFunc(subs, func(p PushSubscription) bool { return p.ID == sub.ID }) {
		sub.ID = NewPushID()
	}
	return append(slices.Clone(subs), sub), sub, true, true, nil
}
