package web_test

// The owner on several devices (contract Part 5), driven in real Chromium
// against a real chatrelay process: the owner's page makes a device link
// ("Open on another device": the link, Copy, its QR code), a phone opens
// it at 390×844 and acts as the owner (answers an approval, posts as
// operator), and the devices panel lists and revokes devices.

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

var deviceLinkForm = regexp.MustCompile(`^http://127\.0\.0\.1:\d+/d#chd_[A-Za-z0-9_-]{43}$`)

// makeDeviceLink makes a device link from the owner's devices panel and
// returns it, leaving the panel open.
func (tb *tab) makeDeviceLink(name, expires string) string {
	tb.t.Helper()
	if !eval[bool](tb, `document.getElementById("devices").open`) {
		tb.click("#devices-open")
	}
	tb.waitJS(soon, "the devices panel", `document.getElementById("devices").open && document.activeElement.id === "device-name"`)
	tb.do(5*time.Second, "name the device", chromedp.SendKeys(chromedp.CSS("#device-name"), name))
	tb.do(5*time.Second, "choose how long", chromedp.SetValue(chromedp.CSS("#device-expiry"), expires))
	tb.click("#device-send")
	tb.waitJS(soon, "the device link shown", `!document.getElementById("device-made").hidden && document.getElementById("device-link").value !== ""`)
	return eval[string](tb, `document.getElementById("device-link").value`)
}

// onOneRow reports whether the visible children of the page's header are
// on one row.
const onOneRow = `(() => {
	const kids = [...document.querySelector("header.bar").children].filter(e => e.getBoundingClientRect().width > 0);
	const first = kids[0].getBoundingClientRect();
	return kids.every(k => { const r = k.getBoundingClientRect(); return r.top < first.bottom && r.bottom > first.top; });
})()`

// The owner makes a device link from "Open on another device": the panel
// shows the link with Copy and its QR code. A phone (390×844) opens it:
// the token leaves the address bar and the history at once, is kept in
// the phone's localStorage, and is sent only as a Bearer header; the phone
// shows the conversation as its owner, answers hermes's approval and
// posts as the operator; loaded again, it still opens the conversation.
func TestDeviceLinkOpensAsTheOwner(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	owner, token := startConversation(t, g.URL, "I will approve from my phone.")
	thread := threadOf(token)

	link := owner.makeDeviceLink("Phone", "2592000")
	if !strings.HasPrefix(link, g.URL+"d#chd_") || !deviceLinkForm.MatchString(link) {
		t.Fatalf("the panel shows the link %q, want %sd#chd_…", link, g.URL)
	}
	if got := owner.text("device-made-title"); !strings.HasPrefix(got, "Link for Phone, until ") {
		t.Errorf("the link is titled %q", got)
	}
	qr := eval[struct {
		Src, Alt string
		Width    int
	}](owner, `(() => { const i = document.getElementById("device-qr"); return { src: i.src, alt: i.alt, width: i.naturalWidth } })()`)
	if qr.Alt != "QR code of the link for Phone" || qr.Width == 0 {
		t.Errorf("the QR image: alt %q, %d px wide", qr.Alt, qr.Width)
	}
	checkQR(t, qr.Src, link)
	grantClipboard(owner, g.URL)
	owner.click("#device-copy")
	owner.waitJS(soon, "the copy confirmed", `document.getElementById("device-copied").textContent === "Copied."`)
	if got := eval[string](owner, `navigator.clipboard.readText()`); got != link {
		t.Errorf("the clipboard holds %q, want the link", got)
	}
	owner.click("#device-done")
	owner.click("#devices-close")
	// The owner's bar stays one row, within the screen, at any width.
	for _, w := range []int64{390, 500, 640, 700, 896, 900, 1280} {
		owner.do(soon, "a screen's width", chromedp.EmulateViewport(w, 800))
		owner.waitJS(soon, "the header on one row within the screen", onOneRow+` && document.querySelector("header.bar").scrollWidth <= innerWidth`)
	}
	if got := eval[string](owner, `document.getElementById("devices-open").innerText`); got != "Open on another device" {
		t.Errorf("the bar's button reads %q at 1280 px, want Open on another device", got)
	}

	// The phone opens the link.
	phone := newWindow(t)
	phone.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	phone.open(link)
	phone.waitState(live, "ws")
	if u := eval[string](phone, `location.href`); u != g.URL+"d" {
		t.Errorf("the address bar shows %q after the page loaded, want %sd (no fragment)", u, g.URL)
	}
	hist, err := chromedp.Call(phone.ctx, page.GetNavigationHistory, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist.Entries {
		if strings.Contains(e.URL, "chd_") {
			t.Errorf("the tab's history holds the token: an entry is %q", e.URL)
		}
	}
	_, devTok, _ := strings.Cut(link, "#")
	if v := eval[string](phone, `localStorage.getItem("chatrelay.device") ?? "none"`); v != devTok {
		t.Errorf("the phone keeps %q, want the device's token in localStorage", v)
	}
	if v := eval[string](phone, `localStorage.getItem("chatrelay.token") ?? "none"`); v != "none" {
		t.Errorf("the device page made an owner's token of its own: %q", v)
	}
	phone.waitShown(soon, "I will approve from my phone.")
	if got := phone.shownBy("I will approve from my phone."); got.Author != "you" || !got.Mine {
		t.Errorf("the phone sees the owner's message as %+v, want it as its own", got)
	}
	phone.waitJS(soon, "the header on one row at a phone's width", onOneRow)
	if phone.visible("#new") {
		t.Errorf("a device offers New conversation")
	}
	if !phone.visible("#people-open") || !phone.visible("#devices-open") {
		t.Errorf("a device's page must offer People and its devices%s", phone.dump())
	}

	// hermes asks; the phone approves.
	q := srv.ask(thread, "--approval", "Deploy build 412 to production?", "--title", "deploy", "--timeout", "15m")
	ix := q.Interaction.ID
	phone.waitIx(soon, ix, "pending")
	phone.click(ixSel(ix) + ` button[data-decision="approve"]`)
	phone.waitIx(soon, ix, "approved")
	owner.waitIx(soon, ix, "approved")
	if st := srv.check(thread, ix); st.State != "approved" || st.AnsweredBy != "operator" {
		t.Errorf("chatrelay check reads %+v, want approved by the operator", st)
	}
	// The phone writes: it is the owner's message, on both pages.
	phone.write("Approved from the train.")
	phone.waitShown(soon, "Approved from the train.")
	owner.waitShown(soon, "Approved from the train.")
	if got := owner.shownBy("Approved from the train."); got.Author != "you" || !got.Mine || got.Badge != "" {
		t.Errorf("the owner sees the phone's message as %+v, want it as its own", got)
	}
	msgs := poll2(t, srv.URL, token)
	if last := msgs[len(msgs)-1]; last.Text != "Approved from the train." || last.Author != "operator" {
		t.Errorf("the thread's last message is %+v, want the phone's, by operator", last)
	}

	// A device is meant to stay: /d opened again opens the conversation.
	phone.open(g.URL + "d")
	phone.waitState(live, "ws")
	phone.waitShown(soon, "Approved from the train.")

	// The token travelled only as a Bearer header.
	lines, heads := g.requests()
	for _, l := range append(lines, heads...) {
		if strings.Contains(l, "chd_") {
			t.Errorf("a request carried the device token outside the Authorization header: %q", l)
		}
	}
	if !slices.Contains(heads, "Authorization: Bearer for POST /api/chat/ticket") || !slices.Contains(heads, "Authorization: Bearer for POST /api/chat/respond") {
		t.Errorf("the device page never sent its token as a Bearer header: %q", heads)
	}
	if strings.Contains(srv.logText(), "chd_") {
		t.Errorf("the server's log holds a device token:\n%s", srv.logText())
	}
}

// The devices panel lists the devices with Revoke. A phone's own panel
// (390×844) marks "this device" and offers no link to make (only the
// conversation's own browser makes devices); the owner revokes the phone
// from its panel, and the phone's page says so at once, and for good.
func TestDevicesPanel(t *testing.T) {
	srv := startServer(t)
	owner, token := startConversation(t, srv.URL, "Two devices, then one.")
	owner.waitJS(soon, "Open on another device offered", `!document.getElementById("devices-open").hidden`)
	tablet := owner.makeDeviceLink("Tablet", "86400")
	owner.click("#device-done")
	eval[bool](owner, `(document.getElementById("device-name").value = "", true)`)
	link := owner.makeDeviceLink("Phone", "7776000")
	owner.click("#device-done")
	owner.waitJS(soon, "both devices listed", `document.querySelectorAll("#devices-list li[data-state=active] button[data-revoke]").length === 2`)
	rows := eval[[]string](owner, `[...document.querySelectorAll("#devices-list li")].map((li) => li.textContent)`)
	if len(rows) != 2 || !strings.HasPrefix(rows[0], "Phone") || !strings.HasPrefix(rows[1], "Tablet") || !strings.Contains(rows[0], "not opened yet") {
		t.Errorf("the devices read %q, want Phone then Tablet, not opened yet", rows)
	}
	if got := owner.text("devices-status"); got != "2 active devices, 2 in all." {
		t.Errorf("the panel says %q", got)
	}
	owner.click("#devices-close")

	phone := newWindow(t)
	phone.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	phone.open(link)
	phone.waitState(live, "ws")
	phone.click("#devices-open")
	phone.waitJS(soon, "the phone's panel", `document.getElementById("devices").open && document.querySelectorAll("#devices-list li").length === 2`)
	if phone.visible("#device-form") {
		t.Errorf("a device's panel offers to make a device link")
	}
	mine := eval[string](phone, `document.querySelector("#devices-list li .this-device")?.closest("li").querySelector(".p-name").textContent ?? ""`)
	if mine != "Phone" {
		t.Errorf("the phone's panel marks %q as this device, want Phone", mine)
	}
	if !strings.Contains(eval[string](phone, `document.querySelector("#devices-list li").textContent`), "last seen ") {
		t.Errorf("the phone's row does not say when it was last seen")
	}
	fits := eval[bool](phone, `(() => { const r = document.getElementById("devices").getBoundingClientRect();
		return r.left >= 0 && r.right <= innerWidth && document.getElementById("devices").scrollWidth <= document.getElementById("devices").clientWidth })()`)
	if !fits {
		t.Errorf("the devices panel does not fit a phone's width%s", phone.dump())
	}
	phone.click("#devices-close")

	// The owner revokes the phone.
	phoneID := eval[string](owner, `(() => { document.getElementById("devices-open").click();
		return [...document.querySelectorAll("#devices-list li")].find((li) => li.textContent.startsWith("Phone")).dataset.id })()`)
	owner.waitJS(soon, "the panel open", `document.getElementById("devices").open`)
	// The panel lists the devices again as it opens: the click waits for
	// that list (the phone has been seen since the last one), else it
	// could land on a row just replaced.
	owner.waitJS(soon, "the list read again", `[...document.querySelectorAll("#devices-list li")].some((li) => li.textContent.startsWith("Phone") && li.textContent.includes("last seen"))`)
	asked := owner.acceptDialog()
	owner.click(`#devices-list button[data-revoke="` + phoneID + `"]`)
	select {
	case words := <-asked:
		if !strings.HasPrefix(words, "Revoke the device Phone?") {
			t.Errorf("the confirmation reads %q", words)
		}
	case <-time.After(soon):
		t.Fatal("no confirmation asked before revoking")
	}
	const revoked = "This device was revoked: it no longer opens this conversation. Open a new device link from the browser that started it."
	phone.waitJS(soon, "the phone says it was revoked", `document.getElementById("ended-text").textContent === `+js(revoked))
	if phone.visible("#composer") || phone.visible("#conversation") || phone.visible("#devices-open") {
		t.Errorf("a revoked device still shows the conversation%s", phone.dump())
	}
	owner.waitJS(soon, "Phone revoked in the list", `(() => { const li = document.querySelector(`+js(`#devices-list li[data-id="`+phoneID+`"]`)+`);
		return li && li.dataset.state === "revoked" && !li.querySelector("button") })()`)
	if got := owner.text("devices-status"); got != "Phone is revoked." {
		t.Errorf("the panel says %q after the revoke", got)
	}
	// Loaded again, the phone says the same; the tablet's link still works.
	phone.open(srv.URL + "d")
	phone.waitJS(soon, "the revoked sentence after a reload", `document.getElementById("ended-text").textContent === `+js(revoked))
	_, tabTok, _ := strings.Cut(tablet, "#")
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"api/chat/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+tabTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var who struct {
		Role   string
		Thread string
		Device struct{ Name string }
	}
	json.NewDecoder(resp.Body).Decode(&who)
	if resp.StatusCode != 200 || who.Role != "owner" || who.Device.Name != "Tablet" || who.Thread != threadOf(token) {
		t.Errorf("the tablet's whoami: %d %+v", resp.StatusCode, who)
	}
}

// TestDeviceLinkAsksBeforeReplacing: a device link opened in a browser
// that keeps another device already replaces it only once the person says
// yes, as a claim link asks. Any page on the web can open a link: here a
// page of another site sends the phone to a device link of its maker's own
// conversation. Before, /d adopted it at once: the phone forgot its
// owner's device for good, unasked, and showed (and posted the person's
// next words to) the link maker's conversation. Said no, the page keeps
// its own device and conversation and says the link was not opened; said
// yes, it opens the link's.
func TestDeviceLinkAsksBeforeReplacing(t *testing.T) {
	srv := startServer(t)
	_, token := startConversation(t, srv.URL, "my own conversation")
	makeDevice := func(owner string) string {
		t.Helper()
		status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", owner, map[string]string{"name": "Phone"})
		var made struct{ Token string }
		if json.Unmarshal(raw, &made); status != http.StatusCreated {
			t.Fatalf("make a device: %d %s", status, raw)
		}
		return made.Token
	}
	mine := makeDevice(token)
	theirs := strings.Repeat("5a", 32) // the link maker's own conversation
	post(t, srv.URL, theirs, "the link maker's conversation", "operator")
	hostile := makeDevice(theirs)
	site := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, `<!doctype html><title>a prize</title><script>location = `+js(srv.URL+"d#"+hostile)+`</script>`)
	}))

	phone := newWindow(t)
	phone.open(srv.URL + "d#" + mine)
	phone.waitShown(soon, "my own conversation")

	// Sent to the link by the other site, and declined: nothing changes.
	asked := phone.answerDialog(false)
	phone.open(site.URL + "/")
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "forget") {
			t.Errorf("the confirmation reads %q", msg)
		}
	case <-time.After(soon):
		t.Fatalf("no confirmation asked before replacing the device%s", phone.dump())
	}
	phone.waitJS(soon, "the notice that the link was not opened", `document.getElementById("notice-text").textContent.includes("The link was not opened")`)
	phone.waitShown(soon, "my own conversation")
	if got := eval[string](phone, `localStorage.getItem("chatrelay.device")`); got != mine {
		t.Fatalf("declined, the phone keeps device token %.12s…, want its own %.12s…", got, mine)
	}
	if u := eval[string](phone, `location.href`); strings.Contains(u, "#") {
		t.Errorf("the address bar still holds the link's fragment: %s", u)
	}
	if got := eval[string](phone, `String(window.chatrelayDevice)`); got != "undefined" {
		t.Errorf("the page keeps the declined token in window.chatrelayDevice")
	}
	phone.open(srv.URL + "d")
	phone.waitShown(soon, "my own conversation")

	// Opened again, and accepted: the link's conversation is the phone's.
	asked = phone.answerDialog(true)
	phone.open(srv.URL + "d#" + hostile)
	select {
	case <-asked:
	case <-time.After(soon):
		t.Fatal("no confirmation asked the second time")
	}
	phone.waitShown(soon, "the link maker's conversation")
	if got := eval[string](phone, `localStorage.getItem("chatrelay.device")`); got != hostile {
		t.Fatalf("accepted, the phone keeps device token %.12s…, want the link's %.12s…", got, hostile)
	}
}
