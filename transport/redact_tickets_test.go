package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestParticipantSeesNoTicket: a ticket written in a message (the address
// of a stream or a file, which the owner or hermes pastes) is a
// credential, as a share token is: a participant sees it [redacted] in
// every view, and the owner sees the message as stored. The owner's
// ticket opened the owner's stream, unredacted, to a viewer who read it;
// a device's named the device, which a participant is never shown.
func TestParticipantSeesNoTicket(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{backend: storetest.File})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	status, _, b := e.do(http.MethodPost, "/api/chat/devices", owner, `{"name":"Phone"}`, nil)
	assert.Equal(t, "device "+string(b), status, http.StatusCreated)
	var dev struct{ Token string }
	assert.Success(t, json.Unmarshal(b, &dev))
	alex := e.invite(owner, `{"name":"Alex","role":"viewer"}`)
	tickets := map[string]string{
		"the owner's":          e.ticket(owner),
		"a device's":           ticketOf(t, mustDo(t, e, "", bearer(dev.Token))),
		"a participant's":      ticketOf(t, mustDo(t, e, "", bearer(alex.Token))),
		"the owner's file":     e.fileTicket(owner, "at_0123456789ab", nil).Ticket,
		"a participant's file": e.fileTicket("", "at_0123456789ab", bearer(alex.Token)).Ticket,
	}
	for what, tk := range tickets {
		b, _ := json.Marshal(map[string]string{"text": what + ": http://127.0.0.1/api/chat/stream?ticket=" + tk + " (15 min)"})
		status, _, body := e.do(http.MethodPost, "/api/chat/post", owner, string(b), nil)
		assert.Equal(t, "post "+string(body), status, http.StatusCreated)
	}
	for _, path := range []string{"/api/chat/poll", "/api/chat/poll?v=2"} {
		status, b := e.asParticipant(http.MethodGet, path, alex.Token, "")
		assert.Equal(t, path, status, http.StatusOK)
		_, _, ob := e.do(http.MethodGet, path, owner, "", nil)
		for what, tk := range tickets {
			assert.True(t, !strings.Contains(string(b), tk), "%s: a viewer reads %s ticket: %s", path, what, b)
			assert.True(t, strings.Contains(string(b), what+": http://127.0.0.1/api/chat/stream?ticket=[redacted] (15 min)"), "%s: %s ticket is not [redacted]: %s", path, what, b)
			assert.True(t, strings.Contains(string(ob), tk), "%s: the owner's view lacks %s ticket", path, what)
		}
	}
}

// mustDo mints a thread's ticket with the owner's token tok or the
// header hdr, and answers its body.
func mustDo(t *testing.T, e *pushEnv, tok string, hdr map[string]string) []byte {
	t.Helper()
	status, _, b := e.do(http.MethodPost, "/api/chat/ticket", tok, "", hdr)
	assert.Equal(t, "ticket "+string(b), status, http.StatusCreated)
	return b
}
