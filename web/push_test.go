package web_test

// Web Push in the page (contract Part 5): the "Notify me" switch
// (push.js) and the service worker (sw.js), in real Chromium against a
// real chatrelay process.
//
// What headless Chromium allows, and so what these tests can drive:
//   - PushManager.subscribe: refused. A fresh profile (a new browser
//     context, as every test here uses) answers "AbortError: Registration
//     failed - permission denied" even with the permission granted; the
//     default profile waits forever for Google's push service, which it
//     cannot reach. TestNotifySwitchWithTheBrowsersPushManager presses the
//     switch against the real PushManager and checks what the page does
//     with the refusal (or, in a browser that allows it, with the
//     subscription). The other tests stand in for the browser's push
//     service: pushStub replaces PushManager's subscribe and
//     getSubscription in the page (and only them) with a subscription at
//     internal/pushtest's service, whose keys the test holds; everything
//     else (the permission, the worker's registration, the POST to the
//     real server, IndexedDB, the worker itself) is the browser's own.
//   - A push: the server sends it to the test's push service, which
//     decrypts it (RFC 8291) and checks its VAPID signature; the test
//     hands the payload, byte for byte, to the real worker with the
//     DevTools protocol's ServiceWorker.deliverPushMessage, as the
//     browser's push service would.
//   - Notifications: shown by the worker for real and read back with
//     registration.getNotifications(), from a page of the origin.
//   - A click on a notification or on its action: the DevTools protocol
//     has no way to click one. The test dispatches a NotificationEvent
//     ("notificationclick", with the real notification the worker showed
//     and the action) in the worker's own global scope, so the worker's
//     registered listener runs, as a click runs it; only its
//     event.waitUntil refuses a script-made event (it throws, after the
//     listener started the answer), so the test waits on the outcome (the
//     server's state, the replacing notification), not on the event. A
//     click on the notification itself (open or focus the page) is the
//     same event with no action (push_worker_test.go), which checks what
//     the worker asks for: clients.openWindow and focus need the
//     activation a real click gives, and refuse a script-made one.

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/serviceworker"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// onEveryPage runs js in every document the tab loads, before the page's
// own scripts.
func (tb *tab) onEveryPage(js string) {
	tb.t.Helper()
	tb.do(soon, "a script on every page", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: js})
		return chromedp.Void{}, err
	})
}

// countPermissionAsks counts the page's calls of
// Notification.requestPermission in window.__asked (the real one still
// answers).
func (tb *tab) countPermissionAsks() {
	tb.onEveryPage(`(() => {
		window.__asked = 0;
		const ask = Notification.requestPermission.bind(Notification);
		Notification.requestPermission = (...a) => (window.__asked++, ask(...a));
	})();`)
}

// pushStub stands in for the browser's push service in the page: subscribe
// answers sub, a subscription at the test's push service (kept in
// localStorage, so that getSubscription finds it after a reload), and
// unsubscribe forgets it. window.__push lists the calls.
func (tb *tab) pushStub(sub pushtest.Subscription) {
	b, _ := json.Marshal(map[string]string{"endpoint": sub.Endpoint, "p256dh": sub.P256dh(), "auth": sub.AuthKey()})
	tb.onEveryPage(`(() => {
		const S = ` + string(b) + `;
		const calls = (window.__push = []);
		const make = (key) => ({
			endpoint: S.endpoint,
			expirationTime: null,
			options: { userVisibleOnly: true, applicationServerKey: Uint8Array.from(key).buffer },
			toJSON: () => ({ endpoint: S.endpoint, expirationTime: null, keys: { p256dh: S.p256dh, auth: S.auth } }),
			unsubscribe: () => (calls.push("unsubscribe"), localStorage.removeItem("test.push"), Promise.resolve(true)),
		});
		PushManager.prototype.subscribe = function (o) {
			calls.push("subscribe");
			const key = [...new Uint8Array(o.applicationServerKey.buffer || o.applicationServerKey)];
			localStorage.setItem("test.push", JSON.stringify(key));
			return Promise.resolve(make(key));
		};
		PushManager.prototype.getSubscription = function () {
			const key = localStorage.getItem("test.push");
			return Promise.resolve(key ? make(JSON.parse(key)) : null);
		};
	})();`)
}

// allowNotifications grants the tab's profile the notifications permission
// for origin u, as a person answering "Allow" does.
func (tb *tab) allowNotifications(u string) {
	tb.t.Helper()
	o, _ := url.Parse(u)
	origin := o.Scheme + "://" + o.Host
	bctx := chromedp.FromContext(tb.ctx).BrowserContextID
	tb.do(soon, "grant notifications", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, chromedp.FromContext(tb.ctx).Browser, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: "notifications"}, Setting: browser.PermissionSettingGranted,
			Origin: origin, BrowserContextID: bctx,
		})
		return chromedp.Void{}, err
	})
}

// registration waits for the worker's registration at scope (from the
// ServiceWorker domain's events) and returns its id.
func (tb *tab) registration(scope string) serviceworker.RegistrationID {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, live)
	defer cancel()
	regs := chromedp.Events(ctx, serviceworker.WorkerRegistrationUpdated)
	if _, err := chromedp.Call(ctx, serviceworker.Enable, cdp.Empty{}); err != nil {
		tb.t.Fatalf("ServiceWorker.enable: %v", err)
	}
	for ev, err := range regs {
		if err != nil {
			tb.t.Fatalf("no worker registered at %s: %v", scope, err)
		}
		for _, r := range ev.Registrations {
			if r.ScopeURL == scope && !r.IsDeleted {
				return r.RegistrationID
			}
		}
	}
	tb.t.Fatalf("no worker registered at %s", scope)
	return ""
}

// deliver pushes payload to the worker of registration id, as the
// browser's push service would.
func (tb *tab) deliver(origin string, id serviceworker.RegistrationID, payload []byte) {
	tb.t.Helper()
	o, _ := url.Parse(origin)
	tb.do(soon, "deliver a push", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, serviceworker.DeliverPushMessage, serviceworker.DeliverPushMessageParams{
			Origin: o.Scheme + "://" + o.Host, RegistrationID: id, Data: string(payload),
		})
		return chromedp.Void{}, err
	})
}

// shownNotification is a notification as registration.getNotifications()
// reads it back.
type shownNotification struct {
	Title   string   `json:"title"`
	Body    string   `json:"body"`
	Tag     string   `json:"tag"`
	Actions []string `json:"actions"` // "action:title"
}

// notifications reads the worker's notifications back, from a page of
// the origin.
func (tb *tab) notifications() []shownNotification {
	tb.t.Helper()
	return eval[[]shownNotification](tb, `navigator.serviceWorker.getRegistration().then((r) => r.getNotifications()).then((ns) =>
		ns.map((n) => ({ title: n.title, body: n.body, tag: n.tag, actions: n.actions.map((a) => a.action + ":" + a.title) })))`)
}

// waitNotification waits until the only notification tagged tag has body.
// It reads them every 300 ms, not faster: a getNotifications() that comes
// while Chromium is still drawing a notification can lose that one (the
// notification database drops what the display does not list yet: seen
// here, 1 run in 3 when read every 50 ms).
func (tb *tab) waitNotification(tag, body string) shownNotification {
	tb.t.Helper()
	var got []shownNotification
	deadline := time.Now().Add(soon)
	for {
		time.Sleep(300 * time.Millisecond) // the poll interval of a condition
		got = slices.DeleteFunc(tb.notifications(), func(n shownNotification) bool { return n.Tag != tag })
		if len(got) == 1 && got[0].Body == body {
			return got[0]
		}
		if len(got) > 1 {
			tb.t.Fatalf("%d notifications tagged %s, want one: %+v", len(got), tag, got)
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("waited %v for the notification %s to say %q: %+v", soon, tag, body, got)
		}
	}
}

// inWorker evaluates js in the global scope of the tab's service worker
// of script scriptURL (awaiting a promise).
func inWorker[T any](tb *tab, scriptURL, js string) T {
	tb.t.Helper()
	bctx := chromedp.FromContext(tb.ctx).BrowserContextID
	var id string
	waitFor(tb.t, soon, "the worker's target", func() bool {
		ts, err := chromedp.Targets(tb.ctx)
		if err != nil {
			tb.t.Fatal(err)
		}
		for _, ti := range ts {
			if ti.Type == "service_worker" && ti.URL == scriptURL && ti.BrowserContextID == bctx {
				id = string(ti.TargetID)
				return true
			}
		}
		// A worker idle for a while stops: start it again.
		chromedp.Call(tb.ctx, serviceworker.StartWorker, serviceworker.StartWorkerParams{ScopeURL: strings.TrimSuffix(scriptURL, "sw.js")})
		return false
	})
	// The session stays attached until the test ends: closing it could
	// end the worker, and with it an answer still on its way.
	wctx, cancel := chromedp.NewContext(tb.ctx, chromedp.WithTargetID(target.ID(id)))
	tb.t.Cleanup(cancel)
	ctx, stop := context.WithTimeout(wctx, 15*time.Second)
	defer stop()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate in the worker %s: %v", js, err)
	}
	return v
}

// clickJS is the JavaScript, run in the worker, that clicks the
// notification tagged tag (the action, "" for the notification itself)
// after delay ms: the worker's notificationclick listener runs with the
// notification the worker showed.
func clickJS(tag, action string, delay int) string {
	return `self.registration.getNotifications({ tag: ` + js(tag) + ` }).then(([n]) => {
		if (!n) throw new Error("no notification tagged " + ` + js(tag) + `);
		setTimeout(() => self.dispatchEvent(new NotificationEvent("notificationclick", { notification: n, action: ` + js(action) + ` })), ` + strconv.Itoa(delay) + `);
		return true;
	})`
}

// notifyApproval has hermes ask thread's approval summary (titled title,
// for 15 minutes), delivers the server's push of it to the subscription at
// path to the worker of registration reg (of the page at origin), and
// waits for its notification; it returns the interaction's id and the
// notification.
func (tb *tab) notifyApproval(srv *server, svc *pushtest.Service, origin string, reg serviceworker.RegistrationID, path, thread, summary, title string) (string, shownNotification) {
	tb.t.Helper()
	ix := srv.ask(thread, "--approval", summary, "--title", title, "--timeout", "15m").Interaction.ID
	tb.deliver(origin, reg, serverPush(tb.t, svc, path, "interaction", ix))
	return ix, tb.waitNotification(ix, summary)
}

// serverPush waits for the server's push of type typ (for interaction
// ix, if not "") to the subscription at path, and returns its payload as
// the server sent it, decrypted by the push service (which also checked
// its VAPID signature).
func serverPush(t *testing.T, svc *pushtest.Service, path, typ, ix string) []byte {
	t.Helper()
	deadline := time.After(live)
	for {
		wake := svc.Wait()
		for _, p := range svc.Pushes() {
			if p.Path != path {
				continue
			}
			if p.Err != nil {
				t.Fatalf("a push the service could not open: %v", p.Err)
			}
			var pl struct {
				Type    string
				Message struct{ Interaction *struct{ ID string } }
			}
			if err := json.Unmarshal(p.Plain, &pl); err != nil {
				t.Fatalf("push payload %s: %v", p.Plain, err)
			}
			if pl.Type == typ && (ix == "" || pl.Message.Interaction != nil && pl.Message.Interaction.ID == ix) {
				return p.Plain
			}
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("the server pushed no %s %s to %s within %v", typ, ix, path, live)
		}
	}
}

// subscriptions lists the thread's push subscriptions the owner holds, as
// the server answers GET /api/chat/push.
func subscriptions(t *testing.T, base, token string) []struct{ ID, Endpoint string } {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"api/chat/push", nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Subscriptions []struct{ ID, Endpoint string } `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/chat/push: %d %v", resp.StatusCode, err)
	}
	return a.Subscriptions
}

// switchState is the switch's data-state and the sentence under it.
func (tb *tab) switchState() (state, note string) {
	tb.t.Helper()
	v := eval[[]string](tb, `[document.getElementById("notify").dataset.state, document.getElementById("notify-note").hidden ? "" : document.getElementById("notify-note").textContent]`)
	return v[0], v[1]
}

// storedCredential is what the page kept for the worker in IndexedDB for
// thread: "scheme token push" ("" if nothing).
func (tb *tab) storedCredential(thread string) string {
	tb.t.Helper()
	return eval[string](tb, `new Promise((resolve, reject) => {
		const req = indexedDB.open("chatrelay-push", 1);
		req.onupgradeneeded = () => (req.result.createObjectStore("threads", { keyPath: "thread" }), req.result.createObjectStore("answered", { keyPath: "ix" }));
		req.onerror = () => reject(req.error);
		req.onsuccess = () => {
			const g = req.result.transaction("threads").objectStore("threads").get(`+js(thread)+`);
			g.onsuccess = () => { req.result.close(); const r = g.result; resolve(r ? [r.scheme, r.token, r.push].join(" ") : ""); };
			g.onerror = () => reject(g.error);
		};
	})`)
}

// pushLines are the request lines of the push routes the proxy saw.
func (g *gate) pushLines() []string {
	lines, _ := g.requests()
	return slices.DeleteFunc(lines, func(l string) bool {
		return !strings.Contains(l, "/api/chat/push") && !strings.Contains(l, "/api/push/")
	})
}

// TestNotifySwitchWithTheBrowsersPushManager presses "Notify me" against
// the browser's own PushManager. The page asks the permission only when
// pressed and registers its worker. Headless Chromium refuses the
// subscription (no push service): the page then says so, stays off,
// gives the server nothing and keeps nothing. Were the subscription
// allowed, the switch would be on and the server would hold it.
func TestNotifySwitchWithTheBrowsersPushManager(t *testing.T) {
	srv, _ := startPushServer(t)
	g := newGate(t, srv)
	tb := newWindow(t)
	tb.allowNotifications(g.URL)
	tb.countPermissionAsks()
	tb.open(g.URL)
	tb.waitState(live, "ws")
	tb.write("Tell me when the build is done.")
	tb.waitShown(soon, "Tell me when the build is done.")
	token := tb.token()

	tb.waitJS(soon, "the switch off", `document.getElementById("notify").dataset.state === "off"`)
	if n := eval[int](tb, `window.__asked`); n != 0 {
		t.Fatalf("the page asked for the notifications permission %d times before the switch was pressed", n)
	}
	tb.click("#notify")
	tb.waitJS(30*time.Second, "the switch to settle", `!["busy"].includes(document.getElementById("notify").dataset.state)`)
	if n := eval[int](tb, `window.__asked`); n != 1 {
		t.Errorf("pressing the switch asked for the permission %d times, want 1", n)
	}
	tb.registration(g.URL) // the worker is registered at the prefix root

	state, note := tb.switchState()
	subs := subscriptions(t, srv.URL, token)
	if state == "on" {
		// A browser with a push service: the page subscribed for real.
		t.Logf("this Chromium subscribed through its push service: %v", subs)
		if len(subs) != 1 || tb.storedCredential(threadOf(token)) == "" {
			t.Errorf("switch on, but the server holds %v and IndexedDB %q", subs, tb.storedCredential(threadOf(token)))
		}
		return
	}
	t.Logf("the browser refused the subscription; the page says: %q", note)
	if state != "off" || !strings.Contains(note, "could not subscribe") {
		t.Errorf("after a refused subscription the switch is %q and says %q, want off and why", state, note)
	}
	if lines := g.pushLines(); !slices.Equal(lines, []string{"GET /api/push/key"}) {
		t.Errorf("push requests %q, want only the key read", lines)
	}
	if len(subs) != 0 {
		t.Errorf("the server holds %v after a refused subscription", subs)
	}
	if got := tb.storedCredential(threadOf(token)); got != "" {
		t.Errorf("IndexedDB kept %q after a refused subscription", got)
	}
}

// TestApproveFromTheNotification: the switch subscribes (the browser's
// push service stood in for, see the file's comment) and gives the server
// the subscription and the worker the credential; a push of hermes's
// approval shows a notification with Approve and Deny, whose Approve
// answers the interaction through the worker; a closing push replaces it;
// an answer the page gave first makes the worker's "Already answered";
// the first answer wins when both come at once; an input's two choices
// are its actions; the switch turned off deletes the subscription.
func TestApproveFromTheNotification(t *testing.T) {
	srv, svc := startPushServer(t)
	g := newGate(t, srv)
	phone := svc.Subscribe(t, "phone")
	tb := newWindow(t)
	tb.allowNotifications(g.URL)
	tb.countPermissionAsks()
	tb.pushStub(phone)
	tb.open(g.URL)
	tb.waitState(live, "ws")
	tb.write("Ship build 412 when it is green.")
	tb.waitShown(soon, "Ship build 412 when it is green.")
	token := tb.token()
	thread := threadOf(token)

	// On: permission asked once, then the key, the POST, and the credential.
	tb.click("#notify")
	tb.waitJS(soon, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	if n := eval[int](tb, `window.__asked`); n != 1 {
		t.Errorf("the permission was asked %d times, want once", n)
	}
	// The state is aria-checked (and the tooltip's words); the name stays
	// "Notify me": the bell shows no words that could disagree with it
	// ("click Notify me" works by voice).
	if got := eval[[]string](tb, `(() => { const b = document.getElementById("notify");
		return [b.getAttribute("aria-checked"), b.getAttribute("aria-label"), b.title, b.innerText.trim()]; })()`); !slices.Equal(got, []string{"true", "Notify me", "Notifications on", ""}) {
		t.Errorf("the switch on: aria-checked, aria-label, tooltip, visible text %q, want true, Notify me, Notifications on, none", got)
	}
	if lines := g.pushLines(); !slices.Equal(lines, []string{"GET /api/push/key", "POST /api/chat/push"}) {
		t.Errorf("push requests %q, want the key read and one POST", lines)
	}
	subs := subscriptions(t, srv.URL, token)
	if len(subs) != 1 || subs[0].Endpoint != phone.Endpoint {
		t.Fatalf("the server holds %+v, want the one subscription to %s", subs, phone.Endpoint)
	}
	if got, want := tb.storedCredential(thread), "owner "+token+" "+subs[0].ID; got != want {
		t.Fatalf("IndexedDB holds %q for the worker, want %q", got, want)
	}
	// A reload finds it on (the browser's subscription, the credential,
	// and the server's word).
	tb.open(g.URL)
	tb.waitJS(live, "the switch on after a reload", `document.getElementById("notify").dataset.state === "on"`)
	scope := g.URL
	reg := tb.registration(scope)
	swURL := g.URL + "sw.js"

	// The person leaves the page (a page of the origin stays, to read the
	// notifications back): the approval reaches the worker.
	tb.open(g.URL + "favicon.svg")
	ix, n := tb.notifyApproval(srv, svc, g.URL, reg, "/push/phone", thread, "Deploy build 412 to production.", "deploy")
	if n.Title != "deploy" || !slices.Equal(n.Actions, []string{"approve:Approve", "deny:Deny"}) {
		t.Errorf("the notification is %+v, want title deploy with Approve and Deny", n)
	}

	// Approve, through the worker's click listener.
	inWorker[bool](tb, swURL, clickJS(ix, "approve", 0))
	waitFor(t, soon, "the approval stored", func() bool { return srv.check(thread, ix).State == "approved" })
	if got := srv.check(thread, ix); got.AnsweredBy != "operator" {
		t.Errorf("approved by %q, want operator (the owner's credential)", got.AnsweredBy)
	}
	tb.waitNotification(ix, "Approved")
	// The closing push replaces it, and does not say "another device".
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/phone", "interaction_closed", ix))
	tb.waitNotification(ix, "Approved")

	// Answered in the page first: the worker's Deny is refused, and says so.
	q2 := srv.ask(thread, "--approval", "Restart the worker pool.", "--title", "restart", "--timeout", "15m")
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/phone", "interaction", q2.Interaction.ID))
	tb.waitNotification(q2.Interaction.ID, "Restart the worker pool.")
	respond(t, srv.URL, token, q2.Interaction.ID, "approve")
	inWorker[bool](tb, swURL, clickJS(q2.Interaction.ID, "deny", 0))
	tb.waitNotification(q2.Interaction.ID, "Already answered: approved.")
	if got := srv.check(thread, q2.Interaction.ID); got.State != "approved" {
		t.Errorf("the late Deny changed the answer: %s", got.State)
	}
	// Its closing push: "on another device".
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/phone", "interaction_closed", q2.Interaction.ID))
	tb.waitNotification(q2.Interaction.ID, "Approved on another device")

	// The worker and a page (the owner's, in another browser) answer at
	// once: one answer is stored, and the other side says it was not taken.
	page := newWindow(t)
	page.adopt(g.URL, token)
	page.waitState(live, "ws")
	q3 := srv.ask(thread, "--approval", "Drop the staging database.", "--title", "drop", "--timeout", "15m")
	page.waitIx(soon, q3.Interaction.ID, "pending")
	page.waitJS(soon, "the page's answers armed", `document.documentElement.dataset.answers === "armed"`)
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/phone", "interaction", q3.Interaction.ID))
	tb.waitNotification(q3.Interaction.ID, "Drop the staging database.")
	eval[bool](page, `(setTimeout(() => document.querySelector(`+js(ixSel(q3.Interaction.ID)+" button.deny")+`).click(), 300), true)`)
	inWorker[bool](tb, swURL, clickJS(q3.Interaction.ID, "approve", 300))
	waitFor(t, soon, "an answer stored", func() bool { return srv.check(thread, q3.Interaction.ID).State != "pending" })
	switch got := srv.check(thread, q3.Interaction.ID).State; got {
	case "approved": // the worker came first
		tb.waitNotification(q3.Interaction.ID, "Approved")
		page.waitJS(soon, "the page's answer refused", `document.querySelector(`+js(ixSel(q3.Interaction.ID)+" .ix-error")+`)?.textContent.includes("already closed")`)
		t.Log("the worker's Approve came first; the page's Deny was refused")
	case "denied": // the page came first
		tb.waitNotification(q3.Interaction.ID, "Already answered: denied.")
		t.Log("the page's Deny came first; the worker's Approve was refused")
	default:
		t.Fatalf("the interaction is %s", got)
	}

	// An input with two choices offers them as actions; one answers.
	q4 := srv.ask(thread, "--input", "Which region first?", "--choice", "eu", "--choice", "us", "--timeout", "15m")
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/phone", "interaction", q4.Interaction.ID))
	n4 := tb.waitNotification(q4.Interaction.ID, "Which region first?")
	if !slices.Equal(n4.Actions, []string{"choice:0:eu", "choice:1:us"}) {
		t.Errorf("the input's actions are %q, want its two choices", n4.Actions)
	}
	inWorker[bool](tb, swURL, clickJS(q4.Interaction.ID, "choice:1", 0))
	waitFor(t, soon, "the choice stored", func() bool { return srv.check(thread, q4.Interaction.ID).Answer.Value == "us" })

	// Off: the server's subscription deleted, the browser's ended, the
	// credential forgotten.
	tb.open(g.URL)
	tb.waitJS(live, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	tb.click("#notify")
	tb.waitJS(soon, "the switch off", `document.getElementById("notify").dataset.state === "off"`)
	if lines := g.pushLines(); !slices.Contains(lines, "DELETE /api/chat/push/"+subs[0].ID) {
		t.Errorf("push requests %q: no DELETE of %s", lines, subs[0].ID)
	}
	if got := subscriptions(t, srv.URL, token); len(got) != 0 {
		t.Errorf("the server still holds %+v", got)
	}
	if got := eval[[]string](tb, `window.__push`); !slices.Equal(got, []string{"unsubscribe"}) {
		t.Errorf("the page's PushManager calls after Off: %q, want unsubscribe", got)
	}
	if got := tb.storedCredential(thread); got != "" {
		t.Errorf("IndexedDB still holds %q", got)
	}
}

// TestExpiredReplacesTheNotification: an approval nobody answers
// expires; the server's closing push replaces its notification, which
// then offers no action.
func TestExpiredReplacesTheNotification(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "late"))
	thread := threadOf(tb.notifyOn(srv.URL, "Restart it if you must."))
	reg := tb.registration(srv.URL)
	tb.open(srv.URL + "favicon.svg")

	// An approval without a title: the notification names it the same
	// before and after.
	q := srv.ask(thread, "--approval", "Restart the worker?", "--timeout", "3s")
	tb.deliver(srv.URL, reg, serverPush(t, svc, "/push/late", "interaction", q.Interaction.ID))
	if n := tb.waitNotification(q.Interaction.ID, "Restart the worker?"); len(n.Actions) != 2 || n.Title != "hermes asks for your approval" {
		t.Errorf("the approval's notification is %+v", n)
	}
	tb.deliver(srv.URL, reg, serverPush(t, svc, "/push/late", "interaction_closed", q.Interaction.ID))
	if n := tb.waitNotification(q.Interaction.ID, "Expired: no answer in time"); n.Title != "hermes asks for your approval" || len(n.Actions) != 0 {
		t.Errorf("the expired notification is %+v, want the same title, with no action", n)
	}
}

// TestDroppedApprovalFromTheNotification: retention dropped the approval
// before the person pressed Approve on its notification (its closing push
// not there yet): the notification says it is gone, and offers nothing.
func TestDroppedApprovalFromTheNotification(t *testing.T) {
	srv, svc := startPushServer(t, "--retention-messages", "3")
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "phone"))
	thread := threadOf(tb.notifyOn(srv.URL, "Ship it when it is green."))
	reg := tb.registration(srv.URL)
	tb.open(srv.URL + "favicon.svg")

	ix, _ := tb.notifyApproval(srv, svc, srv.URL, reg, "/push/phone", thread, "Deploy build 9?", "deploy")
	for i := range 3 {
		srv.reply(thread, fmt.Sprintf("later %d", i)) // the approval is dropped
	}
	inWorker[bool](tb, srv.URL+"sw.js", clickJS(ix, "approve", 0))
	if n := tb.waitNotification(ix, "Not sent: this request is no longer in the conversation."); len(n.Actions) != 0 {
		t.Errorf("the notification of a dropped approval is %+v, want no action", n)
	}
}

// TestFileOnlyReplyNotified: hermes's reply that is only a file says
// so in its notification (its name), not an empty body.
func TestFileOnlyReplyNotified(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "files"))
	thread := threadOf(tb.notifyOn(srv.URL, "Send me the log."))
	reg := tb.registration(srv.URL)
	tb.open(srv.URL + "favicon.svg")

	log := filepath.Join(t.TempDir(), "build.log")
	if err := os.WriteFile(log, []byte("ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.cli("reply", "--data", srv.Data, thread, "", "--attach", log)
	tb.deliver(srv.URL, reg, serverPush(t, svc, "/push/files", "reply", ""))
	if n := tb.waitNotification("thread:"+thread, "📎 build.log"); n.Title != "hermes wrote" {
		t.Errorf("the file's notification is %+v", n)
	}
}

// TestNoNotificationOverTheThreadsFocusedPage: a push for the thread a
// focused page shows is not shown (the page shows it already); one for
// another thread is.
func TestNoNotificationOverTheThreadsFocusedPage(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "focus"))
	tb.do(soon, "a focused page", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true})
		return chromedp.Void{}, err
	})
	token := tb.notifyOn(srv.URL, "Anything new?")
	thread := threadOf(token)
	reg := tb.registration(srv.URL)

	srv.reply(thread, "Build 412 is green.")
	tb.waitShown(soon, "Build 412 is green.")
	// The server's push, as it sent it; and the same for another thread.
	mine := serverPush(t, svc, "/push/focus", "reply", "")
	var p map[string]any
	if err := json.Unmarshal(mine, &p); err != nil || p["thread"] != thread {
		t.Fatalf("the reply's push %s names thread %v, want %s", mine, p["thread"], thread)
	}
	other := strings.Repeat("0f", 8)
	p["thread"] = other
	theirs, _ := json.Marshal(p)
	tb.deliver(srv.URL, reg, mine)
	tb.deliver(srv.URL, reg, theirs)
	tb.waitNotification("thread:"+other, "Build 412 is green.")
	for _, n := range tb.notifications() {
		if n.Tag == "thread:"+thread {
			t.Errorf("a notification over the focused page of its thread: %+v", n)
		}
	}
}

// TestParticipantNotified: on the participant page the switch subscribes
// with the share link's token (Authorization: Bearer), which the worker
// keeps; hermes's reply reaches the participant redacted, and shows so.
func TestParticipantNotified(t *testing.T) {
	srv, svc := startPushServer(t)
	g := newGate(t, srv)
	token := strings.Repeat("7c", 32)
	thread := threadOf(token)
	post(t, srv.URL, token, "Is staging back?", "operator")
	sam := invite(t, g.URL, token, map[string]any{"name": "Sam", "role": "viewer"})

	tb := newWindow(t)
	tb.allowNotifications(g.URL)
	tb.pushStub(svc.Subscribe(t, "sam"))
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	tb.open(sam.Link)
	tb.waitJS(live, "Sam's page", `document.getElementById("me").textContent === "Sam · viewer"`)
	tb.waitState(live, "ws")
	tb.waitJS(soon, "the header on one row, in the phone's width", headerFits)
	tb.click("#notify")
	tb.waitJS(soon, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	_, heads := g.requests()
	if !slices.Contains(heads, "Authorization: Bearer for POST /api/chat/push") {
		t.Errorf("the subscription was not sent with the share token: %q", heads)
	}
	id := eval[string](tb, `new Promise((resolve) => { const r = indexedDB.open("chatrelay-push", 1);
		r.onsuccess = () => { const g = r.result.transaction("threads").objectStore("threads").get(`+js(thread)+`); g.onsuccess = () => resolve(g.result?.push ?? ""); }; })`)
	if got, want := tb.storedCredential(thread), "bearer "+sam.Token+" "+id; got != want || id == "" {
		t.Errorf("IndexedDB holds %q for the worker, want %q", got, want)
	}
	reg := tb.registration(g.URL)

	tb.open(g.URL + "favicon.svg")
	srv.reply(thread, "Yes. The staging password=hunter2 works again.")
	tb.deliver(g.URL, reg, serverPush(t, svc, "/push/sam", "reply", ""))
	n := tb.waitNotification("thread:"+thread, "Yes. The staging password=[redacted]")
	if n.Title != "hermes wrote" || len(n.Actions) != 0 {
		t.Errorf("the reply's notification is %+v", n)
	}
}

// TestNewConversationEndsItsNotifications: the owner's page that starts
// a new conversation forgets the old one's token, so it stops notifying
// about it: the old subscription is deleted on the server, its
// credential goes from IndexedDB (else the worker would keep answering
// with a token the page dropped), the browser's subscription ends (no
// thread uses it), and the switch is off for the new conversation.
func TestNewConversationEndsItsNotifications(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "old"))
	old := tb.notifyOn(srv.URL, "the old conversation")
	if n := len(subscriptions(t, srv.URL, old)); n != 1 {
		t.Fatalf("the server holds %d subscriptions, want 1", n)
	}

	confirmed := tb.acceptDialog()
	tb.click("#new")
	select {
	case <-confirmed:
	case <-time.After(soon):
		t.Fatal("no confirmation asked")
	}
	tb.waitJS(soon, "the old conversation to go", `document.querySelectorAll("#log li").length === 0`)
	waitFor(t, soon, "the old subscription deleted", func() bool { return len(subscriptions(t, srv.URL, old)) == 0 })
	tb.waitJS(soon, "the browser's subscription ended", `window.__push.includes("unsubscribe")`)
	if got := tb.storedCredential(threadOf(old)); got != "" {
		t.Errorf("IndexedDB still holds the old conversation's credential: %q", got)
	}
	if state, _ := tb.switchState(); state != "off" {
		t.Errorf("the switch is %q in the new conversation, want off", state)
	}
}

// TestNotifySwitchUnderPrefix: under --prefix the page registers
// <prefix>/sw.js with the prefix as its scope, and subscribes through the
// prefix's API.
func TestNotifySwitchUnderPrefix(t *testing.T) {
	svc := newPushService(t)
	srv := startServerEnv(t, trustPushService(t, svc), "--push-allow-host", "127.0.0.1", "--prefix", "/spaces/newos4")
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "prefix"))
	tb.notifyOn(srv.URL, "under a prefix")
	tb.registration(srv.URL) // http://127.0.0.1:PORT/spaces/newos4/
	if got := eval[string](tb, `navigator.serviceWorker.getRegistration().then((r) => r.active.scriptURL)`); got != srv.URL+"sw.js" {
		t.Errorf("the worker is %s, want %ssw.js", got, srv.URL)
	}
	if n := len(subscriptions(t, srv.URL, tb.token())); n != 1 {
		t.Errorf("the server holds %d subscriptions, want 1", n)
	}
}

// TestNotifySwitchScreenshot draws the switch on, at a phone's width, with
// hermes's approval waiting, for the README.
func TestNotifySwitchScreenshot(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	tb.pushStub(svc.Subscribe(t, "shot"))
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	token := tb.notifyOn(srv.URL, "Deploy build 412 when it is green; I am on my phone.")
	thread := threadOf(token)
	q := srv.ask(thread, "--approval", "Deploy build 412 to production: 3 services, about 4 minutes.", "--title", "deploy", "--timeout", "15m")
	tb.waitIx(soon, q.Interaction.ID, "pending")
	tb.waitJS(soon, "the header on one row and the page at the phone's width", headerFits)
	eval[bool](tb, `(document.activeElement.blur(), true)`)
	png := screenshot(tb)
	dir := t.ArtifactDir()
	if err := os.WriteFile(filepath.Join(dir, "notify.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(filepath.Join("..", "docs", "notify.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The worker script is served from the prefix root, so its scope is the
// whole page (/ and /p) with no Service-Worker-Allowed header; and with
// Cache-Control: no-cache, so a new binary's worker is picked up at once.
func TestWorkerScriptServed(t *testing.T) {
	srv := startServer(t, "--prefix", "/spaces/newos4")
	resp, err := http.Get(srv.URL + "sw.js")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") ||
		resp.Header.Get("Cache-Control") != "no-cache" || !strings.Contains(string(body), `addEventListener("notificationclick"`) {
		t.Errorf("GET %ssw.js: %d %q %q", srv.URL, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
	}
	if strings.Contains(string(body), `addEventListener("fetch"`) {
		t.Error("the worker has a fetch handler: it must not stand between the page and the API")
	}
}

// startPushServer runs chatrelay with push on (the default) and a push
// service for it: internal/pushtest's, on loopback (allowed with
// --push-allow-host) with a certificate the server trusts (SSL_CERT_FILE).
// notifyOn opens url, starts the conversation with text, turns the page's
// "Notify me" switch on and waits until it is; it returns the page's
// token.
func (tb *tab) notifyOn(url, text string) string {
	tb.open(url)
	tb.waitState(live, "ws")
	tb.write(text)
	tb.waitShown(soon, text)
	token := tb.token()
	tb.click("#notify")
	tb.waitJS(soon, "the switch on", `document.getElementById("notify").dataset.state === "on"`)
	return token
}

// newPushService starts a push service on loopback (on a port of -ports,
// when given).
func newPushService(t *testing.T) *pushtest.Service {
	t.Helper()
	if portRange[0] == 0 {
		return pushtest.NewService(t)
	}
	l, err := net.Listen("tcp", loopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return pushtest.NewServiceOn(t, l)
}

func startPushServer(t *testing.T, args ...string) (*server, *pushtest.Service) {
	t.Helper()
	svc := newPushService(t)
	return startServerEnv(t, trustPushService(t, svc), append([]string{"--push-allow-host", "127.0.0.1"}, args...)...), svc
}

// trustPushService is the environment that has the server trust svc's
// certificate (and no other).
func trustPushService(t *testing.T, svc *pushtest.Service) []string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "push-service.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: svc.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"SSL_CERT_FILE=" + ca}
}

// headerFits is true when the page fits the screen's width and its
// header is one row, every part of it on the screen.
const headerFits = `(() => {
	const kids = [...document.querySelector("header.bar").children].filter(e => e.getBoundingClientRect().width > 0);
	const first = kids[0].getBoundingClientRect();
	return document.documentElement.scrollWidth <= innerWidth &&
		kids.every(k => { const r = k.getBoundingClientRect(); return r.top < first.bottom && r.bottom > first.top && r.right <= innerWidth; });
})()`

// respond answers an approval as the owner, through the API.
func respond(t *testing.T, base, token, ix, decision string) {
	t.Helper()
	if status, raw := callAPI(t, http.MethodPost, base+"api/chat/respond", "X-Chat-Token", token, map[string]string{"interaction_id": ix, "decision": decision}); status != http.StatusOK {
		t.Fatalf("respond: %d %s", status, raw)
	}
}

// TestDevicePageKeepsTheOwnersNotifications: device links opened in the
// browser that owns a conversation with notifications on (the person tries
// a link, or uses both pages on one computer), one of that conversation and
// one of another, leave the owner's notifications on: the owner's page,
// loaded again, shows the switch on, the server still holds the
// subscription and IndexedDB the owner's credential. Before, a device's
// page took the owner's record for one of "a conversation this browser no
// longer holds" and deleted it, and the subscription on the server with it.
func TestDevicePageKeepsTheOwnersNotifications(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	sub := svc.Subscribe(t, "owner") // the browser's one subscription, in every tab
	tb.pushStub(sub)
	token := tb.notifyOn(srv.URL, "notify me on this computer")
	thread := threadOf(token)
	if n := len(subscriptions(t, srv.URL, token)); n != 1 {
		t.Fatalf("the server holds %d subscriptions, want 1", n)
	}
	other := strings.Repeat("7e", 32) // a conversation of the person's other browser
	post(t, srv.URL, other, "my other conversation", "operator")
	for i, c := range []struct{ token, first string }{
		{token, "notify me on this computer"},
		{other, "my other conversation"},
	} {
		status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", c.token, map[string]string{"name": "Laptop"})
		var made struct{ Link string }
		if json.Unmarshal(raw, &made); status != http.StatusCreated || made.Link == "" {
			t.Fatalf("make a device: %d %s", status, raw)
		}
		dev := tb.sibling()
		dev.pushStub(sub)
		if i > 0 {
			// The browser keeps the first device: the person is asked
			// before the second replaces it, and says yes.
			dev.answerDialog(true)
		}
		dev.open(made.Link)
		dev.waitState(live, "ws")
		dev.waitShown(soon, c.first)
	}

	tb.open(srv.URL)
	tb.waitShown(soon, "notify me on this computer")
	tb.waitJS(soon, "the owner's switch still on", `document.getElementById("notify").dataset.state === "on"`)
	if n := len(subscriptions(t, srv.URL, token)); n != 1 {
		t.Errorf("the server holds %d subscriptions once the devices' pages opened, want the owner's", n)
	}
	if got := tb.storedCredential(thread); !strings.HasPrefix(got, "owner "+token+" ") {
		t.Errorf("IndexedDB holds %q for the thread, want the owner's credential", got)
	}
}

// TestParticipantPageKeepsTheOwnersNotifications: a share link of a
// conversation opened in the browser that owns it with notifications on
// (the owner tries the link before sending it), whose Notify me is
// pressed, leaves the owner's notifications as they were: the switch says
// this browser gets them already as the owner, the server still holds the
// owner's subscription for both events, IndexedDB the owner's credential,
// and the owner's page, loaded again, shows the switch on; a device link's
// page of the conversation, pressed the same way, leaves them too. Before, the
// participant's subscription took over the owner's (a browser has one
// endpoint, which the server holds once per thread): the owner's list was
// empty, the worker kept the share token, and an approval reached the
// browser no more.
func TestParticipantPageKeepsTheOwnersNotifications(t *testing.T) {
	srv, svc := startPushServer(t)
	tb := newWindow(t)
	tb.allowNotifications(srv.URL)
	sub := svc.Subscribe(t, "owner")
	tb.pushStub(sub)
	token := tb.notifyOn(srv.URL, "I try the link before I send it")
	thread := threadOf(token)
	before := tb.storedCredential(thread)
	sam := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "commenter"})

	p := tb.sibling()
	p.pushStub(sub)
	p.open(sam.Link)
	p.waitState(live, "ws")
	p.click("#notify")
	p.waitJS(soon, "the switch settled", `!document.getElementById("notify-note").hidden || document.getElementById("notify").dataset.state === "on"`)
	if state, note := p.switchState(); state != "off" || !strings.Contains(note, "as its owner") {
		t.Errorf("the participant's switch is %s, saying %q; want off, saying this browser gets them as the owner", state, note)
	}
	subs := subscriptions(t, srv.URL, token)
	if len(subs) != 1 || subs[0].Endpoint != sub.Endpoint {
		t.Fatalf("the owner's subscriptions are %+v, want the one to %s", subs, sub.Endpoint)
	}
	if got := tb.storedCredential(thread); got != before {
		t.Errorf("IndexedDB holds %q for the thread, want the owner's %q", got, before)
	}
	// A device link of the conversation, opened in the same browser, leaves
	// them be too.
	status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", token, map[string]string{"name": "Laptop"})
	var made struct{ Link string }
	if json.Unmarshal(raw, &made); status != http.StatusCreated {
		t.Fatalf("make a device: %d %s", status, raw)
	}
	dev := tb.sibling()
	dev.pushStub(sub)
	dev.open(made.Link)
	dev.waitState(live, "ws")
	dev.click("#notify")
	dev.waitJS(soon, "the switch settled", `!document.getElementById("notify-note").hidden || document.getElementById("notify").dataset.state === "on"`)
	if state, note := dev.switchState(); state != "off" || !strings.Contains(note, "as its owner") {
		t.Errorf("the device's switch is %s, saying %q; want off, saying this browser gets them as the owner", state, note)
	}
	if got := tb.storedCredential(thread); got != before {
		t.Errorf("after the device's page, IndexedDB holds %q for the thread, want the owner's %q", got, before)
	}

	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tb.waitJS(soon, "the owner's switch still on", `document.getElementById("notify").dataset.state === "on"`)

	// An approval still reaches the browser, and its Approve is the owner's.
	reg := tb.registration(srv.URL)
	tb.open(srv.URL + "favicon.svg")
	ix, _ := tb.notifyApproval(srv, svc, srv.URL, reg, "/push/owner", thread, "Deploy build 7?", "deploy")
	inWorker[bool](tb, srv.URL+"sw.js", clickJS(ix, "approve", 0))
	waitFor(t, soon, "the approval stored", func() bool { return srv.check(thread, ix).State == "approved" })
	if got := srv.check(thread, ix); got.AnsweredBy != "operator" {
		t.Errorf("approved by %q, want operator (the owner's credential)", got.AnsweredBy)
	}
}
