package web_test

// A file the server refused for now (a store that could not answer, the
// thread limit) goes again with the message: the person never sends a
// message whose file the composer still shows as not uploaded.

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// attachPNG attaches a w×h PNG named name with the Attach button's file
// input, as a person picking it does.
func (tb *tab) attachPNG(name string, w, h int) {
	tb.t.Helper()
	b64 := base64.StdEncoding.EncodeToString(pngImage(tb.t, w, h))
	eval[bool](tb, `(() => {
		const bytes = Uint8Array.from(atob("`+b64+`"), (c) => c.charCodeAt(0));
		const dt = new DataTransfer();
		dt.items.add(new File([bytes], `+js(name)+`, { type: "image/png" }));
		const input = document.getElementById("file");
		input.files = dt.files;
		input.dispatchEvent(new Event("change"));
		return true })()`)
}

// attachmentsOf reads the v2 poll of the thread and returns, for each
// message, its text and the names of its files.
func attachmentsOf(t *testing.T, base, token string) map[string][]string {
	t.Helper()
	status, raw := callAPI(t, http.MethodGet, base+"api/chat/poll?v=2", "X-Chat-Token", token, nil)
	var p struct {
		Messages []struct {
			Text        string `json:"text"`
			Attachments []struct {
				Name string `json:"name"`
			} `json:"attachments"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || status != http.StatusOK {
		t.Fatalf("poll v2: %d %s", status, raw)
	}
	out := map[string][]string{}
	for _, m := range p.Messages {
		names := []string{}
		for _, a := range m.Attachments {
			names = append(names, a.Name)
		}
		out[m.Text] = names
	}
	return out
}

// TestFileRefusedForNowGoesWithTheMessage: an upload answered 503
// store_unavailable (retryable) shows "not uploaded"; Send then uploads
// it again and sends it with the text, at a phone's width. (Before, Send
// posted the text alone and left the file in the composer, not uploaded:
// the message went without the file the person attached.)
func TestFileRefusedForNowGoesWithTheMessage(t *testing.T) {
	srv := startServer(t)
	target, _ := url.Parse(srv.URL)
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = r.In.Host }, FlushInterval: -1}
	var uploads atomic.Int32
	px := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first upload meets a store that cannot answer for a moment.
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/api/chat/attachments") && uploads.Add(1) == 1 {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"success":false,"error":"the store is unavailable","code":"store_unavailable","retryable":true}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	tb := newWindow(t)
	tb.do(soon, "a phone's screen", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	tb.open(px.URL + "/")
	tb.waitState(live, "ws")
	tb.attachPNG("shot.png", 24, 18)
	tb.waitJS(soon, "the refusal beside the file", `document.querySelector("#files .file-status.bad")?.textContent === "not uploaded: the store is unavailable"`)
	tb.write("the screenshot")
	tb.waitShown(soon, "the screenshot")
	if got := attachmentsOf(t, srv.URL, tb.token())["the screenshot"]; len(got) != 1 || got[0] != "shot.png" {
		t.Errorf("the message carries files %q, want shot.png", got)
	}
	tb.waitJS(soon, "the thumbnail in the message", `(() => { const i = document.querySelector("#log .atts .thumb img"); return !!i && i.complete && i.naturalWidth === 24 })()`)
	if n := eval[int](tb, `document.querySelectorAll("#files .file").length`); n != 0 {
		t.Errorf("%d files left in the composer after the message went", n)
	}
}

// TestThreadLimitKeepsTextAndFile: a new conversation's first message
// with a file, on a server at its thread limit, is refused (507
// thread_limit) with words that say why and that the message and its
// file are kept, and a Retry; once a place frees up (the sweep removed
// the other thread), Retry sends both. At a desktop's width.
func TestThreadLimitKeepsTextAndFile(t *testing.T) {
	srv := startServer(t, "--max-threads", "1", "--retention-age", "3s", "--sweep-every", "500ms")
	other := strings.Repeat("ab", 32)
	post(t, srv.URL, other, "the one thread", "operator")
	tb := newWindow(t)
	tb.do(soon, "a desktop's screen", chromedp.EmulateViewport(1280, 800))
	tb.open(srv.URL)
	tb.waitState(live, "ws")
	tb.attachPNG("shot.png", 24, 18)
	tb.waitJS(soon, "the refusal beside the file", `!!document.querySelector("#files .file-status.bad")`)
	tb.write("my first words")
	tb.waitJS(soon, "the refusal", `!document.getElementById("notice").hidden`)
	const words = "Not sent: this server holds as many conversations as it may, and this one would be new. Your message and its files are kept: press Retry later."
	if got := eval[string](tb, `document.getElementById("notice-text").textContent`); got != words {
		t.Errorf("the refusal says %q, want %q", got, words)
	}
	if !tb.visible("#retry") {
		t.Error("no Retry beside the refusal")
	}
	if got := eval[string](tb, `document.getElementById("text").value`); got != "my first words" {
		t.Errorf("the composer holds %q after the refusal", got)
	}
	// The sweep removes the other thread (its message is older than 3 s).
	waitFor(t, 15*time.Second, "the other thread removed", func() bool {
		return len(poll2(t, srv.URL, other)) == 0
	})
	tb.click("#retry")
	tb.waitShown(soon, "my first words")
	if got := attachmentsOf(t, srv.URL, tb.token())["my first words"]; len(got) != 1 || got[0] != "shot.png" {
		t.Errorf("the message carries files %q, want shot.png", got)
	}
}
