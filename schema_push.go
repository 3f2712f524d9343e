package chatrelay

import (
	"maps"
	"regexp"
	"strconv"
)

// PushIDPattern is a push subscription's id.
var PushIDPattern = regexp.MustCompile(`^w_[0-9a-f]{8}$`)

// push adds the $defs entries of Web Push (contract Part 5).
func (d defSet) push() {
	ok := constant(true)
	// An endpoint is bounded in bytes; maxLength counts code points, of
	// which a string has never more than bytes, nor fewer than a quarter
	// of them (UTF-8): the schema takes every endpoint the server takes,
	// and refuses the empty one, as the server does (and a URL is ASCII,
	// where both agree).
	endpoint := func(more obj) obj {
		s := obj{"type": "string", "minLength": (LimitPushEndpoint.Min + 3) / 4, "maxLength": LimitPushEndpoint.Max}
		maps.Copy(s, more)
		return s
	}
	events := describe(obj{"type": "array", "items": enum("", string(PushInteraction), string(PushReply)), "uniqueItems": true},
		"what is pushed: interaction (an interaction opens, for the owner's subscriptions, and closes) and reply (hermes posts a message or a card); absent or empty: both")
	d.add("push", object("a push subscription, as its subscriber sees it", obj{
		"id":         pattern(PushIDPattern, "w_ + 8 lowercase hex, unique in the thread"),
		"events":     events,
		"created_at": ref("epoch"),
		"endpoint":   describe(endpoint(nil), "the push service's URL the subscription was made with (chatrelay's addition: the page matches its browser's subscription by it)"),
	}, "id", "events", "created_at", "endpoint"))
	d.add("push.subscribe.body", open("POST "+PathPush+": a browser's PushSubscription.toJSON() and the events wanted", obj{
		"subscription": open("", obj{
			"endpoint": describe(endpoint(obj{"pattern": `^https://`}), "https only; its host may not be, or resolve to, a loopback, private, link-local, shared or unspecified address"),
			"keys": open("", obj{
				"p256dh": describe(obj{"type": "string", "pattern": `^[A-Za-z0-9_-]{87}=?$`}, "base64url of the uncompressed P-256 public key"),
				"auth":   describe(obj{"type": "string", "pattern": `^[A-Za-z0-9_-]{22}(==)?$`}, "base64url of the 16-byte auth secret"),
			}, "p256dh", "auth"),
		}, "endpoint", "keys"),
		"events": events,
	}, "subscription"))
	d.add("push.key.answer", object("200: the VAPID public key, the applicationServerKey of PushManager.subscribe", obj{
		"success":    ok,
		"public_key": describe(obj{"type": "string", "pattern": `^[A-Za-z0-9_-]{87}$`}, "base64url (no padding) of the uncompressed P-256 point"),
	}, "success", "public_key"))
	d.add("push.subscribe.answer", answer("201: subscribed; 200 with the same id when the endpoint already was", "push", ref("push")))
	d.add("push.list.answer", answer("200: the caller's own subscriptions, oldest first", "subscriptions", list(ref("push"), "")))
	d.add("push.unsubscribe.answer", answer("200: the subscription removed", "push", ref("push")))
	d.add("push.payload", object("the JSON a push carries, before its encryption (at most "+strconv.Itoa(LimitPushPayload.Max)+" bytes)", obj{
		"type":    enum("", PushTypeInteraction, PushTypeInteractionClosed, PushTypeReply),
		"thread":  ref("thread"),
		"message": describe(obj{"type": "object"}, "the v2 message as the subscriber may see it (redacted for a participant), its strings cut to "+strconv.Itoa(LimitPushString.Max)+" code points"),
		"url":     describe(obj{"type": "string"}, "<base>/ : the page that opens the thread"),
	}, "type", "thread", "message", "url"))
}
