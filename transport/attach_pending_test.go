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
