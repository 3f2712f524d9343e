package web_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// TestClaimLinkOpensTheConversation: hermes starts a conversation with
// `chatrelay open`; its claim link, opened in a fresh browser profile at a
// phone's width, takes the token out of the address bar at once, keeps it
// as the page's own, shows the title in the header (on one row) and
// hermes's first message, and the page posts as the thread's owner.
func TestClaimLinkOpensTheConversation(t *testing.T) {
	srv := startServer(t)
	const title, first = "Deploy build 412 to production tonight?", "Build 412 passed. Shall I deploy it tonight?"
	out := srv.cli("open", "--title", title, "--text", first, "--public-url", strings.TrimSuffix(srv.URL, "/"))
	var opened struct{ Thread, Link string }
	if err := json.Unmarshal(out, &opened); err != nil {
		t.Fatalf("chatrelay open printed %q: %v", out, err)
	}
	m := regexp.MustCompile(`^` + regexp.QuoteMeta(strings.TrimSuffix(srv.URL, "/")) + `/#t=([0-9a-f]{64})$`).FindStringSubmatch(opened.Link)
	if m == nil {
		t.Fatalf("the claim link %q is not %s#t=<64 hex>", opened.Link, srv.URL)
	}
	token := m[1]

	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.open(opened.Link)
	if u := eval[string](tb, `location.href`); strings.Contains(u, token) || strings.Contains(u, "#") {
		t.Errorf("the address bar still holds the link's fragment: %s", u)
	}
	tb.waitShown(soon, first)
	if got := tb.token(); got != token {
		t.Fatalf("the page kept token %s…, want the link's %s…", got[:8], token[:8])
	}
	tb.waitJS(soon, "the title in the header", `document.getElementById("thread-id").textContent === `+js(title))
	if got := eval[string](tb, `document.title`); got != "chatrelay · "+title {
		t.Errorf("the tab's title is %q, want it to name %q", got, title)
	}
	tb.waitJS(soon, "the header on one row", `(() => {
		const kids = [...document.querySelector("header.bar").children].filter(e => e.getBoundingClientRect().width > 0);
		const first = kids[0].getBoundingClientRect();
		return kids.every(k => { const r = k.getBoundingClientRect(); return r.top < first.bottom && r.bottom > first.top; });
	})()`)
	shown := tb.shown()
	if len(shown) != 1 || shown[0].Author != "hermes" {
		t.Errorf("shown %+v, want hermes's first message alone", shown)
	}

	// The page is the thread's owner: its post is stored in that thread.
	tb.waitState(live, "ws")
	tb.write("Yes, deploy it.")
	tb.waitShown(soon, "Yes, deploy it.")
	waitFor(t, soon, "the owner's post stored", func() bool {
		msgs := poll2(t, srv.URL, token)
		return len(msgs) == 2 && msgs[1].Author == "operator" && msgs[1].Text == "Yes, deploy it."
	})
	// Reloaded, the page keeps the conversation (its own token now).
	tb.open(srv.URL)
	tb.waitShown(soon, "Yes, deploy it.")
	if strings.Contains(srv.logText(), token) {
		t.Errorf("the server's log holds the claimed token")
	}
}

// TestClaimLinkMalformed: a link whose #t= is not 64 lowercase hex is
// taken out of the address bar and never adopted; the page says so and
// keeps its own conversation.
func TestClaimLinkMalformed(t *testing.T) {
	srv := startServer(t)
	notice := `!document.getElementById("notice").hidden && document.getElementById("notice-text").textContent.includes("malformed")`
	// Loaded with a malformed link (t-link.js, before the page runs).
	tb := newWindow(t)
	tb.open(srv.URL + "#t=" + strings.Repeat("A", 64))
	tb.waitJS(soon, "the notice about the malformed link", notice)
	if u := eval[string](tb, `location.href`); strings.Contains(u, "#") {
		t.Errorf("the address bar still holds %s", u)
	}
	tb.waitState(live, "ws")
	own := tb.token()
	if own == strings.Repeat("A", 64) {
		t.Fatal("the malformed token was adopted")
	}
	// A link opened in a tab already showing the page changes only the
	// fragment (app.js).
	for _, bad := range []string{"abc", strings.Repeat("5a", 32) + "00"} {
		eval[bool](tb, `(document.getElementById("notice").hidden = true, location.hash = "#t=`+bad+`", true)`)
		tb.waitJS(soon, "the notice about the malformed link "+bad, notice)
		if u := eval[string](tb, `location.href`); strings.Contains(u, "#") {
			t.Errorf("the address bar still holds %s", u)
		}
		if got := tb.token(); got != own {
			t.Errorf("a malformed link %q changed the page's token", bad)
		}
	}
	// And a good one, the same way, is adopted (once the person says yes:
	// the tab holds a conversation already).
	good := strings.Repeat("5a", 32)
	asked := tb.answerDialog(true)
	eval[bool](tb, `(location.hash = "#t=`+good+`", true)`)
	select {
	case <-asked:
	case <-time.After(soon):
		t.Fatal("no confirmation asked before adopting the link")
	}
	tb.waitJS(soon, "the link's token adopted", `localStorage.getItem("chatrelay.token") === "`+good+`" && location.hash === ""`)
}

// answerDialog answers the tab's next dialog (accept: OK, else Cancel)
// and sends its message.
func (tb *tab) answerDialog(accept bool) <-chan string {
	dialogs := chromedp.Events(tb.ctx, page.JavascriptDialogOpening)
	answered := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			if _, err := chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil {
				tb.t.Errorf("answer the dialog: %v", err)
			}
			answered <- ev.Message
			return
		}
	}()
	return answered
}

// TestClaimLinkAsksBeforeReplacing: a claim link opened in a browser that
// holds a conversation already replaces it only once the person says yes.
// Any page on the web can open a link: before, one adopted at once, so a
// hostile page (or a link from anyone) made the browser forget its
// conversation for good, unasked, and the person's next words went to the
// link maker's thread. Said no, the page keeps its own conversation and
// says the link was not opened; said yes, it opens the link's.
func TestClaimLinkAsksBeforeReplacing(t *testing.T) {
	srv := startServer(t)
	tb, own := startConversation(t, srv.URL, "my own conversation with hermes")
	out := srv.cli("open", "--text", "a conversation from a link", "--public-url", strings.TrimSuffix(srv.URL, "/"))
	var opened struct{ Link string }
	if err := json.Unmarshal(out, &opened); err != nil {
		t.Fatalf("chatrelay open printed %q: %v", out, err)
	}
	_, claimed, _ := strings.Cut(opened.Link, "#t=")

	// Opened, and declined: nothing changes.
	asked := tb.answerDialog(false)
	tb.open(opened.Link)
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "forget its current conversation") {
			t.Errorf("the confirmation reads %q", msg)
		}
	case <-time.After(soon):
		t.Fatal("no confirmation asked before replacing the conversation")
	}
	if u := eval[string](tb, `location.href`); strings.Contains(u, "#") {
		t.Errorf("the address bar still holds the link's fragment: %s", u)
	}
	tb.waitShown(soon, "my own conversation with hermes")
	tb.waitJS(soon, "the notice that the link was not opened", `document.getElementById("notice-text").textContent.includes("The link was not opened")`)
	if got := tb.token(); got != own {
		t.Fatalf("declined, the page holds token %s…, want its own %s…", got[:8], own[:8])
	}
	if got := eval[string](tb, `String(window.chatrelayClaim)`); got != "undefined" {
		t.Errorf("the page keeps the declined token in window.chatrelayClaim: %s", got)
	}

	// Opened again, and accepted: the link's conversation is the page's.
	asked = tb.answerDialog(true)
	tb.open(opened.Link)
	select {
	case <-asked:
	case <-time.After(soon):
		t.Fatal("no confirmation asked the second time")
	}
	tb.waitShown(soon, "a conversation from a link")
	if got := tb.token(); got != claimed {
		t.Fatalf("accepted, the page holds token %s…, want the link's %s…", got[:8], claimed[:8])
	}
}

// TestLongTitleFitsTheBar: a title longer than the bar's room, at a phone's
// width and at a desktop's, is cut with an ellipsis; every button stays
// inside the bar and nothing in it overlaps, and the status, cut to a dot
// or "live…", has its whole words in its tooltip (before, the name kept its
// 16 rem: "New conversation" stood 90 px past the bar at 1280 px, and at
// 390 px "New" touched the screen's edge with the status dot over the bell).
func TestLongTitleFitsTheBar(t *testing.T) {
	srv := startServer(t)
	const title = "Deploy review of build 412 for the production cluster in eu-west"
	out := srv.cli("open", "--title", title, "--text", "hello", "--public-url", strings.TrimSuffix(srv.URL, "/"))
	var opened struct{ Thread, Link string }
	if err := json.Unmarshal(out, &opened); err != nil {
		t.Fatalf("chatrelay open printed %q: %v", out, err)
	}
	tb := newWindow(t)
	tb.open(opened.Link)
	tb.waitShown(soon, "hello")
	tb.waitState(live, "ws")
	for _, size := range []struct {
		name   string
		width  int64
		height int64
		mobile bool
	}{
		{"a phone", 390, 844, true},
		{"a desktop", 1280, 800, false},
	} {
		if size.mobile {
			tb.do(soon, size.name+"'s screen", chromedp.EmulateViewport(size.width, size.height, chromedp.EmulateScale(3), chromedp.EmulateMobile))
		} else {
			tb.do(soon, size.name+"'s screen", chromedp.EmulateViewport(size.width, size.height))
		}
		tb.waitJS(soon, "the bar's buttons shown ("+size.name+")", `!document.getElementById("devices-open").hidden`)
		tb.waitJS(soon, "the bar's items inside it, one row, none over another ("+size.name+")", `(() => {
			const bar = document.querySelector("header.bar");
			const cs = getComputedStyle(bar), b = bar.getBoundingClientRect();
			const left = b.left + parseFloat(cs.paddingLeft) - 0.5, right = b.right - parseFloat(cs.paddingRight) + 0.5;
			const boxes = [...bar.children].map(e => e.getBoundingClientRect()).filter(r => r.width > 0);
			// the dot, drawn outside its status box when that box has no room, counts too
			boxes.splice(1, 1, document.querySelector("#status .dot").getBoundingClientRect());
			return boxes.every((r, i) => r.left >= left && r.right <= right && r.top < boxes[0].bottom && r.bottom > boxes[0].top &&
				(i === 0 || r.left >= boxes[i - 1].right - 0.5));
		})()`)
		if got := eval[string](tb, `document.getElementById("status").title`); !strings.HasPrefix(got, "live · WebSocket") {
			t.Errorf("%s: the status's tooltip is %q, want its whole words, live · WebSocket", size.name, got)
		}
		if cut := eval[bool](tb, `(() => { const s = document.getElementById("thread-id"); return s.scrollWidth > s.clientWidth })()`); !cut {
			t.Errorf("%s: the title is not cut, though it is longer than its room", size.name)
		}
		if !eval[bool](tb, wordmarkWhole) {
			t.Errorf("%s: the name \"chatrelay\" itself is cut", size.name)
		}
	}
	// With no title, the name is never cut, not even by a fraction of a
	// pixel (which draws "chatrel…"): the status text gives way instead.
	plain := newWindow(t)
	plain.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	plain.open(srv.URL)
	plain.write("hello")
	plain.waitJS(soon, "the bar's buttons shown", `!document.getElementById("devices-open").hidden`)
	plain.waitState(live, "ws")
	if !eval[bool](plain, wordmarkWhole) {
		t.Errorf("a phone, no title: the name \"chatrelay\" is cut")
	}
}

// wordmarkWhole says whether the bar's "chatrelay" has its whole width.
const wordmarkWhole = `(() => {
	const h = document.querySelector(".bar h1"), r = document.createRange();
	r.selectNodeContents(h.firstChild);
	return r.getBoundingClientRect().width <= h.getBoundingClientRect().width;
})()`
