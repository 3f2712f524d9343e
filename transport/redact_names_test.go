package transport_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/pushtest"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// TestParticipantSeesNamesRedacted: a participant's name is the owner's
// words, and a participant sees it as every other string of the owner's:
// redacted (contract Part 3), in whoami and as a v2 message's
// author_name; the owner sees it as given.
func TestParticipantSeesNamesRedacted(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{backend: storetest.File})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	secret := "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	named := e.invite(owner, `{"name":"`+secret+`","role":"commenter"}`)
	bo := e.invite(owner, `{"name":"Bo","role":"viewer"}`)
	status, b := e.asParticipant(http.MethodPost, "/api/chat/post", named.Token, `{"text":"from the named one"}`)
	assert.Equal(t, "the named participant posts "+string(b), status, http.StatusCreated)

	for _, who := range []string{named.Token, bo.Token} {
		status, b = e.asParticipant(http.MethodGet, "/api/chat/whoami", who, "")
		assert.Equal(t, "whoami", status, http.StatusOK)
		assert.True(t, !strings.Contains(string(b), "abcdefghijkl") && strings.Contains(string(b), "[redacted]"), "a participant's whoami: %s", b)
		status, b = e.asParticipant(http.MethodGet, "/api/chat/poll?v=2", who, "")
		assert.Equal(t, "poll", status, http.StatusOK)
		var page struct{ Messages []map[string]any }
		assert.Success(t, json.Unmarshal(b, &page))
		last := page.Messages[len(page.Messages)-1]
		assert.Equal(t, "the author's name a participant sees", last["author_name"], any("[redacted]"))
	}
	_, _, b = e.do(http.MethodGet, "/api/chat/poll?v=2", owner, "", nil)
	assert.True(t, strings.Contains(string(b), `"author_name":"`+secret+`"`), "the owner sees the name as given: %s", b)
	_, _, b = e.do(http.MethodGet, "/api/chat/whoami", owner, "", nil)
	assert.True(t, strings.Contains(string(b), secret), "the owner's whoami: %s", b)
}

// TestParticipantRedactionKeepsLimits: a redaction can lengthen a string
// ("password=x" becomes "password=[redacted]"), and a participant's view
// cuts it back to its field's limit, as RedactMessage does a message's:
// the thread's title (160 code points) in a v2 poll, and a name (64) in
// whoami, which then reads as the message's author_name reads. They were
// redacted but not cut: a title of 169 code points, a name longer than
// the same name as a message's author.
func TestParticipantRedactionKeepsLimits(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{backend: storetest.File})
	owner := tokenN(1)
	title := strings.Repeat("t", chatrelay.LimitThreadTitle.Max-10) + "password=x"
	_, err := e.store.Append(t.Context(), threadN(1), store.NewMessage{Author: chatrelay.Hermes, Text: "hello", Title: title})
	assert.Success(t, err)
	name := strings.Repeat("n", chatrelay.LimitName.Max-10) + "password=x"
	p := e.invite(owner, `{"name":"`+name+`","role":"commenter"}`)
	status, b := e.asParticipant(http.MethodPost, "/api/chat/post", p.Token, `{"text":"hi"}`)
	assert.Equal(t, "the participant posts "+string(b), status, http.StatusCreated)

	status, b = e.asParticipant(http.MethodGet, "/api/chat/poll?v=2", p.Token, "")
	assert.Equal(t, "poll", status, http.StatusOK)
	var page struct {
		Title    string
		Messages []struct {
			AuthorName string `json:"author_name"`
		}
	}
	assert.Success(t, json.Unmarshal(b, &page))
	n := utf8.RuneCountInString(page.Title)
	assert.True(t, n == chatrelay.LimitThreadTitle.Max && strings.HasSuffix(page.Title, "…") && !strings.Contains(page.Title, "=x"), "the title a participant reads (%d code points): %q", n, page.Title)
	author := page.Messages[len(page.Messages)-1].AuthorName
	status, b = e.asParticipant(http.MethodGet, "/api/chat/whoami", p.Token, "")
	assert.Equal(t, "whoami", status, http.StatusOK)
	var who struct {
		Participant  struct{ Name string }
		Participants []struct{ Name string }
	}
	assert.Success(t, json.Unmarshal(b, &who))
	for _, got := range []string{author, who.Participant.Name, who.Participants[0].Name} {
		assert.True(t, utf8.RuneCountInString(got) <= chatrelay.LimitName.Max && !strings.Contains(got, "=x"), "a name a participant reads: %q", got)
		assert.Equal(t, "the name in whoami and as the author", got, author)
	}
}

// TestParticipantRefusalWordsRedacted: a refusal's words that quote what
// the participant sent (an unknown message id to react to, a push
// subscription id, an unknown push event) obey the participant's view as
// a success does: a secret-shaped string in them is [redacted]. They
// quoted it as sent, so an error answer carried what the same answer's
// success would have redacted (an upload's answer redacts the sender's
// own file name).
func TestParticipantRefusalWordsRedacted(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{config: withPush(pushtest.NewService(t), nil)})
	owner := tokenN(1)
	e.mustPost(owner, "hello")
	p := e.invite(owner, `{"name":"Alex","role":"commenter"}`)
	secret := "sk-abcdefghijklmnopqrstuvwx"
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"react to an unknown message", http.MethodPost, "/api/chat/react", `{"message_id":"` + secret + `","emoji":"👍"}`, http.StatusNotFound},
		{"react to a secret-named id", http.MethodPost, "/api/chat/react", `{"message_id":"password=hunter2","emoji":"👍"}`, http.StatusNotFound},
		{"delete an unknown push subscription", http.MethodDelete, "/api/chat/push/" + secret, "", http.StatusNotFound},
		{"subscribe to an unknown event", http.MethodPost, "/api/chat/push", `{"subscription":{"endpoint":"https://push.example.com/x","keys":{"p256dh":"A","auth":"B"}},"events":["` + secret + `"]}`, http.StatusBadRequest},
	} {
		status, b := e.asParticipant(tc.method, tc.path, p.Token, tc.body)
		assert.Equal(t, tc.name+": "+string(b), status, tc.status)
		assert.True(t, !strings.Contains(string(b), "abcdefghijkl") && !strings.Contains(string(b), "hunter2") && strings.Contains(string(b), "[redacted]"), "%s: a participant's refusal: %s", tc.name, b)
	}
	// A long id whose secret the quote would cut at its end: a cut shape
	// is no longer one, so no cut of it may be quoted.
	long := strings.Repeat("x", 240) + " " + p.Token
	status, b := e.asParticipant(http.MethodPost, "/api/chat/react", p.Token, `{"message_id":"`+long+`","emoji":"👍"}`)
	assert.Equal(t, "a long id: "+string(b), status, http.StatusNotFound)
	assert.True(t, !strings.Contains(string(b), p.Token[:12]), "a participant's refusal of a long id: %s", b)
	_, _, b = e.do(http.MethodPost, "/api/chat/react", owner, `{"message_id":"`+secret+`","emoji":"👍"}`, nil)
	assert.True(t, strings.Contains(string(b), secret), "the owner's refusal quotes the id as sent: %s", b)
}
