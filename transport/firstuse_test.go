package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestFirstUseIsTheFirstAcceptedRequest: a share link's first_use (and
// so its participant.joined webhook) and a device's device_first_use and
// last_seen come from the grant's first accepted request, as the contract
// defines first_use, never from a refused one: a viewer whose first
// request was a post (403) was audited "first_use" and "refused" for that
// one request, and a device whose first request made a device (403) was
// "seen" and audited as first used.
func TestFirstUseIsTheFirstAcceptedRequest(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testFirstUseIsTheFirstAcceptedRequest)
}

func testFirstUseIsTheFirstAcceptedRequest(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	events := func() []string {
		t.Helper()
		status, _, b := e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
		assert.Equal(t, "audit "+string(b), status, http.StatusOK)
		var audit struct {
			Events []struct{ Event, Code string }
		}
		assert.Success(t, json.Unmarshal(b, &audit))
		var out []string
		for _, ev := range audit.Events {
			out = append(out, ev.Event+":"+ev.Code)
		}
		return out
	}

	viewer := e.invite(owner, `{"name":"Vi","role":"viewer"}`)
	status, b := e.asParticipant(http.MethodPost, "/api/chat/post", viewer.Token, `{"text":"may I?"}`)
	assert.Equal(t, "a viewer's post "+string(b), status, http.StatusForbidden)
	status, b = e.asParticipant(http.MethodGet, "/api/chat/devices", viewer.Token, "")
	assert.Equal(t, "a viewer on a device route "+string(b), status, http.StatusForbidden)
	assert.Equal(t, "after two refusals", events(), []string{"issued:", "refused:not_permitted", "refused:not_permitted"})
	status, b = e.asParticipant(http.MethodGet, "/api/chat/poll", viewer.Token, "")
	assert.Equal(t, "a viewer's poll "+string(b), status, http.StatusOK)
	assert.Equal(t, "after its first accepted request", events(), []string{"issued:", "refused:not_permitted", "refused:not_permitted", "first_use:"})

	phone := e.issueDevice(owner, `{"name":"Phone"}`)
	status, b = e.asDevice(http.MethodPost, "/api/chat/devices", phone.Token, `{"name":"another"}`)
	assert.Equal(t, "a device making a device "+string(b), status, http.StatusForbidden)
	status, _, b = e.do(http.MethodGet, "/api/chat/devices", owner, "", nil)
	var list struct{ Devices []deviceObject }
	assert.Success(t, json.Unmarshal(b, &list))
	assert.True(t, status == 200 && len(list.Devices) == 1 && list.Devices[0].LastSeen == 0, "a device refused once is not seen: %d %s", status, b)
	assert.Equal(t, "after the device's refusal", events()[4:], []string{"device_issued:"})
	status, b = e.asDevice(http.MethodGet, "/api/chat/poll", phone.Token, "")
	assert.Equal(t, "the device's poll "+string(b), status, http.StatusOK)
	assert.Equal(t, "after the device's first accepted request", events()[4:], []string{"device_issued:", "device_first_use:"})
}
