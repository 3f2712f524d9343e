package web_test

// The page against hostile words: what hermes (whose text an AI writes,
// and a prompt can steer), a participant or the thread's title puts in
// every field the page draws is drawn as text, a card's link is a link
// only for http(s) and opens with no opener and no referrer, and nothing
// the page draws runs a script, loads another origin or breaks the CSP.

import (
	"context"
	"encoding/json"
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

// hostile is markup that runs a script if any part of it is parsed as
// HTML (were the CSP to let it).
const short = `<img src=x onerror=window.__pwned=1>`

const hostile = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><svg onload="window.__pwned=3"></svg><a href="javascript:window.__pwned=4">x</a>`

// watch makes tb's next documents count CSP violations and note every
// element a script or the parser adds that could run or load something,
// before any of the page's own scripts run.
func (tb *tab) watch() {
	tb.t.Helper()
	tb.do(soon, "watch the page", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
			window.__csp = [];
			document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
		`})
		return chromedp.Void{}, err
	})
}

// checkInert fails if the page ran a payload, broke its CSP, or drew in
// the conversation an element a payload would make, or a link that is not
// http(s), same-origin, or opens without noopener.
func checkInert(t *testing.T, tb *tab, who string) {
	t.Helper()
	var got struct {
		Pwned  any      `json:"pwned"`
		CSP    []string `json:"csp"`
		Made   []string `json:"made"`
		Links  []string `json:"links"`
		Opener []string `json:"opener"`
	}
	raw := eval[string](tb, `JSON.stringify({
		pwned: window.__pwned ?? null,
		csp: window.__csp || ["no watcher"],
		made: [...document.querySelectorAll("body script, body iframe, body object, body embed, body svg, body frame, body form:not(.ix-text):not(#composer):not(#invite):not(#device-form), body img")]
			.filter((e) => !(e.matches("img") && e.closest("a.thumb")))
			.filter((e) => !e.closest("#log") || !e.matches("svg[aria-hidden]"))
			.map((e) => e.outerHTML.slice(0, 120)),
		links: [...document.querySelectorAll("#log a[href]")].filter((a) => !/^https?:$/.test(a.protocol)).map((a) => a.href),
		opener: [...document.querySelectorAll("a[target]")].filter((a) => !/\bnoopener\b/.test(a.rel) && !(a.origin === location.origin && a.relList.contains("noopener"))).map((a) => a.outerHTML.slice(0, 120)),
	})`)
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	if got.Pwned != nil {
		t.Errorf("%s: a payload ran: window.__pwned = %v", who, got.Pwned)
	}
	if len(got.CSP) > 0 {
		t.Errorf("%s: CSP violations: %q", who, got.CSP)
	}
	for _, m := range got.Made {
		if strings.Contains(m, "pwned") || strings.Contains(m, `src="x"`) {
			t.Errorf("%s: the page drew a payload as markup: %s", who, m)
		}
	}
	if len(got.Links) > 0 {
		t.Errorf("%s: links that are not http(s): %q", who, got.Links)
	}
	if len(got.Opener) > 0 {
		t.Errorf("%s: links opened with an opener: %q", who, got.Opener)
	}
}

// TestHostileWordsDrawAsText: hermes's reply, card (title, text, fields,
// links of every dangerous scheme, code, fallback), approval (title,
// prompt, details) and question (choices), a file's name, a thread's
// title, a participant's and a device's name, all made of markup, are
// drawn as the words they are on the owner's page, a participant's and a
// device's; no link but http(s) is made.
func TestHostileWordsDrawAsText(t *testing.T) {
	srv := startServer(t)
	base := strings.TrimSuffix(srv.URL, "/")
	out := srv.cli("open", "--title", "t "+short+" evil", "--text", "first "+hostile, "--public-url", base)
	var opened struct{ Thread, Link string }
	if err := json.Unmarshal(out, &opened); err != nil {
		t.Fatalf("chatrelay open printed %q: %v", out, err)
	}
	thread := opened.Thread
	a := newWindow(t)
	a.watch()
	a.open(opened.Link)
	a.waitState(live, "ws")
	token := a.token()

	srv.reply(thread, "reply "+hostile)
	// The server refuses a card whose link is not http(s); the page would
	// draw one as text anyway (view.js safeURL).
	for _, u := range []string{
		"javascript:window.__pwned=5", "JaVaScRiPt:window.__pwned=6", " javascript:window.__pwned=7", "java\tscript:window.__pwned=8",
		"data:text/html,<script>window.__pwned=9</script>", "vbscript:msgbox(1)", "//evil.example/x", "file:///etc/passwd",
		"blob:" + base + "/x", "https\u0000://x", "\u202Ehttps://evil.example",
	} {
		bad, _ := json.Marshal(map[string]any{"fallback_text": "x", "blocks": []map[string]any{{"type": "link", "url": u, "label": "x"}}})
		if _, _, err := srv.cliRun(bad, "card", thread, "-"); err == nil {
			t.Errorf("the server took a card linking to %q", u)
		}
	}
	links := []map[string]any{{"type": "link", "url": "https://ok.example/?q=" + hostile, "label": "link " + short}}
	card, _ := json.Marshal(map[string]any{"title": "card " + hostile, "fallback_text": "fb " + hostile, "blocks": append([]map[string]any{
		{"type": "text", "text": "text " + hostile},
		{"type": "fields", "fields": []map[string]string{{"label": "l " + short, "value": "v " + hostile}}},
		{"type": "code", "text": "code " + hostile, "language": `"><svg onload=__pwned=10>`},
	}, links...)})
	if _, stderr, err := srv.cliRun(card, "card", thread, "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	srv.ask(thread, "--approval", "prompt "+hostile, "--title", "title "+short, "--detail", "d "+short+"=v "+hostile, "--timeout", "15m")
	srv.ask(thread, "--input", "pick "+hostile, "--choice", "a=A "+short, "--choice", `b"><img src=x>=B`, "--allow-text", "--timeout", "15m")
	aid := attach(t, srv.URL, token, "f "+hostile+".html", "text/html", []byte("<script>window.__pwned=11</script>"))
	callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "X-Chat-Token", token, map[string]any{"text": "file", "attachments": []string{aid}})
	inv := invite(t, srv.URL, token, map[string]any{"name": "p " + short + " \u202Eevil\u200b", "role": "commenter"})

	a.waitJS(soon, "everything drawn", `document.querySelectorAll("#log li").length >= 6 && !!document.querySelector("#log a.chip[href]")`)
	checkInert(t, a, "owner")
	if got := eval[string](a, `document.querySelector("#log .card .card-title").textContent`); got != "card "+hostile {
		t.Errorf("card title drawn as %q", got)
	}
	if n := eval[int](a, `document.querySelectorAll("#log .card a[href]").length`); n != 1 {
		t.Errorf("the card has %d links, want the one https link", n)
	}

	p := newWindow(t)
	p.watch()
	p.open(inv.Link)
	p.waitState(live, "ws")
	p.write("from the guest " + hostile)
	p.waitShown(soon, "from the guest "+hostile)
	p.waitJS(soon, "everything drawn", `document.querySelectorAll("#log li").length >= 7 && !!document.querySelector("#log a.chip[href]")`)
	checkInert(t, p, "participant")
	a.waitShown(soon, "from the guest "+hostile)
	checkInert(t, a, "owner, after the guest wrote")
	t.Logf("the guest's name as the owner sees it: %q", eval[string](a, `[...document.querySelectorAll("#log li .author")].at(-1).textContent`))

	out = srv.cli("device", thread, "--name", "dev "+short, "--public-url", base)
	link := regexp.MustCompile(`http://\S+/d#chd_\S+`).Find(out)
	if link == nil {
		t.Fatalf("chatrelay device printed no link: %q", out)
	}
	d := newWindow(t)
	d.watch()
	d.open(string(link))
	d.waitState(live, "ws")
	d.waitJS(soon, "everything drawn", `document.querySelectorAll("#log li").length >= 7 && !!document.querySelector("#log a.chip[href]")`)
	checkInert(t, d, "device")
}

// TestLongUnbrokenWordsStayInTheirMessage: at a phone's width, words with
// no place to break (a hash, a URL, a key) in every field hermes or a
// participant writes wrap inside their message, on the owner's page and on
// a participant's: the conversation never scrolls sideways, and no text
// runs out of its message (a code block scrolls in its own box).
func TestLongUnbrokenWordsStayInTheirMessage(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	thread := threadOf(token)
	long := func(n int) string { return strings.Repeat("0123456789abcdef", n/16+1)[:n] }
	srv.reply(thread, long(300))
	card, _ := json.Marshal(map[string]any{"title": long(100), "fallback_text": long(100), "blocks": []map[string]any{
		{"type": "text", "text": long(300)},
		{"type": "fields", "fields": []map[string]string{{"label": long(80), "value": long(200)}}},
		{"type": "link", "url": "https://example.com/" + long(200), "label": long(80)},
		{"type": "link", "url": "https://example.com/" + long(200)},
		{"type": "code", "text": long(300)},
	}})
	if _, stderr, err := srv.cliRun(card, "card", thread, "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	srv.ask(thread, "--approval", long(300), "--title", long(100), "--detail", long(60)+"="+long(200), "--timeout", "15m")
	srv.ask(thread, "--input", long(300), "--title", long(100), "--choice", long(60)+"="+long(60), "--choice", "b="+long(60), "--timeout", "15m")
	aid := attach(t, srv.URL, token, long(120)+".txt", "text/plain", []byte("x"))
	callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "X-Chat-Token", token, map[string]any{"text": "file", "attachments": []string{aid}})
	inv := invite(t, srv.URL, token, map[string]any{"name": long(64), "role": "commenter"})
	p := newWindow(t)
	for _, tb := range []*tab{a, p} {
		tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	}
	p.open(inv.Link)
	p.waitState(live, "ws")
	p.write(long(300))
	p.waitShown(soon, long(300))
	// A reaction is any 64 code points with no space: a word as well.
	for _, e := range []string{strings.Repeat("W", 64), strings.Repeat("🇺🇸", 32)} {
		if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/react", "Authorization", "Bearer "+inv.Token, map[string]any{"message_id": poll2(t, srv.URL, token)[0].ID, "emoji": e}); status != http.StatusOK {
			t.Fatalf("react: %d %s", status, raw)
		}
	}
	a.waitJS(soon, "the reactions", `document.querySelectorAll("#log .reactions .react:not(.unused)").length === 2`)
	for who, tb := range map[string]*tab{"owner": a, "participant": p} {
		tb.waitJS(soon, "everything drawn", `document.querySelectorAll("#log li.msg").length >= 7`)
		out := eval[[]string](tb, `(() => {
			const out = [], conv = document.getElementById("conversation");
			if (conv.scrollWidth > conv.clientWidth) out.push("the conversation scrolls sideways: " + conv.scrollWidth + " > " + conv.clientWidth);
			const c = conv.getBoundingClientRect();
			for (const e of document.querySelectorAll("#log .msg")) {
				const r = e.getBoundingClientRect();
				if (r.right > c.right + 0.5) out.push("a message (" + e.children[1]?.className + ") runs out of the conversation by " + Math.round(r.right - c.right) + " px");
			}
			if (document.scrollingElement.scrollWidth > document.scrollingElement.clientWidth) out.push("the page scrolls sideways");
			for (const e of document.querySelectorAll("#log .msg *")) {
				if (e.closest("pre") && !e.matches("pre") || e.closest(".sr-only")) continue;
				const r = e.getBoundingClientRect(), m = e.closest(".msg").getBoundingClientRect();
				if (r.width > 0 && (r.left < m.left - 0.5 || r.right > m.right + 0.5)) out.push(e.tagName + "." + e.className + " runs out of its message by " + Math.round(r.right - m.right) + " px");
				else if (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === "visible") out.push(e.tagName + "." + e.className + "'s words run out of it by " + (e.scrollWidth - e.clientWidth) + " px");
			}
			return out;
		})()`)
		for _, o := range out {
			t.Errorf("%s: %s", who, o)
		}
	}
}

// TestReactorsNamedAsGuests: participants named "you" and "the owner"
// react beside the owner; a reaction's list of who reacted names each of
// the three apart, on the owner's page and on a participant's, as the
// message's author line does with its guest badge.
func TestReactorsNamedAsGuests(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	msgs := poll2(t, srv.URL, token)
	you := invite(t, srv.URL, token, map[string]any{"name": "you", "role": "commenter"})
	owner := invite(t, srv.URL, token, map[string]any{"name": "the owner", "role": "commenter"})
	callAPI(t, http.MethodPost, srv.URL+"api/chat/react", "X-Chat-Token", token, map[string]any{"message_id": msgs[0].ID, "emoji": "👍"})
	for _, g := range []invited{you, owner} {
		if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/react", "Authorization", "Bearer "+g.Token, map[string]any{"message_id": msgs[0].ID, "emoji": "👍"}); status != http.StatusOK {
			t.Fatalf("react as %s: %d %s", g.Participant.Name, status, raw)
		}
	}
	p := newWindow(t)
	p.open(you.Link)
	p.waitState(live, "ws")
	for who, tb := range map[string]*tab{"owner": a, "participant": p} {
		tb.waitJS(soon, "three reactors named", `/: .*, .*, /.test(document.querySelector("#log .reactions .react")?.title)`)
		title := eval[string](tb, `document.querySelector("#log .reactions .react").title`)
		names := strings.Split(strings.SplitN(title, ": ", 2)[1], ", ")
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				t.Errorf("%s: the reactors read %q: two of them are named %q", who, title, n)
			}
			seen[n] = true
		}
	}
}

// TestCardLinkShowsItsRealAddress: a card's link with no label shows its
// address as the browser will open it: bidi controls hermes put in the
// URL (to draw "https://evil.example/?…" as if it ended in another
// site's address) are shown percent-encoded, as the address bar shows
// them, never applied.
func TestCardLinkShowsItsRealAddress(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	const spoof = "https://evil.example/?\u202Emoc.elpmaxe.knab//:sptth"
	card, _ := json.Marshal(map[string]any{"fallback_text": "the report", "blocks": []map[string]any{
		{"type": "link", "url": spoof},
		{"type": "link", "url": "https://evil.example/\u2066x\u2069\u200b"},
	}})
	if _, stderr, err := srv.cliRun(card, "card", threadOf(token), "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	a.waitJS(soon, "the card's links", `document.querySelectorAll("#log .card a[href]").length === 2`)
	got := eval[[][2]string](a, `[...document.querySelectorAll("#log .card a[href]")].map((a) => [a.textContent, a.href])`)
	for _, g := range got {
		if strings.ContainsAny(g[0], "\u202A\u202B\u202C\u202D\u202E\u2066\u2067\u2068\u2069\u200B\u200E\u200F") || g[0] != g[1] {
			t.Errorf("a link to %q reads %q", g[1], g[0])
		}
	}
}

// TestAnotherSiteLosesTheWindowItOpened: a page of another origin that
// opens the chat's pages (window.open) keeps no hold on the window once
// the page loads (Cross-Origin-Opener-Policy: same-origin): it cannot
// send it elsewhere (a look-alike page, while the person believes it is
// their conversation), count its frames or learn when it loaded, to time
// a click on an answer button.
func TestAnotherSiteLosesTheWindowItOpened(t *testing.T) {
	srv := startServer(t)
	site := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<!doctype html><title>another site</title><p>another site</p>"))
	}))
	tb := newWindow(t)
	tb.open(site.URL)
	for _, page := range []string{"", "p", "d"} {
		eval[bool](tb, `(window.w = window.open(`+js(srv.URL+page)+`), !!window.w)`)
		tb.waitJS(soon, "the window opened on /"+page+" out of the site's hold", `window.w.closed`)
	}
}

// TestCardLinkReachesAnotherSiteBare: hermes's card links to another
// site; the owner clicks it. The site gets no Referer, its page no
// document.referrer and no window.opener (it cannot send the chat's tab
// elsewhere), and neither the owner's token (the claim link's fragment)
// nor a participant's reached the site or the server's log.
func TestCardLinkReachesAnotherSiteBare(t *testing.T) {
	srv := startServer(t, "--log-level", "debug")
	type visit struct{ path, referer, query string }
	visits := make(chan visit, 16)
	site := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		visits <- visit{r.URL.Path, r.Header.Get("Referer"), r.URL.RawQuery}
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/landing" {
			w.Write([]byte(`<!doctype html><script>fetch("/report?opener=" + (window.opener === null) + "&referrer=" + encodeURIComponent(document.referrer))</script>`))
		}
	}))
	base := strings.TrimSuffix(srv.URL, "/")
	out := srv.cli("open", "--title", "links", "--text", "hello", "--public-url", base)
	var opened struct{ Thread, Link string }
	if err := json.Unmarshal(out, &opened); err != nil {
		t.Fatalf("chatrelay open printed %q: %v", out, err)
	}
	a := newWindow(t)
	a.open(opened.Link)
	a.waitState(live, "ws")
	token := a.token()
	inv := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "commenter"})
	p := newWindow(t)
	p.open(inv.Link)
	p.waitState(live, "ws")
	card, _ := json.Marshal(map[string]any{"fallback_text": "the report", "blocks": []map[string]any{{"type": "link", "url": site.URL + "/landing", "label": "the report"}}})
	if _, stderr, err := srv.cliRun(card, "card", opened.Thread, "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	for who, tb := range map[string]*tab{"owner": a, "participant": p} {
		tb.waitJS(soon, "the card's link", `!!document.querySelector("#log .card a[href]")`)
		tb.do(soon, "click the card's link", chromedp.Click(chromedp.CSS("#log .card a[href]")))
		var got []visit
		for len(got) == 0 || got[len(got)-1].path != "/report" {
			select {
			case v := <-visits:
				got = append(got, v)
			case <-time.After(soon):
				t.Fatalf("%s: the site saw %+v, and no report from its page", who, got)
			}
		}
		for _, v := range got {
			if v.path == "/landing" && v.referer != "" {
				t.Errorf("%s: the site got Referer %q for %s", who, v.referer, v.path)
			}
		}
		if !slices.ContainsFunc(got, func(v visit) bool { return v.path == "/landing" }) {
			t.Errorf("%s: the site saw %+v, not the link's page", who, got)
		}
		if r := got[len(got)-1].query; r != "opener=true&referrer=" {
			t.Errorf("%s: the site's page reports %s, want no opener and no referrer", who, r)
		}
		if u := eval[string](tb, `location.href`); strings.Contains(u, "#") || !strings.HasPrefix(u, srv.URL) {
			t.Errorf("%s: the chat's tab is at %s", who, u)
		}
	}
	log := srv.logText()
	for name, secret := range map[string]string{"the owner's token": token, "the share token": inv.Token} {
		if strings.Contains(log, secret) {
			t.Errorf("the server's log holds %s", name)
		}
	}
}

// TestCardLinkNamesItsSite: a card's link with a label (hermes's words,
// which may name another address) says beside it the site it opens, as
// the browser's address bar would name it (an internationalized name in
// its xn-- form): on a phone, with no status bar on hover, that is the
// only place the reader learns where the link goes before pressing it.
func TestCardLinkNamesItsSite(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	card, _ := json.Marshal(map[string]any{"fallback_text": "the run", "blocks": []map[string]any{
		{"type": "link", "url": "https://evil.example/x", "label": "https://ci.example.com/run/1"},
		{"type": "link", "url": "https://\u0430pple.example/login", "label": "Sign in to apple.example"},
	}})
	if _, stderr, err := srv.cliRun(card, "card", threadOf(token), "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	a.waitJS(soon, "the card's links", `document.querySelectorAll("#log .card a[href]").length === 2`)
	got := eval[[]string](a, `[...document.querySelectorAll("#log .card .card-link")].map((p) => p.textContent)`)
	for i, host := range []string{"evil.example", "xn--pple-43d.example"} {
		if i >= len(got) || !strings.Contains(got[i], "("+host+")") {
			t.Errorf("link %d reads %q, want it to name %s", i, got, host)
		}
	}
}
