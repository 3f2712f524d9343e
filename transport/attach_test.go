package transport_test

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/schematest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// Attachments over HTTP (contract Part 5).

type uploaded struct {
	Success    bool                 `json:"success"`
	Attachment chatrelay.Attachment `json:"attachment"`
	Code       chatrelay.Code       `json:"code"`
}

// upload sends body as a file named name with the credentials in hdr.
func (e *pushEnv) upload(hdr map[string]string, name, ctype string, body io.Reader) (int, uploaded) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), body)
	assert.Success(e.t, err)
	req.Header.Set("X-Filename", url.PathEscape(name))
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	assert.Success(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Success(e.t, err)
	schematest.Answer(e.t, http.MethodPost, chatrelay.PathAttachments, resp.StatusCode, resp.Header, b)
	var u uploaded
	assert.Success(e.t, json.Unmarshal(b, &u))
	return resp.StatusCode, u
}

func owner(tok string) map[string]string { return map[string]string{"X-Chat-Token": tok} }

// mustUpload uploads as the owner of tok and expects 201.
func (e *pushEnv) mustUpload(tok, name, ctype string, body []byte) chatrelay.Attachment {
	e.t.Helper()
	status, u := e.upload(owner(tok), name, ctype, bytes.NewReader(body))
	assert.Equal(e.t, "upload status "+string(u.Code), status, http.StatusCreated)
	return u.Attachment
}

// fetch downloads an attachment (path and query) with hdr; the answer is
// the bytes, not a JSON answer.
func (e *pushEnv) fetch(target string, hdr map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.url(target), nil)
	assert.Success(e.t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	assert.Success(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.Success(e.t, err)
	return resp.StatusCode, resp.Header, b
}

// postJSON posts a body as the owner of tok.
func (e *pushEnv) postJSON(tok string, body any) (int, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	status, _, answer := e.do(http.MethodPost, chatrelay.PathPost, tok, string(b), nil)
	return status, answer
}

func errCode(t testing.TB, b []byte) chatrelay.Code {
	t.Helper()
	var a struct {
		Code chatrelay.Code `json:"code"`
	}
	assert.Success(t, json.Unmarshal(b, &a))
	return a.Code
}

// TestAttachmentLimits: each limit at its value is taken, one past it
// refused with its code, and a refused upload keeps nothing.
func TestAttachmentLimits(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		max := chatrelay.LimitAttachmentBytes.Max

		status, u := e.upload(owner(tok), "max.bin", "application/octet-stream", bytes.NewReader(make([]byte, max)))
		assert.Equal(t, "a file of the most bytes", status, http.StatusCreated)
		assert.Equal(t, "its size", u.Attachment.Size, int64(max))
		status, u = e.upload(owner(tok), "over.bin", "application/octet-stream", bytes.NewReader(make([]byte, max+1)))
		assert.Equal(t, "a byte more (Content-Length)", status, http.StatusRequestEntityTooLarge)
		assert.Equal(t, "its code", u.Code, chatrelay.AttachmentTooLarge)
		// Without a Content-Length the server counts the bytes as they come.
		status, u = e.upload(owner(tok), "over.bin", "application/octet-stream", io.MultiReader(bytes.NewReader(make([]byte, max+1))))
		assert.Equal(t, "a byte more (chunked)", status, http.StatusRequestEntityTooLarge)
		assert.Equal(t, "its code", u.Code, chatrelay.AttachmentTooLarge)

		var ids []string
		for i := range 11 {
			ids = append(ids, e.mustUpload(tok, "f.txt", "text/plain", []byte{byte('a' + i)}).ID)
		}
		status, b := e.postJSON(tok, map[string]any{"text": "eleven", "attachments": ids})
		assert.Equal(t, "11 attachments", status, http.StatusConflict)
		assert.Equal(t, "its code", errCode(t, b), chatrelay.TooManyAttachments)
		status, _ = e.postJSON(tok, map[string]any{"attachments": ids[:10]})
		assert.Equal(t, "10 attachments and no text", status, http.StatusCreated)

		name := strings.Repeat("é", chatrelay.LimitAttachmentName.Max)
		a := e.mustUpload(tok, name, "text/plain", []byte("n"))
		assert.Equal(t, "a name of the most code points", a.Name, name)
		a = e.mustUpload(tok, name+"x", "text/plain", []byte("n"))
		assert.Equal(t, "a name one past: cut", a.Name, name)
		status, u = e.upload(owner(tok), "<>[]\n", "text/plain", strings.NewReader("x"))
		assert.Equal(t, "a name empty once cleaned", status, http.StatusBadRequest)
		assert.Equal(t, "its code", u.Code, chatrelay.InvalidAttachment)

		status, b = e.postJSON(tok, map[string]any{"text": "reuse", "attachments": ids[:1]})
		assert.Equal(t, "an id already used", status, http.StatusBadRequest)
		assert.Equal(t, "its code", errCode(t, b), chatrelay.InvalidAttachment)
		status, b = e.postJSON(tokenN(2), map[string]any{"text": "foreign", "attachments": ids[10:]})
		assert.Equal(t, "another thread's id", status, http.StatusBadRequest)
		assert.Equal(t, "its code", errCode(t, b), chatrelay.InvalidAttachment)
	})
}

// TestAttachmentThreadLimit: a thread holds 100 MiB of attachments to the
// byte; one byte more is refused.
func TestAttachmentThreadLimit(t *testing.T) {
	most := chatrelay.LimitThreadAttachments.Max
	e := startPush(t, pushOptions{config: func(c *transport.Config) { c.MaxAttachmentBytes = int64(most) }})
	tok := tokenN(1)
	e.mustUpload(tok, "all.bin", "application/octet-stream", make([]byte, most))
	status, u := e.upload(owner(tok), "one.bin", "application/octet-stream", strings.NewReader("1"))
	assert.Equal(t, "one byte past the thread's", status, http.StatusRequestEntityTooLarge)
	assert.Equal(t, "its code", u.Code, chatrelay.AttachmentTooLarge)
}

func pngBytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	assert.Success(t, png.Encode(&b, image.NewGray(image.Rect(0, 0, 4, 2))))
	return b.Bytes()
}

// TestAttachmentServing: the type is decided from the bytes: a PNG is
// served inline as an image, an SVG holding a script and an HTML page as
// downloads; always nosniff, a sandbox CSP and private caching; Range.
func TestAttachmentServing(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		svg := []byte(`<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`)
		html := []byte(`<!DOCTYPE html><html><body><script>alert(1)</script></body></html>`)
		img := pngBytes(t)
		for _, tc := range []struct {
			name, sent, ctype, disposition string
			body                           []byte
		}{
			{"png", "image/png", "image/png", "inline", img},
			{"svg with a script", "image/svg+xml", "application/octet-stream", "attachment", svg},
			{"html", "text/html", "application/octet-stream", "attachment", html},
			{"html sent as a png", "image/png", "application/octet-stream", "attachment", html},
		} {
			a := e.mustUpload(tok, tc.name, tc.sent, tc.body)
			status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, owner(tok))
			assert.Equal(t, tc.name+": status", status, http.StatusOK)
			assert.Equal(t, tc.name+": bytes", string(b), string(tc.body))
			assert.Equal(t, tc.name+": Content-Type", h.Get("Content-Type"), tc.ctype)
			assert.True(t, strings.HasPrefix(h.Get("Content-Disposition"), tc.disposition+";"), "%s: Content-Disposition %q", tc.name, h.Get("Content-Disposition"))
			assert.Equal(t, tc.name+": nosniff", h.Get("X-Content-Type-Options"), "nosniff")
			assert.Equal(t, tc.name+": CSP", h.Get("Content-Security-Policy"), "sandbox")
			assert.Equal(t, tc.name+": Cache-Control", h.Get("Cache-Control"), "private")
		}
		a := e.mustUpload(tok, "digits.txt", "text/plain", []byte("0123456789"))
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+a.ID, map[string]string{"X-Chat-Token": tok, "Range": "bytes=2-5"})
		assert.Equal(t, "range status", status, http.StatusPartialContent)
		assert.Equal(t, "range bytes", string(b), "2345")
		assert.Equal(t, "Content-Range", h.Get("Content-Range"), "bytes 2-5/10")
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/at_000000000000", owner(tok))
		assert.Equal(t, "an unknown id", status, http.StatusNotFound)
	})
}

// TestAttachmentInPolls: a v1 poll shows a line per attachment in the
// text; a v2 poll carries the attachment objects.
func TestAttachmentInPolls(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		a := e.mustUpload(tok, "diff.patch", "text/x-diff", bytes.Repeat([]byte("+"), 1536))
		b := e.mustUpload(tok, "shot.png", "image/png", pngBytes(t))
		status, _ := e.postJSON(tok, map[string]any{"text": "see these", "attachments": []string{a.ID, b.ID}})
		assert.Equal(t, "post", status, http.StatusCreated)

		_, _, v1 := e.do(http.MethodGet, chatrelay.PathPoll, tok, "", nil)
		var p1 struct {
			Messages []map[string]any `json:"messages"`
		}
		assert.Success(t, json.Unmarshal(v1, &p1))
		want := "see these\n[attachment: diff.patch (1.5 KiB)]\n[attachment: shot.png (" + chatrelay.FormatSize(b.Size) + ")]"
		assert.Equal(t, "v1 text", p1.Messages[0]["text"], any(want))
		assert.Equal(t, "v1 fields", len(p1.Messages[0]), 5)

		_, _, v2 := e.do(http.MethodGet, chatrelay.PathPoll+"?v=2", tok, "", nil)
		var p2 struct {
			Messages []chatrelay.Message `json:"messages"`
		}
		assert.Success(t, json.Unmarshal(v2, &p2))
		assert.Equal(t, "v2 text", p2.Messages[0].Text, "see these")
		assert.Equal(t, "v2 attachments", p2.Messages[0].Attachments, []chatrelay.Attachment{a, b})
		assert.Equal(t, "image size", [2]int{b.Width, b.Height}, [2]int{4, 2})
	})
}

// TestAttachmentParticipant: a participant downloads its thread's files
// (with its token or a ticket), gets 404 for another thread's id, sees
// secret-shaped names redacted, and its upload is audited.
func TestAttachmentParticipant(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok, other := tokenN(1), tokenN(2)
		mine := e.mustUpload(tok, "password=hunter2.txt", "text/plain", []byte("mine"))
		status, _ := e.postJSON(tok, map[string]any{"text": "here", "attachments": []string{mine.ID}})
		assert.Equal(t, "post", status, http.StatusCreated)
		theirs := e.mustUpload(other, "theirs.txt", "text/plain", []byte("theirs"))
		in := e.invite(tok, `{"name":"Alex","role":"commenter"}`)

		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+mine.ID, bearer(in.Token))
		assert.Equal(t, "its thread's file", status, http.StatusOK)
		assert.Equal(t, "bytes", string(b), "mine")
		assert.True(t, !strings.Contains(h.Get("Content-Disposition"), "hunter2"), "the name is not redacted: %q", h.Get("Content-Disposition"))
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+theirs.ID, bearer(in.Token))
		assert.Equal(t, "another thread's id", status, http.StatusNotFound)

		_, _, v2 := e.do(http.MethodGet, chatrelay.PathPoll+"?v=2", "", "", bearer(in.Token))
		assert.True(t, !bytes.Contains(v2, []byte("hunter2")), "a participant's poll shows the name: %s", v2)
		assert.True(t, bytes.Contains(v2, []byte(mine.ID)), "a participant's poll lacks the attachment: %s", v2)

		_, _, tb := e.do(http.MethodPost, chatrelay.PathTicket, "", "", bearer(in.Token))
		var ticket struct {
			Ticket string `json:"ticket"`
		}
		assert.Success(t, json.Unmarshal(tb, &ticket))
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+mine.ID+"?ticket="+url.QueryEscape(ticket.Ticket), nil)
		assert.Equal(t, "with a ticket", status, http.StatusOK)
		assert.Equal(t, "bytes with a ticket", string(b), "mine")

		status, u := e.upload(bearer(in.Token), "from alex.txt", "text/plain", strings.NewReader("hi"))
		assert.Equal(t, "a commenter uploads", status, http.StatusCreated)
		_, _, audit := e.do(http.MethodGet, chatrelay.PathAudit, tok, "", nil)
		assert.True(t, bytes.Contains(audit, []byte(`"event":"upload","participant":"`)), "no audit line for the upload: %s", audit)
		assert.True(t, !bytes.Contains(audit, []byte(u.Attachment.Name)), "the audit names the file: %s", audit)
	})
}

// TestAttachmentAcrossNodes: uploaded on one node, downloaded from
// another of the same Redis.
func TestAttachmentAcrossNodes(t *testing.T) {
	a := startPush(t, pushOptions{backend: storetest.Redis})
	b := startPush(t, pushOptions{on: a.backend.Another(t, storetest.Options{})})
	tok := tokenN(1)
	body := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: several chunks
	at := a.mustUpload(tok, "big.bin", "application/octet-stream", body)
	status, _, got := b.fetch(chatrelay.PathAttachments+"/"+at.ID, owner(tok))
	assert.Equal(t, "status on the other node", status, http.StatusOK)
	assert.True(t, bytes.Equal(got, body), "the other node served %d bytes, not the %d uploaded", len(got), len(body))
}

// TestAttachmentFullDisk: a 10 MiB upload on a full disk answers 503
// store_unavailable and leaves nothing behind.
func TestAttachmentFullDisk(t *testing.T) {
	dir := storetest.SmallDisk(t, 4<<20)
	be := storetest.OpenFileIn(t, dir, storetest.Options{})
	e := startPush(t, pushOptions{on: be})
	tok := tokenN(1)
	e.mustUpload(tok, "small.txt", "text/plain", []byte("fits"))
	before := storetest.Files(t, dir)
	status, u := e.upload(owner(tok), "big.bin", "application/octet-stream", bytes.NewReader(make([]byte, 10<<20)))
	assert.Equal(t, "status", status, http.StatusServiceUnavailable)
	assert.Equal(t, "code", u.Code, chatrelay.StoreUnavailable)
	assert.Equal(t, "files after the refused upload", storetest.Files(t, dir), before)
}

// TestAttachmentWSPost: a WebSocket post frame names attachments as a
// POST does; the v2 socket pushes the message with their objects.
func TestAttachmentWSPost(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		a := e.mustUpload(tok, "notes.txt", "text/plain", []byte("notes"))
		c := e.mustWS("/api/chat/ws?v=2", tok)
		assert.Equal(t, "first", nextWS(t, c).Type, "ready")
		answer, pushed := wsAnswer(t, c, map[string]any{"type": "post", "attachments": []string{a.ID}})
		assert.True(t, answer.Type == "posted" && answer.Success, "WS post: %s", answer.raw)
		for len(pushed) == 0 {
			pushed = append(pushed, nextWS(t, c))
		}
		var m chatrelay.Message
		assert.Success(t, json.Unmarshal(pushed[0].Message, &m))
		assert.Equal(t, "pushed attachments", m.Attachments, []chatrelay.Attachment{a})
		answer, _ = wsAnswer(t, c, map[string]any{"type": "post", "text": "again", "attachments": []string{a.ID}})
		assert.True(t, answer.Type == "error" && answer.Code == string(chatrelay.InvalidAttachment), "a used id over the socket: %s", answer.raw)
	})
}

// slowReader gives its bytes in n pieces, pausing between them: a client
// on a slow link.
type slowReader struct {
	left  []byte
	piece int
	pause time.Duration
}

func (r *slowReader) Read(b []byte) (int, error) {
	if len(r.left) == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.pause) // the client's slowness (the test's input), not a wait for a condition
	n := copy(b[:min(len(b), r.piece)], r.left)
	r.left = r.left[n:]
	return n, nil
}

// TestAttachmentSlowUpload: an upload that takes longer than the
// server's ReadTimeout and WriteTimeout (here 300 ms; 30 s in serve) is
// still received whole, and its answer written: the route sets its own
// deadlines.
func TestAttachmentSlowUpload(t *testing.T) {
	e := startPush(t, pushOptions{http: func(s *http.Server) {
		s.ReadTimeout, s.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	}})
	tok := tokenN(1)
	body := bytes.Repeat([]byte("slow"), 1024)
	status, u := e.upload(owner(tok), "slow.bin", "application/octet-stream", &slowReader{left: body, piece: 512, pause: 100 * time.Millisecond})
	assert.Equal(t, "a slow upload's status", status, http.StatusCreated)
	assert.Equal(t, "its size", u.Attachment.Size, int64(len(body)))
}

// TestAttachmentDevice: one of the owner's devices uploads and downloads
// as the owner: the name unredacted, and no audit line (a participant's
// upload has one).
func TestAttachmentDevice(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		phone := e.issueDevice(tok, `{"name":"Phone"}`)
		status, u := e.upload(bearer(phone.Token), "password=hunter2.txt", "text/plain", strings.NewReader("from the phone"))
		assert.Equal(t, "a device's upload", status, http.StatusCreated)
		assert.Equal(t, "its name, unredacted", u.Attachment.Name, "password=hunter2.txt")
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+u.Attachment.ID, bearer(phone.Token))
		assert.Equal(t, "a device's download", status, http.StatusOK)
		assert.Equal(t, "bytes", string(b), "from the phone")
		assert.True(t, strings.Contains(h.Get("Content-Disposition"), "hunter2"), "the owner's device sees the name: %q", h.Get("Content-Disposition"))
		_, _, audit := e.do(http.MethodGet, chatrelay.PathAudit, tok, "", nil)
		assert.True(t, !bytes.Contains(audit, []byte(`"event":"upload"`)), "a device's upload is audited as a participant's: %s", audit)
	})
}

// TestUploadFilenameSentTwice: an upload with two X-Filename headers is
// 400 invalid_attachment, as a credential sent twice is refused: a proxy that checked one name must not see another stored and
// shown to people. Before, the first was taken.
func TestUploadFilenameSentTwice(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "hello")
	req, err := http.NewRequest(http.MethodPost, e.url(chatrelay.PathAttachments), strings.NewReader("bytes"))
	assert.Success(t, err)
	req.Header.Set("X-Chat-Token", tok)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Add("X-Filename", "report.txt")
	req.Header.Add("X-Filename", "setup.exe")
	resp, err := e.client.Do(req)
	assert.Success(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Success(t, err)
	assert.Equal(t, "status "+string(b), resp.StatusCode, http.StatusBadRequest)
	assert.Equal(t, "code", decodeError(t, b).Code, "invalid_attachment")
}
