package web_test

// Attachments in the page (contract Part 5): images drawn inline from the
// served bytes, everything else a download that never runs.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// pngImage is a w×h PNG.
func pngImage(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		img.Set(x, 0, color.RGBA{200, 30, 30, 255})
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// attach uploads body as the owner of token and returns its id.
func attach(t *testing.T, base, token, name, ctype string, body []byte) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"api/chat/attachments", bytes.NewReader(body))
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("X-Filename", url.PathEscape(name))
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload %s: %d %s", name, resp.StatusCode, b)
	}
	var a struct{ Attachment struct{ ID string } }
	json.Unmarshal(b, &a)
	return a.Attachment.ID
}

// TestAttachmentsDrawnSafely: a PNG is drawn inline (from the served
// bytes, through a ticket); an SVG holding a script is a download chip
// and its script never runs.
func TestAttachmentsDrawnSafely(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tok := tb.token()
	// What the SVG's script would do if it ever ran in a page of this origin.
	eval[bool](tb, `(() => { window.ran = false; window.addEventListener("message", () => (window.ran = true)); return true })()`)
	svg := `<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>document.title = "ran"; top.postMessage("ran", "*"); top.ran = true</script></svg>`
	pngID := attach(t, srv.URL, tok, "shot.png", "image/png", pngImage(t, 40, 30))
	svgID := attach(t, srv.URL, tok, "drawing.svg", "image/svg+xml", []byte(svg))
	body, _ := json.Marshal(map[string]any{"text": "look", "attachments": []string{pngID, svgID}})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"api/chat/post", bytes.NewReader(body))
	req.Header.Set("X-Chat-Token", tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()

	tb.waitJS(soon, "the PNG drawn inline", `(() => { const i = document.querySelector(".atts .thumb img");
		return !!i && i.complete && i.naturalWidth === 40 && i.naturalHeight === 30 })()`)
	tb.waitJS(soon, "the SVG as a download chip", `(() => { const a = [...document.querySelectorAll(".atts .chip")];
		return a.length === 1 && a[0].textContent.startsWith("drawing.svg") && a[0].hasAttribute("download") && a[0].href.includes("ticket=") })()`)
	if n := eval[int](tb, `document.querySelectorAll(".atts img").length`); n != 1 {
		t.Errorf("%d images drawn, want the PNG alone", n)
	}
	// Even loaded as an image or a frame on purpose, the SVG's bytes are a
	// download (application/octet-stream, nosniff, sandbox): no script runs.
	eval[bool](tb, `new Promise((ok) => {
		const href = document.querySelector(".atts .chip").href;
		const img = new Image(); img.onload = img.onerror = () => ok(true); img.src = href;
		const f = document.createElement("iframe"); f.src = href; document.body.append(f);
	})`)
	tb.waitJS(soon, "the probe frame to settle", `document.readyState === "complete"`)
	if ran := eval[bool](tb, `window.ran === true || document.title === "ran"`); ran {
		t.Errorf("the SVG's script ran in the page")
	}
	if got := eval[string](tb, `document.querySelector(".atts .thumb").getAttribute("aria-label")`); !strings.HasPrefix(got, "shot.png (") {
		t.Errorf("thumbnail label %q", got)
	}
}

// TestPasteAnImageSendsIt: an image pasted into the composer is uploaded
// (with its progress), and Enter sends it with no text: the message shows
// its thumbnail, and the v2 poll carries the attachment.
func TestPasteAnImageSendsIt(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	b64 := base64.StdEncoding.EncodeToString(pngImage(t, 12, 8))
	eval[bool](tb, `(() => {
		const bytes = Uint8Array.from(atob("`+b64+`"), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], "pasted.png", { type: "image/png" }));
		const text = document.getElementById("text");
		text.focus();
		text.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
		return true })()`)
	tb.waitJS(soon, "the pasted file uploaded", `(() => { const s = document.querySelector("#files .file-status");
		return !!s && s.textContent.endsWith(" B") && !document.querySelector("#files progress") })()`)
	tb.enter(false)
	tb.waitJS(soon, "the message with its thumbnail", `(() => { const i = document.querySelector("#log .atts .thumb img");
		return !!i && i.complete && i.naturalWidth === 12 })()`)
	tb.waitJS(soon, "the composer emptied of files", `document.getElementById("files").hidden`)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"api/chat/poll?v=2", nil)
	req.Header.Set("X-Chat-Token", tb.token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"name":"pasted.png","type":"image/png"`) || !strings.Contains(string(b), `"width":12,"height":8`) {
		t.Errorf("the v2 poll lacks the pasted image: %s", b)
	}
}

// TestApprovalShowsItsAttachments: an approval hermes asks with a file
// (chatrelay ask --attach) shows the file under its card, with Approve
// and Deny; a log is a download chip.
func TestApprovalShowsItsAttachments(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tok := tb.token()
	post(t, srv.URL, tok, "please deploy", "operator")
	dir := t.TempDir()
	shot, log := filepath.Join(dir, "screen.png"), filepath.Join(dir, "deploy.log")
	if err := os.WriteFile(shot, pngImage(t, 200, 120), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, []byte("step 1\nstep 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.cli("ask", threadOf(tok), "--approval", "Deploy build 412?", "--attach", shot, "--attach", log)
	tb.waitJS(soon, "the approval card with its files", `(() => {
		const li = [...document.querySelectorAll("#log li")].find((l) => l.querySelector(".ix"));
		if (!li) return false;
		const img = li.querySelector(".atts .thumb img"), chip = li.querySelector(".atts .chip");
		return !!img && img.complete && img.naturalWidth === 200 && !!chip && chip.textContent === "deploy.log (14 B)" &&
			[...li.querySelectorAll(".ix button")].some((b) => b.textContent === "Approve") })()`)
	// The chip beside the screenshot keeps its own height: before, the row
	// stretched it to the image's, an empty box 121 px tall.
	if h := eval[float64](tb, `document.querySelector(".atts .chip").getBoundingClientRect().height`); h > 40 {
		t.Errorf("the file's chip beside the image is %.0f px tall, want one line", h)
	}
}

// TestParticipantSeesAttachments: a viewer's page shows the thread's
// image (fetched with a ticket minted from its link) and a file whose
// name has a secret's shape with the name redacted.
func TestParticipantSeesAttachments(t *testing.T) {
	srv := startServer(t)
	tok := strings.Repeat("7c", 32)
	pngID := attach(t, srv.URL, tok, "chart.png", "image/png", pngImage(t, 16, 9))
	logID := attach(t, srv.URL, tok, "token=s3cr3t.txt", "text/plain", []byte("log"))
	body, _ := json.Marshal(map[string]any{"text": "the chart and the log", "attachments": []string{pngID, logID}})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"api/chat/post", bytes.NewReader(body))
	req.Header.Set("X-Chat-Token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("post: %v %v", resp, err)
	}
	resp.Body.Close()
	sam := invite(t, srv.URL, tok, map[string]any{"name": "Sam", "role": "viewer"})
	viewer := newWindow(t)
	viewer.open(sam.Link)
	viewer.waitState(live, "ws")
	viewer.waitJS(soon, "the image and the redacted file", `(() => {
		const img = document.querySelector(".atts .thumb img"), chip = document.querySelector(".atts .chip");
		return !!img && img.complete && img.naturalWidth === 16 && !!chip && chip.textContent.startsWith("token=[redacted]") })()`)
	if n := eval[int](viewer, `document.body.innerHTML.includes("s3cr3t") ? 1 : 0`); n != 0 {
		t.Error("the viewer's page shows the secret in a file's name")
	}
}

// TestDropAFileSendsIt: a file dropped on the conversation is uploaded
// and sent with the text; the message shows it as a download chip.
func TestDropAFileSendsIt(t *testing.T) {
	srv := startServer(t)
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	eval[bool](tb, `(() => {
		const dt = new DataTransfer();
		dt.items.add(new File(["line 1\nline 2\n"], "build.log", { type: "text/plain" }));
		const zone = document.getElementById("conversation");
		zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
		zone.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
		return true })()`)
	tb.waitJS(soon, "the dropped file uploaded", `(() => { const s = document.querySelector("#files .file-status");
		return !!s && s.textContent === "14 B" })()`)
	tb.write("the build log")
	tb.waitJS(soon, "the message with its chip", `(() => { const c = document.querySelector("#log .atts .chip");
		return !!c && c.textContent === "build.log (14 B)" && c.download === "build.log" })()`)
	tb.waitShown(soon, "the build log")
}

// TestTooLargeFileSaysWhy: a file over the server's size limit stays in
// the composer marked with its size and the server's reason (before, only
// "too large", with no word of the limit).
func TestTooLargeFileSaysWhy(t *testing.T) {
	srv := startServer(t, "--max-attachment-bytes", "1024")
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	eval[bool](tb, `(() => {
		const dt = new DataTransfer();
		dt.items.add(new File([new Uint8Array(3000)], "core.dump", { type: "application/octet-stream" }));
		const input = document.getElementById("file");
		input.files = dt.files;
		input.dispatchEvent(new Event("change"));
		return true })()`)
	tb.waitJS(soon, "the refusal beside the file", `(() => { const s = document.querySelector("#files .file-status.bad");
		return !!s && s.textContent === "too large (2.9 KiB): the file is larger than 1024 bytes" })()`)
}

// TestDeviceAttachesAFile: the owner's phone (a device link, /d) attaches
// a file as the owner's page does: it is uploaded with the device's token
// as a Bearer header and sent with the text, and the owner's page shows it.
// (Before, the page sent the device's token as X-Chat-Token, which the
// server refused: "not uploaded: missing or malformed X-Chat-Token".)
func TestDeviceAttachesAFile(t *testing.T) {
	srv := startServer(t)
	owner, token := startConversation(t, srv.URL, "Send me the log from your phone.")
	status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", token, map[string]string{"name": "Phone"})
	var made struct{ Link string }
	if json.Unmarshal(raw, &made); status != http.StatusCreated || made.Link == "" {
		t.Fatalf("make a device: %d %s", status, raw)
	}
	phone := newWindow(t)
	phone.open(made.Link)
	phone.waitState(live, "ws")
	eval[bool](phone, `(() => {
		const dt = new DataTransfer();
		dt.items.add(new File(["line 1\nline 2\n"], "phone.log", { type: "text/plain" }));
		const input = document.getElementById("file");
		input.files = dt.files;
		input.dispatchEvent(new Event("change"));
		return true })()`)
	phone.waitJS(soon, "the file uploaded", `(() => { const s = document.querySelector("#files .file-status");
		return !!s && s.textContent === "14 B" })()`)
	phone.write("the log")
	phone.waitShown(soon, "the log")
	owner.waitJS(soon, "the phone's file on the owner's page", `(() => { const c = document.querySelector("#log .atts .chip");
		return !!c && c.textContent === "phone.log (14 B)" })()`)
}

// TestExpiredTicketLinkOpens: a file's link pressed after the ticket it was
// drawn with expired still opens the file: the page gets a fresh ticket
// first. (Before, a thumbnail or a chip pressed 15 minutes after it was
// drawn opened the server's JSON refusal, "invalid ticket: expired".) The
// server here gives tickets 2 seconds.
func TestExpiredTicketLinkOpens(t *testing.T) {
	srv := startServer(t, "--ticket-ttl", "2s")
	tb := newWindow(t)
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tok := tb.token()
	id := attach(t, srv.URL, tok, "shot.png", "image/png", pngImage(t, 40, 30))
	status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "X-Chat-Token", tok, map[string]any{"text": "the screenshot", "attachments": []string{id}})
	if status != http.StatusCreated {
		t.Fatalf("post: %d %s", status, raw)
	}
	tb.waitJS(soon, "the thumbnail drawn", `(() => { const i = document.querySelector(".atts .thumb img"); return !!i && i.complete && i.naturalWidth === 40 })()`)
	expires := `Number(new URL(document.querySelector(".atts .thumb").href).searchParams.get("ticket").split(".").at(-2))`
	tb.waitJS(soon, "the thumbnail's ticket expired", `Date.now() > `+expires+` + 500`)

	opened := chromedp.WaitNewTarget(tb.ctx, func(i *target.Info) bool { return strings.Contains(i.URL, "/api/chat/attachments/") })
	tb.fullSize(opened)
}

// fullSize presses the first thumbnail and checks that the tab it opens
// (opened, from chromedp.WaitNewTarget) shows the 40 px wide test image
// full size.
func (tb *tab) fullSize(opened <-chan target.ID) {
	tb.t.Helper()
	tb.click(".atts .thumb")
	var tid target.ID
	select {
	case tid = <-opened:
	case <-time.After(soon):
		tb.t.Fatal("pressing the thumbnail opened no tab")
	}
	full, cancel := chromedp.NewContext(tb.ctx, chromedp.WithTargetID(tid))
	defer cancel()
	shown := &tab{t: tb.t, ctx: full}
	shown.waitJS(soon, "the image full size in the new tab", `document.contentType === "image/png" && document.images[0]?.naturalWidth === 40`)
}
