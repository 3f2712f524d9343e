package transport_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/transport"
)

// A file ticket (POST /api/chat/ticket with {"attachment": "at_…"}) opens
// that one attachment's bytes and nothing else: the page puts it in the
// address of an <img> or a link, which a person may copy and paste
// anywhere, and that address must not open the conversation.

type fileTicketAnswer struct {
	Success    bool   `json:"success"`
	Ticket     string `json:"ticket"`
	Thread     string `json:"thread"`
	ExpiresAt  int64  `json:"expires_at"`
	Attachment string `json:"attachment"`
}

// fileTicket mints a file ticket for id with the credentials hdr (the
// owner's token if tok is not "").
func (e *pushEnv) fileTicket(tok, id string, hdr map[string]string) fileTicketAnswer {
	e.t.Helper()
	status, _, b := e.do(http.MethodPost, chatrelay.PathTicket, tok, `{"attachment":"`+id+`"}`, hdr)
	assert.Equal(e.t, "file ticket status "+string(b), status, http.StatusCreated)
	var a fileTicketAnswer
	assert.Success(e.t, json.Unmarshal(b, &a))
	// (A thread's ticket in its place would open the streams below, which
	// never end.)
	assert.Equal(e.t, "the answer names the file", a.Attachment, id)
	return a
}

// refusedFileTicket expects the answer (status, b) to be the refusal of a
// file ticket used where it does not open: 401 invalid_ticket, in words
// that say it opens one file.
func refusedFileTicket(t *testing.T, what string, status int, b []byte) {
	t.Helper()
	assert.Equal(t, what+" status", status, http.StatusUnauthorized)
	e := decodeError(t, b)
	assert.Equal(t, what+" code", e.Code, string(chatrelay.InvalidTicket))
	assert.True(t, strings.Contains(e.Error, "one file"), "%s: the words do not say the ticket opens one file: %q", what, e.Error)
}

func TestFileTicket(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		clock := &testClock{t: time.Now()}
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) {
			c.Now = clock.Now
			c.TicketTTL = time.Minute
		}})
		tok, other := tokenN(1), tokenN(2)
		img := e.mustUpload(tok, "screen shot.png", "image/png", pngBytes(t))
		txt := e.mustUpload(tok, "notes.txt", "text/plain", []byte("other file"))
		status, _ := e.postJSON(tok, map[string]any{"text": "look", "attachments": []string{img.ID, txt.ID}})
		assert.Equal(t, "post", status, http.StatusCreated)
		theirs := e.mustUpload(other, "theirs.txt", "text/plain", []byte("theirs"))

		ft := e.fileTicket(tok, img.ID, nil)
		assert.Equal(t, "thread", ft.Thread, threadN(1))
		assert.Equal(t, "expires_at", ft.ExpiresAt, clock.Now().Add(time.Minute).UnixMilli())
		q := "?ticket=" + url.QueryEscape(ft.Ticket)

		// It opens its file, inline with its name, as a thread's ticket does.
		status, h, b := e.fetch(chatrelay.PathAttachments+"/"+img.ID+q, nil)
		assert.Equal(t, "its own file", status, http.StatusOK)
		assert.Equal(t, "its bytes", string(b), string(pngBytes(t)))
		assert.True(t, strings.Contains(h.Get("Content-Disposition"), "screen shot.png"), "no file name: %q", h.Get("Content-Disposition"))

		// Nothing else: another file of the thread, another thread's file,
		// the streams, the polls, a post.
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+txt.ID+q, nil)
		refusedFileTicket(t, "another file of the thread", status, b)
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+theirs.ID+q, nil)
		refusedFileTicket(t, "another thread's file", status, b)
		resp, ws := e.refusedWS(chatrelay.PathWS+q, "", nil)
		assert.Equal(t, "the WebSocket status", resp.StatusCode, http.StatusUnauthorized)
		assert.Equal(t, "the WebSocket code", ws.Code, string(chatrelay.InvalidTicket))
		assert.True(t, strings.Contains(ws.Error, "one file"), "the WebSocket's words: %q", ws.Error)
		for _, path := range []string{chatrelay.PathSSE, chatrelay.PathSSE + "?v=2&since=0"} {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			status, _, b = e.do(http.MethodGet, path+sep+"ticket="+url.QueryEscape(ft.Ticket), "", "", nil)
			refusedFileTicket(t, path, status, b)
		}
		for _, path := range []string{chatrelay.PathPoll, chatrelay.PathPoll + "?v=2", "/api/chat/poll.php"} {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			status, _, b = e.do(http.MethodGet, path+sep+"ticket="+url.QueryEscape(ft.Ticket), "", "", nil)
			refusedFileTicket(t, path, status, b)
		}
		status, _, b = e.do(http.MethodPost, chatrelay.PathPost+q, "", `{"text":"hi"}`, nil)
		refusedFileTicket(t, "a post", status, b)

		// Another thread's id in a file ticket of this thread opens
		// nothing: the file is looked up in the ticket's thread.
		forged := e.fileTicket(tok, theirs.ID, nil)
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+theirs.ID+"?ticket="+url.QueryEscape(forged.Ticket), nil)
		assert.Equal(t, "another thread's id, named in the ticket", status, http.StatusNotFound)

		// A thread's ticket still opens every file of its thread (Part 5).
		_, _, tb := e.do(http.MethodPost, chatrelay.PathTicket, tok, "", nil)
		var thread fileTicketAnswer
		assert.Success(t, json.Unmarshal(tb, &thread))
		assert.Equal(t, "a thread's ticket names no file", thread.Attachment, "")
		for _, body := range []string{`{}`, `{"attachment":null}`, " "} {
			status, _, b := e.do(http.MethodPost, chatrelay.PathTicket, tok, body, nil)
			var a fileTicketAnswer
			assert.Success(t, json.Unmarshal(b, &a))
			assert.Equal(t, body+": a thread's ticket", status, http.StatusCreated)
			assert.Equal(t, body+": names no file", a.Attachment, "")
		}
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+txt.ID+"?ticket="+url.QueryEscape(thread.Ticket), nil)
		assert.Equal(t, "a thread's ticket on a file", status, http.StatusOK)

		// A body that names no attachment id is refused.
		for _, c := range []struct {
			body string
			code chatrelay.Code
		}{
			{`{"attachment":"notes.txt"}`, chatrelay.InvalidAttachment},
			{`{"attachment":["` + img.ID + `"]}`, chatrelay.InvalidAttachment},
			{`[]`, chatrelay.InvalidJSON},
			// A misspelled or unknown member is refused, never read as
			// asking for the whole thread's ticket: a client that meant
			// one file must not be handed the conversation.
			{`{"attachments":"` + img.ID + `"}`, chatrelay.InvalidJSON},
			{`{"Attachment":"` + img.ID + `"}`, chatrelay.InvalidJSON},
			{`{"attachment":"` + img.ID + `","thread":"x"}`, chatrelay.InvalidJSON},
		} {
			status, _, b = e.do(http.MethodPost, chatrelay.PathTicket, tok, c.body, nil)
			assert.Equal(t, c.body+" status", status, http.StatusBadRequest)
			assert.Equal(t, c.body+" code", decodeError(t, b).Code, string(c.code))
		}

		// Expired: refused.
		clock.Advance(time.Minute)
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+img.ID+q, nil)
		assert.Equal(t, "expired status", status, http.StatusUnauthorized)
		assert.Equal(t, "expired code", decodeError(t, b).Code, string(chatrelay.InvalidTicket))
	})
}

// TestFileTicketDiesWithItsGrant: a file ticket minted with a share link's
// or a device's token opens its file until the grant is revoked, then
// never again.
func TestFileTicketDiesWithItsGrant(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		at := e.mustUpload(tok, "a.txt", "text/plain", []byte("the file"))
		status, _ := e.postJSON(tok, map[string]any{"text": "here", "attachments": []string{at.ID}})
		assert.Equal(t, "post", status, http.StatusCreated)
		in := e.invite(tok, `{"name":"Alex","role":"viewer"}`)
		phone := e.issueDevice(tok, `{"name":"Phone"}`)

		for _, g := range []struct {
			name, token, revoke string
		}{
			{"participant", in.Token, "/api/chat/participants/" + in.Participant.ID},
			{"device", phone.Token, "/api/chat/devices/" + phone.Device.ID},
		} {
			ft := e.fileTicket("", at.ID, bearer(g.token))
			target := chatrelay.PathAttachments + "/" + at.ID + "?ticket=" + url.QueryEscape(ft.Ticket)
			status, _, b := e.fetch(target, nil)
			assert.Equal(t, g.name+": before the revoke", status, http.StatusOK)
			assert.Equal(t, g.name+": bytes", string(b), "the file")
			status, _, b = e.do(http.MethodGet, chatrelay.PathSSE+"?ticket="+url.QueryEscape(ft.Ticket), "", "", nil)
			refusedFileTicket(t, g.name+": the stream", status, b)

			status, _, b = e.do(http.MethodDelete, g.revoke, tok, "", nil)
			assert.Equal(t, g.name+": revoke "+string(b), status, http.StatusOK)
			status, _, b = e.fetch(target, nil)
			assert.Equal(t, g.name+": after the revoke", status, http.StatusUnauthorized)
			assert.Equal(t, g.name+": after the revoke, code", decodeError(t, b).Code, string(chatrelay.TokenRevoked))
		}
	})
}
