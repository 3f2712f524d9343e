package web_test

// The page on the v2 view (issue #9), driven in real Chromium against a
// real chatrelay process: hermes's approvals and questions (made with the
// host CLI, in its own process), reactions, cards and idempotent posts.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// asked is what `chatrelay ask` prints.
type asked struct {
	MessageID   string      `json:"message_id"`
	Interaction interaction `json:"interaction"`
}

// ask has hermes ask a question with the host CLI.
func (s *server) ask(thread string, args ...string) asked {
	s.t.Helper()
	var a asked
	out := s.cli(append([]string{"ask", thread}, args...)...)
	if err := json.Unmarshal(out, &a); err != nil || a.Interaction.ID == "" {
		s.t.Fatalf("chatrelay ask printed %s: %v", out, err)
	}
	return a
}

// check reads an interaction's state with the host CLI.
func (s *server) check(thread, ix string) interaction {
	s.t.Helper()
	var a asked
	out := s.cli("check", thread, ix)
	if err := json.Unmarshal(out, &a); err != nil {
		s.t.Fatalf("chatrelay check printed %s: %v", out, err)
	}
	return a.Interaction
}

// ixSel is the CSS selector of an interaction's card.
func ixSel(id string) string { return `.ix[data-ix="` + id + `"]` }

// msgSel is the CSS selector of a message's list item.
func msgSel(id string) string { return `#log li[data-id="` + id + `"]` }

// waitIx waits until the tab shows the interaction in state.
func (tb *tab) waitIx(d time.Duration, id, state string) time.Duration {
	tb.t.Helper()
	return tb.waitJS(d, "interaction "+id+" "+state,
		`document.querySelector(`+js(ixSel(id))+`)?.dataset.state === `+js(state))
}

// outcomeOf is the outcome a tab shows on an interaction's card.
func (tb *tab) outcomeOf(id string) string {
	tb.t.Helper()
	return eval[string](tb, `document.querySelector(`+js(ixSel(id)+" .ix-outcome")+`)?.textContent ?? ""`)
}

// buttonsOf lists the buttons a tab shows on an interaction's card, as
// "TAG:text" (so a clickable div would show).
func (tb *tab) buttonsOf(id string) []string {
	tb.t.Helper()
	return eval[[]string](tb, `[...document.querySelectorAll(`+js(ixSel(id)+" .ix-actions > *")+`)]
		.map((b) => b.tagName + ":" + (b.querySelector(".choice-label")?.textContent ?? b.textContent))`)
}

// click clicks the element at sel as a mouse does.
func (tb *tab) click(sel string) {
	tb.t.Helper()
	if strings.Contains(sel, "data-decision") || strings.Contains(sel, "data-choice") {
		// An answer button takes a press only once the page has been
		// seen for a moment (TestAnswerNotTakenAsThePageAppears).
		tb.waitJS(soon, "the answers armed", `document.documentElement.dataset.answers === "armed"`)
	}
	// A list the page draws again (People, Devices: a stream's event
	// reloads it) can replace the node between its lookup and the click:
	// "Could not find node", and nothing was clicked. The click is then
	// made again on the node that replaced it, a few times at most.
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
		err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel)))
		cancel()
		if err == nil {
			return
		}
		if try == 3 || !strings.Contains(err.Error(), "Could not find node") {
			tb.t.Fatalf("click %s: %v%s", sel, err, tb.dump())
		}
	}
}

// watchGone starts a watch in the tab that resolves window.__gone with the
// time (Date.now()) when nothing matches sel any more.
func (tb *tab) watchGone(sel string) {
	tb.t.Helper()
	eval[bool](tb, `(() => {
		window.__gone = new Promise((resolve) => {
			const done = () => !document.querySelector(`+js(sel)+`) && (resolve(Date.now()), true);
			if (done()) return;
			new MutationObserver((_, o) => done() && o.disconnect())
				.observe(document.getElementById("log"), { childList: true, subtree: true, attributes: true });
		});
		return true;
	})()`)
}

// watchAnnouncer records every text the tab's announcer is given.
func (tb *tab) watchAnnouncer() {
	tb.t.Helper()
	eval[bool](tb, `(() => {
		window.__said = [];
		const a = document.getElementById("announcer");
		new MutationObserver(() => a.textContent && window.__said.push(a.textContent))
			.observe(a, { childList: true, characterData: true, subtree: true });
		return true;
	})()`)
}

func (tb *tab) said() []string {
	tb.t.Helper()
	return eval[[]string](tb, `window.__said`)
}

// startConversation opens a tab on u, live, with one message written (the
// host CLI answers existing threads only), and returns it with its token.
func startConversation(t *testing.T, u, first string) (*tab, string) {
	t.Helper()
	tb := newWindow(t)
	tb.open(u)
	tb.waitState(live, "ws")
	tb.write(first)
	tb.waitShown(soon, first)
	return tb, tb.token()
}

// An approval shows as a card (title, prompt, details, a countdown that is
// not announced, real Approve/Deny buttons). Approved in one tab, the
// buttons go and the outcome shows in every tab at once: a second tab of
// the same browser (which shares the first's stream) and a tab of another
// browser (its own stream).
func TestApprovalInEveryTabAtOnce(t *testing.T) {
	srv := startServer(t)
	tabs, token := threeTabs(t, srv, "May I deploy build 412?")
	thread := threadOf(token)
	a, a2, b := tabs[0], tabs[1], tabs[2]

	q := srv.ask(thread, "--approval", "Deploy build 412 to production?", "--title", "deploy",
		"--detail", "build=412", "--detail", "branch=main", "--timeout", "15m")
	ix := q.Interaction.ID
	for _, tb := range tabs {
		tb.waitIx(soon, ix, "pending")
	}

	type card struct {
		Kind, Title, Prompt, Countdown, Deadline string
		Details                                  [][2]string
		Hidden                                   bool
	}
	got := eval[card](b, `(() => { const c = document.querySelector(`+js(ixSel(ix))+`);
		return {
			kind: c.querySelector(".ix-kind").textContent,
			title: c.querySelector("h2").textContent,
			prompt: c.querySelector(".ix-prompt").textContent,
			details: [...c.querySelectorAll("dl dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]),
			countdown: c.querySelector(".ix-countdown").textContent,
			hidden: !!c.querySelector(".ix-countdown").closest("[aria-hidden=true]"),
			deadline: c.querySelector(".ix-deadline").textContent,
		} })()`)
	if got.Kind != "Approval requested" || got.Title != "deploy" || got.Prompt != "Deploy build 412 to production?" {
		t.Errorf("the card reads %+v", got)
	}
	if !slices.Equal(got.Details, [][2]string{{"build", "412"}, {"branch", "main"}}) {
		t.Errorf("details %v, want build 412 and branch main as a definition list", got.Details)
	}
	if !strings.HasPrefix(got.Countdown, "Expires in 14:5") && !strings.HasPrefix(got.Countdown, "Expires in 15:00") {
		t.Errorf("countdown reads %q, want about 15 minutes", got.Countdown)
	}
	if !got.Hidden || !strings.Contains(got.Deadline, "Answer by ") {
		t.Errorf("the ticking countdown must be hidden from screen readers, which read the deadline once: %+v", got)
	}
	if bs := b.buttonsOf(ix); !slices.Equal(bs, []string{"BUTTON:Approve", "BUTTON:Deny"}) {
		t.Errorf("the card's controls are %v, want the buttons Approve and Deny", bs)
	}

	// The countdown ticks, and nothing is announced while it does.
	for _, tb := range []*tab{a2, b} {
		tb.watchAnnouncer()
		tb.watchGone(ixSel(ix) + " .ix-actions")
	}
	tb := b
	before := eval[string](tb, `document.querySelector(`+js(ixSel(ix)+" .ix-countdown")+`).textContent`)
	tb.waitJS(3*time.Second, "the countdown to tick", `document.querySelector(`+js(ixSel(ix)+" .ix-countdown")+`).textContent !== `+js(before))
	if s := b.said(); len(s) != 0 {
		t.Errorf("announced while the countdown ticked: %q", s)
	}

	eval[bool](a, `(document.addEventListener("click", () => (window.__clickedAt = Date.now()), { capture: true, once: true }), true)`)
	a.click(ixSel(ix) + ` button[data-decision="approve"]`)
	clicked := eval[float64](a, `window.__clickedAt`)
	for _, other := range []struct {
		tb   *tab
		what string
	}{{a2, "a second tab of the same browser"}, {b, "a tab of another browser"}} {
		gone := eval[float64](other.tb, `window.__gone`)
		t.Logf("approved in one tab: the buttons went in %s %.0f ms after the click", other.what, gone-clicked)
	}
	for _, tb := range tabs {
		tb.waitIx(soon, ix, "approved")
		if o := tb.outcomeOf(ix); !strings.HasPrefix(o, "Approved by you") {
			t.Errorf("outcome reads %q, want Approved by you", o)
		}
		if bs := tb.buttonsOf(ix); len(bs) != 0 {
			t.Errorf("buttons left after the approval: %v", bs)
		}
	}
	// The outcome is announced once in each tab, by the polite announcer.
	for _, tb := range []*tab{a2, b} {
		tb.waitJS(soon, "the outcome announced", `window.__said.length > 0`)
		if s := tb.said(); !slices.Equal(s, []string{"deploy: Approved by you."}) {
			t.Errorf("announced %q, want the outcome once", s)
		}
	}
	// The keyboard focus was on Approve: it moves to the outcome, not to the page.
	if f := eval[string](a, `document.activeElement.className`); f != "ix-outcome" {
		t.Errorf("focus after approving is on %q, want the outcome", f)
	}
	if st := srv.check(thread, ix); st.State != "approved" || st.AnsweredBy != "operator" || st.Answer.Decision != "approve" {
		t.Errorf("chatrelay check reads %+v", st)
	}
}

// An input shows its choices as buttons, and with allow_text a labelled
// text field; it is answered by a choice in one browser and by text in
// another, and the answer shows in both.
func TestInputByChoiceAndByText(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "ready when you are")
	thread := threadOf(token)
	b := newWindow(t)
	b.adopt(srv.URL, token)
	b.waitState(live, "ws")

	// Choices only.
	q := srv.ask(thread, "--input", "Which branch?", "--title", "branch", "--choice", "main=Main branch", "--choice", "release")
	ix := q.Interaction.ID
	for _, tb := range []*tab{a, b} {
		tb.waitIx(soon, ix, "pending")
	}
	if bs := a.buttonsOf(ix); !slices.Equal(bs, []string{"BUTTON:Main branch", "BUTTON:release"}) {
		t.Errorf("choices drawn as %v, want two buttons", bs)
	}
	if n := eval[int](a, `document.querySelectorAll(`+js(ixSel(ix)+" input")+`).length`); n != 0 {
		t.Errorf("an input without allow_text has %d text fields", n)
	}
	a.click(ixSel(ix) + ` button[data-choice="main"]`)
	for _, tb := range []*tab{a, b} {
		tb.waitIx(soon, ix, "answered")
		if o := tb.outcomeOf(ix); !strings.HasPrefix(o, "Answered by you: Main branch") {
			t.Errorf("outcome reads %q", o)
		}
	}
	if st := srv.check(thread, ix); st.State != "answered" || st.Answer.Value != "main" {
		t.Errorf("chatrelay check reads %+v, want answered main", st)
	}

	// Text only, answered from the other browser with the keyboard.
	q = srv.ask(thread, "--input", "Any notes for the release?", "--allow-text")
	ix = q.Interaction.ID
	for _, tb := range []*tab{a, b} {
		tb.waitIx(soon, ix, "pending")
	}
	if lbl := eval[string](b, `(() => { const i = document.querySelector(`+js(ixSel(ix)+" input")+`);
		return document.querySelector("label[for='" + i.id + "']").textContent })()`); lbl != "Your answer" {
		t.Errorf("the text field is labelled %q", lbl)
	}
	note := "ship it <b>now</b> & tell QA"
	b.do(5*time.Second, "type the answer", chromedp.SendKeys(chromedp.CSS(ixSel(ix)+" input"), note))
	b.enter(false)
	for _, tb := range []*tab{a, b} {
		tb.waitIx(soon, ix, "answered")
		if o := tb.outcomeOf(ix); !strings.HasPrefix(o, "Answered by you: "+note) {
			t.Errorf("outcome reads %q, want the text as written", o)
		}
		if n := eval[int](tb, `document.querySelectorAll("#log b").length`); n != 0 {
			t.Errorf("the answer was parsed as HTML")
		}
	}
	if st := srv.check(thread, ix); st.Answer.Value != note {
		t.Errorf("chatrelay check reads %+v, want the text", st)
	}

	// Choices and text: both ways are offered; the Send button answers.
	q = srv.ask(thread, "--input", "Tag it?", "--choice", "yes", "--allow-text")
	ix = q.Interaction.ID
	a.waitIx(soon, ix, "pending")
	if bs := a.buttonsOf(ix); !slices.Equal(bs, []string{"BUTTON:yes"}) {
		t.Errorf("choices drawn as %v", bs)
	}
	// An empty answer is not sent.
	a.click(ixSel(ix) + " .ix-text button")
	a.waitJS(soon, "the empty answer refused", `document.querySelector(`+js(ixSel(ix)+" .ix-error")+`).textContent === "Write an answer first."`)
	a.do(5*time.Second, "type", chromedp.SendKeys(chromedp.CSS(ixSel(ix)+" input"), "as v412"))
	a.click(ixSel(ix) + " .ix-text button")
	b.waitIx(soon, ix, "answered")
	if o := b.outcomeOf(ix); !strings.HasPrefix(o, "Answered by you: as v412") {
		t.Errorf("outcome reads %q", o)
	}
}

// What the page cannot hear still ends right: an approval hermes canceled
// while the page was cut off is answered 409, and the card shows the
// cancel the 409 carries; a pending approval past its deadline shows as
// expired before any word from the server.
func TestInteractionClosedWhileCutOff(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	a, token := startConversation(t, g.URL, "anything to approve?")
	thread := threadOf(token)
	a.watchAnnouncer()

	canceled := srv.ask(thread, "--approval", "Rotate the API keys?", "--title", "rotate-keys").Interaction.ID
	a.waitIx(soon, canceled, "pending")
	soonOver := srv.ask(thread, "--approval", "Restart the worker?", "--title", "restart", "--timeout", "4s").Interaction
	a.waitIx(soon, soonOver.ID, "pending")

	// Cut the page off from every read; its requests still go through.
	g.noPoll.Store(true)
	g.refuse(true, true)
	a.waitJS(soon, "the page to lose its stream", `document.getElementById("status").dataset.state !== "ws"`)

	srv.cli("cancel", thread, canceled)
	if st := a.outcomeOf(canceled); st != "" {
		t.Fatalf("the page heard of the cancel while cut off: %q", st)
	}
	a.click(ixSel(canceled) + ` button[data-decision="approve"]`)
	a.waitIx(soon, canceled, "canceled")
	if o := a.outcomeOf(canceled); !strings.HasPrefix(o, "Canceled by hermes") {
		t.Errorf("after the 409 the card reads %q, want the cancel", o)
	}
	a.waitJS(soon, "the late answer explained", `document.querySelector(`+js(ixSel(canceled)+" .ix-error")+`).textContent === "Your answer was not taken: this had already closed."`)
	if st := srv.check(thread, canceled); st.State != "canceled" {
		t.Errorf("the late approval changed the interaction: %+v", st)
	}

	took := a.waitIx(10*time.Second, soonOver.ID, "expired")
	late := time.Since(time.UnixMilli(soonOver.Deadline))
	t.Logf("a cut-off page showed the approval expired %v after its deadline (waited %v)", late.Round(time.Millisecond), took.Round(time.Millisecond))
	if o := a.outcomeOf(soonOver.ID); o != "Expired: no answer in time" {
		t.Errorf("expired card reads %q", o)
	}
	if bs := a.buttonsOf(soonOver.ID); len(bs) != 0 {
		t.Errorf("an expired card keeps its buttons: %v", bs)
	}

	// Back online: the server's own word changes nothing on the page, and
	// nothing is announced twice.
	g.noPoll.Store(false)
	g.refuse(false, false)
	eval[bool](a, `(dispatchEvent(new Event("online")), true)`)
	a.waitState(live, "ws")
	if st := srv.check(thread, soonOver.ID); st.State != "expired" {
		t.Errorf("the server reads %+v, want expired", st)
	}
	srv.reply(thread, "done")
	a.waitShown(soon, "done") // every change before it has arrived too
	a.waitIx(soon, soonOver.ID, "expired")
	a.waitIx(soon, canceled, "canceled")
	want := []string{"rotate-keys: Canceled by hermes.", "restart: Expired: no answer in time."}
	if s := a.said(); !slices.Equal(s, want) {
		t.Errorf("announced %q, want %q", s, want)
	}
}

// Reactions: the set under every message, hermes's (any emoji) shown with
// counts; one added or removed in one tab shows in the others.
func TestReactionsAcrossTabs(t *testing.T) {
	srv := startServer(t)
	tabs, token := threeTabs(t, srv, "ship it?")
	thread := threadOf(token)
	a, a2, b := tabs[0], tabs[1], tabs[2]

	srv.reply(thread, "on it")
	for _, tb := range tabs {
		tb.waitShown(soon, "on it")
	}
	msgs := poll2(t, srv.URL, token)
	mine, hermes := msgs[0].ID, msgs[1].ID

	// reactionsOf reads a message's reaction buttons in a tab.
	type button struct {
		Emoji, Label, Count string
		Pressed             string
		Tag                 string
	}
	reactionsOf := func(tb *tab, id string) []button {
		return eval[[]button](tb, `[...document.querySelectorAll(`+js(msgSel(id)+" .reactions > *")+`)].map((b) => ({
			tag: b.tagName, emoji: b.dataset.emoji, label: b.getAttribute("aria-label"),
			count: b.querySelector(".n")?.textContent ?? "", pressed: b.getAttribute("aria-pressed") }))`)
	}
	set := []string{"👍", "❤️", "😄", "🎉", "👀", "🙏"}
	for _, id := range []string{mine, hermes} {
		bs := reactionsOf(a, id)
		if len(bs) != len(set) {
			t.Fatalf("message %s has %d reaction buttons, want the set of %d: %+v", id, len(bs), len(set), bs)
		}
		for i, bt := range bs {
			if bt.Tag != "BUTTON" || bt.Emoji != set[i] || bt.Pressed != "false" || bt.Count != "" {
				t.Errorf("reaction button %d: %+v", i, bt)
			}
		}
	}

	// hermes reacts from the host CLI, with one of the set and one not.
	srv.cli("react", thread, mine, "👀")
	srv.cli("react", thread, mine, "🚀")
	for _, tb := range tabs {
		tb.waitJS(soon, "hermes's reactions", `document.querySelector(`+js(msgSel(mine)+` button[data-emoji="🚀"]`)+`)?.getAttribute("aria-label") === "🚀, 1"`)
		bs := reactionsOf(tb, mine)
		if bs[4].Label != "eyes, 1" || bs[4].Count != "1" || bs[4].Pressed != "false" || len(bs) != 7 {
			t.Errorf("after hermes's reactions: %+v", bs)
		}
	}

	// The owner reacts in one tab: every tab shows it, pressed.
	pressed := func(id, emoji, label string) string {
		return `(() => { const b = document.querySelector(` + js(msgSel(id)+` button[data-emoji="`+emoji+`"]`) + `);
			return b?.getAttribute("aria-pressed") === "true" && b.getAttribute("aria-label") === ` + js(label) + ` })()`
	}
	a.click(msgSel(hermes) + ` button[data-emoji="👍"]`)
	start := time.Now()
	for _, tb := range []*tab{a2, b} {
		tb.waitJS(soon, "the reaction in another tab", pressed(hermes, "👍", "thumbs up, 1"))
	}
	t.Logf("a reaction added in one tab showed in the two others within %v", time.Since(start).Round(time.Millisecond))

	// From the other browser, with the keyboard: a reaction bar is one Tab
	// stop, whose arrow keys move along it; 👀 on the owner's message, now 2.
	if n := eval[[]int](b, `[...document.querySelectorAll("#log .reactions")].map((bar) => bar.querySelectorAll("button[tabindex='0']").length)`); !slices.Equal(n, []int{1, 1}) {
		t.Errorf("Tab stops per reaction bar: %v, want one each", n)
	}
	b.do(5*time.Second, "focus the reactions", chromedp.Focus(chromedp.CSS(msgSel(mine)+` .reactions button[tabindex="0"]`)))
	for range 4 {
		b.arrowRight()
	}
	if e := eval[string](b, `document.activeElement.dataset.emoji`); e != "👀" {
		t.Fatalf("four right arrows from 👍 focus %q, want 👀", e)
	}
	b.enter(false)
	for _, tb := range tabs {
		tb.waitJS(soon, "two 👀", pressed(mine, "👀", "eyes, 2"))
	}
	if r := poll2(t, srv.URL, token)[0].Reactions; !slices.Equal(r["👀"], []string{"hermes", "operator"}) {
		t.Errorf("the server holds %v", r)
	}

	// Pressed again, in the second tab: removed everywhere.
	a2.click(msgSel(hermes) + ` button[data-emoji="👍"]`)
	for _, tb := range tabs {
		tb.waitJS(soon, "the reaction removed", `(() => { const b = document.querySelector(`+js(msgSel(hermes)+` button[data-emoji="👍"]`)+`);
			return b.getAttribute("aria-pressed") === "false" && !b.querySelector(".n") })()`)
	}
	if r := poll2(t, srv.URL, token)[1].Reactions; len(r) != 0 {
		t.Errorf("hermes's message still has reactions %v", r)
	}
}

// Reactions over the rate window are refused with a notice, and nothing
// is shown as pressed that the server did not store.
func TestReactionRateLimited(t *testing.T) {
	srv := startServer(t, "--rate-thread", "2", "--rate-window", "1m")
	a, token := startConversation(t, srv.URL, "react to this")
	id := poll2(t, srv.URL, token)[0].ID
	for _, e := range []string{"👍", "❤️"} {
		a.click(msgSel(id) + ` button[data-emoji="` + e + `"]`)
		a.waitJS(soon, e+" pressed", `document.querySelector(`+js(msgSel(id)+` button[data-emoji="`+e+`"]`)+`).getAttribute("aria-pressed") === "true"`)
	}
	a.click(msgSel(id) + ` button[data-emoji="🎉"]`)
	a.waitJS(soon, "the rate-limit notice", `/Too many reactions for now; try again in \d+ s/.test(document.getElementById("notice-text").textContent)`)
	if p := eval[string](a, `document.querySelector(`+js(msgSel(id)+` button[data-emoji="🎉"]`)+`).getAttribute("aria-pressed")`); p != "false" {
		t.Errorf("a refused reaction shows pressed: %s", p)
	}
	if r := poll2(t, srv.URL, token)[0].Reactions; len(r) != 2 {
		t.Errorf("the server holds %v, want the two allowed", r)
	}
}

// Cards: one with a javascript: link cannot be sent (the CLI refuses it);
// one whose words hold markup renders them as text, with safe links.
func TestCardsAreText(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	thread := threadOf(token)

	for _, url := range []string{"javascript:window.__pwned=1", "data:text/html,<script>alert(1)</script>"} {
		bad := fmt.Sprintf(`{"fallback_text":"x","blocks":[{"type":"link","url":%q,"label":"open"}]}`, url)
		_, stderr, err := srv.cliRun([]byte(bad), "card", thread, "-")
		if err == nil || !strings.Contains(string(stderr), "invalid_card") {
			t.Errorf("chatrelay card with a %s link: %v %s, want refused with invalid_card", url[:5], err, stderr)
		}
	}
	if n := len(poll2(t, srv.URL, token)); n != 1 {
		t.Fatalf("a refused card was stored: %d messages", n)
	}

	const (
		title = `Build 412 <script>window.__pwned=1</script>`
		text  = `<img src=x onerror="window.__pwned=1"> and <b>bold</b>`
		code  = `<script>document.title = "pwned"</script>`
	)
	good, _ := json.Marshal(map[string]any{
		"title": title, "fallback_text": "Build 412: green",
		"blocks": []map[string]any{
			{"type": "text", "text": text},
			{"type": "fields", "fields": []map[string]string{{"label": "<i>status</i>", "value": "green"}, {"label": "took", "value": "4 min"}}},
			{"type": "link", "url": "https://example.com/builds/412?log=<full>", "label": "the log"},
			{"type": "link", "url": "http://example.com/artifacts"},
			{"type": "code", "text": code, "language": "html"},
		},
	})
	out, stderr, err := srv.cliRun(good, "card", thread, "-")
	if err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	var sentCard struct{ Message message2 }
	json.Unmarshal(out, &sentCard)
	sel := msgSel(sentCard.Message.ID) + " .card"
	a.waitJS(soon, "the card", `!!document.querySelector(`+js(sel)+`)`)

	type drawn struct {
		Title, Text, Code, Lang, Fallback string
		Fields                            [][2]string
		Links                             [][4]string
		Markup, Pwned                     bool
		DocTitle                          string
	}
	got := eval[drawn](a, `(() => { const c = document.querySelector(`+js(sel)+`);
		return {
			title: c.querySelector(".card-title").textContent,
			text: c.querySelector(".card-text").textContent,
			fields: [...c.querySelectorAll("dl dt")].map((dt) => [dt.textContent, dt.nextElementSibling.textContent]),
			links: [...c.querySelectorAll("a")].map((x) => [x.textContent, x.href, x.target, x.rel]),
			code: c.querySelector("pre > code").textContent,
			lang: c.querySelector("pre > code").dataset.language,
			markup: !!document.querySelector("#log script, #log img, #log b, #log i"),
			pwned: window.__pwned !== undefined,
			docTitle: document.title,
			fallback: c.closest("li").querySelector(":scope > .text")?.textContent ?? "",
		} })()`)
	want := drawn{
		Title: title, Text: text, Code: code, Lang: "html",
		Fields: [][2]string{{"<i>status</i>", "green"}, {"took", "4 min"}},
		Links: [][4]string{
			{"the log", "https://example.com/builds/412?log=%3Cfull%3E", "_blank", "noopener noreferrer"},
			{"http://example.com/artifacts", "http://example.com/artifacts", "_blank", "noopener noreferrer"},
		},
		DocTitle: "chatrelay · " + thread, // the page names its thread; a card cannot rename it
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the card is drawn as\n%+v\nwant\n%+v", got, want)
	}

	// The page itself never makes a link of another scheme, whatever it is
	// given (the server refuses them; this is the page's own guard).
	links := eval[[]string](a, `import("./view.js").then((v) => {
		const c = v.card({ fallback_text: "f", blocks: [
			{ type: "link", url: "javascript:window.__pwned=1", label: "click" },
			{ type: "link", url: " JaVaScRiPt:window.__pwned=1" },
			{ type: "link", url: "data:text/html,<script>window.__pwned=1</script>" },
			{ type: "link", url: "/relative" } ] });
		return [c.querySelectorAll("a").length + " links", ...[...c.querySelectorAll(".card-url")].map((s) => s.textContent)];
	})`)
	wantLinks := []string{"0 links", "click (javascript:window.__pwned=1)", " JaVaScRiPt:window.__pwned=1",
		"data:text/html,<script>window.__pwned=1</script>", "/relative"}
	if !slices.Equal(links, wantLinks) {
		t.Errorf("links of other schemes drawn as %q, want plain text %q", links, wantLinks)
	}
}

// TestLongFieldsStayInTheirCard: at a phone's width, a card's field and an
// approval's detail whose label and value are long unbroken words (a
// commit id, a URL) wrap inside the message (before, the label column took
// its whole width, 600 px, and the conversation scrolled sideways).
func TestLongFieldsStayInTheirCard(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	thread := threadOf(token)
	a.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	label, value := "commit-"+strings.Repeat("0123456789abcdef", 3), "https://ci.example.com/builds/412/"+strings.Repeat("artifact", 20)
	card, _ := json.Marshal(map[string]any{"title": "Build 412", "fallback_text": "Build 412",
		"blocks": []map[string]any{{"type": "fields", "fields": []map[string]string{{"label": label, "value": value}, {"label": "took", "value": "4 min"}}}}})
	if _, stderr, err := srv.cliRun(card, "card", thread, "-"); err != nil {
		t.Fatalf("chatrelay card: %v %s", err, stderr)
	}
	srv.cli("ask", thread, "--approval", "Deploy build 412?", "--detail", label+"="+value, "--timeout", "15m")
	a.waitJS(soon, "the card and the approval", `document.querySelectorAll("#log .card dl, #log .ix dl").length === 2`)
	a.waitJS(soon, "every label and value inside its message, nothing scrolling sideways", `(() => {
		const conv = document.getElementById("conversation");
		return conv.scrollWidth <= conv.clientWidth && [...document.querySelectorAll("#log dl > *")].every((e) => {
			const r = e.getBoundingClientRect(), m = e.closest(".msg").getBoundingClientRect();
			return r.width > 0 && r.left >= m.left && r.right <= m.right;
		});
	})()`)
}

// TestPageNeverScrollsAsAWhole: an approval far down a long conversation
// leaves the page itself unscrollable at a phone's width: only the
// conversation scrolls, and bringing the card into view (as focus does)
// moves neither the header nor the composer (before, the card's hidden
// "Answer by …" sentence, positioned against <main>, made the document
// as tall as the conversation: the page slid up, leaving a gap under the
// composer).
func TestPageNeverScrollsAsAWhole(t *testing.T) {
	srv := startServer(t)
	a, token := startConversation(t, srv.URL, "status?")
	thread := threadOf(token)
	a.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	for i := range 12 {
		srv.reply(thread, fmt.Sprintf("Step %d of the deploy: the images are rebuilt, pushed and checked before anything runs.", i))
	}
	srv.cli("ask", thread, "--approval", "Deploy build 412?", "--timeout", "15m")
	srv.reply(thread, "Waiting for your answer.")
	a.waitShown(soon, "Waiting for your answer.")
	a.waitJS(soon, "the approval drawn", `!!document.querySelector("#log .ix .sr-only")`)
	eval[bool](a, `(document.getElementById("conversation").scrollTop = 0, document.querySelector("#log .ix").scrollIntoView(), true)`)
	if got := eval[[]float64](a, `[document.scrollingElement.scrollHeight - document.scrollingElement.clientHeight, scrollY]`); got[0] > 0 || got[1] > 0 {
		t.Errorf("the page itself scrolls: %.0f px more than the screen, scrolled %.0f px", got[0], got[1])
	}
}

// Every post carries a client_id, so a post whose answer was lost is
// stored once: whether the page learns of it from its stream, or the
// person presses Retry while the page can read nothing, and whoever sends
// the same request again.
func TestRetryNeverDoublesAMessage(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	a := newWindow(t)
	a.open(g.URL)
	a.waitState(live, "ws")

	// The answer is lost, the stream is up: the message arrives, the
	// composer clears, and there is nothing to retry.
	g.dropPosts.Store(true)
	a.write("first, its answer lost")
	a.waitShown(soon, "first, its answer lost")
	a.waitJS(soon, "the composer to clear", `document.getElementById("text").value === "" && document.getElementById("retry").hidden`)

	// The answer is lost and the page can read nothing: the person retries.
	g.noPoll.Store(true)
	g.refuse(true, true)
	a.waitJS(soon, "the page to lose its stream", `document.getElementById("status").dataset.state !== "ws"`)
	a.write("second, retried")
	a.waitJS(soon, "the network error", `!document.getElementById("retry").hidden &&
		document.getElementById("notice-text").textContent.includes("could not be reached")`)
	if v := eval[string](a, `document.getElementById("text").value`); v != "second, retried" {
		t.Fatalf("composer holds %q after the lost answer", v)
	}
	token := a.token()
	stored := poll2(t, srv.URL, token)
	if len(stored) != 2 || stored[1].Text != "second, retried" || stored[1].ClientID == "" {
		t.Fatalf("the server holds %+v, want the lost post stored with its client_id", stored)
	}
	if stored[0].ClientID == stored[1].ClientID {
		t.Errorf("two posts share the client_id %s", stored[0].ClientID)
	}
	n := g.posts.Load()
	a.click("#retry") // still lost
	waitFor(t, soon, "the retry to reach the server", func() bool { return g.posts.Load() > n })
	a.waitJS(soon, "the network error again", `!document.getElementById("composer").hasAttribute("aria-busy") &&
		!document.getElementById("retry").hidden`)
	g.dropPosts.Store(false)
	a.click("#retry")
	a.waitJS(soon, "the retry to succeed", `document.getElementById("text").value === "" && document.getElementById("notice").hidden`)
	if n := len(poll2(t, srv.URL, token)); n != 2 {
		t.Errorf("after three sends of one message the server holds %d messages, want 2", n)
	}
	t.Logf("the proxy passed %d posts for 2 messages", g.posts.Load())

	// The same request again, by hand: answered as the first, stored once.
	body, _ := json.Marshal(map[string]string{"text": "second, retried", "client_id": stored[1].ClientID})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"api/chat/post", strings.NewReader(string(body)))
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same post again: %d, Idempotent-Replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}

	// The network comes back, WebSockets first: a climb already under way
	// when both came back at once could find WS still refused and SSE open,
	// and stay on SSE (a live stream is not left for a better one). While
	// SSE is still refused such a climb falls back to polling, and the
	// "online" signal, given again until the page is on WS (one given while
	// a climb is under way is spent by it), makes it climb at once.
	g.noPoll.Store(false)
	g.refuse(false, true)
	a.waitJS(live, "the page back on WS", `(dispatchEvent(new Event("online")), document.getElementById("status").dataset.state === "ws")`)
	g.refuse(false, false)
	a.waitState(live, "ws")
	a.waitShown(soon, "second, retried")
	checkOnce(t, a, poll(t, srv.URL, token).Messages)
}

// Retention dropped messages changed after the page's cursor while it was
// away: back, it redraws, and shows what the thread holds, each once.
func TestRetentionResetRedraws(t *testing.T) {
	srv := startServer(t, "--retention-messages", "4")
	g := newGate(t, srv)
	a, token := startConversation(t, g.URL, "one")
	thread := threadOf(token)
	srv.reply(thread, "two")
	a.waitShown(soon, "two")

	g.noPoll.Store(true)
	g.refuse(true, true)
	a.waitJS(soon, "the page to lose its stream", `document.getElementById("status").dataset.state !== "ws"`)
	id := poll2(t, srv.URL, token)[1].ID
	srv.cli("react", thread, id, "👍") // a change after the page's cursor…
	for i := range 4 {
		srv.reply(thread, fmt.Sprintf("later %d", i)) // …that retention then drops
	}
	g.noPoll.Store(false)
	g.refuse(false, false)
	eval[bool](a, `(dispatchEvent(new Event("online")), true)`)
	a.waitShown(soon, "later 3")
	a.waitJS(soon, "the dropped messages to go", `document.querySelectorAll("#log li").length === 4`)
	checkOnce(t, a, poll(t, srv.URL, token).Messages)
}

// A screenshot of an approval card, written as a test artifact; with
// -update, also as testdata/approval.png for the API's docs.
func TestApprovalScreenshot(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.do(5*time.Second, "size the window", chromedp.EmulateViewport(820, 820))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	token := tb.token()
	thread := threadOf(token)

	tb.write("Build 412 is green. Can you ship it?")
	tb.waitShown(soon, "Build 412 is green. Can you ship it?")
	srv.reply(thread, "Yes: it needs your approval first, since it goes to production.")
	tb.waitShown(soon, "Yes: it needs your approval first, since it goes to production.")
	first := poll2(t, srv.URL, token)[0].ID
	srv.cli("react", thread, first, "👀")
	q := srv.ask(thread, "--approval", "Deploy build 412 to production: 3 services, about 4 minutes, no downtime expected.",
		"--title", "deploy", "--detail", "build=412", "--detail", "branch=main", "--detail", "services=api, worker, web",
		"--timeout", "15m")
	tb.waitIx(soon, q.Interaction.ID, "pending")
	tb.click(msgSel(first) + ` button[data-emoji="👍"]`)
	tb.waitJS(soon, "the reaction", `document.querySelector(`+js(msgSel(first)+` button[data-emoji="👍"]`)+`).getAttribute("aria-pressed") === "true"`)
	eval[bool](tb, `(document.activeElement.blur(), document.getElementById("conversation").scrollTop = 1e6, true)`)
	tb.do(5*time.Second, "move the mouse away", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, input.DispatchMouseEvent, input.DispatchMouseEventParams{Type: input.DispatchMouseEventTypeMouseMoved, X: 810, Y: 600})
		return chromedp.Void{}, err
	})
	tb.waitJS(soon, "no message under the mouse", `!document.querySelector(".msg:hover")`)

	png := screenshot(tb)
	dir := t.ArtifactDir()
	if err := os.WriteFile(filepath.Join(dir, "approval.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, "approval.png"))
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", "approval.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// At phone width the card and its buttons fit.
	tb.do(5*time.Second, "a phone-width window", chromedp.EmulateViewport(360, 720, chromedp.EmulateScale(2)))
	tb.waitJS(soon, "the page to fit the phone", `document.documentElement.scrollWidth <= innerWidth`)
	if !eval[bool](tb, `(() => { const r = document.querySelector(".ix-actions .deny").getBoundingClientRect();
		return r.right <= innerWidth && r.width > 0 })()`) {
		t.Errorf("the Deny button is off a phone-width screen%s", tb.dump())
	}
	if err := os.WriteFile(filepath.Join(dir, "approval-phone.png"), screenshot(tb), 0o644); err != nil {
		t.Fatal(err)
	}
}

// threeTabs starts a conversation with first and opens it in three live
// tabs: the first, a second tab of the same browser (which shares the
// first's stream) and a tab of another browser (its own stream). It
// returns the tabs and the conversation's token.
func threeTabs(t *testing.T, srv *server, first string) ([]*tab, string) {
	t.Helper()
	a, token := startConversation(t, srv.URL, first)
	a2 := a.sibling()
	a2.open(srv.URL)
	a2.waitState(live, "ws")
	b := newWindow(t)
	b.adopt(srv.URL, token)
	b.waitState(live, "ws")
	return []*tab{a, a2, b}, token
}

// TestAnswerNotTakenAsThePageAppears: a click that lands on Approve in the
// first instants after the page appeared is not taken as the answer; a
// click once the card has been seen is. A page of another site cannot
// frame this one (frame-ancestors 'none'), but it can open it
// (window.open) at a size it chooses, where the pending approval shows at
// a place it can learn, under the pointer of a person it has clicking
// (a game, "double-click to continue": double-clickjacking). Before, the
// button took the click that came 150-230 ms after the navigation began
// (measured here), as soon as it was drawn.
func TestAnswerNotTakenAsThePageAppears(t *testing.T) {
	srv := startServer(t)
	tb, token := startConversation(t, srv.URL, "Ship build 9 when it is green.")
	thread := threadOf(token)
	q := srv.ask(thread, "--approval", "Deploy build 9?", "--title", "deploy", "--timeout", "15m")
	ix := q.Interaction.ID
	tb.waitIx(soon, ix, "pending")
	at := eval[[]float64](tb, `(() => { const r = document.querySelector("button[data-decision=approve]").getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	// Each load of the page notes when its Approve button was first drawn.
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		new MutationObserver(() => { if (!window.__drawn && document.querySelector("button[data-decision=approve]")) window.__drawn = performance.now(); })
			.observe(document, { subtree: true, childList: true });`}); err != nil {
		t.Fatal(err)
	}

	// The page appears, and the clicks keep coming where Approve is drawn,
	// until the button has been on the page for 250 ms.
	tb.open(srv.URL)
	clicks, deadline := 0, time.Now().Add(live)
	for {
		tb.do(soon, "click where Approve is", chromedp.MouseClickXY(at[0], at[1]))
		clicks++
		if eval[bool](tb, `window.__drawn !== undefined && performance.now() - window.__drawn > 250`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Approve was not drawn again%s", tb.dump())
		}
	}
	if got := srv.check(thread, ix); got.State != "pending" {
		t.Fatalf("one of %d clicks in the page's first instants answered the approval: %s", clicks, got.State)
	}
	tb.waitIx(soon, ix, "pending")

	// Seen for a moment, the card takes the person's click.
	tb.waitJS(soon, "the answers armed", `document.documentElement.dataset.answers === "armed"`)
	tb.do(soon, "click Approve", chromedp.MouseClickXY(at[0], at[1]))
	waitFor(t, soon, "the approval stored", func() bool { return srv.check(thread, ix).State == "approved" })
	tb.waitIx(soon, ix, "approved")
}

// Retention dropped an approval while the page showed it (a live stream is
// told nothing of a drop before its cursor): Approve finds it gone, and the
// page says so and shows the conversation as the server holds it.
func TestAnsweringADroppedApproval(t *testing.T) {
	srv := startServer(t, "--retention-messages", "3")
	a, token := startConversation(t, srv.URL, "anything to approve?")
	thread := threadOf(token)
	ix := srv.ask(thread, "--approval", "Deploy build 9?", "--title", "deploy").Interaction.ID
	a.waitIx(soon, ix, "pending")
	for i := range 3 {
		srv.reply(thread, fmt.Sprintf("later %d", i)) // the approval is dropped
	}
	a.waitShown(soon, "later 2")

	a.click(ixSel(ix) + ` button[data-decision="approve"]`)
	a.waitJS(soon, "the dropped card to go", `document.querySelector(`+js(ixSel(ix))+`) === null`)
	a.waitJS(soon, "the answer explained", `!document.getElementById("notice").hidden &&
		document.getElementById("notice-text").textContent.includes("no longer in the conversation")`)
	checkOnce(t, a, poll(t, srv.URL, token).Messages)
}

// The answer to Approve was lost on its way back (the server stored it).
// With its stream up, the page learns the outcome from it and says
// nothing of a failure, whichever came first; with its stream down, the
// press again is refused 409 by its own approval, which the page shows
// as the outcome it asked for, not as an answer not taken.
func TestApprovalWhoseAnswerWasLost(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	a, token := startConversation(t, g.URL, "anything to approve?")
	thread := threadOf(token)
	countRequests(a, "api/chat/respond")
	a.open(g.URL)
	a.waitState(live, "ws")

	ix := srv.ask(thread, "--approval", "Deploy build 9?", "--title", "deploy").Interaction.ID
	a.waitIx(soon, ix, "pending")
	g.dropResponds.Store(true)
	a.click(ixSel(ix) + ` button[data-decision="approve"]`)
	a.waitIx(soon, ix, "approved")
	a.waitJS(soon, "the lost answer's request to fail", `window.__requests === 1`)
	if e := a.ixError(ix); e != "" {
		t.Errorf("with its stream up, the approved card says %q", e)
	}

	// Cut off from every read: the press again is the page's only news.
	ix2 := srv.ask(thread, "--approval", "Restart the worker?", "--title", "restart").Interaction.ID
	a.waitIx(soon, ix2, "pending")
	g.noPoll.Store(true)
	g.refuse(true, true)
	a.waitJS(soon, "the page to lose its stream", `document.getElementById("status").dataset.state !== "ws"`)
	a.click(ixSel(ix2) + ` button[data-decision="deny"]`)
	a.waitJS(soon, "the lost answer's request to fail", `window.__requests === 2`)
	waitFor(t, soon, "the denial stored", func() bool { return srv.check(thread, ix2).State == "denied" })
	if e := a.ixError(ix2); !strings.Contains(e, "could not be reached") {
		t.Errorf("the pending card says %q, want that the server could not be reached", e)
	}
	g.dropResponds.Store(false)
	a.click(ixSel(ix2) + ` button[data-decision="deny"]`)
	a.waitIx(soon, ix2, "denied")
	a.waitJS(soon, "the press again answered", `window.__requests === 3`)
	if e := a.ixError(ix2); e != "" {
		t.Errorf("refused by its own denial, the card says %q", e)
	}
}

// countRequests has each load of tb's page count its requests to path
// that settled, answered or failed, in window.__requests.
func countRequests(tb *tab, path string) {
	tb.t.Helper()
	if _, err := chromedp.Call(tb.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		window.__requests = 0;
		const fetched = window.fetch;
		window.fetch = (...args) => {
			const p = fetched(...args);
			if (String(args[0]).includes(` + js(path) + `)) p.finally(() => window.__requests++).catch(() => {});
			return p;
		};`}); err != nil {
		tb.t.Fatal(err)
	}
}

// ixError is the error a tab shows on an interaction's card ("" for none).
func (tb *tab) ixError(id string) string {
	tb.t.Helper()
	return eval[string](tb, `(() => { const e = document.querySelector(`+js(ixSel(id)+" .ix-error")+`); return e && !e.hidden ? e.textContent : ""; })()`)
}

// A reaction whose answer was lost on its way back (the server stored it),
// with the stream up: the page shows it pressed, and says nothing of a
// reaction not saved.
func TestReactionWhoseAnswerWasLost(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	a, token := startConversation(t, g.URL, "ship it?")
	countRequests(a, "api/chat/react")
	a.open(g.URL)
	a.waitState(live, "ws")
	a.waitShown(soon, "ship it?")
	id := poll2(t, srv.URL, token)[0].ID

	g.dropReacts.Store(true)
	a.click(msgSel(id) + ` button[data-emoji="👍"]`)
	a.waitJS(soon, "the reaction shown", `document.querySelector(`+js(msgSel(id)+` button[data-emoji="👍"]`)+`)?.getAttribute("aria-pressed") === "true"`)
	a.waitJS(soon, "the lost answer's request to fail", `window.__requests === 1`)
	if r := poll2(t, srv.URL, token)[0].Reactions; !slices.Equal(r["👍"], []string{"operator"}) {
		t.Fatalf("the server holds %v", r)
	}
	if n := eval[string](a, `document.getElementById("notice").hidden ? "" : document.getElementById("notice-text").textContent`); n != "" {
		t.Errorf("with the reaction shown as stored, the page says %q", n)
	}
}
