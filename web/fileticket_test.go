package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// openOnly checks that the address addr, copied out of a page, opens the
// file id (its bytes want, under its name) and nothing else: not the
// thread's stream, not its poll, not the thread's other file.
func openOnly(t *testing.T, base, addr, id, name string, want []byte, other string) {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	if !strings.HasSuffix(u.Path, "/api/chat/attachments/"+id) {
		t.Fatalf("address %s is not the file %s's", addr, id)
	}
	tk := u.Query().Get("ticket")
	get := func(target string) (int, http.Header, []byte) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, b
		}
		return resp.StatusCode, resp.Header, nil // an open stream: never read to its end
	}

	status, h, b := get(addr)
	if status != http.StatusOK || !bytes.Equal(b, want) {
		t.Errorf("the address of %s: %d, %d bytes; want 200 and its %d bytes", name, status, len(b), len(want))
	}
	if cd := h.Get("Content-Disposition"); !strings.Contains(cd, name) {
		t.Errorf("the address of %s is served as %q, without its name", name, cd)
	}
	for _, target := range []string{
		base + "api/chat/stream?v=2&ticket=" + url.QueryEscape(tk),
		base + "api/chat/stream?ticket=" + url.QueryEscape(tk),
		base + "api/chat/poll?v=2&ticket=" + url.QueryEscape(tk),
		base + "api/chat/attachments/" + other + "?ticket=" + url.QueryEscape(tk),
	} {
		status, _, b := get(target)
		var e struct{ Code string }
		json.Unmarshal(b, &e)
		if status != http.StatusUnauthorized || e.Code != "invalid_ticket" {
			t.Errorf("the ticket in the address of %s opened %s: %d %.200s", name, strings.TrimPrefix(target, base), status, b)
		}
	}
}

// TestCopiedFileAddressOpensOnlyThatFile: every address a page puts in its
// DOM for a file (the thumbnail's src, its full-size link, a file chip's
// download link) and the full-size tab's address open that one file and
// nothing else, on the owner's page, a participant's and a device's.
// (Before, they carried the thread's ticket: "Copy image address" pasted
// anywhere opened the whole conversation's stream for 15 minutes.) The
// thumbnails, the full-size view and the downloads' names still work.
func TestCopiedFileAddressOpensOnlyThatFile(t *testing.T) {
	srv := startServer(t)
	owner, tok := startConversation(t, srv.URL, "Here is what I see.")
	img := pngImage(t, 40, 30)
	log := []byte("line 1\nline 2\n")
	imgID := attach(t, srv.URL, tok, "screen shot.png", "image/png", img)
	logID := attach(t, srv.URL, tok, "build.log", "text/plain", log)
	status, raw := callAPI(t, http.MethodPost, srv.URL+"api/chat/post", "X-Chat-Token", tok, map[string]any{"text": "the screenshot and the log", "attachments": []string{imgID, logID}})
	if status != http.StatusCreated {
		t.Fatalf("post: %d %s", status, raw)
	}
	sam := invite(t, srv.URL, tok, map[string]any{"name": "Sam", "role": "viewer"})
	status, raw = callAPI(t, http.MethodPost, srv.URL+"api/chat/devices", "X-Chat-Token", tok, map[string]string{"name": "Phone"})
	var phoneLink struct{ Link string }
	if json.Unmarshal(raw, &phoneLink); status != http.StatusCreated || phoneLink.Link == "" {
		t.Fatalf("make a device: %d %s", status, raw)
	}
	viewer := newWindow(t)
	viewer.open(sam.Link)
	phone := newWindow(t)
	phone.open(phoneLink.Link)

	for _, p := range []struct {
		name string
		tb   *tab
	}{{"the owner's page", owner}, {"the participant's page", viewer}, {"the device's page", phone}} {
		p.tb.waitJS(soon, p.name+": the thumbnail drawn and the chip's link", `(() => {
			const i = document.querySelector(".atts .thumb img"), c = document.querySelector(".atts .chip");
			return !!i && i.complete && i.naturalWidth === 40 && !!c && c.href.includes("ticket=") })()`)
		if got := eval[string](p.tb, `document.querySelector(".atts .chip").download`); got != "build.log" {
			t.Errorf("%s: the chip downloads as %q, want build.log", p.name, got)
		}
		addrs := eval[[]string](p.tb, `[...document.querySelectorAll("[src*='ticket='], [href*='ticket=']")].map((e) => e.src || e.href)`)
		if len(addrs) != 3 {
			t.Errorf("%s: %d addresses with a ticket, want 3 (the thumbnail's src and link, the chip's link): %q", p.name, len(addrs), addrs)
		}
		for _, a := range addrs {
			if strings.Contains(a, imgID) {
				openOnly(t, srv.URL, a, imgID, "screen shot.png", img, logID)
			} else {
				openOnly(t, srv.URL, a, logID, "build.log", log, imgID)
			}
		}
	}

	// The chip downloads the file under its name, as a person's click does.
	dir := t.TempDir()
	owner.do(5*time.Second, "allow downloads", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllow, BrowserContextID: chromedp.FromContext(owner.ctx).BrowserContextID, DownloadPath: dir})
		return chromedp.Void{}, err
	})
	owner.click(".atts .chip")
	waitFor(t, soon, "build.log downloaded", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "build.log"))
		return err == nil && bytes.Equal(b, log)
	})

	// The full-size view: a new tab showing the image, whose address
	// opens that image only.
	addr := make(chan string, 1) // the new tab's address
	opened := chromedp.WaitNewTarget(owner.ctx, func(i *target.Info) bool {
		if !strings.Contains(i.URL, "/api/chat/attachments/") {
			return false
		}
		select {
		case addr <- i.URL:
		default:
		}
		return true
	})
	owner.fullSize(opened)
	openOnly(t, srv.URL, <-addr, imgID, "screen shot.png", img, logID)
}
