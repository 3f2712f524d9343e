package web_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

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
	// And a good one, the same way, is adopted.
	good := strings.Repeat("5a", 32)
	eval[bool](tb, `(location.hash = "#t=`+good+`", true)`)
	tb.waitJS(soon, "the link's token adopted", `localStorage.getItem("chatrelay.token") === "`+good+`" && location.hash === ""`)
}
