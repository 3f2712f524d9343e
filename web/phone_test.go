package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// TestPhoneWidthOpensAtTheNewestMessage: a conversation longer than the
// screen, opened at a phone's width (390×844), shows its newest message
// above the composer, with the header on one row (before, the header
// wrapped "New" onto a second row once the status said "live", after the
// page had scrolled: the newest message stayed 43 px under the composer,
// on every load); and keeps it there when the screen shrinks (a phone's
// keyboard opening).
func TestPhoneWidthOpensAtTheNewestMessage(t *testing.T) {
	srv := startServer(t)
	token := strings.Repeat("5a", 32)
	thread := threadOf(token)
	for i := range 12 {
		post(t, srv.URL, token, "Question "+strconv.Itoa(i)+": what does step "+strconv.Itoa(i)+" of the deploy do, and may it run now?", "operator")
	}
	srv.reply(thread, "Step 12 rebuilds the images.\nIt may run now: nothing else is queued.")

	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.adopt(srv.URL, token)
	for load := range 3 {
		if load > 0 {
			tb.open(srv.URL)
		}
		tb.waitState(live, "ws")
		tb.waitShown(soon, "Step 12 rebuilds the images.\nIt may run now: nothing else is queued.")
		tb.waitJS(soon, "the header on one row", `(() => {
			const kids = [...document.querySelector("header.bar").children].filter(e => e.getBoundingClientRect().width > 0);
			const first = kids[0].getBoundingClientRect();
			return kids.every(k => { const r = k.getBoundingClientRect(); return r.top < first.bottom && r.bottom > first.top; });
		})()`)
		tb.waitJS(soon, "the newest message above the composer (load "+strconv.Itoa(load+1)+")", `(() => {
			const r = document.querySelector("#log > li:last-child").getBoundingClientRect();
			const composer = document.getElementById("composer").getBoundingClientRect();
			return r.height > 0 && r.bottom <= composer.top + 1;
		})()`)
	}
	// Which conversation this is: its thread id, short in the header,
	// whole in the tab's title.
	if got := eval[string](tb, `document.getElementById("thread-id").textContent`); got != thread[:8] {
		t.Errorf("the header names the thread %q, want %q", got, thread[:8])
	}
	if got := eval[string](tb, `document.title`); got != "chatrelay · "+thread {
		t.Errorf("the tab's title is %q, want it to name thread %s", got, thread)
	}
	// The keyboard opens: the screen loses half its height, and a reader
	// at the end stays at the end.
	tb.do(soon, "a phone's screen with its keyboard open", chromedp.EmulateViewport(390, 420, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.waitJS(soon, "the newest message above the composer, the keyboard open", `(() => {
		const r = document.querySelector("#log > li:last-child").getBoundingClientRect();
		const composer = document.getElementById("composer").getBoundingClientRect();
		return r.height > 0 && r.bottom <= composer.top + 1;
	})()`)
	// Nothing the page asks for is missing (it asked for /favicon.ico,
	// a 404, on every load).
	for _, line := range strings.Split(srv.logText(), "\n") {
		if strings.Contains(line, "status=404") {
			t.Errorf("the page asked for something missing: %s", line)
		}
	}
}

// TestLongNamesStayInThePage: names with no place to break (a share link's
// name is up to 64 code points, a reaction up to 64) stay inside the page
// at a phone's width (390×844): the participant page's bar keeps one row
// and cuts its own name with an ellipsis (the whole name in its tooltip),
// "Also here" wraps, and on both pages a guest's name and a reaction wrap
// inside their message. Before, the participant page grew 835 px wider
// than the screen (it scrolled sideways, its buttons out of sight), and on
// the owner's page the guest's name and the reaction ran out of their
// message.
func TestLongNamesStayInThePage(t *testing.T) {
	srv := startServer(t)
	token := strings.Repeat("6b", 32)
	post(t, srv.URL, token, "Who is in?", "operator")
	long := strings.Repeat("W", 64)
	alex := invite(t, srv.URL, token, map[string]any{"name": long, "role": "commenter"})
	invite(t, srv.URL, token, map[string]any{"name": strings.Repeat("Z", 64), "role": "viewer"})
	if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "Authorization", "Bearer "+alex.Token, map[string]any{"text": "I am in."}); status != http.StatusCreated {
		t.Fatalf("the guest's post: %d %s", status, raw)
	}
	first := poll2(t, srv.URL, token)[0]
	if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/react", "Authorization", "Bearer "+alex.Token, map[string]any{"message_id": first.ID, "emoji": strings.Repeat("Q", 64)}); status != http.StatusOK {
		t.Fatalf("the guest's reaction: %d %s", status, raw)
	}

	// inPage lists what runs out of the page or out of its message.
	const inPage = `(() => {
		const out = [];
		const name = (e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className && typeof e.className === "string" ? "." + e.className.split(" ")[0] : "");
		const de = document.documentElement;
		if (de.scrollWidth > de.clientWidth) out.push("the page is " + (de.scrollWidth - de.clientWidth) + " px wider than the screen");
		for (const e of document.querySelectorAll("header.bar > *, #others")) {
			const r = e.getBoundingClientRect();
			if (r.width > 0 && r.right > de.clientWidth + 0.5) out.push(name(e) + " ends at " + Math.round(r.right) + " px");
		}
		for (const li of document.querySelectorAll("#log li")) {
			const box = li.getBoundingClientRect();
			for (const e of li.querySelectorAll(".meta > *, .reactions > *")) {
				const r = e.getBoundingClientRect();
				if (r.width > 0 && r.right > box.right + 0.5) out.push(name(e) + " runs " + Math.round(r.right - box.right) + " px out of its message");
			}
		}
		return out;
	})()`
	check := func(tb *tab, what string) {
		t.Helper()
		tb.waitShown(soon, "I am in.")
		tb.waitJS(soon, "the reaction shown", `[...document.querySelectorAll(".reactions > *")].some((e) => e.textContent.includes("QQQQ"))`)
		if out := eval[[]string](tb, inPage); len(out) > 0 {
			t.Errorf("%s at 390 px: %s", what, strings.Join(out, "; "))
		}
	}

	p := newWindow(t)
	p.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	p.open(alex.Link)
	p.waitState(live, "ws")
	check(p, "the participant page")
	p.waitJS(soon, "the bar on one row", onOneRow)
	if got := eval[string](p, `document.getElementById("me").title`); !strings.Contains(got, long) {
		t.Errorf("the bar's name has the tooltip %q, want the whole name", got)
	}

	o := newWindow(t)
	o.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	o.adopt(srv.URL, token)
	o.waitState(live, "ws")
	check(o, "the owner's page")
}

// TestFileSizeOnOneLine: at a phone's width, a file in the composer whose
// name fills the row keeps its size on one line beside it ("3.1 KiB";
// before, the name took the room and the size broke into "3.1" over
// "KiB").
func TestFileSizeOnOneLine(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tb.attachPNG("screenshot-of-the-failing-deploy-pipeline-2026-12-03.png", 800, 600)
	tb.waitJS(soon, "the file uploaded", `/KiB$/.test(document.querySelector("#files .file-status")?.textContent)`)
	lines := eval[int](tb, `(() => { const r = document.createRange(); r.selectNodeContents(document.querySelector("#files .file-status"));
		return new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size })()`)
	if lines != 1 {
		t.Errorf("the file's size %q takes %d lines, want 1", eval[string](tb, `document.querySelector("#files .file-status").textContent`), lines)
	}
}

// TestLongFileNameKeepsItsRemoveButton: at a phone's width, a file in the
// composer whose name has no place to break (no space, no hyphen) wraps
// inside its row, and its size and its × stay on the screen. (Before, the
// name ran out of the row and pushed its status and × out of sight: the
// file could not be taken out.)
func TestLongFileNameKeepsItsRemoveButton(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tb.attachPNG(strings.Repeat("verylongfilename", 6)+".png", 24, 18)
	tb.waitJS(soon, "the file uploaded", `/ B$/.test(document.querySelector("#files .file-status")?.textContent)`)
	out := eval[[]string](tb, `(() => {
		const row = document.querySelector("#files .file").getBoundingClientRect(), out = [];
		for (const e of document.querySelectorAll("#files .file > *")) {
			const r = e.getBoundingClientRect();
			if (r.right > row.right + 0.5 || r.right > document.documentElement.clientWidth + 0.5) out.push(e.className + " ends at " + Math.round(r.right) + " px, its row at " + Math.round(row.right));
		}
		return out })()`)
	if len(out) > 0 {
		t.Errorf("the file's row at 390 px: %s", strings.Join(out, "; "))
	}
	tb.click(`#files button[aria-label^="Remove"]`)
	tb.waitJS(soon, "the file taken out", `document.querySelectorAll("#files .file").length === 0`)
}

// TestZoomedPageKeepsTheConversationInSight: a desktop browser zoomed to
// 200 % (1280×800 is then 640×400 CSS px) and to 400 % (1280×1024 is then
// 320×256, WCAG's reflow size), and a phone held sideways (844×390): the
// conversation keeps more of the height than the composer, and shows
// lines of a reply, with the composer's label, field, Attach, count and
// Send all on the screen. Before, the composer kept its three lines of
// field and its own rows whatever the height: 187 px of 256 at 400 %, the
// conversation 29 px (no whole line of a reply), and 153 px of 400 at 200 %.
func TestZoomedPageKeepsTheConversationInSight(t *testing.T) {
	srv := startServer(t)
	tb, token := startConversation(t, srv.URL, "How did the deploy go?")
	srv.reply(threadOf(token), "Build 412 is live on every node.\nThe error rate is flat since.")
	tb.waitShown(soon, "Build 412 is live on every node.\nThe error rate is flat since.")
	for _, size := range []struct {
		name          string
		width, height int64
		scale         float64
	}{
		{"200 % of 1280×800", 640, 400, 2},
		{"400 % of 1280×1024", 320, 256, 4},
		{"a phone held sideways", 844, 390, 3},
	} {
		tb.do(soon, size.name, chromedp.EmulateViewport(size.width, size.height, chromedp.EmulateScale(size.scale)))
		tb.waitJS(soon, size.name+": the layout at its size", `document.documentElement.clientWidth === `+strconv.FormatInt(size.width, 10))
		got := eval[map[string]float64](tb, `(() => {
			const h = (id) => document.getElementById(id).getBoundingClientRect().height;
			const line = parseFloat(getComputedStyle(document.querySelector("#log .text")).lineHeight);
			return { conversation: h("conversation"), composer: h("composer"), line };
		})()`)
		if got["conversation"] <= got["composer"] || got["conversation"] < 3*got["line"] {
			t.Errorf("%s: the conversation is %.0f px tall, the composer %.0f px: want the conversation taller, and 3 lines (%.0f px) at least",
				size.name, got["conversation"], got["composer"], 3*got["line"])
		}
		off := eval[[]string](tb, `[..."label[for=text] #text #attach #count #send".split(" ")].filter((s) => {
			const r = document.querySelector(s).getBoundingClientRect();
			return !(r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth + 0.5 && r.top >= 0 && r.bottom <= innerHeight + 0.5);
		})`)
		if len(off) > 0 {
			t.Errorf("%s: not whole on the screen: %v", size.name, off)
		}
	}
}

// TestNarrowestPhoneKeepsTheBarOnTheScreen: at 320 px, the narrowest
// phones' width and WCAG's reflow width (a desktop at 400 %), the owner's
// bar with People and Devices offered keeps every button on the screen,
// the page does not scroll sideways, and the thread's short id shows whole
// (the name "chatrelay" gives way first, cut with an ellipsis). Before,
// New went 34 px past the screen's edge, the page scrolled sideways, and
// the bar read "N".
func TestNarrowestPhoneKeepsTheBarOnTheScreen(t *testing.T) {
	srv := startServer(t)
	tb, token := startConversation(t, srv.URL, "Is build 412 green?")
	thread := threadOf(token)
	tb.do(soon, "a 320 px phone", chromedp.EmulateViewport(320, 568, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	tb.waitJS(soon, "People and Devices offered at 320 px", `document.documentElement.clientWidth === 320 &&
		!document.getElementById("people-open").hidden && !document.getElementById("devices-open").hidden`)
	off := eval[[]string](tb, `(() => {
		const vw = document.documentElement.clientWidth, out = [];
		if (document.documentElement.scrollWidth > vw) out.push("the page is " + document.documentElement.scrollWidth + " px wide");
		for (const e of document.querySelectorAll("header.bar > *")) {
			const r = e.getBoundingClientRect();
			if (r.width > 0 && (r.left < 0 || r.right > vw + 0.5)) out.push((e.id || e.tagName) + " spans " + Math.round(r.left) + "–" + Math.round(r.right) + " px");
		}
		return out;
	})()`)
	if len(off) > 0 {
		t.Errorf("at 320 px: %v", off)
	}
	id := eval[[]float64](tb, `(() => { const e = document.getElementById("thread-id"); return [e.scrollWidth, e.clientWidth] })()`)
	if got := eval[string](tb, `document.getElementById("thread-id").textContent`); got != thread[:8] || id[0] > id[1] {
		t.Errorf("the bar names the thread %q in %.0f of its %.0f px, want %q whole", got, id[1], id[0], thread[:8])
	}
}

// TestStatusDotTellsTheStateByItsShape: at a phone's width the bar's status
// words are cut away and its dot is left to tell the state, which it did by
// its colour alone (WCAG 1.4.1: green, amber, red; and in the browser's
// forced colours, a high-contrast mode, by nothing, its fill taken away).
// The dot is now a filled disc when live, a ring while connecting or
// polling, and a hollow square offline, in forced colours too.
func TestStatusDotTellsTheStateByItsShape(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	// The state is set on the bar as app.js sets it, to see each one drawn.
	shapes := func() map[string]string {
		return eval[map[string]string](tb, `(() => {
			const status = document.getElementById("status"), dot = status.querySelector(".dot"), live = status.dataset.state, out = {};
			for (const state of ["ws", "sse", "polling", "connecting", "offline", "ended"]) {
				status.dataset.state = state;
				// a fill or a border is seen only in another colour than what is behind the dot
				const opaque = (c) => !/^rgba\(.*, 0\)$|^transparent$/.test(c);
				let behind = "rgb(255, 255, 255)";
				for (let e = status; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (opaque(c)) { behind = c; break; } }
				const cs = getComputedStyle(dot);
				const filled = opaque(cs.backgroundColor) && cs.backgroundColor !== behind;
				const ring = parseFloat(cs.borderTopWidth) > 0 && cs.borderTopStyle !== "none" && opaque(cs.borderTopColor) && cs.borderTopColor !== behind;
				out[state] = (filled ? "filled" : ring ? "hollow" : "invisible") + " " + (parseFloat(cs.borderTopLeftRadius) >= dot.offsetWidth / 2 ? "round" : "square");
			}
			status.dataset.state = live;
			return out;
		})()`)
	}
	// Three shapes, each for the states docs/web.md gives it: live (ws,
	// sse), on its way or polling (connecting, polling), not live
	// (offline, ended).
	groups := [][]string{{"ws", "sse"}, {"polling", "connecting"}, {"offline", "ended"}}
	check := func(mode string, got map[string]string) {
		t.Helper()
		seen := map[string]string{}
		for _, g := range groups {
			shape := got[g[0]]
			if strings.HasPrefix(shape, "invisible") {
				t.Errorf("%s: the dot is not drawn when %s", mode, g[0])
			}
			for _, state := range g[1:] {
				if got[state] != shape {
					t.Errorf("%s: the dot is drawn %s when %s and %s when %s, which docs/web.md gives one shape", mode, got[state], state, shape, g[0])
				}
			}
			if other, ok := seen[shape]; ok {
				t.Errorf("%s: the dot is drawn %s both when %s and when %s: only its colour tells them apart", mode, shape, other, g[0])
			}
			seen[shape] = g[0]
		}
	}
	check("colours", shapes())
	tb.do(soon, "forced colours", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "forced-colors", Value: "active"}}})
		return chromedp.Void{}, err
	})
	if !eval[bool](tb, `matchMedia("(forced-colors: active)").matches`) {
		t.Fatal("the page does not see forced colours")
	}
	check("forced colours", shapes())
}

// TestReactionButtonsAreWholeTargets: every reaction button under a
// message, at a phone's width and a desktop's, is a target of 24 × 24 CSS
// px at least (WCAG 2.2's target size, 2.5.8), and one nobody used yet is
// drawn at full strength with an outline that stands out from its
// message (3:1 at least, WCAG 1.4.11), in the light and the dark scheme.
// Before, the buttons were 19 px high, and an unused one was its emoji
// greyed at 40 % opacity with no outline: a control a person could hardly
// see, nor hit on a phone.
func TestReactionButtonsAreWholeTargets(t *testing.T) {
	srv := startServer(t)
	tb, _ := startConversation(t, srv.URL, "Is build 412 green?")
	for _, size := range []struct {
		name          string
		width, height int64
		scheme        string
	}{{"a phone", 390, 844, "light"}, {"a desktop", 1280, 900, "light"}, {"a phone, dark", 390, 844, "dark"}} {
		tb.do(soon, size.name, chromedp.EmulateViewport(size.width, size.height), func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: size.scheme}}})
			return chromedp.Void{}, err
		})
		tb.waitJS(soon, size.name+": the width", fmt.Sprintf(`document.documentElement.clientWidth === %d`, size.width))
		problems := eval[[]string](tb, `(() => {
			const rgb = (c) => c.match(/[\d.]+/g).map(Number);
			const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
				.reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
			const contrast = (a, b) => { const [x, y] = [lum(rgb(a)), lum(rgb(b))].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
			const fill = (e) => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor; if (rgb(c)[3] !== 0) return c; } return "rgb(255, 255, 255)"; };
			const out = [], buttons = document.querySelectorAll("#log .reactions .react");
			if (buttons.length === 0) out.push("no reaction button");
			for (const b of buttons) {
				const r = b.getBoundingClientRect(), name = b.getAttribute("aria-label") || b.textContent.trim();
				if (r.width < 24 || r.height < 24) out.push(name + ": " + r.width.toFixed(1) + " × " + r.height.toFixed(1) + " px");
				if (!b.classList.contains("unused")) continue;
				let o = 1;
				for (let e = b; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
				const s = getComputedStyle(b);
				if (o < 1 || s.filter !== "none") out.push(name + ": drawn at opacity " + o + ", filter " + s.filter);
				const c = contrast(s.borderTopColor, fill(b.parentElement));
				if (s.borderTopStyle === "none" || parseFloat(s.borderTopWidth) === 0 || rgb(s.borderTopColor)[3] === 0 || c < 3)
					out.push(name + ": outline " + s.borderTopStyle + " " + s.borderTopColor + " at " + c.toFixed(2) + ":1 on " + fill(b.parentElement));
			}
			return out;
		})()`)
		if len(problems) > 0 {
			t.Errorf("%s (%d × %d, %s): %v", size.name, size.width, size.height, size.scheme, problems)
		}
	}
}

// TestTitleReadWholeAtANarrowWidth: a conversation's title (chatrelay
// open) that the bar cuts at 320 px, the narrowest phones' width and
// WCAG's reflow width, can be read whole on the screen, not only in a
// tooltip (which a touch screen and the keyboard never show); where the
// bar shows it whole (a desktop), it is shown once. Before, at 320 px the
// bar read "Deploy bu…" and the rest was in the title attribute alone.
func TestTitleReadWholeAtANarrowWidth(t *testing.T) {
	srv := startServer(t)
	const title = "Deploy build 412 to production tonight?"
	out := srv.cli("open", "--title", title, "--text", "Build 412 passed.", "--public-url", strings.TrimSuffix(srv.URL, "/"))
	link := ""
	if i := strings.Index(string(out), `"link":"`); i >= 0 {
		link, _, _ = strings.Cut(string(out[i+len(`"link":"`):]), `"`)
	}
	if link == "" {
		t.Fatalf("chatrelay open printed %q", out)
	}
	tb := newWindow(t)
	tb.do(soon, "a 320 px phone", chromedp.EmulateViewport(320, 568, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	tb.open(link)
	tb.waitShown(soon, "Build 412 passed.")
	tb.waitJS(soon, "the title in the bar", `document.getElementById("thread-id").textContent === `+js(title))
	// Each element, out of every tooltip, that shows the title whole: its
	// text is the title, it is drawn, on the screen, and not cut.
	const whole = `(() => {
		const out = [];
		for (const e of document.querySelectorAll("body *")) {
			if (e.textContent.trim() !== ` + "`" + title + "`" + ` || [...e.children].some((c) => c.textContent.trim() === e.textContent.trim())) continue;
			const r = e.getBoundingClientRect();
			let cut = e.scrollWidth > e.clientWidth + 0.5;
			for (let p = e.parentElement; p && !cut; p = p.parentElement) {
				const pr = p.getBoundingClientRect(), s = getComputedStyle(p);
				if (s.overflowX !== "visible" && (r.left < pr.left - 0.5 || r.right > pr.right + 0.5)) cut = true;
			}
			if (r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= innerWidth + 0.5 && r.top >= 0 && r.bottom <= innerHeight + 0.5 && !cut) out.push(e.id || e.className || e.tagName);
		}
		return out;
	})()`
	tb.waitJS(soon, "the title read whole at 320 px", whole+`.length >= 1`)
	tb.do(soon, "a desktop", chromedp.EmulateViewport(1280, 900))
	tb.waitJS(soon, "the width", `document.documentElement.clientWidth === 1280`)
	tb.waitJS(soon, "the title shown whole once at 1280 px", whole+`.length === 1`)
}

// TestStatusWordsWholeOrNotDrawn: the bar draws its status words whole,
// or their first word alone, or none where it has no room for "live"
// (the dot then tells the state by its shape:
// TestStatusDotTellsTheStateByItsShape); the words stay whole for screen
// readers and in the tooltip. Before, at a phone's width the bar read
// "● l…", a letter of "live" that tells no one anything.
func TestStatusWordsWholeOrNotDrawn(t *testing.T) {
	srv := startServer(t)
	tb, _ := startConversation(t, srv.URL, "Is build 412 green?")
	for _, size := range []struct {
		name          string
		width, height int64
		mobile        bool
		forced        bool   // the browser's forced colours (a high-contrast mode)
		want          string // the words drawn; "" for any whole words or none
	}{
		{"a desktop", 1280, 800, false, false, "live"},
		{"a phone", 390, 844, true, false, ""},
		{"the narrowest phone", 320, 568, true, false, ""},
		{"a phone in forced colours", 390, 844, true, true, ""},
		{"a desktop again", 1280, 800, false, true, "live"},
	} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(2)}
		if size.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		tb.do(soon, size.name, chromedp.EmulateViewport(size.width, size.height, opts...))
		if size.forced {
			tb.do(soon, "forced colours", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
				_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
					Features: []*emulation.MediaFeature{{Name: "forced-colors", Value: "active"}}})
				return chromedp.Void{}, err
			})
		}
		tb.waitJS(soon, size.name+"'s width, People offered", fmt.Sprintf(`document.documentElement.clientWidth === %d && !document.getElementById("people-open").hidden`, size.width))
		// The words are fitted again after a resize (a ResizeObserver's
		// turn): wait for what a user would see, bounded by soon.
		drawn := `(() => {
			const e = document.getElementById("status-text"), box = e.getBoundingClientRect();
			const parts = e.children.length ? [...e.children] : [e];
			const drawn = parts.filter((p) => getComputedStyle(p).color !== "rgba(0, 0, 0, 0)");
			const right = (p) => p === e ? box.left + e.scrollWidth : p.getBoundingClientRect().right;
			return {whole: drawn.every((p) => right(p) <= box.right + 0.5), words: drawn.map((p) => p.textContent).join(""),
				all: e.textContent, title: document.getElementById("status").title};
		})()`
		tb.waitJS(soon, fmt.Sprintf("%s: the status's words drawn whole (%q)", size.name, size.want),
			fmt.Sprintf(`(() => { const d = %s; return d.whole && (%q === "" || d.words === %q) })()`, drawn, size.want, size.want))
		got := eval[map[string]any](tb, drawn)
		if got["all"] != "live · WebSocket" || got["title"] != "live · WebSocket" {
			t.Errorf("%s: the status reads %q, its tooltip %q, want both %q", size.name, got["all"], got["title"], "live · WebSocket")
		}
	}
}
