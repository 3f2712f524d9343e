package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
)

// TestWrongTypeWordsAreJSON: a body field of the wrong type is 400
// invalid_json whose words name the JSON type the field takes (string,
// integer, array, …), never a Go type of the server ("[]chatrelay.PushEvent"
// was sent: the implementation's words, which an error never carries), and
// names the field once ("name", never "name.name").
func TestWrongTypeWordsAreJSON(t *testing.T) {
	t.Parallel()
	svc := pushtest.NewService(t)
	e := startPush(t, pushOptions{config: withPush(svc, nil)})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	a := svc.Subscribe(t, "a")
	sub := `{"endpoint":"` + a.Endpoint + `","keys":{"p256dh":"` + a.P256dh() + `","auth":"` + a.AuthKey() + `"}}`
	for _, c := range []struct{ path, body, want string }{
		{chatrelay.PathPush, `{"subscription":` + sub + `,"events":"reply"}`, "events must be an array"},
		{chatrelay.PathPush, `{"subscription":` + sub + `,"events":[1]}`, "events must be a string"},
		{chatrelay.PathDevices, `{"name":"Phone","expires_in":"x"}`, ""},
		{chatrelay.PathDevices, `{"name":5}`, "types: name must be a string"}, // never "name.name"
		{chatrelay.PathParticipants, `{"name":5}`, "types: name must be a string"},
		{chatrelay.PathReact, `{"message_id":"MSG-x","emoji":"x","remove":"yes"}`, "remove must be a boolean"},
		{chatrelay.PathParticipants, `{"name":"A","cap":"5"}`, ""},
	} {
		status, _, b := e.do(http.MethodPost, c.path, owner, c.body, nil)
		var out struct {
			Code  string `json:"code"`
			Error string `json:"error"`
		}
		assert.Success(t, json.Unmarshal(b, &out))
		assert.True(t, status == 400, "%s %s: %d %s", c.path, c.body, status, b)
		assert.True(t, !strings.Contains(out.Error, "chatrelay.") && !strings.Contains(out.Error, "[]") && !strings.Contains(out.Error, "int64") && !strings.Contains(out.Error, "*"),
			"%s %s: Go's words in the error: %s", c.path, c.body, b)
		if c.want != "" {
			assert.True(t, out.Code == "invalid_json" && strings.Contains(out.Error, c.want), "%s %s: want %q: %s", c.path, c.body, c.want, b)
		}
	}
}
