package web_test

// Sharing a conversation (issue #11, contract Part 3), driven in real
// Chromium against a real chatrelay process: the owner invites from the
// People panel, the link opens the participant page /p in another browser
// context, the participant comments, the owner revokes, a viewer reads.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// The sentences the participant page says when its link is refused.
const (
	revokedWords = "This link was revoked by the conversation's owner."
	removedWords = "This conversation was removed from the server, so this link no longer opens it."
	expiredWords = "This link expired: ask the owner for a new one."
	unknownWords = "This link is not valid: ask the conversation's owner for a new one."
)

// participant is the contract's participant object.
type participant struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	Role      string `json:"role"`
	CreatedAt int64  `json:"created_at"`
	ExpiresAt int64  `json:"expires_at"`
	State     string `json:"state"`
	Cap       int    `json:"cap"`
	Sent      int    `json:"sent"`
}

// invited is the answer to an invite.
type invited struct {
	Participant participant `json:"participant"`
	Token       string      `json:"token"`
	Link        string      `json:"link"`
	QR          string      `json:"qr"`
}

// invite asks the server for a share link, as the owner of token.
func invite(t *testing.T, base, token string, body map[string]any) invited {
	t.Helper()
	status, raw := callAPI(t, http.MethodPost, base+"api/chat/participants", "X-Chat-Token", token, body)
	var a invited
	if err := json.Unmarshal(raw, &a); err != nil || status != http.StatusCreated {
		t.Fatalf("invite: %d %s", status, raw)
	}
	return a
}

// asParticipant polls the v2 view with a share token and returns the
// status and the code of a refusal.
func asParticipant(t *testing.T, base, share string) (status int, code string, msgs []message2) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"api/chat/poll?v=2", nil)
	req.Header.Set("Authorization", "Bearer "+share)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Code     string     `json:"code"`
		Messages []message2 `json:"messages"`
	}
	json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a.Code, a.Messages
}

// acceptDialog accepts the next JavaScript dialog of the tab and sends
// its words.
func (tb *tab) acceptDialog() <-chan string {
	dialogs := chromedp.Events(tb.ctx, page.JavascriptDialogOpening)
	answered := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			if _, err := chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				tb.t.Errorf("accept the dialog: %v", err)
			}
			answered <- ev.Message
			return
		}
	}()
	return answered
}

// text is the textContent of the element with this id ("" if none).
func (tb *tab) text(id string) string {
	tb.t.Helper()
	return eval[string](tb, `document.getElementById(`+js(id)+`)?.textContent ?? ""`)
}

// visible reports whether the element at sel is laid out on the page.
func (tb *tab) visible(sel string) bool {
	tb.t.Helper()
	return eval[bool](tb, `(() => { const e = document.querySelector(`+js(sel)+`);
		return !!e && e.getClientRects().length > 0 })()`)
}

// watchEnded resolves window.__endedAt with the time (Date.now()) the
// participant page first says why its link was refused.
func (tb *tab) watchEnded() {
	tb.t.Helper()
	eval[bool](tb, `(() => {
		window.__endedAt = new Promise((resolve) => {
			const t = document.getElementById("ended-text");
			const done = () => t.textContent !== "" && (resolve(Date.now()), true);
			if (done()) return;
			new MutationObserver((_, o) => done() && o.disconnect())
				.observe(t, { childList: true, characterData: true, subtree: true });
		});
		return true;
	})()`)
}

// shownBy is a message as the page names its author: the name and the
// badge, and whether it is drawn on the reader's side.
type shownBy struct {
	Text, Author, Badge string
	Mine                bool
}

func (tb *tab) shownBy(text string) shownBy {
	tb.t.Helper()
	return eval[shownBy](tb, `(() => {
		const li = [...document.querySelectorAll("#log li")].find((li) => li.querySelector(":scope > .text")?.textContent === `+js(text)+`);
		if (!li) return {};
		return { text: li.querySelector(":scope > .text").textContent, author: li.querySelector(".author").textContent,
			badge: li.querySelector(".meta .badge")?.textContent ?? "", mine: li.classList.contains("mine") };
	})()`)
}

// bearers counts the requests the proxy saw with a Bearer credential.
func (g *gate) bearers() int {
	_, heads := g.requests()
	n := 0
	for _, h := range heads {
		if strings.HasPrefix(h, "Authorization: Bearer ") {
			n++
		}
	}
	return n
}

var linkForm = regexp.MustCompile(`^http://127\.0\.0\.1:\d+/p#chp_[A-Za-z0-9_-]{43}$`)

// The owner invites Alex from the People panel; the link, opened in
// another browser context, loses its fragment at once (the token never
// reaches the server); Alex comments, and the owner's page shows the
// comment with Alex's name and a badge; the owner revokes, and Alex's page
// says so at once, and for good.
func TestShareInviteCommentRevoke(t *testing.T) {
	srv := startServer(t)
	g := newGate(t, srv)
	owner, token := startConversation(t, g.URL, "Can someone review the deploy plan before 3pm?")
	thread := threadOf(token)
	srv.reply(thread, "The plan is in the runbook: drain, migrate, deploy, undrain.")
	owner.waitShown(soon, "The plan is in the runbook: drain, migrate, deploy, undrain.")

	// The People panel: a modal dialog, the focus in its name field.
	owner.click("#people-open")
	owner.waitJS(soon, "the People panel", `document.getElementById("people").open && document.activeElement.id === "invite-name"`)
	owner.waitJS(soon, "the empty list", `document.getElementById("people-status").textContent === "No one has been invited yet."`)
	// An empty name is refused by the page, a name of only < > by the server.
	owner.click("#invite-send")
	owner.waitJS(soon, "the empty name refused", `document.getElementById("invite-error").textContent === "Give the person a name first."`)
	owner.do(5*time.Second, "type a name the server cleans away", chromedp.SendKeys(chromedp.CSS("#invite-name"), "<>"))
	owner.click("#invite-send")
	owner.waitJS(soon, "invalid_name explained", `document.getElementById("invite-error").textContent.startsWith("Give the person a name: letters or digits")`)

	// Alex, a commenter, for one day: the keyboard alone fills the form.
	eval[bool](owner, `(document.getElementById("invite-name").value = "", true)`)
	owner.do(5*time.Second, "type the name", chromedp.SendKeys(chromedp.CSS("#invite-name"), "Alex"))
	owner.do(5*time.Second, "choose one day", chromedp.SetValue(chromedp.CSS("#invite-expiry"), "86400"))
	owner.do(5*time.Second, "focus the name", chromedp.Focus(chromedp.CSS("#invite-name")))
	owner.enter(false)
	owner.waitJS(soon, "the link shown", `!document.getElementById("invited").hidden && document.getElementById("invited-link").value !== ""`)
	link := eval[string](owner, `document.getElementById("invited-link").value`)
	if !strings.HasPrefix(link, g.URL+"p#chp_") || !linkForm.MatchString(link) {
		t.Fatalf("the panel shows the link %q, want %sp#chp_…", link, g.URL)
	}
	if got := owner.text("invited-title"); !strings.HasPrefix(got, "Link for Alex (commenter), until ") {
		t.Errorf("the link is titled %q", got)
	}
	if f := eval[string](owner, `document.activeElement.id`); f != "invited-title" {
		t.Errorf("after the invite the focus is on %q, want the link's title", f)
	}

	// The QR code is the link: the image shown is the QR code of the link shown.
	qr := eval[struct {
		Src, Alt string
		Width    int
	}](owner, `(() => { const i = document.getElementById("invited-qr"); return { src: i.src, alt: i.alt, width: i.naturalWidth } })()`)
	if qr.Alt != "QR code of the link for Alex" || qr.Width == 0 {
		t.Errorf("the QR image: alt %q, %d px wide", qr.Alt, qr.Width)
	}
	checkQR(t, qr.Src, link)

	// Copy puts the link on the clipboard.
	grantClipboard(owner, g.URL)
	owner.click("#invited-copy")
	owner.waitJS(soon, "the copy confirmed", `document.getElementById("invited-copied").textContent === "Copied."`)
	if got := eval[string](owner, `navigator.clipboard.readText()`); got != link {
		t.Errorf("the clipboard holds %q, want the link", got)
	}

	// The list: Alex, commenter, active, 0 of 50, with Revoke.
	owner.waitJS(soon, "Alex in the list", `!!document.querySelector("#people-list li[data-state=active] button[data-revoke]")`)
	row := eval[string](owner, `document.querySelector("#people-list li").textContent`)
	for _, want := range []string{"Alex", "commenter", "active", "0 of 50 messages sent", "expires "} {
		if !strings.Contains(row, want) {
			t.Errorf("Alex's row reads %q, want %q in it", row, want)
		}
	}
	if lbl := eval[string](owner, `document.querySelector("#people-list button[data-revoke]").getAttribute("aria-label")`); lbl != "Revoke Alex's link" {
		t.Errorf("the Revoke button is labelled %q", lbl)
	}

	// Done forgets the link: it was shown once.
	owner.click("#invited-done")
	if v := eval[string](owner, `document.getElementById("invited-link").value + document.getElementById("invited-qr").getAttribute("src")`); v != "null" {
		t.Errorf("after Done the panel still holds %q", v)
	}

	// Alex opens the link in another browser context.
	alex := newWindow(t)
	alex.open(link)
	alex.waitJS(live, "Alex's page", `document.getElementById("me").textContent === "Alex · commenter"`)
	if u := eval[string](alex, `location.href`); u != g.URL+"p" {
		t.Errorf("the address bar shows %q after the page loaded, want %sp (no fragment)", u, g.URL)
	}
	hist, err := chromedp.Call(alex.ctx, page.GetNavigationHistory, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist.Entries {
		if strings.Contains(e.URL, "chp_") {
			t.Errorf("the tab's history holds the token: an entry is %q", e.URL)
		}
	}
	alex.waitState(live, "ws")
	if got := alex.text("others"); got != "Also here: the owner, hermes." {
		t.Errorf("the others read %q", got)
	}
	if v := eval[string](alex, `localStorage.getItem("chatrelay.token") ?? "none"`); v != "none" {
		t.Errorf("the participant page made an owner's token: %q", v)
	}
	alex.waitShown(soon, "Can someone review the deploy plan before 3pm?")
	if got := alex.shownBy("Can someone review the deploy plan before 3pm?"); got.Author != "the owner" || got.Badge != "" || got.Mine {
		t.Errorf("Alex sees the owner's message as %+v", got)
	}
	if !alex.visible("#composer") || alex.visible("#readonly") {
		t.Errorf("a commenter's page must show the composer%s", alex.dump())
	}

	// Alex comments: both pages show it as Alex's, with the badge.
	comment := "Looks right to me; I would drain the EU nodes first."
	alex.write(comment)
	alex.waitShown(soon, comment)
	took := owner.waitShown(soon, comment)
	t.Logf("Alex's comment shown on the owner's page after %v", took)
	if got := owner.shownBy(comment); got.Author != "Alex" || got.Badge != "guest" || got.Mine {
		t.Errorf("the owner sees Alex's comment as %+v, want Alex with the guest badge, not as the owner's", got)
	}
	if got := alex.shownBy(comment); got.Author != "you" || got.Badge != "guest" || !got.Mine {
		t.Errorf("Alex sees their comment as %+v", got)
	}
	msgs := poll2(t, srv.URL, token)
	last := msgs[len(msgs)-1]
	if last.Text != comment || !strings.HasPrefix(last.Author, "p:p_") {
		t.Fatalf("the thread's last message is %+v, want Alex's comment by p:p_…", last)
	}
	alexID := strings.TrimPrefix(last.Author, "p:")

	// The owner's list counts it.
	owner.closePeople()
	owner.click("#people-open")
	owner.waitJS(soon, "the count", `document.querySelector("#people-list li").textContent.includes("1 of 50 messages sent")`)

	// The owner revokes from the panel; Alex's page says so at once.
	alex.watchEnded()
	asked := owner.acceptDialog()
	owner.click(`#people-list button[data-revoke="` + alexID + `"]`)
	select {
	case words := <-asked:
		if !strings.HasPrefix(words, "Revoke Alex's link?") {
			t.Errorf("the confirmation reads %q", words)
		}
	case <-time.After(soon):
		t.Fatal("no confirmation asked before revoking")
	}
	alex.waitJS(soon, "the revoked sentence", `document.getElementById("ended-text").textContent === `+js(revokedWords))
	endedAt := eval[float64](alex, `window.__endedAt`)
	// The server ends Alex's streams before it answers the revoke, so the
	// owner's request may finish (and get its timing entry) a little later.
	revokeURL := js("/api/chat/participants/" + alexID)
	owner.waitJS(soon, "the revoke request done", `performance.getEntriesByType("resource").some((e) => e.name.endsWith(`+revokeURL+`))`)
	sent := eval[[]float64](owner, `performance.getEntriesByType("resource")
		.filter((e) => e.name.endsWith(`+js("/api/chat/participants/"+alexID)+`))
		.map((e) => [performance.timeOrigin + e.startTime, e.responseEnd - e.startTime]).flat()`)
	if len(sent) != 2 {
		t.Fatalf("the owner's page made %d revoke requests, want 1", len(sent)/2)
	}
	t.Logf("revoke → sentence: Alex's page said it %.0f ms after the owner's page sent the revoke (which the server answered in %.0f ms)",
		endedAt-sent[0], sent[1])
	bearers := g.bearers()

	// Alex's page holds nothing more of the conversation.
	if n := eval[int](alex, `document.querySelectorAll("#log li").length`); n != 0 {
		t.Errorf("Alex's page still shows %d messages", n)
	}
	if alex.visible("#composer") || alex.visible("#conversation") {
		t.Errorf("a revoked page still shows the conversation or the composer%s", alex.dump())
	}
	alex.waitState(soon, "ended")
	if got := alex.text("status-text"); got != "no access" {
		t.Errorf("the status reads %q", got)
	}
	owner.waitJS(soon, "Alex revoked in the list", `(() => { const li = document.querySelector("#people-list li");
		return li.dataset.state === "revoked" && !li.querySelector("button") && li.textContent.includes("revoked") })()`)
	if got := owner.text("people-status"); got != "Alex's link is revoked." {
		t.Errorf("the panel says %q after the revoke", got)
	}
	_, share, _ := strings.Cut(link, "#")
	if status, code, _ := asParticipant(t, srv.URL, share); status != 401 || code != "token_revoked" {
		t.Errorf("the revoked token polls %d %s, want 401 token_revoked", status, code)
	}

	// The page stopped for good: while the conversation goes on, it asks
	// the server nothing more.
	owner.closePeople()
	owner.write("Thanks Alex, draining the EU nodes first.")
	owner.waitShown(soon, "Thanks Alex, draining the EU nodes first.")
	srv.reply(thread, "Draining eu-1 and eu-2 now.")
	owner.waitShown(soon, "Draining eu-1 and eu-2 now.")
	if n := g.bearers(); n != bearers {
		t.Errorf("the revoked page made %d more requests with its link", n-bearers)
	}
	// Loaded again (the tab keeps the token for itself), it says the same.
	alex.open(g.URL + "p")
	alex.waitJS(soon, "the revoked sentence after a reload", `document.getElementById("ended-text").textContent === `+js(revokedWords))

	// The token never reached a server: no request line holds it (the
	// proxy saw every request the browsers made), nor the server's log
	// (every request logged, at debug), nor a Referer.
	lines, heads := g.requests()
	if !slices.Contains(lines, "GET /p") {
		t.Errorf("the proxy never saw GET /p: %q", lines)
	}
	for _, l := range append(lines, heads...) {
		if strings.Contains(l, "chp_") {
			t.Errorf("a request carried the share token outside the Authorization header: %q", l)
		}
	}
	if !slices.Contains(heads, "Authorization: Bearer for GET /api/chat/whoami") || !slices.Contains(heads, "Authorization: Bearer for POST /api/chat/ticket") {
		t.Errorf("the participant page never sent its token as a Bearer header: %q", heads)
	}
	logText := srv.logText()
	if !strings.Contains(logText, "msg=request method=GET route=/ path=/p status=200") {
		t.Errorf("the server's log has no line for GET /p:\n%s", logText)
	}
	if strings.Contains(logText, "chp_") {
		t.Errorf("the server's log holds a share token:\n%s", logText)
	}
}

// A viewer reads (the server's redacted view) and never writes: no
// composer, no reaction buttons, no answer buttons; the page names them
// and who else is in. A commenter reacts, and the owner's page names them.
func TestShareViewer(t *testing.T) {
	srv := startServer(t)
	owner, token := startConversation(t, srv.URL, "The staging password=hunter2 works again.")
	thread := threadOf(token)
	sam := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "viewer", "expires_in": 3600})
	jo := invite(t, srv.URL, token, map[string]any{"name": "Jo <ops>", "role": "commenter"})

	viewer := newWindow(t)
	viewer.open(sam.Link)
	viewer.waitJS(live, "Sam's page", `document.getElementById("me").textContent === "Sam · viewer"`)
	viewer.waitState(live, "ws")
	if got := viewer.text("others"); got != "Also here: the owner, hermes, Jo ops (commenter)." {
		t.Errorf("the others read %q", got)
	}
	// Each name is isolated, so a right-to-left one never reorders the
	// words around it.
	if got := eval[string](viewer, `[...document.querySelectorAll("#me bdi, #others bdi")].map((b) => b.textContent).join("|")`); got != "Sam|Jo ops" {
		t.Errorf("the names in <bdi>: %q, want Sam|Jo ops", got)
	}
	if viewer.visible("#composer") || viewer.visible("#text") || !viewer.visible("#readonly") {
		t.Errorf("a viewer's page shows a composer%s", viewer.dump())
	}
	// Redacted by the server: the viewer never sees the password.
	viewer.waitShown(soon, "The staging password=[redacted]") // the value runs to the end of the line
	if n := eval[int](viewer, `document.body.textContent.includes("hunter2") ? 1 : 0`); n != 0 {
		t.Error("the viewer's page shows the password")
	}
	owner.waitShown(soon, "The staging password=hunter2 works again.")
	if got := eval[string](owner, `[...document.querySelectorAll(".msg .author")].map((a) => a.dir).join()`); got != "auto" {
		t.Errorf("the author names' dir: %q, want auto (isolated)", got)
	}

	// hermes asks the owner; the viewer sees the question, read-only.
	q := srv.ask(thread, "--approval", "Rotate the staging password?", "--title", "rotate")
	viewer.waitIx(soon, q.Interaction.ID, "pending")
	if n := eval[int](viewer, `document.querySelectorAll("#log button, #log input, #log textarea").length`); n != 0 {
		t.Errorf("a viewer's page has %d controls in the conversation", n)
	}
	if got := eval[string](viewer, `document.querySelector(`+js(ixSel(q.Interaction.ID)+" .ix-waiting")+`)?.textContent ?? ""`); got != "Waiting for the owner's answer." {
		t.Errorf("the pending approval says %q to a viewer", got)
	}

	// Jo, a commenter, reacts; the owner approves: every page shows both.
	commenter := newWindow(t)
	commenter.open(jo.Link)
	commenter.waitJS(live, "Jo's page", `document.getElementById("me").textContent === "Jo ops · commenter"`)
	commenter.waitIx(soon, q.Interaction.ID, "pending")
	if bs := commenter.buttonsOf(q.Interaction.ID); len(bs) != 0 {
		t.Errorf("a commenter may not answer, yet the card has %v", bs)
	}
	first := poll2(t, srv.URL, token)[0].ID
	commenter.click(msgSel(first) + ` button[data-emoji="👀"]`)
	for _, tb := range []*tab{owner, viewer} {
		tb.waitJS(soon, "Jo's reaction", `!!document.querySelector(`+js(msgSel(first)+` .react[title="eyes: Jo ops (guest)"]`)+`)`)
	}
	owner.click(ixSel(q.Interaction.ID) + ` button[data-decision="approve"]`)
	for _, tb := range []*tab{viewer, commenter} {
		tb.waitIx(soon, q.Interaction.ID, "approved")
		if o := tb.outcomeOf(q.Interaction.ID); !strings.HasPrefix(o, "Approved by the owner") {
			t.Errorf("a participant reads the outcome %q", o)
		}
	}
	if n := eval[int](viewer, `document.querySelectorAll("#log button").length`); n != 0 {
		t.Errorf("a viewer's page has %d buttons", n)
	}

	// Three of Jo's messages wait for hermes: a fourth is refused with a
	// sentence, kept, and sent once hermes has answered.
	for i := 1; i <= 3; i++ {
		commenter.write(fmt.Sprintf("note %d", i))
		commenter.waitShown(soon, fmt.Sprintf("note %d", i))
	}
	commenter.write("note 4")
	commenter.waitJS(soon, "too_many_messages explained", `document.getElementById("notice-text").textContent.startsWith("Not sent: your last 3 messages still wait for hermes's answer.")`)
	if v := eval[string](commenter, `document.getElementById("text").value`); v != "note 4" {
		t.Errorf("the composer holds %q after the refusal, want the text kept", v)
	}
	srv.reply(thread, "noted")
	commenter.waitShown(soon, "noted")
	commenter.click("#send")
	commenter.waitShown(soon, "note 4")
	for _, tb := range []*tab{owner, viewer} {
		tb.waitShown(soon, "note 4")
		if got := tb.shownBy("note 4"); got.Author != "Jo ops" || got.Badge != "guest" || got.Mine {
			t.Errorf("Jo's note is drawn as %+v", got)
		}
	}

	// Jo's link is revoked: a viewer's page opened afterwards (whoami
	// names active links only) still names Jo's notes and reaction.
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"api/chat/participants/"+jo.Participant.ID, nil)
	req.Header.Set("X-Chat-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("revoke: %v %v", err, resp)
	}
	resp.Body.Close()
	later := newWindow(t)
	later.open(sam.Link)
	later.waitShown(soon, "note 4")
	later.waitJS(soon, "the revoked commenter's reaction named", `!!document.querySelector(`+js(msgSel(first)+` .react[title="eyes: Jo ops (guest)"]`)+`)`)
	if got := later.shownBy("note 1"); got.Author != "Jo ops" {
		t.Errorf("after the revoke, Jo's note is drawn as %+v", got)
	}
}

// Under --prefix, a share link opens the participant page below the
// prefix, which finds its files and its API there.
func TestShareUnderPrefix(t *testing.T) {
	srv := startServer(t, "--prefix", "/spaces/newos4")
	owner := strings.Repeat("7a", 32)
	post(t, srv.URL, owner, "under a prefix", "operator")
	kim := invite(t, srv.URL, owner, map[string]any{"name": "Kim", "role": "commenter"})
	if want := srv.URL + "p#"; !strings.HasPrefix(kim.Link, want) {
		t.Fatalf("the link is %s, want it under the prefix (%s…)", kim.Link, want)
	}
	tb := newWindow(t)
	tb.open(kim.Link)
	tb.waitJS(live, "Kim's page", `document.getElementById("me").textContent === "Kim · commenter"`)
	tb.waitState(live, "ws")
	tb.waitShown(soon, "under a prefix")
	tb.write("hello from under the prefix")
	tb.waitShown(soon, "hello from under the prefix")
	if u := eval[string](tb, `location.href`); u != srv.URL+"p" {
		t.Errorf("the address bar shows %q", u)
	}
}

// A link that expires while its page is open: the server ends the stream,
// and the page says the contract's sentence; loaded again, the server's
// 401 token_expired gives the same. The grant is made with the store (as
// `chatrelay share` makes one, but created an hour ago, so that its
// shortest life, one hour, ends a few seconds from now): the server's own
// clock and timers do the rest.
func TestShareLinkExpires(t *testing.T) {
	srv := startServer(t)
	owner := strings.Repeat("5e", 32)
	post(t, srv.URL, owner, "a conversation to share", "operator")
	thread := threadOf(owner)

	st, err := filestore.OpenFile(srv.Data, filestore.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := chatrelay.Invite{Name: "Kim", Role: chatrelay.Commenter, ExpiresIn: time.Hour}
	if err := in.Check(); err != nil {
		t.Fatal(err)
	}
	grant, share := in.Grant(time.Now().Add(-time.Hour + 8*time.Second))
	if err := st.Invite(context.Background(), thread, grant); err != nil {
		t.Fatal(err)
	}
	st.Close()
	expires := time.UnixMilli(grant.ExpiresAt)
	waitFor(t, soon, "the server to know the link", func() bool {
		status, _, _ := asParticipant(t, srv.URL, share)
		return status == http.StatusOK
	})

	kim := newWindow(t)
	kim.open(srv.URL + "p#" + share)
	kim.waitJS(live, "Kim's page", `document.getElementById("me").textContent === "Kim · commenter"`)
	kim.waitState(live, "ws")
	if time.Now().After(expires) {
		t.Fatalf("the link expired before its page was live: give it longer")
	}
	kim.watchEnded()
	kim.waitJS(soon+time.Until(expires), "the expired sentence", `document.getElementById("ended-text").textContent === `+js(expiredWords))
	endedAt := eval[float64](kim, `window.__endedAt`)
	t.Logf("expiry → sentence: the open page said it %.0f ms after the link's expires_at", endedAt-float64(grant.ExpiresAt))

	kim.open(srv.URL + "p")
	kim.waitJS(soon, "the expired sentence after a reload", `document.getElementById("ended-text").textContent === `+js(expiredWords))
	if status, code, _ := asParticipant(t, srv.URL, share); status != 401 || code != "token_expired" {
		t.Errorf("the expired token polls %d %s, want 401 token_expired", status, code)
	}
}

// A link the server does not know, one cut short, and the page opened
// without one: each says so, and the fragment never stays in the address
// bar.
func TestShareBadLinks(t *testing.T) {
	srv := startServer(t)
	for _, c := range []struct{ what, fragment, words string }{
		{"an unknown link", "#chp_" + strings.Repeat("A", 43), unknownWords},
		{"a link cut short", "#chp_AbC", "This link is incomplete: open the whole link the conversation's owner sent you."},
		{"no link", "", "This page opens a conversation shared with you: open the link the conversation's owner sent you."},
	} {
		tb := newWindow(t)
		tb.open(srv.URL + "p" + c.fragment)
		tb.waitJS(soon, c.what+" explained", `document.getElementById("ended-text").textContent === `+js(c.words))
		if u := eval[string](tb, `location.href`); u != srv.URL+"p" {
			t.Errorf("%s: the address bar shows %q", c.what, u)
		}
		if tb.visible("#composer") {
			t.Errorf("%s: the page shows a composer", c.what)
		}
	}
}

// Screenshots of the People panel with a link just made, and of the
// participant page, written as test artifacts; with -update, also as
// testdata/people.png and testdata/participant.png for the README.
func TestShareScreenshots(t *testing.T) {
	srv := startServer(t)
	owner := newWindow(t)
	owner.do(5*time.Second, "size the window", chromedp.EmulateViewport(820, 1000))
	owner.open(srv.URL)
	owner.waitState(live, "ws")
	token := owner.token()
	thread := threadOf(token)
	owner.write("Can someone review the deploy plan before 3pm?")
	owner.waitShown(soon, "Can someone review the deploy plan before 3pm?")
	srv.reply(thread, "The plan is in the runbook: drain, migrate, deploy, undrain. I can start at 3pm.")
	owner.waitShown(soon, "The plan is in the runbook: drain, migrate, deploy, undrain. I can start at 3pm.")

	invite(t, srv.URL, token, map[string]any{"name": "Priya", "role": "viewer", "expires_in": 3600})
	alexLink := invite(t, srv.URL, token, map[string]any{"name": "Alex", "role": "commenter", "expires_in": 86400})
	alex := newWindow(t)
	alex.do(5*time.Second, "size the window", chromedp.EmulateViewport(820, 720))
	alex.open(alexLink.Link)
	alex.waitState(live, "ws")
	alex.write("Looks right to me; I would drain the EU nodes first.")
	owner.waitShown(soon, "Looks right to me; I would drain the EU nodes first.")
	srv.reply(thread, "Good idea, Alex: EU first, then the US.")
	alex.waitShown(soon, "Good idea, Alex: EU first, then the US.")
	gone := invite(t, srv.URL, token, map[string]any{"name": "Release bot", "role": "viewer", "kind": "agent"})
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"api/chat/participants/"+gone.Participant.ID, nil)
	req.Header.Set("X-Chat-Token", token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// The participant page.
	eval[bool](alex, `(document.activeElement.blur(), true)`)
	alex.waitJS(soon, "the log to settle", `!document.getElementById("log").hasAttribute("aria-busy")`)
	writeShot(t, alex, "participant.png")

	// The People panel, with a link just made for Sam.
	owner.click("#people-open")
	owner.do(5*time.Second, "type the name", chromedp.SendKeys(chromedp.CSS("#invite-name"), "Sam"))
	owner.click(`input[name=role][value=viewer]`)
	owner.click("#invite-send")
	owner.waitJS(soon, "the link shown", `!document.getElementById("invited").hidden && document.getElementById("invited-qr").complete`)
	owner.waitJS(soon, "the list", `document.querySelectorAll("#people-list li").length === 4`)
	writeShot(t, owner, "people.png")

	// At phone width the panel, its link and Copy fit the screen.
	owner.do(5*time.Second, "a phone-width window", chromedp.EmulateViewport(360, 720, chromedp.EmulateScale(2)))
	owner.waitJS(soon, "the panel to fit the phone", `(() => { const d = document.getElementById("people");
		const c = document.getElementById("invited-copy").getBoundingClientRect();
		return d.scrollWidth <= d.clientWidth && d.getBoundingClientRect().right <= innerWidth && c.right <= innerWidth && c.width > 0 })()`)
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "people-phone.png"), screenshot(owner), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeShot writes a screenshot of the tab as a test artifact, and with
// -update into testdata.
func writeShot(t *testing.T, tb *tab, name string) {
	t.Helper()
	shot := screenshot(tb)
	dir := t.ArtifactDir()
	if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, name))
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkQR fails unless the data URL src is a PNG of the QR code of link
// (drawn again here, module for module, as the server draws it).
func checkQR(t *testing.T, src, link string) {
	t.Helper()
	b64, ok := strings.CutPrefix(src, "data:image/png;base64,")
	if !ok {
		t.Fatalf("the QR image is %.40q…, want a PNG data URL", src)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the QR image is not a PNG: %v", err)
	}
	wantPNG, err := qrcode.Encode(link, qrcode.Medium, got.Bounds().Dx())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := png.Decode(bytes.NewReader(wantPNG))
	if !sameImage(got, want) {
		t.Errorf("the QR image shown is not the QR code of the link shown")
	}
}

func sameImage(a, b image.Image) bool {
	if a.Bounds() != b.Bounds() {
		return false
	}
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				return false
			}
		}
	}
	return true
}

// grantClipboard lets the tab's pages on origin write and read the
// clipboard, as a person who allowed it.
func grantClipboard(tb *tab, origin string) {
	tb.t.Helper()
	c := chromedp.FromContext(tb.ctx)
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	params := map[string]any{
		"permissions": []string{"clipboardReadWrite", "clipboardSanitizedWrite"},
		"origin":      strings.TrimSuffix(origin, "/"),
	}
	if c.BrowserContextID != "" {
		params["browserContextId"] = c.BrowserContextID
	}
	if err := c.Browser.Call(ctx, "Browser.grantPermissions", params, nil); err != nil {
		tb.t.Fatalf("grant the clipboard: %v", err)
	}
}

// closePeople closes the People panel with its Close button and waits
// until the page has handled the dialog's close event, which comes a task
// after the click and gives the focus back to the People button: keys
// typed before it would lose the focus to the button halfway, and a
// space would open the panel again. (A listener added now runs after the
// page's own.)
func (tb *tab) closePeople() {
	tb.t.Helper()
	eval[bool](tb, `(() => {
		window.__peopleClosed = false;
		document.getElementById("people").addEventListener("close", () => { window.__peopleClosed = true }, { once: true });
		return true;
	})()`)
	tb.click("#people-close")
	tb.waitJS(soon, "the People panel closed", `window.__peopleClosed === true && document.activeElement?.id === "people-open"`)
}

// TestPeopleFollowTheConversation: People is offered once the
// conversation has a first message (before it, an invite could only be
// refused), and an open People list shows a guest's post in its link's
// count at once (before, "0 of 50 messages sent" stayed until a reload).
func TestPeopleFollowTheConversation(t *testing.T) {
	srv := startServer(t)
	owner := newWindow(t)
	owner.open(srv.URL)
	owner.waitState(live, "ws")
	if !eval[bool](owner, `document.getElementById("people-open").hidden`) {
		t.Errorf("People is offered before the conversation has a message%s", owner.dump())
	}
	owner.write("Alex will review the deploy plan.")
	owner.waitShown(soon, "Alex will review the deploy plan.")
	owner.waitJS(soon, "People offered", `!document.getElementById("people-open").hidden`)

	guest := invite(t, srv.URL, owner.token(), map[string]any{"name": "Alex", "role": "commenter"})
	eval[bool](owner, `(document.getElementById("people-open").click(), true)`)
	owner.waitJS(soon, "the list with Alex's count", `document.getElementById("people-list").textContent.includes("0 of 50 messages sent")`)

	if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "Authorization", "Bearer "+guest.Token, map[string]string{"text": "Looks right to me."}); status != http.StatusCreated {
		t.Fatalf("the guest's post: %d %s", status, raw)
	}
	owner.waitJS(soon, "the open list counting the guest's post", `document.getElementById("people-list").textContent.includes("1 of 50 messages sent")`)
}

// openSamePage opens u, the page the tab shows with another fragment (as a
// link pasted into the address bar: only the fragment changes), and waits
// for the page to be loaded again.
func (tb *tab) openSamePage(u string) {
	tb.t.Helper()
	loads := chromedp.Events(tb.ctx, page.LoadEventFired)
	loaded := make(chan struct{}, 1)
	go func() {
		for _, err := range loads {
			if err == nil {
				loaded <- struct{}{}
			}
			return
		}
	}()
	eval[bool](tb, `(location.href = `+js(u)+`, true)`)
	select {
	case <-loaded:
	case <-time.After(soon):
		tb.t.Fatalf("the page was not loaded again after %s was opened in its tab%s", u[:strings.Index(u, "#")], tb.dump())
	}
}

// TestNewLinkInTheSameTab: a share link opened in a tab that already shows
// the participant page, and a device link in a tab showing the device's
// page, change only the fragment (no load): the page still takes the token
// out of the address bar and the tab's history and opens the new link, as
// a first load does (a device link, once the person said yes to replacing
// the device the browser keeps). Before, the page never looked: the token stayed in
// the address bar and the history, and a person whose link was revoked,
// pasting the new one the owner sent, still read "revoked".
func TestNewLinkInTheSameTab(t *testing.T) {
	srv := startServer(t)
	_, token := startConversation(t, srv.URL, "Here is the plan.")
	noToken := func(tb *tab, what, kind string) {
		t.Helper()
		if u := eval[string](tb, `location.href`); strings.Contains(u, "#") {
			t.Errorf("%s: the address bar shows %q", what, u)
		}
		hist, err := chromedp.Call(tb.ctx, page.GetNavigationHistory, cdp.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist.Entries {
			if strings.Contains(e.URL, kind) {
				t.Errorf("%s: the tab's history holds the token: an entry is %q", what, e.URL)
			}
		}
	}

	// A participant whose link is revoked opens the new one in the same tab.
	first := invite(t, srv.URL, token, map[string]any{"name": "Alex", "role": "viewer"})
	second := invite(t, srv.URL, token, map[string]any{"name": "Sam", "role": "viewer"})
	tb := newWindow(t)
	tb.open(first.Link)
	tb.waitJS(soon, "the first link's name", `document.getElementById("me").textContent === "Alex · viewer"`)
	if status, _ := callAPI(t, http.MethodDelete, srv.URL+"api/chat/participants/"+first.Participant.ID, "X-Chat-Token", token, nil); status != http.StatusOK {
		t.Fatalf("revoke: %d", status)
	}
	tb.waitJS(soon, "the revoked link explained", `document.getElementById("ended-text").textContent.includes("revoked")`)
	tb.openSamePage(second.Link)
	tb.waitJS(soon, "the second link's name", `document.getElementById("me").textContent === "Sam · viewer"`)
	tb.waitShown(soon, "Here is the plan.")
	noToken(tb, "the second share link", "chp_")

	// A device's page opens another device link in the same tab.
	var devs []string
	for _, name := range []string{"Phone", "Tablet"} {
		status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", token, map[string]string{"name": name})
		var made struct{ Link string }
		if json.Unmarshal(raw, &made); status != http.StatusCreated {
			t.Fatalf("make a device: %d %s", status, raw)
		}
		devs = append(devs, made.Link)
	}
	dev := newWindow(t)
	dev.open(devs[0])
	dev.waitState(live, "ws")
	// It replaces the device the browser keeps, so the person is asked
	// first (TestDeviceLinkAsksBeforeReplacing), and says yes.
	asked := dev.answerDialog(true)
	dev.openSamePage(devs[1])
	select {
	case <-asked:
	case <-time.After(soon):
		t.Fatal("no confirmation asked before the second device link replaced the first")
	}
	_, second2, _ := strings.Cut(devs[1], "#")
	dev.waitJS(soon, "the second device's token kept", `localStorage.getItem("chatrelay.device") === `+js(second2))
	dev.waitState(live, "ws")
	noToken(dev, "the second device link", "chd_")
}

// TestShareRemovedConversation: the server removes a conversation past
// its retention while a participant's page shows it. Its streams end as
// at a revoke (token_revoked), but the page says the conversation was
// removed, not that the owner revoked the link; it said "revoked by the
// conversation's owner".
func TestShareRemovedConversation(t *testing.T) {
	srv := startServer(t, "--retention-age", "3s", "--sweep-every", "500ms")
	token := strings.Repeat("cd", 32)
	post(t, srv.URL, token, "the first words", "operator")
	alex := invite(t, srv.URL, token, map[string]any{"name": "Alex", "role": "commenter"})
	page := newWindow(t)
	page.open(alex.Link)
	page.waitState(live, "ws")
	post(t, srv.URL, token, "see you later", "operator") // the thread's newest message: removed 3 s on
	page.waitShown(soon, "see you later")
	page.watchEnded()
	page.waitJS(20*time.Second, "the removed sentence", `document.getElementById("ended-text").textContent !== ""`)
	if got := page.text("ended-text"); got != removedWords {
		t.Errorf("the page says %q, want %q", got, removedWords)
	}
	if status, code, _ := asParticipant(t, srv.URL, alex.Token); status != http.StatusUnauthorized || code != "unauthorized" {
		t.Errorf("the link answers %d %s once its conversation is removed, want 401 unauthorized", status, code)
	}
}
