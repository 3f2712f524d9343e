package transport_test

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// TestAttachmentRevokeRemovesDrafts: an outside probe's commenter filled
// its thread's pending uploads with files it never posted, and the
// owner's uploads were 409 too_many_attachments for up to an hour,
// revoked link or not. Now it holds at most its own 10, which count for
// the owner as nothing (its upload is taken beside them), and revoking
// the link removes its uploads that no post names: they are gone (404)
// while the file it posted stays.
func TestAttachmentRevokeRemovesDrafts(t *testing.T) {
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
		// The owner's drafts and the commenter's, each bounded apart
		// (attachment.pending, attachment.pending_per_participant).
		for range chatrelay.LimitAttachmentPending.Max - 1 {
			e.mustUpload(tok, "owner's.txt", "text/plain", []byte("owner's"))
		}
		var drafts []string
		for range chatrelay.LimitParticipantPending.Max {
			status, u := e.upload(bearer(in.Token), "junk.txt", "text/plain", bytes.NewReader([]byte("junk")))
			assert.Equal(t, "a draft", status, http.StatusCreated)
			drafts = append(drafts, u.Attachment.ID)
		}
		status, u = e.upload(bearer(in.Token), "junk.txt", "text/plain", bytes.NewReader([]byte("junk")))
		assert.Equal(t, "the commenter's draft past its own most", status, http.StatusConflict)
		assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)
		e.mustUpload(tok, "mine.txt", "text/plain", []byte("mine")) // the owner's 100th, beside the commenter's drafts

		status, _, b = e.do(http.MethodDelete, chatrelay.PathParticipants+"/"+in.Participant.ID, tok, "", nil)
		assert.Equal(t, "revoke "+string(b), status, http.StatusOK)
		for _, id := range drafts[:3] {
			status, _, _ := e.fetch(chatrelay.PathAttachments+"/"+id, owner(tok))
			assert.Equal(t, "a draft of the revoked link", status, http.StatusNotFound)
		}
		status, _, b = e.fetch(chatrelay.PathAttachments+"/"+posted, owner(tok))
		assert.Equal(t, "the file it posted", status, http.StatusOK)
		assert.Equal(t, "its bytes", string(b), "posted")
	})
}

// TestAttachmentParticipantDraftsOwnCount: an outside probe's commenter
// uploaded until refused and learned from the 409 how many drafts the
// owner held, which it may not read. A participant's drafts are counted
// alone: it takes as many beside the owner's drafts as in a thread with
// none, and another participant's drafts change nothing either.
func TestAttachmentParticipantDraftsOwnCount(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		busy, empty := tokenN(1), tokenN(2)
		e.mustPost(busy, "hello")
		e.mustPost(empty, "hello")
		for i := range chatrelay.LimitAttachmentPending.Max - 1 - chatrelay.LimitParticipantPending.Max {
			e.mustUpload(busy, "owner's.txt", "text/plain", []byte{byte(i)})
		}
		taken := func(tok, name string) int {
			in := e.invite(tok, `{"name":"`+name+`","role":"commenter"}`)
			for n := 0; n <= chatrelay.LimitAttachmentPending.Max; n++ {
				status, u := e.upload(bearer(in.Token), "mine.txt", "text/plain", bytes.NewReader([]byte(name)))
				if status != http.StatusCreated {
					assert.Equal(t, "refused", status, http.StatusConflict)
					assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)
					return n
				}
			}
			t.Fatalf("%s took more than %d drafts", name, chatrelay.LimitAttachmentPending.Max)
			return 0
		}
		alone := taken(empty, "Alex")
		assert.Equal(t, "a commenter's drafts, the owner holding none", alone, chatrelay.LimitParticipantPending.Max)
		assert.Equal(t, "a commenter's drafts beside the owner's", taken(busy, "Alex"), alone)
		assert.Equal(t, "another commenter's, beside both", taken(busy, "Bo"), alone)
	})
}

// TestAttachmentOwnerBesideDrafts: ten commenters holding their most
// drafts each held the owner's uploads back (409 too_many_attachments)
// for up to the drafts' hour, and a commenter's drafts' bytes its 413:
// the owner was judged on every draft of the thread. It is judged on its
// own drafts (its devices' among them) and the posted files: it takes its
// 100 drafts beside theirs, and the posted files' room left.
func TestAttachmentOwnerBesideDrafts(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		const mib = 1 << 20
		// Posted files leave 5 MiB of the thread's 100.
		var posted []string
		for i := range 10 {
			size := min(10*mib, chatrelay.LimitThreadAttachments.Max-5*mib-i*10*mib)
			posted = append(posted, e.mustUpload(tok, "posted.bin", "application/octet-stream", bytes.Repeat([]byte{byte(i)}, size)).ID)
		}
		status, _ := e.postJSON(tok, map[string]any{"text": "", "attachments": posted})
		assert.Equal(t, "the post naming the files", status, http.StatusCreated)
		var commenters []string
		for i := range 10 {
			in := e.invite(tok, fmt.Sprintf(`{"name":"Commenter %d","role":"commenter"}`, i))
			commenters = append(commenters, in.Token)
			for n := range chatrelay.LimitParticipantPending.Max {
				var body []byte // empty, beside its room in the thread's bytes taken to the byte
				if i == 0 && n == 0 {
					body = bytes.Repeat([]byte{10}, 5*mib)
				}
				status, u := e.upload(bearer(in.Token), "draft.txt", "text/plain", bytes.NewReader(body))
				assert.Equal(t, fmt.Sprintf("commenter %d's draft %d: %s", i, n, u.Code), status, http.StatusCreated)
			}
		}
		status, _, b := e.do(http.MethodPost, chatrelay.PathDevices, tok, `{"name":"Phone"}`, nil)
		assert.Equal(t, "device "+string(b), status, http.StatusCreated)
		var dev struct {
			Token string `json:"token"`
		}
		assert.Success(t, json.Unmarshal(b, &dev))

		// Its bytes: the posted file's room left, to the byte.
		e.mustUpload(tok, "five.bin", "application/octet-stream", bytes.Repeat([]byte{11}, 5*mib))
		status, u := e.upload(owner(tok), "one more.bin", "application/octet-stream", bytes.NewReader([]byte{3}))
		assert.Equal(t, "the owner's byte past the posted file and its own drafts", status, http.StatusRequestEntityTooLarge)
		assert.Equal(t, "its code", u.Code, chatrelay.AttachmentTooLarge)
		// Its drafts: 100, a device's among them.
		status, u = e.upload(bearer(dev.Token), "from the phone.txt", "text/plain", bytes.NewReader(nil))
		assert.Equal(t, "the device's draft: "+string(u.Code), status, http.StatusCreated)
		for i := 2; i < chatrelay.LimitAttachmentPending.Max; i++ {
			e.mustUpload(tok, "empty.txt", "text/plain", nil)
		}
		for who, auth := range map[string]map[string]string{"the owner": owner(tok), "its device": bearer(dev.Token)} {
			status, u := e.upload(auth, "one more.txt", "text/plain", bytes.NewReader(nil))
			assert.Equal(t, who+"'s draft past the owner's most", status, http.StatusConflict)
			assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)
		}
		status, u = e.upload(bearer(commenters[0]), "one more.txt", "text/plain", bytes.NewReader(nil))
		assert.Equal(t, "a commenter's past its own most", status, http.StatusConflict)
		assert.Equal(t, "its code", u.Code, chatrelay.TooManyAttachments)
	})
}
