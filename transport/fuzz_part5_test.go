package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
	"github.com/chatrelay/chatrelay/webpush"
)

// fuzzNet resolves every name to one public address, but names under
// "private.test" to a private one, and dials nothing: no packet leaves.
type fuzzNet struct{}

func (fuzzNet) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(strings.TrimSuffix(strings.ToLower(host), "."), "private.test") {
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("203.0.114.9")}, nil
}

func (fuzzNet) dial(context.Context, string, string) (net.Conn, error) {
	return nil, &net.OpError{Op: "dial", Err: net.UnknownNetworkError("fuzz: no dialling")}
}

// validHeader reports whether v is a header value net/http's server lets
// through (no control character but tab), as it hands it on (trimmed).
func validHeader(v string) (string, bool) {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return strings.Trim(v, " \t"), true
}

// FuzzPart5Bodies: the Part 5 write routes' input is untrusted: a push
// subscription's body (endpoint, p256dh, auth, events), a device's body
// (name, expires_in), and an upload's X-Filename and Content-Type. Each
// answers below 500 (503 is the store's own refusal) and refuses with the
// contract's JSON error and a known code. What is accepted is what the
// contract allows: a subscription's endpoint passes the guard again as
// it is stored, and its keys the key checks; a device's name is a
// cleaned name; an upload's name is a cleaned one, its type a bare media
// type, and its download names it in a Content-Disposition that parses
// back to that name, with the bytes sent.
func FuzzPart5Bodies(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	guard := &webpush.Guard{Resolver: fuzzNet{}, Dial: fuzzNet{}.dial}
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler), Windows: chatrelay.Windows{PerThread: 1 << 30, PerIP: 1 << 30},
		Push: &PushConfig{Guard: guard}})
	token := strings.Repeat("cd", 32)
	thread := chatrelay.ThreadOf(token)
	if _, err := st.Append(context.Background(), thread, store.NewMessage{Text: "hello"}); err != nil {
		f.Fatal(err)
	}
	inv := httptest.NewRecorder()
	ir := httptest.NewRequest(http.MethodPost, chatrelay.PathParticipants, strings.NewReader(`{"name":"Viewer","role":"viewer"}`))
	ir.Header.Set("X-Chat-Token", token)
	srv.ServeHTTP(inv, ir)
	var invited struct{ Token string }
	if err := json.Unmarshal(inv.Body.Bytes(), &invited); err != nil || inv.Code != http.StatusCreated {
		f.Fatalf("invite: %d %s", inv.Code, inv.Body)
	}
	p256dh := "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
	auth := "BTBZMqHH6r4Tts7J_aSIgg"
	sub := func(endpoint, p256dh, auth, events string) string {
		b := `{"subscription":{"endpoint":` + endpoint + `,"keys":{"p256dh":"` + p256dh + `","auth":"` + auth + `"}}`
		if events != "" {
			b += `,"events":` + events
		}
		return b + "}"
	}
	seeds := []struct {
		route             uint8
		body, name, ctype string
	}{
		{0, sub(`"https://fcm.googleapis.com/fcm/send/dGVzdA:APA91bH"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk"`, p256dh, auth, `["reply"]`), "", ""},
		{0, sub(`"https://web.push.apple.com/QGuQyavXutnMrwx"`, p256dh+"=", auth+"==", `["interaction","reply"]`), "", ""},
		{0, sub(`"https://push.private.test/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://127.0.0.1/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://[::ffff:10.0.0.1]/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"http://push.example.com/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://user:pw@push.example.com/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://push.example.com:0/x"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://push.example.com/a b%zz"`, p256dh, auth, ""), "", ""},
		{0, sub(`"https://push.example.com/x"`, strings.Repeat("A", 87), auth, ""), "", ""},
		{0, sub(`"https://push.example.com/x"`, p256dh, "AAAA", ""), "", ""},
		{0, sub(`"https://push.example.com/x"`, p256dh, auth, `["bogus"]`), "", ""},
		{0, sub(`5`, p256dh, auth, `[]`), "", ""},
		{0, `{"subscription":null}`, "", ""},
		{0, `{"subscription":{"endpoint":"https://push.example.com/x"}}`, "", ""},
		{1, `{"name":"Laptop"}`, "", ""},
		{1, `{"name":"Phone","expires_in":3600}`, "", ""},
		{1, `{"name":"Phone","expires_in":31536001}`, "", ""},
		{1, `{"name":"Phone","expires_in":3600.5}`, "", ""},
		{1, `{"name":"Phone","expires_in":18446747674}`, "", ""},
		{1, `{"name":"\u202e[x]<y>"}`, "", ""},
		{1, `{"name":5}`, "", ""},
		{2, "hello, file", "notes.txt", "text/plain; charset=utf-8"},
		{2, "\x89PNG\r\n\x1a\n", "shot%20one.png", "image/png"},
		{2, "<svg/>", "a%22b%5C.svg", "image/svg+xml"},
		{2, "x", "caf%C3%A9%20%E2%80%94%20%F0%9F%93%8E.txt", ""},
		{2, "x", "%ff%fe", "text/html"},
		{2, "x", "%zz", "a/b/c"},
		{2, "x", "sk-" + strings.Repeat("a", 40) + ".txt", "application/json"},
		{2, "x", "%5B%5D%3C%3E", "text/plain"},
		{2, "x", "a;b=c\\\"d'e*f%25.txt", "TEXT/Plain ;q=1"},
	}
	ranges := []string{"", "bytes=0-0", "bytes=2-", "bytes=-3", "bytes=5-1", "bytes=0-0,2-3", "bytes=999-", "bytes=a-b", "items=0-1", "bytes=0-18446744073709551616"}
	for i, s := range seeds {
		f.Add(s.route, s.body, s.name, s.ctype, ranges[i%len(ranges)])
	}
	known := knownCodes()
	do := func(t *testing.T, method, path string, body string, h map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("X-Chat-Token", token)
		if h["Authorization"] != "" {
			r.Header.Del("X-Chat-Token")
		}
		for k, v := range h {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q %q: %d %s", method, path, body, h, w.Code, w.Body)
		}
		if w.Code >= 400 {
			var a struct {
				Success *bool          `json:"success"`
				Code    chatrelay.Code `json:"code"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || a.Success == nil || *a.Success || !known[a.Code] {
				t.Fatalf("%s %s %q %q: %d %s", method, path, body, h, w.Code, w.Body)
			}
		}
		return w
	}
	f.Fuzz(func(t *testing.T, route uint8, body, name, ctype, rng string) {
		switch route % 3 {
		case 0:
			w := do(t, http.MethodPost, chatrelay.PathPush, body, nil)
			if w.Code != http.StatusCreated && w.Code != http.StatusOK {
				return
			}
			var a struct{ Push pushAnswer }
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || !chatrelay.ValidPushID(a.Push.ID) {
				t.Fatalf("body %q: %s", body, w.Body)
			}
			u, err := guard.CheckEndpoint(t.Context(), a.Push.Endpoint)
			if err != nil || u.String() != a.Push.Endpoint || len(a.Push.Endpoint) > chatrelay.LimitPushEndpoint.Max {
				t.Fatalf("body %q: stored endpoint %q does not pass again: %v", body, a.Push.Endpoint, err)
			}
			subs, err := st.PushSubscriptions(t.Context(), thread)
			if err != nil {
				t.Fatalf("body %q: the stored subscriptions do not read back: %v", body, err)
			}
			for _, s := range subs {
				if err := chatrelay.CheckPushSubscription(s); err != nil {
					t.Fatalf("body %q stored %+v, which its store refuses: %v", body, s, err)
				}
			}
			// Make room: the thread keeps at most 20.
			do(t, http.MethodDelete, chatrelay.PathPush+"/"+a.Push.ID, "", nil)
		case 1:
			w := do(t, http.MethodPost, chatrelay.PathDevices, body, nil)
			if w.Code != http.StatusCreated {
				return
			}
			var a deviceIssued
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
				t.Fatalf("body %q: %s", body, w.Body)
			}
			if clean, err := chatrelay.CleanName(a.Device.Name); err != nil || clean != a.Device.Name || !strings.HasSuffix(a.Link, "#"+a.Token) {
				t.Fatalf("body %q: device %+v link %q", body, a.Device, a.Link)
			}
			// It lives as long as it asked, in the contract's bounds.
			life := (a.Device.ExpiresAt - a.Device.CreatedAt) / 1000
			var asked struct{ ExpiresIn json.Number }
			json.Unmarshal([]byte(body), &asked)
			if n, err := asked.ExpiresIn.Int64(); err == nil && n != life || life < int64(chatrelay.LimitDeviceExpiresIn.Min) || life > int64(chatrelay.LimitDeviceExpiresIn.Max) {
				t.Fatalf("body %q: a device of %d s (%+v)", body, life, a.Device)
			}
			// Make room: a thread has at most 10 active devices.
			do(t, http.MethodDelete, chatrelay.PathDevices+"/"+a.Device.ID, "", nil)
		case 2:
			n, ok1 := validHeader(name)
			c, ok2 := validHeader(ctype)
			if !ok1 || !ok2 {
				return
			}
			w := do(t, http.MethodPost, chatrelay.PathAttachments, body, map[string]string{"X-Filename": n, "Content-Type": c})
			if w.Code != http.StatusCreated {
				return
			}
			var a attachmentAnswer
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
				t.Fatalf("upload %q %q: %s", name, ctype, w.Body)
			}
			at := a.Attachment
			if clean, err := chatrelay.CleanAttachmentName(at.Name); err != nil || clean != at.Name || !utf8.ValidString(at.Name) {
				t.Fatalf("upload %q: kept name %q", name, at.Name)
			}
			if chatrelay.CleanMediaType(at.Type) != at.Type {
				t.Fatalf("upload type %q: kept %q", ctype, at.Type)
			}
			g := do(t, http.MethodGet, chatrelay.PathAttachments+"/"+at.ID, "", nil)
			if g.Code != http.StatusOK || !bytes.Equal(g.Body.Bytes(), []byte(body)) {
				t.Fatalf("upload %q: download %d, %d bytes of %d", name, g.Code, g.Body.Len(), len(body))
			}
			cd := g.Header().Get("Content-Disposition")
			_, params, err := mime.ParseMediaType(cd)
			if err != nil || params["filename"] != at.Name {
				t.Fatalf("upload %q (kept as %q): Content-Disposition %q parses to %q, %v", name, at.Name, cd, params["filename"], err)
			}
			// A Range (anyone's header) answers 206 with the bytes it
			// names, or 416 as the API's JSON error; the whole file else.
			if rng, ok := validHeader(rng); ok && rng != "" {
				g := do(t, http.MethodGet, chatrelay.PathAttachments+"/"+at.ID, "", map[string]string{"Range": rng})
				switch g.Code {
				case http.StatusOK:
					if g.Body.String() != body {
						t.Fatalf("upload %q, Range %q: 200 with %d bytes of %d", body, rng, g.Body.Len(), len(body))
					}
				case http.StatusPartialContent:
					var a, b, size int
					cr := g.Header().Get("Content-Range")
					if strings.HasPrefix(g.Header().Get("Content-Type"), "multipart/byteranges") {
						break
					}
					if n, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &size); n != 3 || err != nil || size != len(body) || a > b || b >= size || g.Body.String() != body[a:b+1] {
						t.Fatalf("upload %q, Range %q: 206 %q with %q", body, rng, cr, g.Body)
					}
				case http.StatusRequestedRangeNotSatisfiable:
				default:
					t.Fatalf("upload %q, Range %q: %d %s", body, rng, g.Code, g.Body)
				}
			}
			// A participant does not see it before a post names it; then
			// it downloads it under its redacted name, with nothing
			// secret-shaped left in it.
			participant := map[string]string{"Authorization": "Bearer " + invited.Token}
			if g := do(t, http.MethodGet, chatrelay.PathAttachments+"/"+at.ID, "", participant); g.Code != http.StatusNotFound {
				t.Fatalf("upload %q: a participant's download of the owner's draft %d", name, g.Code)
			}
			if p := do(t, http.MethodPost, chatrelay.PathPost, `{"attachments":["`+at.ID+`"]}`, nil); p.Code != http.StatusCreated {
				t.Fatalf("upload %q: the post naming it %d %s", name, p.Code, p.Body)
			}
			g = do(t, http.MethodGet, chatrelay.PathAttachments+"/"+at.ID, "", participant)
			cd = g.Header().Get("Content-Disposition")
			_, params, err = mime.ParseMediaType(cd)
			seen := params["filename"]
			if g.Code != http.StatusOK || err != nil || seen != redactAttachment(at).Name || chatrelay.Redact(seen) != seen {
				t.Fatalf("upload %q (kept as %q): a participant's download %d, Content-Disposition %q (%q), %v", name, at.Name, g.Code, cd, seen, err)
			}
		}
	})
}
