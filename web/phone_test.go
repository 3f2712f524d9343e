package web_test

import (
	"strconv"
	"strings"
	"testing"

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
