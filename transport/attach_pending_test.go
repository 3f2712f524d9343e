package transport_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestAttachmentPendingLimit: a thread holds at most attachment.pending
// uploads no post names; one more is 409 too_many_attachments, and a
// post naming some makes room again.
func TestAttachmentPendingLimit(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		var ids []string
		for range chatrelay.LimitAttachmentPending.Max {
			ids = append(ids, e.mustUpload(tok, "same.txt", "text/plain", []byte("the same bytes")).ID)
		}
		status, u := e.upload(owner(tok), "one more.txt", "text/plain", bytes.NewReader([]byte("one more")))
		assert.Equal(t, "one upload past the pending ones", status, http.StatusConflict)
		assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)

		status, _ = e.postJSON(tok, map[string]any{"text": "", "attachments": ids[:10]})
		assert.Equal(t, "a post naming 10", status, http.StatusCreated)
		e.mustUpload(tok, "one more.txt", "text/plain", []byte("one more"))
	})
}

// TestAttachmentRevokeFreesPending: an outside probe's commenter filled
// its thread's pending uploads with files it never posted, and the
// owner's uploads were 409 too_many_attachments for up to an hour,
// revoked link or not. Revoking the link removes its uploads that no
// post names: the owner's next upload is taken, and the commenter's
// drafts are gone (404) while the file it posted stays.
func TestAttachmentRevokeFreesPending(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		in := e.invite(tok, `{"name":"Alex","role":"commenter"}`)
		status, u := e.upload(bearer(in.Token), "posted.txt", "text/plain", bytes.NewReader([]byte("posted")))
		assert.Equal(t, "the commenter's upload", status, http.StatusCreated)
		posted := u.Attachment.ID
		status, b := e.asParticipant(http.MethodPost, chatrelay.PathPost, in.Token, `{"text":"see","attachments":["`+posted+`"]}`)
		assert.Equal(t, "the commenter's post "+string(b), status, http.StatusCreated)
		var drafts []string
		for range chatrelay.LimitAttachmentPending.Max {
			status, u := e.upload(bearer(in.Token), "junk.txt", "text/plain", bytes.NewReader([]byte("junk")))
			assert.Equal(t, "a draft", status, http.StatusCreated)
			drafts = append(drafts, u.Attachment.ID)
		}
		status, u = e.upload(owner(tok), "mine.txt", "text/plain", bytes.NewReader([]byte("mine")))
		assert.Equal(t, "the owner's upload, the thread full of drafts", status, http.StatusConflict)
		assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)

		status, _, b = e.do(http.MethodDelete, chatrelay.PathParticipants+"/"+in.Participant.ID, tok, "", nil)
		assert.Equal(t, "revoke "+string(b), status, http.StatusOK)
		e.mustUpload(tok, "mine.txt", "text/plain", []byte("mine"))
		for _, id := range drafts[:3] {
			status, _, _ := e.fetch(chatrelay.PathAttachments+"/"+id, owner(tok))
			assert.Equal(t, "a draft of the revoked link", status, http.StatusNotFound)
		}
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+posted, owner(tok))
		assert.Equal(t, "the file it posted", status, http.StatusOK)
		assert.Equal(t, "its bytes", string(b), "posted")
	})
}
