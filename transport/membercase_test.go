package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// TestMemberNamesAreExact: a JSON body's member names are matched exactly,
// as the schema bundle (normative) and the post body match them: a member
// whose name differs only in case ("Decision", "ROLE") is an unknown one,
// ignored, never read as the field. Before, encoding/json's case-folding
// read it, so a body the bundle says denies approved, and one it says
// invites a viewer invited a commenter.
func TestMemberNamesAreExact(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testMemberNamesAreExact)
}

func testMemberNamesAreExact(t *testing.T, backend string) {
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{backend: backend, config: withPush(svc, nil)})
	tok := tokenN(1)
	m := e.mustPost(tok, "hello")

	ix := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?"})
	status, body := e.respond(tok, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"deny","Decision":"approve"}`)
	assert.Equal(t, "respond "+string(body), status, http.StatusOK)
	var answered struct {
		Message v2msg `json:"message"`
	}
	assert.Success(t, json.Unmarshal(body, &answered))
	assert.Equal(t, "the decision the body's decision member says", answered.Message.Interaction.State, chatrelay.Denied)

	in := e.invite(tok, `{"name":"Alex","role":"viewer","ROLE":"commenter"}`)
	assert.Equal(t, "the role the body's role member says", in.Participant.Role, chatrelay.Viewer)
	status, _, body = e.do(http.MethodPost, chatrelay.PathParticipants, tok, `{"NAME":"Alex"}`, nil)
	assert.Equal(t, "an invite without a name member "+string(body), status, http.StatusBadRequest)
	assert.Equal(t, "its code", decodeError(t, body).Code, "invalid_name")

	status, _, body = e.do(http.MethodPost, chatrelay.PathDevices, tok, `{"name":"Phone","Expires_In":1}`, nil)
	assert.Equal(t, "a device whose Expires_In is an unknown member "+string(body), status, http.StatusCreated)

	status, body = e.react(tok, m.ID, "👍", false)
	assert.Equal(t, "react "+string(body), status, http.StatusOK)
	status, _, body = e.do(http.MethodPost, chatrelay.PathReact, tok, `{"message_id":"`+m.ID+`","emoji":"👍","Remove":true}`, nil)
	assert.Equal(t, "react with an unknown Remove "+string(body), status, http.StatusOK)
	var reacted struct {
		Message v2msg `json:"message"`
	}
	assert.Success(t, json.Unmarshal(body, &reacted))
	assert.Equal(t, "the reaction is kept", len(reacted.Message.Reactions["👍"]), 1)

	// In a nested object too: the subscription's keys.
	sub := svc.Subscribe(t, "a")
	good := `{"endpoint":"` + sub.Endpoint + `","keys":{"p256dh":"` + sub.P256dh() + `","auth":"` + sub.AuthKey() + `","AUTH":"not the key"}}`
	status, _, body = e.do(http.MethodPost, chatrelay.PathPush, tok, `{"subscription":`+good+`}`, nil)
	assert.Equal(t, "a subscription whose AUTH is an unknown member "+string(body), status, http.StatusCreated)
}

// TestIntegersAsTheSchemaReadsThem: an integer field (a grant's or a
// device's expires_in, a grant's cap) takes every JSON number the bundle's
// "type": "integer" takes, that is any number whose fraction is zero:
// 3600.0 and 36e2 are 3600 (Python's json writes a float as 3600.0).
// Before, they were refused invalid_expiry and invalid_cap while the
// bundle (normative) said the body was valid. A fraction is still refused.
func TestIntegersAsTheSchemaReadsThem(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "hello")
	in := e.invite(tok, `{"name":"Alex","expires_in":3600.0,"cap":5.0}`)
	assert.Equal(t, "cap", in.Participant.Cap, 5)
	assert.Equal(t, "lifetime", in.Participant.ExpiresAt-in.Participant.CreatedAt, int64(3600_000))
	status, _, body := e.do(http.MethodPost, chatrelay.PathDevices, tok, `{"name":"Phone","expires_in":36e2}`, nil)
	assert.Equal(t, "a device for 36e2 seconds "+string(body), status, http.StatusCreated)
	for _, c := range []struct{ path, body, code string }{
		{chatrelay.PathParticipants, `{"name":"x","expires_in":3600.5}`, "invalid_expiry"},
		{chatrelay.PathParticipants, `{"name":"x","expires_in":1e999}`, "invalid_expiry"},
		{chatrelay.PathParticipants, `{"name":"x","expires_in":-0.0}`, "invalid_expiry"},
		{chatrelay.PathParticipants, `{"name":"x","cap":1.5}`, "invalid_cap"},
		{chatrelay.PathParticipants, `{"name":"x","cap":1e3000}`, "invalid_cap"},
		{chatrelay.PathDevices, `{"name":"x","expires_in":3.6e10}`, "invalid_expiry"},
	} {
		status, _, body := e.do(http.MethodPost, c.path, tok, c.body, nil)
		assert.True(t, status == http.StatusBadRequest && decodeError(t, body).Code == c.code, "%s %s: %d %s", c.path, c.body, status, body)
	}
}
