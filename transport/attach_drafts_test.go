package transport_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestAttachmentDraftsHidden: a participant downloads the files of its
// thread's messages and its own uploads, but not an upload of the owner
// (or of another participant) that no message names yet: 404, with its
// token or its ticket, as an unknown id. Once a post names it, it sees it.
func TestAttachmentDraftsHidden(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e, tok, draft, alex, sam := ownerDraftAndTwoCommenters(t, backend)

		status, _, _ := e.fetch(chatrelay.PathAttachments+"/"+draft.ID, bearer(alex.Token))
		assert.Equal(t, "a participant downloads the owner's unposted upload", status, http.StatusNotFound)
		_, _, tb := e.do(http.MethodPost, chatrelay.PathTicket, "", `{"attachment":"`+draft.ID+`"}`, bearer(alex.Token))
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+draft.ID+"?ticket="+url.QueryEscape(ticketOf(t, tb)), nil)
		assert.Equal(t, "with its file ticket", status, http.StatusNotFound)

		status, u := e.upload(bearer(alex.Token), "alex.txt", "text/plain", strings.NewReader("alex's draft"))
		assert.Equal(t, "a commenter uploads", status, http.StatusCreated)
		status, _, b := e.fetch(chatrelay.PathAttachments+"/"+u.Attachment.ID, bearer(alex.Token))
		assert.Equal(t, "its own unposted upload", status, http.StatusOK)
		assert.Equal(t, "bytes", string(b), "alex's draft")
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+u.Attachment.ID, bearer(sam.Token))
		assert.Equal(t, "another participant's unposted upload", status, http.StatusNotFound)
		status, _, _ = e.fetch(chatrelay.PathAttachments+"/"+u.Attachment.ID, owner(tok))
		assert.Equal(t, "the owner downloads a participant's upload", status, http.StatusOK)

		status, _ = e.postJSON(tok, map[string]any{"text": "here", "attachments": []string{draft.ID}})
		assert.Equal(t, "post naming the draft", status, http.StatusCreated)
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+draft.ID, bearer(sam.Token))
		assert.Equal(t, "once a message names it", status, http.StatusOK)
		assert.Equal(t, "bytes", string(b), "the owner's draft")
	})
}

// ticketOf is the ticket of a ticket's answer.
func ticketOf(t *testing.T, b []byte) string {
	t.Helper()
	var a struct {
		Ticket string `json:"ticket"`
	}
	assert.Success(t, json.Unmarshal(b, &a))
	return a.Ticket
}

// TestAttachmentDraftsNotPostable: a participant's post names its own
// uploads only: naming the owner's upload that no message names yet (or
// another participant's) would show that draft to everyone, so it is
// refused as an unknown id is (400 invalid_attachment), and nothing is
// stored.
func TestAttachmentDraftsNotPostable(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e, tok, draft, alex, sam := ownerDraftAndTwoCommenters(t, backend)
		_, u := e.upload(bearer(sam.Token), "sam.txt", "text/plain", strings.NewReader("sam's draft"))
		_, own := e.upload(bearer(alex.Token), "alex.txt", "text/plain", strings.NewReader("alex's"))

		for _, c := range []struct{ name, id string }{{"the owner's draft", draft.ID}, {"another participant's upload", u.Attachment.ID}} {
			b, _ := json.Marshal(map[string]any{"text": "look", "attachments": []string{c.id}})
			status, _, answer := e.do(http.MethodPost, chatrelay.PathPost, "", string(b), bearer(alex.Token))
			assert.Equal(t, "a participant posts "+c.name, status, http.StatusBadRequest)
			assert.Equal(t, "code", errCode(t, answer), chatrelay.InvalidAttachment)
		}
		b, _ := json.Marshal(map[string]any{"text": "mine", "attachments": []string{own.Attachment.ID}})
		status, _, _ := e.do(http.MethodPost, chatrelay.PathPost, "", string(b), bearer(alex.Token))
		assert.Equal(t, "a participant posts its own upload", status, http.StatusCreated)
		status, _ = e.postJSON(tok, map[string]any{"text": "yours", "attachments": []string{u.Attachment.ID}})
		assert.Equal(t, "the owner posts a participant's upload", status, http.StatusCreated)
		assert.Equal(t, "messages stored", len(e.poll(tok, 0).Messages), 3)
	})
}

// ownerDraftAndTwoCommenters starts a server on backend whose thread (the
// owner's token tok) has a message, an upload of the owner's that no
// message names (draft), and two commenters, Alex and Sam.
func ownerDraftAndTwoCommenters(t *testing.T, backend string) (e *pushEnv, tok string, draft chatrelay.Attachment, alex, sam invited) {
	t.Helper()
	e = startPush(t, pushOptions{backend: backend})
	tok = tokenN(1)
	status, _ := e.postJSON(tok, map[string]any{"text": "hello"})
	assert.Equal(t, "post", status, http.StatusCreated)
	draft = e.mustUpload(tok, "draft.txt", "text/plain", []byte("the owner's draft"))
	alex = e.invite(tok, `{"name":"Alex","role":"commenter"}`)
	sam = e.invite(tok, `{"name":"Sam","role":"commenter"}`)
	return e, tok, draft, alex, sam
}
