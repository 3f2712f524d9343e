package web_test

// The page, driven in real Chromium against a real chatrelay process: the
// nine checks of the browser page's issue, one test each.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Pacific/Chatham, for the local-time check

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// soon is how long a "within a second" delivery may take here before a
// test fails: generous, since a loaded CI machine runs the race detector
// beside Chromium. The measured delays are logged.
const soon = 5 * time.Second

// live is how long a page may take to connect.
const live = 15 * time.Second

// 1. Open the page, send a message: it shows, and the poll API returns it.
func TestSendShowsAndPollReturnsIt(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	// A time zone 12:45 or 13:45 from UTC shows whether times are local.
	tb.do(5*time.Second, "set the time zone", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Pacific/Chatham"})
		return chromedp.Void{}, err
	})
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	if got := eval[string](tb, `document.getElementById("status-text").textContent`); got != "live · WebSocket" {
		t.Errorf("status reads %q, want %q", got, "live · WebSocket")
	}
	// Keyboard only: the composer has focus and a label.
	if got := eval[string](tb, `document.activeElement.id + "|" + document.querySelector("label[for=text]").textContent`); got != "text|Message" {
		t.Errorf("focus and label: %q", got)
	}
	// The message list is a live region, busy only while the history loads.
	tb.waitJS(soon, "the log to settle", `(() => { const l = document.getElementById("log");
		return l.getAttribute("aria-live") === "polite" && !l.hasAttribute("aria-busy") })()`)

	text := "hello <b>hermes</b> & co"
	tb.write(text)
	took := tb.waitShown(soon, text)
	t.Logf("own message shown after %v", took)

	got := tb.shown()
	if len(got) != 1 || got[0].Author != "you" || got[0].Text != text {
		t.Fatalf("page shows %+v", got)
	}
	if n := eval[int](tb, `document.querySelectorAll("#log b").length`); n != 0 {
		t.Errorf("the text was parsed as HTML: %d <b> elements", n)
	}
	if v := eval[string](tb, `document.getElementById("text").value`); v != "" {
		t.Errorf("composer still holds %q after a send", v)
	}
	tb.waitJS(soon, "the waiting state", `!document.getElementById("waiting").hidden`)

	page := poll(t, srv.URL, tb.token())
	if len(page.Messages) != 1 || page.Messages[0].Text != text || page.Messages[0].Author != "operator" || page.Messages[0].ID != got[0].ID {
		t.Fatalf("poll returns %+v, page shows %+v", page.Messages, got)
	}

	// Shift+Enter makes a new line; Enter sends.
	tb.do(5*time.Second, "type", chromedp.SendKeys(chromedp.CSS("#text"), "line one"))
	tb.enter(true)
	tb.write("line two")
	tb.waitShown(soon, "line one\nline two")

	chatham, err := time.LoadLocation("Pacific/Chatham")
	if err != nil {
		t.Fatal(err)
	}
	minute := time.UnixMilli(page.Messages[0].Epoch).In(chatham).Format(":04")
	if !strings.Contains(got[0].Time, minute) {
		t.Errorf("time shown %q, want the reader's local time (…%s in Pacific/Chatham)", got[0].Time, minute)
	}
}

// 2. Two tabs of one token: a message sent in one appears in the other
// within a second, once.
func TestTwoTabs(t *testing.T) {
	srv := startServer(t)
	a := newWindow(t)
	a.open(srv.URL)
	a.waitState(live, "ws")
	b := a.sibling()
	b.open(srv.URL)
	b.waitState(live, "ws")
	if a.token() != b.token() {
		t.Fatal("two tabs of one profile have different tokens")
	}

	b.write("from tab B")
	took := a.waitShown(soon, "from tab B")
	t.Logf("tab A shows tab B's message after %v", took)
	a.write("from tab A")
	took = b.waitShown(soon, "from tab A")
	t.Logf("tab B shows tab A's message after %v", took)

	// Each message that came later arrived, so had a copy of an earlier
	// one been coming, it would be here by now.
	want := poll(t, srv.URL, a.token()).Messages
	checkOnce(t, a, want)
	checkOnce(t, b, want)
}

// 3. A `chatrelay reply` from another process appears in the tab within a
// second and the waiting state clears.
func TestReplyFromHostCLI(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tb.write("is anyone there?")
	tb.waitShown(soon, "is anyone there?")
	tb.waitJS(soon, "the waiting state", `!document.getElementById("waiting").hidden`)

	start := time.Now()
	srv.reply(threadOf(tb.token()), "hermes here")
	tb.waitShown(soon, "hermes here")
	t.Logf("CLI reply shown %v after the CLI started", time.Since(start))
	tb.waitJS(soon, "the waiting state to clear", `document.getElementById("waiting").hidden`)

	got := tb.shown()
	if len(got) != 2 || got[1].Author != "hermes" || got[1].Text != "hermes here" {
		t.Fatalf("page shows %+v", got)
	}
}

// 4. WebSocket refused → the tab is live over SSE; both refused → it polls
// and still receives (new messages and changes of earlier ones); when they
// come back, it climbs back.
func TestLadder(t *testing.T) {
	srv := startServer(t, "--ticket-ttl", "2s")
	g := newGate(t, srv)
	g.refuse(true, false)

	tb := newWindow(t)
	tb.open(g.URL)
	tb.waitState(live, "sse")
	thread := threadOf(tb.token())
	tb.write("hello") // the host CLI answers existing threads only
	tb.waitShown(soon, "hello")
	srv.reply(thread, "over SSE")
	tb.waitShown(soon, "over SSE")
	// A change of an earlier message comes as an update, on every rung.
	first := poll2(t, srv.URL, tb.token())[0].ID
	srv.cli("react", thread, first, "🎉")
	tb.waitJS(soon, "hermes's reaction over SSE", `document.querySelector(`+js(msgSel(first)+` button[data-emoji="🎉"]`)+`).getAttribute("aria-label") === "party, 1"`)

	// The stream drops after its ticket expired: the page gets a new one
	// and resumes from the last message it showed.
	waitExpired(t, srv.URL, ticket(t, srv.URL, tb.token()))
	g.cut()
	srv.reply(thread, "after the ticket expired")
	tb.waitShown(soon, "after the ticket expired")
	tb.waitState(live, "sse")

	g.refuse(true, true)
	took := tb.waitState(live, "polling")
	t.Logf("polling %v after both push routes were refused", took)
	srv.reply(thread, "while polling")
	tb.waitShown(soon, "while polling")
	q := srv.ask(thread, "--approval", "Go on while polling?")
	tb.waitIx(soon, q.Interaction.ID, "pending")
	srv.cli("cancel", thread, q.Interaction.ID)
	tb.waitIx(soon, q.Interaction.ID, "canceled")
	srv.cli("react", thread, first, "🎉", "--remove")
	tb.waitJS(soon, "hermes's reaction removed while polling", `document.querySelector(`+js(msgSel(first)+` button[data-emoji="🎉"]`)+`).getAttribute("aria-label") === "party"`)
	tb.write("sent while polling")
	tb.waitShown(soon, "sent while polling")

	g.refuse(false, false)
	took = tb.waitState(45*time.Second, "ws")
	t.Logf("back on the WebSocket %v after the routes came back", took)
	srv.reply(thread, "over the WebSocket again")
	tb.waitShown(soon, "over the WebSocket again")

	checkOnce(t, tb, poll(t, srv.URL, tb.token()).Messages)
}

// 5. The server restarts mid-conversation: the tab reconnects and shows
// every message once, in order.
func TestServerRestart(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	thread := threadOf(tb.token())
	tb.write("one")
	tb.waitShown(soon, "one")
	srv.reply(thread, "two")
	tb.waitShown(soon, "two")

	srv.stop()
	tb.waitJS(soon, "the page to notice", `document.getElementById("status").dataset.state !== "ws"`)
	// A send while the server is away keeps the text and offers a retry.
	tb.write("four")
	tb.waitJS(soon, "the network error", `!document.getElementById("retry").hidden &&
		document.getElementById("notice-text").textContent.includes("could not be reached")`)
	if v := eval[string](tb, `document.getElementById("text").value`); v != "four" {
		t.Errorf("composer holds %q after a network failure, want the text kept", v)
	}
	srv.reply(thread, "three, written while the server was down")
	srv.start()
	took := tb.waitState(live, "ws")
	t.Logf("live again %v after the restart", took)
	tb.waitShown(soon, "three, written while the server was down")
	tb.do(5*time.Second, "click Retry", chromedp.Click(chromedp.CSS("#retry")))
	tb.waitShown(soon, "four")
	srv.reply(thread, "five")
	tb.waitShown(soon, "five")

	checkOnce(t, tb, poll(t, srv.URL, tb.token()).Messages)
}

// TestServerRestartBehindAProxy: behind a reverse proxy (nginx, Caddy), a
// server that is restarting does not leave a post unanswered: the proxy
// answers it, 502 with a body of its own. The page says what it says when
// nothing answers (the server could not be reached), offers Retry, and
// Retry stores the message once the server is back. Before, it said "Not
// sent: HTTP 502." with no Retry (found in Firefox behind nginx; the same
// in Chromium).
func TestServerRestartBehindAProxy(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	tb := newWindow(t)
	tb.open(g.URL)
	tb.waitState(live, "ws")
	tb.write("one")
	tb.waitShown(soon, "one")

	srv.stop()
	tb.waitJS(soon, "the page to notice", `document.getElementById("status").dataset.state !== "ws"`)
	tb.write("two, sent while the server was away")
	tb.waitJS(soon, "the post refused", `document.getElementById("notice-text").textContent !== ""`)
	notice := eval[string](tb, `document.getElementById("notice-text").textContent`)
	retry := eval[bool](tb, `!document.getElementById("retry").hidden`)
	if !strings.Contains(notice, "could not be reached") || !retry {
		t.Fatalf("the proxy's 502 shows %q with Retry shown %v, want the server could not be reached, and Retry", notice, retry)
	}
	if v := eval[string](tb, `document.getElementById("text").value`); v != "two, sent while the server was away" {
		t.Errorf("composer holds %q after the proxy's 502, want the text kept", v)
	}
	srv.start()
	tb.waitState(live, "ws")
	tb.do(5*time.Second, "click Retry", chromedp.Click(chromedp.CSS("#retry")))
	tb.waitShown(soon, "two, sent while the server was away")
	checkOnce(t, tb, poll(t, srv.URL, tb.token()).Messages)
}

// 6. 4 001 characters → the error shows and the text stays; a 429 → the
// countdown shows, and the message is sent again only when asked.
func TestComposerLimits(t *testing.T) {
	srv := startServer(t, "--rate-thread", "2", "--rate-window", "5s")
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")

	// The counter counts code points, as the server does: 4 000 emoji fit.
	setText := func(v string) {
		t.Helper()
		eval[bool](tb, `(() => { const e = document.getElementById("text");
			e.value = `+v+`; e.dispatchEvent(new Event("input")); return true })()`)
	}
	setText(`"😀".repeat(4000)`)
	if got := eval[string](tb, `document.getElementById("count").textContent`); got != "4000 / 4000" {
		t.Errorf("counter for 4000 emoji reads %q", got)
	}

	setText(`"x".repeat(4001)`)
	if got := eval[string](tb, `document.getElementById("count").textContent`); got != "4001 / 4000 · 1 too many" {
		t.Errorf("counter for 4001 characters reads %q", got)
	}
	tb.do(5*time.Second, "focus the composer", chromedp.Focus(chromedp.CSS("#text")))
	tb.enter(false)
	tb.waitJS(soon, "the 413 explained", `document.getElementById("notice-text").textContent.includes("text too long (max 4000 chars)")`)
	if n := eval[int](tb, `document.getElementById("text").value.length`); n != 4001 {
		t.Errorf("composer holds %d characters after the 413, want the 4001 written", n)
	}
	if n := len(poll(t, srv.URL, tb.token()).Messages); n != 0 {
		t.Errorf("a text over the limit was stored: %d messages", n)
	}

	setText(`""`)
	tb.write("r1")
	tb.waitShown(soon, "r1")
	tb.write("r2")
	tb.waitShown(soon, "r2")
	tb.write("r3")
	tb.waitJS(soon, "the countdown", `/send again in \d+ s/.test(document.getElementById("notice-text").textContent)`)
	if !eval[bool](tb, `document.getElementById("send").disabled && document.getElementById("text").value === "r3"`) {
		t.Errorf("during the countdown the send button must be disabled and the text kept%s", tb.dump())
	}
	tb.waitJS(10*time.Second, "the countdown to end", `!document.getElementById("send").disabled`)
	if v := eval[string](tb, `document.getElementById("text").value`); v != "r3" {
		t.Errorf("composer holds %q after the countdown, want r3", v)
	}
	if n := len(poll(t, srv.URL, tb.token()).Messages); n != 2 {
		t.Errorf("%d messages stored after the countdown ended: nothing may be sent unasked", n)
	}
	tb.do(5*time.Second, "click Send", chromedp.Click(chromedp.CSS("#send")))
	tb.waitShown(soon, "r3")
}

// 7. Ten tabs of one token stay live and each receives a new message
// within a second. The WebSocket is refused, so they are on SSE, which
// counts against the browser's six connections per origin: the tabs share
// one stream.
func TestTenTabs(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	g.refuse(true, false)
	first := newWindow(t)
	tabs := []*tab{first}
	for range 9 {
		tabs = append(tabs, first.sibling())
	}
	for _, tb := range tabs {
		tb.open(g.URL)
	}
	for _, tb := range tabs {
		tb.waitState(live, "sse")
	}
	token := first.token()

	post(t, srv.URL, token, "to every tab", "agent")
	var worst time.Duration
	for _, tb := range tabs {
		worst = max(worst, tb.waitShown(soon, "to every tab"))
	}
	t.Logf("ten tabs show a new message; the last one after %v", worst)

	tabs[9].write("from the tenth tab")
	for _, tb := range tabs {
		tb.waitShown(soon, "from the tenth tab")
	}
	want := poll(t, srv.URL, token).Messages
	for _, tb := range tabs {
		checkOnce(t, tb, want)
	}
	open, peak := g.counts()
	t.Logf("SSE streams open: %d (at most %d at once)", open, peak)
	if open != 1 || peak > 2 {
		t.Errorf("ten tabs hold %d SSE streams (peak %d), want one shared", open, peak)
	}
}

// 8. A page served from a second local origin that is listed in
// --allowed-origin chats through the client module; one that is not listed
// is refused.
func TestAnotherOrigin(t *testing.T) {
	var chatURL string // set once the server runs
	embed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, embedPage, chatURL)
	})
	listed := newLoopbackServer(t, embed)
	defer listed.Close()
	unlisted := newLoopbackServer(t, embed)
	defer unlisted.Close()
	srv := startServer(t, "--allowed-origin", listed.URL)
	chatURL = srv.URL

	tb := newWindow(t)
	tb.open(listed.URL)
	tb.waitJS(live, "live over the WebSocket", `document.getElementById("state").textContent === "ws"`)
	if got := eval[string](tb, `window.sendIt("from another origin")`); got != "ok" {
		t.Fatalf("send from the listed origin: %s", got)
	}
	tb.waitJS(soon, "the message", `document.getElementById("log").textContent.includes("from another origin")`)
	token := tb.token()
	page := poll(t, srv.URL, token)
	if len(page.Messages) != 1 || page.Messages[0].Text != "from another origin" {
		t.Fatalf("poll returns %+v", page.Messages)
	}
	// SSE and polling cross origins too.
	for _, rung := range []string{"sse", "poll"} {
		got := eval[string](tb, `window.tryOnly(`+js(rung)+`)`)
		if want := map[string]string{"sse": "sse", "poll": "polling"}[rung]; got != want {
			t.Errorf("a client on %s alone from the listed origin ends %q, want %q", rung, got, want)
		}
	}

	other := newWindow(t)
	other.open(unlisted.URL)
	other.waitJS(live, "the client to give up", `document.getElementById("state").textContent === "offline"`)
	if got := eval[string](other, `window.sendIt("must not arrive")`); got != "network" {
		t.Errorf("send from an unlisted origin: %s, want refused (network)", got)
	}
	if n := len(poll(t, srv.URL, other.token()).Messages); n != 0 {
		t.Errorf("an unlisted origin stored %d messages", n)
	}
	// Even with a valid ticket, the WebSocket refuses the unlisted origin.
	tk := ticket(t, srv.URL, other.token())
	got := eval[string](other, `new Promise((resolve) => {
		const u = new URL("api/chat/ws", `+js(srv.URL)+`);
		u.protocol = "ws:";
		u.searchParams.set("ticket", `+js(tk)+`);
		const ws = new WebSocket(u);
		ws.onmessage = () => resolve("frame");
		ws.onclose = () => resolve("closed");
	})`)
	if got != "closed" {
		t.Errorf("WebSocket from an unlisted origin: %s, want closed before any frame", got)
	}
}

// embedPage is another site's page that imports the client module from
// the chatrelay server (%[1]s) and chats through it.
const embedPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>another site</title></head>
<body>
<p id="state"></p>
<ol id="log"></ol>
<script type="module">
import { ChatClient } from "%[1]schat.js";

const chat = new ChatClient(); // the server is where chat.js came from
chat.addEventListener("status", (e) => (document.getElementById("state").textContent = e.detail.state));
chat.addEventListener("message", (e) => {
  const li = document.createElement("li");
  li.textContent = e.detail.message.text;
  document.getElementById("log").append(li);
});
chat.start();

window.sendIt = (text) => chat.send(text).then(() => "ok", (e) => e.code);

// tryOnly runs a second client on one rung of the ladder until it
// settles, and tells where it ended.
window.tryOnly = (rung) => new Promise((resolve) => {
  const c = new ChatClient({ transports: [rung], share: false, storageKey: "chatrelay.token" });
  c.addEventListener("status", (e) => {
    if (e.detail.state === "connecting") return;
    resolve(e.detail.state);
    c.stop();
  });
  c.start();
});
</script>
</body></html>
`

// 9. A screenshot (PNG) of a conversation is written as a test artifact;
// with -update, also as testdata/screenshot.png for the README. A phone
// width shows the page without sideways scrolling.
func TestScreenshot(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.do(5*time.Second, "size the window", chromedp.EmulateViewport(820, 720))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	token := tb.token()
	thread := threadOf(token)

	tb.write("The deploy of build 412 failed on step 3. Can you look at the log?")
	tb.waitShown(soon, "The deploy of build 412 failed on step 3. Can you look at the log?")
	srv.reply(thread, "Looking now. Step 3 ran out of disk on the runner: /var was 100% full.\nI cleared the old images; a retry should pass.")
	tb.waitShown(soon, "Looking now. Step 3 ran out of disk on the runner: /var was 100% full.\nI cleared the old images; a retry should pass.")
	post(t, srv.URL, token, "Retried from the page: build 412 is green.", "agent")
	tb.waitShown(soon, "Retried from the page: build 412 is green.")
	tb.write("Thanks! Could you also keep an eye on the next one?")
	tb.waitShown(soon, "Thanks! Could you also keep an eye on the next one?")
	tb.waitJS(soon, "the waiting state", `!document.getElementById("waiting").hidden`)
	eval[bool](tb, `(() => { const e = document.getElementById("text");
		e.value = "Sure — which branch?"; e.dispatchEvent(new Event("input")); e.blur(); return true })()`)

	png := screenshot(tb)
	dir := t.ArtifactDir()
	if err := os.WriteFile(filepath.Join(dir, "screenshot.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, "screenshot.png"))
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", "screenshot.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	tb.do(5*time.Second, "a phone-width window", chromedp.EmulateViewport(360, 720, chromedp.EmulateScale(2)))
	tb.waitJS(soon, "the page to fit the phone", `document.documentElement.scrollWidth <= innerWidth`)
	if !eval[bool](tb, `(() => { const r = document.getElementById("send").getBoundingClientRect();
		return r.right <= innerWidth && r.bottom <= innerHeight && r.width > 0 })()`) {
		t.Errorf("the send button is off a phone-width screen%s", tb.dump())
	}
	if err := os.WriteFile(filepath.Join(dir, "phone.png"), screenshot(tb), 0o644); err != nil {
		t.Fatal(err)
	}

	// A reader scrolled up to read is not yanked down by a new message,
	// but told; the button takes them down.
	srv.reply(thread, "Will do. I will write here when it starts and when it ends.")
	eval[bool](tb, `(document.getElementById("text").value = "", true)`)
	tb.write("The next one is build 413, on the release branch of the API.")
	tb.waitShown(soon, "The next one is build 413, on the release branch of the API.")
	// The composer empties when the post's answer comes, which may be after
	// the message is pushed: the composer shrinks and the conversation
	// grows. Measure the overflow after that.
	tb.waitJS(soon, "the composer emptied", `document.getElementById("text").value === ""`)
	tb.waitJS(soon, "the conversation to overflow", `(() => { const s = document.getElementById("conversation");
		return s.scrollHeight > s.clientHeight + 100 })()`)
	eval[bool](tb, `(document.getElementById("conversation").scrollTop = 0, true)`)
	srv.reply(thread, "Main, the release branch.")
	tb.waitShown(soon, "Main, the release branch.")
	tb.waitJS(soon, "the new-messages button", `!document.getElementById("jump").hidden`)
	if top := eval[float64](tb, `document.getElementById("conversation").scrollTop`); top != 0 {
		t.Errorf("a pushed message scrolled a reader who was reading at the top to %v", top)
	}
	tb.do(5*time.Second, "click the new-messages button", chromedp.Click(chromedp.CSS("#jump")))
	tb.waitJS(soon, "the end of the conversation", `(() => { const s = document.getElementById("conversation");
		return s.scrollHeight - s.scrollTop - s.clientHeight < 2 && document.getElementById("jump").hidden })()`)
}

// New conversation, after a confirmation, starts a fresh token in every
// tab of the browser; the old conversation is no longer shown.
func TestNewConversation(t *testing.T) {
	srv := startServer(t)
	a := newWindow(t)
	a.open(srv.URL)
	a.waitState(live, "ws")
	b := a.sibling()
	b.open(srv.URL)
	b.waitState(live, "ws")
	a.write("the old conversation")
	b.waitShown(soon, "the old conversation")
	old := a.token()

	dialogs := chromedp.Events(a.ctx, page.JavascriptDialogOpening)
	answered := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, err := chromedp.Call(a.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			if err != nil {
				t.Errorf("accept the dialog: %v", err)
			}
			answered <- ev.Message
			return
		}
	}()
	a.do(5*time.Second, "click New conversation", chromedp.Click(chromedp.CSS("#new")))
	select {
	case msg := <-answered:
		if !strings.Contains(msg, "new conversation") {
			t.Errorf("confirmation reads %q", msg)
		}
	case <-time.After(soon):
		t.Fatal("no confirmation asked")
	}

	for _, tb := range []*tab{a, b} {
		tb.waitJS(soon, "the old conversation to go", `document.querySelectorAll("#log li").length === 0`)
	}
	if a.token() == old || b.token() != a.token() {
		t.Fatalf("tokens after New conversation: a %s…, b %s…, old %s…", a.token()[:8], b.token()[:8], old[:8])
	}
	b.waitState(live, "ws")
	b.write("the new conversation")
	a.waitShown(soon, "the new conversation")
	if n := len(poll(t, srv.URL, a.token()).Messages); n != 1 {
		t.Errorf("the new thread has %d messages, want 1", n)
	}
	if n := len(poll(t, srv.URL, old).Messages); n != 1 {
		t.Errorf("the old thread has %d messages, want it kept with its 1", n)
	}
}

func screenshot(tb *tab) []byte {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		tb.t.Fatal(err)
	}
	return png
}

// Under --prefix, the page finds its files and its API below the prefix
// (the client's default server is the folder chat.js came from).
func TestUnderPrefix(t *testing.T) {
	srv := startServer(t, "--prefix", "/spaces/newos4")
	if !strings.HasSuffix(srv.URL, "/spaces/newos4/") {
		t.Fatalf("server URL %s", srv.URL)
	}
	tb := newWindow(t)
	tb.open(strings.TrimSuffix(srv.URL, "/")) // without the slash: redirected
	tb.waitState(live, "ws")
	tb.write("under a prefix")
	tb.waitShown(soon, "under a prefix")
	if n := len(poll(t, srv.URL, tb.token()).Messages); n != 1 {
		t.Errorf("poll under the prefix returns %d messages, want 1", n)
	}
}

// TestMessagesAreAListAScreenReaderHears: the conversation is, in the
// browser's accessibility tree (what a screen reader reads), a list named
// "Messages" whose items are the messages, and a polite live region, so a
// reply is read out as it arrives. Before, the list carried role="log",
// which took its list role away: its items were list items outside any
// list (axe-core's "listitem" rule, serious, one per message), and a screen
// reader could neither count the messages nor move through them as a list.
func TestMessagesAreAListAScreenReaderHears(t *testing.T) {
	srv := startServer(t)
	tb, token := startConversation(t, srv.URL, "Is the build green?")
	srv.reply(threadOf(token), "Yes: 812 tests passed.")
	tb.waitShown(soon, "Yes: 812 tests passed.")
	tb.waitJS(soon, "the log to settle", `!document.getElementById("log").hasAttribute("aria-busy")`)

	tree := tb.axTree()
	var list *accessibility.Node
	for _, n := range tree.Nodes {
		if !n.Ignored && str(n.Name) == "Messages" {
			list = n
		}
	}
	if list == nil {
		t.Fatal("no node of the accessibility tree is named Messages")
	}
	if role := str(list.Role); role != "list" {
		t.Errorf("the messages are a %q to a screen reader, want a list", role)
	}
	live := ""
	for _, p := range list.Properties {
		if p.Name == accessibility.PropertyNameLive {
			live = str(p.Value)
		}
	}
	if live != "polite" {
		t.Errorf("the messages are live %q, want polite (a reply is read out as it arrives)", live)
	}
	items := 0
	for _, n := range tree.Nodes {
		if n.ParentID == list.NodeID && str(n.Role) == "listitem" {
			items++
		}
	}
	if items != 2 {
		t.Errorf("the list holds %d list items, want the 2 messages", items)
	}
	// The composer is a landmark a screen reader jumps to, as it jumps to
	// the banner and the main part (axe-core's best-practice "region" rule
	// found the field, its label and its count outside every landmark).
	composer := 0
	for _, n := range tree.Nodes {
		if !n.Ignored && str(n.Role) == "form" && str(n.Name) == "Write a message" {
			composer++
		}
	}
	if composer != 1 {
		t.Errorf("%d form landmarks named \"Write a message\", want the composer", composer)
	}
}

// TestFilledButtonsReadInDarkMode: in the browser's dark scheme
// (prefers-color-scheme: dark, which the page follows), the words on a
// filled button (Send, Approve) contrast with its fill at least 4.5:1, as
// they do in the light scheme (WCAG 2.1 AA). Before, dark mode lightened
// the fills and kept white words on them: Send read at 2.2:1 (white on
// #7eb0ff) and Approve at 2.0:1 (white on #5fcf7f).
func TestFilledButtonsReadInDarkMode(t *testing.T) {
	srv := startServer(t)
	for _, scheme := range []string{"light", "dark"} {
		t.Run(scheme, func(t *testing.T) {
			tb := newWindow(t)
			tb.do(soon, "the "+scheme+" scheme", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
				_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
				return chromedp.Void{}, err
			})
			tb.open(srv.URL)
			tb.waitState(live, "ws")
			tb.write("May I see the approval?")
			tb.waitShown(soon, "May I see the approval?")
			q := srv.ask(threadOf(tb.token()), "--approval", "Deploy build 412?", "--timeout", "15m")
			tb.waitIx(soon, q.Interaction.ID, "pending")
			if got := eval[bool](tb, `matchMedia("(prefers-color-scheme: dark)").matches`); got != (scheme == "dark") {
				t.Fatalf("the page sees the dark scheme %v", got)
			}
			// Each visible button with an opaque fill: its words' contrast.
			got := eval[[]string](tb, `(() => {
				const rgb = (c) => c.match(/[\d.]+/g).map(Number);
				const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
					.reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
				return [...document.querySelectorAll("button")].filter((b) => b.getClientRects().length > 0 && !b.disabled).flatMap((b) => {
					const cs = getComputedStyle(b), bg = rgb(cs.backgroundColor);
					if (bg.length === 4 && bg[3] < 1) return []; // no fill of its own
					const [hi, lo] = [lum(rgb(cs.color)), lum(bg)].sort((x, y) => y - x);
					return [b.textContent.trim() + " " + ((hi + 0.05) / (lo + 0.05)).toFixed(1)];
				});
			})()`)
			filled := map[string]bool{}
			for _, b := range got {
				i := strings.LastIndexByte(b, ' ')
				name, ratio := b[:i], b[i+1:]
				filled[name] = true
				if r, err := strconv.ParseFloat(ratio, 64); err != nil || r < 4.5 {
					t.Errorf("%s: %q reads at %s:1, want 4.5:1 at least", scheme, name, ratio)
				}
			}
			if !filled["Send"] || !filled["Approve"] {
				t.Errorf("%s: the filled buttons measured are %v, want Send and Approve among them", scheme, got)
			}
		})
	}
}

// axTree reads the tab's accessibility tree, as a screen reader gets it.
func (tb *tab) axTree() accessibility.GetFullAXTreeResult {
	tb.t.Helper()
	var tree accessibility.GetFullAXTreeResult
	tb.do(soon, "read the accessibility tree", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		var err error
		tree, err = cdp.Call(ctx, tg, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
		return chromedp.Void{}, err
	})
	return tree
}

// str is an accessibility value's string ("" for none).
func str(v *accessibility.Value) string {
	if v == nil {
		return ""
	}
	var s string
	_ = json.Unmarshal(v.Value, &s)
	return s
}

// TestParticipantPageIsAllInLandmarks: on the participant page, "Also
// here: …" (who else is in) is inside a landmark, the conversation's main
// part, so a screen reader that moves by landmarks reaches it. Before, it
// sat between the banner and the main part, in none (axe-core's
// best-practice "region" rule).
func TestParticipantPageIsAllInLandmarks(t *testing.T) {
	srv := startServer(t)
	token := strings.Repeat("7c", 32)
	post(t, srv.URL, token, "Who is in?", "operator")
	alex := invite(t, srv.URL, token, map[string]any{"name": "Alex", "role": "commenter"})
	sam := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "viewer"})
	p := newWindow(t)
	p.open(alex.Link)
	p.waitState(live, "ws")
	p.waitJS(soon, "who else is in", `document.getElementById("others").textContent.startsWith("Also here")`)
	assertInLandmark(t, p, "Also here")
	// A viewer's page tells why it has no composer, in a landmark too.
	v := newWindow(t)
	v.open(sam.Link)
	v.waitState(live, "ws")
	v.waitJS(soon, "the viewer's note", `!document.getElementById("readonly").hidden`)
	assertInLandmark(t, v, "You can read")
}

// assertInLandmark checks that the page's text that begins with prefix,
// as the accessibility tree has it, is inside a landmark, where a screen
// reader moving by landmarks reaches it.
func assertInLandmark(t *testing.T, p *tab, prefix string) {
	t.Helper()
	tree := p.axTree()
	byID := map[accessibility.NodeID]*accessibility.Node{}
	for _, n := range tree.Nodes {
		byID[n.NodeID] = n
	}
	found := false
	for _, n := range tree.Nodes {
		if n.Ignored || str(n.Role) != "StaticText" || !strings.HasPrefix(str(n.Name), prefix) {
			continue
		}
		found = true
		var in []string
		for a := byID[n.ParentID]; a != nil; a = byID[a.ParentID] {
			switch r := str(a.Role); r {
			case "main", "banner", "form", "region", "navigation", "complementary", "contentinfo":
				in = append(in, r)
			}
		}
		if len(in) == 0 {
			t.Errorf("%q is in no landmark", str(n.Name))
		}
	}
	if !found {
		t.Fatalf("no text of the accessibility tree reads %s", prefix)
	}
}
