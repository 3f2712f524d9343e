package web_test

// The service worker's paths no browser action of a test can start: a
// click on the notification itself, and the browser's push service
// replacing a subscription. Both are driven the way push_test.go drives
// an action's click: an event dispatched in the worker's own global
// scope (through the DevTools protocol's Runtime on the worker's
// target), so that the worker's registered listener runs as the browser
// would run it.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// recordWindowCallsJS makes the worker record, in self.__calls, each
// WindowClient.focus ("focus <page>") and clients.openWindow ("open
// <url>") it makes, before making it. Headless Chromium refuses both to
// a script-made click (they need the activation a real click on a
// notification gives, which the DevTools protocol cannot make), so the
// test checks what the worker asked for, not a window's focus.
const recordWindowCallsJS = `(() => {
	if (self.__calls) return (self.__calls.length = 0, true);
	self.__calls = [];
	const page = (u) => { const x = new URL(u); return x.origin + x.pathname; };
	const focus = WindowClient.prototype.focus;
	WindowClient.prototype.focus = function () { self.__calls.push("focus " + page(this.url)); return focus.call(this).catch(() => null); };
	const open = Clients.prototype.openWindow;
	Clients.prototype.openWindow = function (u) { self.__calls.push("open " + u); return open.call(this, u).catch(() => null); };
	return true;
})()`

// TestClickOnTheNotificationOpensTheThread: a click on the notification
// itself (not on an action) closes it and focuses the window that shows
// the thread's page; with no such window, it opens the page the push
// named (its url).
func TestClickOnTheNotificationOpensTheThread(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "click"))
	thread := threadOf(tb.notifyOn(srv.URL, "Ping me when it is done."))
	reg := tb.registration(srv.URL)
	swURL := srv.URL + "sw.js"

	// The notification shows while the person is elsewhere; then the
	// thread's page is open again when the notification is clicked.
	tb.open(srv.URL + "favicon.svg")
	ix, _ := tb.notifyApproval(srv, svc, srv.URL, reg, "/push/click", thread, "Tag release 2.4?", "tag")
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	inWorker[bool](tb, swURL, recordWindowCallsJS)
	inWorker[bool](tb, swURL, clickJS(ix, "", 0))
	var calls []string
	waitFor(t, soon, "the worker to focus a window", func() bool {
		calls = inWorker[[]string](tb, swURL, `self.__calls`)
		return len(calls) > 0
	})
	if want := "focus " + srv.URL; len(calls) != 1 || calls[0] != want {
		t.Errorf("a click on the notification with the thread's page open: the worker did %q, want %q", calls, want)
	}
	waitFor(t, soon, "the notification closed", func() bool {
		for _, n := range tb.notifications() {
			if n.Tag == ix {
				return false
			}
		}
		return true
	})
	if got := srv.check(thread, ix).State; got != "pending" {
		t.Errorf("a click on the notification itself answered the approval: %s", got)
	}

	// No window on the thread's page: the push's url is opened.
	tb.open(srv.URL + "favicon.svg")
	srv.reply(thread, "Release 2.4 is tagged.")
	raw := serverPush(t, svc, "/push/click", "reply", "")
	var p struct{ URL string }
	if err := json.Unmarshal(raw, &p); err != nil || !strings.HasPrefix(p.URL, srv.URL) {
		t.Fatalf("the reply's push %s: url %q", raw, p.URL)
	}
	tb.deliver(srv.URL, reg, raw)
	tb.waitNotification("thread:"+thread, "Release 2.4 is tagged.")
	inWorker[bool](tb, swURL, recordWindowCallsJS)
	inWorker[bool](tb, swURL, clickJS("thread:"+thread, "", 0))
	waitFor(t, soon, "the worker to open a window", func() bool {
		calls = inWorker[[]string](tb, swURL, `self.__calls`)
		return len(calls) > 0
	})
	if want := "open " + p.URL; len(calls) != 1 || calls[0] != want {
		t.Errorf("a click on the notification with no page of the thread: the worker did %q, want %q", calls, want)
	}
}

// TestPushSubscriptionChangeResubscribes: the browser's push service
// replaces the subscription (pushsubscriptionchange, with no new one
// given): the worker subscribes again with the server's key, gives the
// server the new subscription with the thread's credential, deletes the
// old one there, and keeps the new one's id; the next push goes to the
// new endpoint.
func TestPushSubscriptionChangeResubscribes(t *testing.T) {
	srv, svc := startPushServer(t)
	before := svc.Subscribe(t, "before")
	after := svc.Subscribe(t, "after")
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(before)
	token := tb.notifyOn(srv.URL, "Keep me posted.")
	thread := threadOf(token)
	subs := subscriptions(t, srv.URL, token)
	if len(subs) != 1 || subs[0].Endpoint != before.Endpoint {
		t.Fatalf("the server holds %+v, want the subscription to %s", subs, before.Endpoint)
	}
	tb.registration(srv.URL)
	swURL := srv.URL + "sw.js"

	// In the worker, the browser's PushManager stood in for as in the
	// page (pushStub): its subscribe answers the new subscription, and
	// records the key it was asked with.
	key := pushKey(t, srv.URL)
	stub := `(() => {
		const S = { endpoint: ` + js(after.Endpoint) + `, p256dh: ` + js(after.P256dh()) + `, auth: ` + js(after.AuthKey()) + ` };
		self.__keys = [];
		PushManager.prototype.subscribe = function (o) {
			const k = new Uint8Array(o.applicationServerKey.buffer || o.applicationServerKey);
			self.__keys.push(btoa(String.fromCharCode(...k)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, ""));
			return Promise.resolve({ endpoint: S.endpoint, toJSON: () => ({ endpoint: S.endpoint, expirationTime: null, keys: { p256dh: S.p256dh, auth: S.auth } }) });
		};
		const e = new ExtendableEvent("pushsubscriptionchange");
		Object.defineProperty(e, "oldSubscription", { value: { endpoint: ` + js(before.Endpoint) + ` } });
		Object.defineProperty(e, "newSubscription", { value: null });
		self.dispatchEvent(e);
		return true;
	})()`
	inWorker[bool](tb, swURL, stub)
	waitFor(t, soon, "the server to hold the new subscription only", func() bool {
		subs = subscriptions(t, srv.URL, token)
		return len(subs) == 1 && subs[0].Endpoint == after.Endpoint
	})
	if got := inWorker[[]string](tb, swURL, `self.__keys`); len(got) != 1 || got[0] != key {
		t.Errorf("the worker subscribed with keys %q, want the server's %q", got, key)
	}
	if got, want := tb.storedCredential(thread), "owner "+token+" "+subs[0].ID; got != want {
		t.Errorf("IndexedDB holds %q for the worker, want %q", got, want)
	}
	srv.reply(thread, "Still here.")
	serverPush(t, svc, "/push/after", "reply", "")
	if n := len(pushesTo(svc, "/push/before")); n != 0 {
		t.Errorf("%d pushes to the replaced subscription", n)
	}
}

func pushesTo(svc *pushtest.Service, path string) []pushtest.Push {
	var out []pushtest.Push
	for _, p := range svc.Pushes() {
		if p.Path == path {
			out = append(out, p)
		}
	}
	return out
}

// pushKey is the server's VAPID public key (GET api/push/key).
func pushKey(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "api/push/key")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		PublicKey string `json:"public_key"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.PublicKey == "" {
		t.Fatalf("GET api/push/key: %d %v", resp.StatusCode, err)
	}
	return a.PublicKey
}

// TestClickOnAParticipantsNotificationOpensTheirPage: a participant's
// page keeps its share token in its tab only (sessionStorage), so the
// participant page opened for a click on their notification, with no tab
// of theirs open, would know no link and show nothing. The worker opens
// it with the token it keeps for the thread in the fragment (never sent
// to a server; p-link.js takes it out of the address bar at once), and
// that page shows the conversation.
func TestClickOnAParticipantsNotificationOpensTheirPage(t *testing.T) {
	srv, svc := startPushServer(t)
	token := strings.Repeat("7d", 32)
	thread := threadOf(token)
	post(t, srv.URL, token, "Is staging back?", "operator")
	sam := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "viewer"})
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "sam"))
	tb.open(sam.Link)
	tb.waitState(live, "ws")
	tb.click("#notify")
	tb.waitJS(soon, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	reg := tb.registration(srv.URL)
	swURL := srv.URL + "sw.js"

	tb.open(srv.URL + "favicon.svg")
	srv.reply(thread, "Yes, staging is back.")
	tb.deliver(srv.URL, reg, serverPush(t, svc, "/push/sam", "reply", ""))
	tb.waitNotification("thread:"+thread, "Yes, staging is back.")
	inWorker[bool](tb, swURL, recordWindowCallsJS)
	inWorker[bool](tb, swURL, clickJS("thread:"+thread, "", 0))
	var calls []string
	waitFor(t, soon, "the worker to open a window", func() bool {
		calls = inWorker[[]string](tb, swURL, `self.__calls`)
		return len(calls) > 0
	})
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "open "+srv.URL+"p") {
		t.Fatalf("the worker did %q, want it to open the participant page", calls)
	}
	// The page the worker asked for, in a tab of its own (a new tab's
	// sessionStorage is empty, as the window the worker opens).
	p := newWindow(t)
	p.open(strings.TrimPrefix(calls[0], "open "))
	p.waitShown(soon, "Yes, staging is back.")
	if u := eval[string](p, `location.href`); strings.Contains(u, "#") {
		t.Errorf("the address bar holds the fragment: %s", u)
	}
}
