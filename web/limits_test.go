package web_test

// The limits the page states (a post's text, a message's files, a
// thread's active devices) are the server's: rows of the limits table
// (limits.go) that the server writes into the page when it builds it, and
// written nowhere in web/static.

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/web"
)

// pageLimits reads, in tb, the limits the page's modules hold: chat.js's
// MAX_CHARS export and limits.js's LIMITS, by name.
func pageLimits(tb *tab) map[string]int {
	tb.t.Helper()
	return eval[map[string]int](tb, `Promise.all([import("./chat.js"), import("./limits.js")]).then(([chat, l]) =>
		({ MAX_CHARS: chat.MAX_CHARS, ...l.LIMITS, ...Object.fromEntries(Object.entries(l.LEAST).map(([k, v]) => ["least " + k, v])) }))`)
}

// TestPageStatesTheTablesLimits: the running server's page holds the
// limits table's values: the counter before any script ran, chat.js's
// MAX_CHARS and limits.js, on the owner's page and the participant's.
func TestPageStatesTheTablesLimits(t *testing.T) {
	srv := startServer(t)
	want := map[string]int{"MAX_CHARS": chatrelay.LimitPostText.Max}
	for _, l := range web.PageLimits {
		want[l.Name], want["least "+l.Name] = l.Max, l.Min
	}
	for _, l := range []chatrelay.Limit{chatrelay.LimitPostText, chatrelay.LimitAttachments, chatrelay.LimitActiveDevices,
		chatrelay.LimitDeviceExpiresIn, chatrelay.LimitName, chatrelay.LimitActiveGrants, chatrelay.LimitCap, chatrelay.LimitExpiresIn} {
		if want[l.Name] != l.Max {
			t.Errorf("the page does not state %s", l)
		}
	}
	counter := fmt.Sprintf(`<span id="count" class="count">0 / %d</span>`, chatrelay.LimitPostText.Max)
	for _, path := range []string{"", "d", "p", "p.html"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(counter)) || bytes.Contains(b, []byte("{{")) {
			t.Errorf("GET /%s: %d, want the counter %q filled in, with no {{mark}} left:\n%s", path, resp.StatusCode, counter, b)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET /%s: Content-Type %q, CSP %q", path, ct, resp.Header.Get("Content-Security-Policy"))
		}
	}
	tb := newWindow(t)
	tb.open(srv.URL)
	got := pageLimits(tb)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the page holds %v, the limits table %v", got, want)
	}
	if c := eval[string](tb, `document.getElementById("count").textContent`); c != fmt.Sprintf("0 / %d", chatrelay.LimitPostText.Max) {
		t.Errorf("the counter reads %q", c)
	}
	for _, id := range []string{"invite-name", "device-name"} {
		if n := eval[int](tb, `Number(document.getElementById("`+id+`").dataset.maxChars)`); n != chatrelay.LimitName.Max {
			t.Errorf("#%s takes at most %d characters, want %d", id, n, chatrelay.LimitName.Max)
		}
	}
	// The limits the sentences state in words: the expiries' bounds.
	words := eval[[]string](tb, `import("./linkpanel.js").then((m) => [3600, 2592000, 31536000, 7200, 90].map(m.durationWords))`)
	if fmt.Sprint(words) != fmt.Sprint([]string{"1 hour", "30 days", "1 year", "2 hours", "90 seconds"}) {
		t.Errorf("durationWords: %q", words)
	}
}

// typeName types text into the name field id as a person does (the
// browser's editing, which a maxlength bounds) and returns what it holds.
func typeName(tb *tab, id, text string) string {
	tb.t.Helper()
	return eval[string](tb, `(() => { const f = document.getElementById(`+js(id)+`); f.value = ""; f.focus();
		document.execCommand("insertText", false, `+js(text)+`); return f.value })()`)
}

// TestPageStatesTheServersLimits serves the page with other values than
// the table's (post.text 37, message.attachments 2, device.active 4,
// participant.name 12, participant.grants 5) in front of a real server:
// the counter, the "too many files" notice, the device_limit and
// participant_limit sentences, the name fields' limit and chat.js's
// MAX_CHARS say the served values, so no limit of the page is written in
// web/static. A name's limit counts code points, as the server does: 13
// emoji typed keep 12 (a maxlength counted UTF-16 units and kept 6).
func TestPageStatesTheServersLimits(t *testing.T) {
	srv := startServer(t)
	text, files, devices := chatrelay.LimitPostText, chatrelay.LimitAttachments, chatrelay.LimitActiveDevices
	text.Max, files.Max, devices.Max = 37, 2, 4
	name, grants := chatrelay.LimitName, chatrelay.LimitActiveGrants
	name.Max, grants.Max = 12, 5
	page := web.HandlerStating([]chatrelay.Limit{text, files, devices, name, grants,
		chatrelay.LimitDeviceExpiresIn, chatrelay.LimitCap, chatrelay.LimitExpiresIn})
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	api := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the page's origin is this server's
	}}
	front := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			api.ServeHTTP(w, r)
			return
		}
		page.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		front.CloseClientConnections()
		front.Close()
	})
	base := front.URL + "/"

	owner, token := startConversation(t, base, "Limits from the server.")
	if got := pageLimits(owner); got["MAX_CHARS"] != 37 || got["message.attachments"] != 2 || got["device.active"] != 4 {
		t.Errorf("the page holds %v, want the served 37, 2 and 4", got)
	}
	// The counter, after the first message was sent (the composer empty),
	// and as the person writes.
	if c := owner.text("count"); c != "0 / 37" {
		t.Errorf("the empty composer's counter reads %q, want 0 / 37", c)
	}
	eval[bool](owner, `(() => { const t = document.getElementById("text");
		t.value = "x".repeat(40); t.dispatchEvent(new Event("input", { bubbles: true })); return true })()`)
	if c := owner.text("count"); c != "40 / 37 · 3 too many" {
		t.Errorf("the counter for 40 characters reads %q, want 40 / 37 · 3 too many", c)
	}
	eval[bool](owner, `(() => { const t = document.getElementById("text");
		t.value = ""; t.dispatchEvent(new Event("input", { bubbles: true })); return true })()`)

	// Three images pasted at once: two are taken, and the notice says why.
	b64 := base64.StdEncoding.EncodeToString(pngImage(t, 4, 4))
	eval[bool](owner, `(() => {
		const bytes = Uint8Array.from(atob("`+b64+`"), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		for (const n of ["a.png", "b.png", "c.png"]) dt.items.add(new File([bytes], n, { type: "image/png" }));
		const text = document.getElementById("text");
		text.focus();
		text.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
		return true })()`)
	owner.waitJS(soon, "the files notice", `document.getElementById("notice-text").textContent === "A message carries at most 2 files."`)
	if n := eval[int](owner, `document.querySelectorAll("#files li").length`); n != 2 {
		t.Errorf("the composer holds %d files, want 2", n)
	}

	// The thread holds as many devices as the real server allows; the
	// page's refusal names the served number.
	for i := range chatrelay.LimitActiveDevices.Max {
		if status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", token, map[string]any{"name": fmt.Sprintf("Device %d", i)}); status != http.StatusCreated {
			t.Fatalf("device %d: %d %s", i, status, raw)
		}
	}
	owner.click("#devices-open")
	owner.waitJS(soon, "the devices panel", `document.getElementById("devices").open`)
	if got := typeName(owner, "device-name", strings.Repeat("😀", 13)); got != strings.Repeat("😀", 12) {
		t.Errorf("13 emoji typed in the device name keep %q (%d code points), want the served 12", got, utf8.RuneCountInString(got))
	}
	eval[bool](owner, `(document.getElementById("device-name").value = "One more", true)`)
	owner.click("#device-send")
	const refused = "This conversation already has 4 active devices: revoke one before adding another."
	owner.waitJS(soon, "the device_limit sentence", `document.getElementById("device-error").textContent === `+js(refused))
	owner.click("#devices-close")

	// The thread holds as many share links as the real server allows; the
	// People panel's refusal names the served number.
	for i := range chatrelay.LimitActiveGrants.Max {
		invite(t, srv.URL, token, map[string]any{"name": fmt.Sprintf("Guest %d", i)})
	}
	owner.click("#people-open")
	owner.waitJS(soon, "the People panel", `document.getElementById("people").open`)
	if got := typeName(owner, "invite-name", strings.Repeat("😀", 13)); got != strings.Repeat("😀", 12) {
		t.Errorf("13 emoji typed in the invite name keep %q (%d code points), want the served 12", got, utf8.RuneCountInString(got))
	}
	eval[bool](owner, `(document.getElementById("invite-name").value = "One more", true)`)
	owner.click("#invite-send")
	const full = "This conversation already has 5 active links: revoke one before inviting someone else."
	owner.waitJS(soon, "the participant_limit sentence", `document.getElementById("invite-error").textContent === `+js(full))
}
