package transport

import (
	"crypto/ecdh"
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/webpush"
)

// The Web Push routes (contract Part 5): GET /api/push/key, and a
// caller's subscriptions, POST/GET/DELETE /api/chat/push[/{id}].
// Delivery is webpushsend.go.

// PushConfig turns Web Push on. Zero fields take the defaults.
type PushConfig struct {
	// Contact is the VAPID JWT's sub: "mailto:…" or "https://…"
	// (--push-contact).
	Contact string
	// Guard checks endpoints at subscribe time and dials every push;
	// its Allow is --push-allow-host. The server uses a copy whose
	// MaxEndpoint is chatrelay.LimitPushEndpoint's.
	Guard *webpush.Guard
	// TLS, if set, is the push client's TLS configuration (tests: the
	// test push service's certificate authority); nil: the system's.
	TLS *tls.Config
	// Workers send pushes (default 4); Queue bounds the changes waiting
	// for them (default 1024): a change past it is never waited for, but
	// read again from the store once there is room.
	Workers int
	Queue   int
	// Backoff is the wait before each retry, at least a Retry-After
	// (default 5s, 30s, 2m, 5m; tests shorten it).
	Backoff []time.Duration
	// Lease is how long a node's claim of a change's pushes lasts
	// unless it renews it (it does, every third of it, while it sends
	// them): another node sends the pushes of a claim that lapsed
	// (default chatrelay.DefaultPushLease; tests shorten it).
	Lease time.Duration
	// NoSend serves the push routes (the key, subscriptions) and sends
	// nothing: another process on the same store, a server whose pusher
	// runs (`chatrelay push send`), sends every push, claiming each change
	// in the store as nodes do. This server's feed then hands its pusher
	// nothing, and Run starts none of its workers.
	NoSend bool
}

// pushAnswer is a subscription as its subscriber sees it.
type pushAnswer struct {
	ID        string                `json:"id"`
	Events    []chatrelay.PushEvent `json:"events"`
	CreatedAt int64                 `json:"created_at"`
	Endpoint  string                `json:"endpoint"`
}

func answerOf(p chatrelay.PushSubscription) pushAnswer {
	return pushAnswer{ID: p.ID, Events: p.Events, CreatedAt: p.CreatedAt, Endpoint: p.Endpoint}
}

// subscriberOf is who p's subscriptions belong to: the owner's token
// ("owner"), one of its devices ("d:<id>") or a participant ("p:<id>").
func subscriberOf(p principal) string {
	switch {
	case p.device():
		return chatrelay.SubscriberDevicePrefix + p.grant.ID
	case p.participant():
		return string(p.grant.Author())
	}
	return chatrelay.SubscriberOwner
}

// pushOn answers 404 push_disabled and reports false if push is off.
func (s *Server) pushOn(w http.ResponseWriter, r *http.Request) bool {
	if s.push == nil {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.PushDisabled, "push is turned off on this server"))
		return false
	}
	return true
}

// handlePushKey serves GET /api/push/key (anyone): the VAPID public key.
func (s *Server) handlePushKey(w http.ResponseWriter, r *http.Request) {
	if !s.pushOn(w, r) {
		return
	}
	v, err := s.push.vapid(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Success   bool   `json:"success"`
		PublicKey string `json:"public_key"`
	}{true, v.PublicKey()})
}

// subscribeBody is the body of POST /api/chat/push.
type subscribeBody struct {
	Subscription *struct {
		Endpoint *string `json:"endpoint"`
		Keys     *struct {
			P256dh *string `json:"p256dh"`
			Auth   *string `json:"auth"`
		} `json:"keys"`
	} `json:"subscription"`
	Events []chatrelay.PushEvent `json:"events"`
}

// handlePushSubscribe serves POST /api/chat/push (the owner or a
// participant): 201 a new subscription, 200 the same id for an endpoint
// the thread has already.
func (s *Server) handlePushSubscribe(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.pushOn(w, r) {
		return
	}
	var body subscribeBody
	if !s.decodeJSON(w, r, &body) {
		return
	}
	sub, err := s.push.subscription(r, body, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sub.Subscriber, sub.Base = subscriberOf(p), s.publicBase(r)
	if len(sub.Base) > chatrelay.LimitPushEndpoint.Max {
		// Stored with the subscription and carried by each push: a Host
		// header of a megabyte would be too (no browser sends one).
		s.writeError(w, r, chatrelay.Errorf(chatrelay.InvalidPushEndpoint, "the page's address (its Host) is longer than %d bytes: no push could link to it", chatrelay.LimitPushEndpoint.Max))
		return
	}
	got, created, err := s.push.st.PushSubscribe(r.Context(), p.thread, sub)
	if chatrelay.CodeOf(err) == chatrelay.PushLimit && s.push.dropEnded(r.Context(), p.thread) {
		// Full of subscriptions of ended grants, which no push deleted
		// yet (hermes has not written since the revoke): they go now.
		got, created, err = s.push.st.PushSubscribe(r.Context(), p.thread, sub)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, struct {
		Success bool       `json:"success"`
		Push    pushAnswer `json:"push"`
	}{true, answerOf(got)})
}

// eventsFor checks the events p asks for (chatrelay.PushEventsOf). A
// participant cannot answer an interaction, so it is never pushed one:
// its subscription gets reply only, and asking for interaction by name is
// refused (403 not_permitted) rather than stored and never sent.
func eventsFor(p principal, asked []chatrelay.PushEvent) ([]chatrelay.PushEvent, error) {
	events, err := chatrelay.PushEventsOf(asked)
	if err != nil {
		return nil, chatrelay.Errorf(chatrelay.InvalidJSON, "%v", err)
	}
	if !p.participant() {
		return events, nil
	}
	if slices.Contains(asked, chatrelay.PushInteraction) {
		return nil, chatrelay.Errorf(chatrelay.NotPermitted, `a participant cannot answer an interaction, so it gets no "interaction" push: subscribe to "reply" (the default)`)
	}
	return []chatrelay.PushEvent{chatrelay.PushReply}, nil
}

// subscription checks p's subscribe body: its shape, its keys, its events
// (eventsFor), and its endpoint (https, not a private address: the
// Guard), in that order: a refused one resolves no name.
func (ps *pusher) subscription(r *http.Request, b subscribeBody, p principal) (chatrelay.PushSubscription, error) {
	bad := func(format string, args ...any) error {
		return chatrelay.Errorf(chatrelay.InvalidPushEndpoint, format, args...)
	}
	if b.Subscription == nil || b.Subscription.Endpoint == nil || b.Subscription.Keys == nil ||
		b.Subscription.Keys.P256dh == nil || b.Subscription.Keys.Auth == nil {
		return chatrelay.PushSubscription{}, bad(`the body must be {"subscription": {"endpoint", "keys": {"p256dh", "auth"}}}: a PushSubscription's toJSON()`)
	}
	events, err := eventsFor(p, b.Events)
	if err != nil {
		return chatrelay.PushSubscription{}, err
	}
	p256dh, auth := strings.TrimRight(*b.Subscription.Keys.P256dh, "="), strings.TrimRight(*b.Subscription.Keys.Auth, "=")
	if err := chatrelay.CheckPushKeys(p256dh, auth); err != nil {
		return chatrelay.PushSubscription{}, bad("%v", err)
	}
	// The shape alone (65 bytes, starting 4) takes a point off the
	// curve, to which no push could ever be encrypted. Checked here, at
	// subscribe, not in CheckPushKeys: a stored record is not refused
	// whole for a subscription an older server took.
	if raw, _ := base64.RawURLEncoding.DecodeString(p256dh); !onP256(raw) {
		return chatrelay.PushSubscription{}, bad("keys.p256dh is not a point of the P-256 curve")
	}
	u, err := ps.guard.CheckEndpoint(r.Context(), *b.Subscription.Endpoint)
	if err != nil {
		if webpush.IsBlocked(err) {
			return chatrelay.PushSubscription{}, bad("the endpoint's host is, or resolves to, a loopback, private, link-local, shared or unspecified address")
		}
		return chatrelay.PushSubscription{}, bad("%v", err)
	}
	return chatrelay.PushSubscription{
		ID: chatrelay.NewPushID(), Endpoint: u.String(), P256dh: p256dh, Auth: auth,
		Events: events, CreatedAt: ps.s.cfg.Now().UnixMilli(),
	}, nil
}

// handlePushList serves GET /api/chat/push: the caller's own
// subscriptions, oldest first.
func (s *Server) handlePushList(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.pushOn(w, r) {
		return
	}
	subs, err := s.push.st.PushSubscriptions(r.Context(), p.thread)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := []pushAnswer{}
	me := subscriberOf(p)
	for _, sub := range subs {
		if sub.Subscriber == me {
			out = append(out, answerOf(sub))
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Success       bool         `json:"success"`
		Subscriptions []pushAnswer `json:"subscriptions"`
	}{true, out})
}

// handlePushDelete serves DELETE /api/chat/push/{id}: by its subscriber,
// or the owner (on any of its devices). Another's subscription is, to a
// participant, no subscription at all (404 not_found).
func (s *Server) handlePushDelete(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.pushOn(w, r) {
		return
	}
	id := r.PathValue("id")
	notFound := chatrelay.Errorf(chatrelay.NotFound, "no push subscription %s of yours in this thread", quoteID(id))
	if !chatrelay.ValidPushID(id) {
		s.writeError(w, r, notFound)
		return
	}
	subs, err := s.push.st.PushSubscriptions(r.Context(), p.thread)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	i := slices.IndexFunc(subs, func(sub chatrelay.PushSubscription) bool { return sub.ID == id })
	if i < 0 || (p.participant() && subs[i].Subscriber != subscriberOf(p)) {
		s.writeError(w, r, notFound)
		return
	}
	gone, err := s.push.st.PushUnsubscribe(r.Context(), p.thread, id)
	s.answer(w, r, struct {
		Success bool       `json:"success"`
		Push    pushAnswer `json:"push"`
	}{true, answerOf(gone)}, err)
}

// onP256 reports whether raw is an uncompressed point of the P-256 curve.
func onP256(raw []byte) bool {
	_, err := ecdh.P256().NewPublicKey(raw)
	return err == nil
}
