package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

// TestRespondValueNotText: an input's answer whose value is not valid
// UTF-8, or holds a lone UTF-16 surrogate escape (a sliced emoji), is 400
// invalid_answer, and the interaction stays pending: the person's answer
// is refused, never stored changed into U+FFFD (as a post's text is
// refused, invalid_text). It was answered (200) with "ok �".
func TestRespondValueNotText(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	e.mustPost(tok, "hello")
	in := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Prompt: "Why?", AllowText: true})
	for name, body := range map[string]string{
		"invalid UTF-8":    `{"interaction_id":"` + in.Interaction.ID + `","value":"ok ` + "\xff" + `"}`,
		"a lone surrogate": `{"interaction_id":"` + in.Interaction.ID + `","value":"ok \ud83d"}`,
	} {
		status, b := e.respond(tok, body)
		assert.True(t, status == 400 && decodeError(t, b).Code == "invalid_answer", "%s: %d %s", name, status, b)
	}
	_, _, b := e.do(http.MethodGet, chatrelay.PathPoll+"?v=2", tok, "", nil)
	var p struct {
		Messages []chatrelay.Message `json:"messages"`
	}
	assert.Success(t, json.Unmarshal(b, &p))
	last := p.Messages[len(p.Messages)-1]
	assert.True(t, last.Interaction != nil && last.Interaction.State == chatrelay.Pending, "after the refusals: %s", b)
	status, b := e.respond(tok, `{"interaction_id":"`+in.Interaction.ID+`","value":"ok 👍"}`)
	assert.Equal(t, "a real answer "+string(b), status, 200)
	status, b = e.respond(tok, `{"interaction_id":"`+in.Interaction.ID+`","value":5}`)
	// The body is checked before the interaction is looked at: a value of
	// the wrong type is invalid_json, though the interaction is answered.
	assert.True(t, status == 400 && decodeError(t, b).Code == "invalid_json", "a value of the wrong type: %d %s", status, b)
}
