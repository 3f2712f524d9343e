package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

// FuzzParticipantPost: a commenter's post bodies (over HTTP and as
// WebSocket post frames) are untrusted, and a refusal may carry a message
// (409 client_id_conflict carries the message its client_id names).
// Whatever the body, the answer is below 500 (or 503), a refusal is the
// contract's error with a known code, and nothing the owner's message
// holds that a participant may not see (a secret in its text, its
// client_id) is ever in the answer.
func FuzzParticipantPost(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler), Windows: chatrelay.Windows{PerThread: 1 << 30, PerIP: 1 << 30}})
	token := strings.Repeat("ef", 32)
	thread := chatrelay.ThreadOf(token)
	const secret, ownerID = "hunter2hunter2", "owner-tab:7f3a"
	if _, err := st.Append(context.Background(), thread, store.NewMessage{Text: "db password=" + secret, ClientID: ownerID}); err != nil {
		f.Fatal(err)
	}
	invited := fuzzInvite(f, srv, token)
	bearer := "Bearer " + invited.Token
	pr := httptest.NewRequest(http.MethodPost, chatrelay.PathPost, nil)
	pr.Header.Set("Authorization", bearer)
	who, err := srv.authenticate(pr)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"text":"hi"}`, `{"text":"hi","client_id":"` + ownerID + `"}`, `{"text":"db password=` + secret + `","client_id":"` + ownerID + `"}`,
		`{"text":"hi","kind":"agent"}`, `{"text":"","attachments":["at_000000000000"]}`, `{"text":"x","client_id":"bad id"}`,
		`{"type":"post","text":"hi"}`, `{"type":"post","text":"hi","client_id":"` + ownerID + `"}`, `{"type":"nope"}`, `null`, `[]`, "\xff",
	} {
		f.Add(false, s)
		f.Add(true, s)
	}
	known := knownCodes()
	f.Fuzz(func(t *testing.T, ws bool, body string) {
		var answer []byte
		if ws {
			answer = srv.wsFrame(t.Context(), []byte(body), streamRequest{p: who, ip: "192.0.2.7"})
			var a struct {
				Type string         `json:"type"`
				Code chatrelay.Code `json:"code"`
			}
			if err := json.Unmarshal(answer, &a); err != nil || (a.Type != "posted" && (a.Type != "error" || !known[a.Code])) {
				t.Fatalf("frame %q: %s", body, answer)
			}
		} else {
			r := httptest.NewRequest(http.MethodPost, chatrelay.PathPost, strings.NewReader(body))
			r.Header.Set("Authorization", bearer)
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			answer = w.Body.Bytes()
			if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
				t.Fatalf("post %q: %d %s", body, w.Code, answer)
			}
			if w.Code >= 400 {
				var a struct {
					Success *bool          `json:"success"`
					Code    chatrelay.Code `json:"code"`
				}
				if err := json.Unmarshal(answer, &a); err != nil || a.Success == nil || *a.Success || !known[a.Code] {
					t.Fatalf("post %q: %d %s", body, w.Code, answer)
				}
			}
		}
		if strings.Contains(string(answer), secret) && !strings.Contains(body, secret) || strings.Contains(string(answer), ownerID) {
			t.Fatalf("post %q (ws %v): a participant was answered %s", body, ws, answer)
		}
		// hermes answers, so the commenter may post again (3 at most wait for hermes).
		if _, err := st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, Text: "ok"}); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParticipantReact: a commenter's bodies on the routes a participant
// may call with one (react, and respond, push, post, participants, which
// it is refused or answered) are untrusted, and a refusal of a reaction
// carries the message it is about (409 too_many_reactions). The thread
// holds an approval whose detail is secret-named ("DB password for
// prod") and a text with a secret, both with the owner's client_id.
// Whatever the body, the answer is below 500 (or 503), a refusal is the
// contract's error with a known code, and neither secret nor client_id
// is ever in the answer, a success's or a refusal's.
func FuzzParticipantReact(f *testing.F) {
	st, err := filestore.OpenFile(f.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(Config{Store: st, Log: slog.New(slog.DiscardHandler), Windows: chatrelay.Windows{PerThread: 1 << 30, PerIP: 1 << 30}})
	token := strings.Repeat("e7", 32)
	thread := chatrelay.ThreadOf(token)
	const detail, secret, ownerID = "opaque-detail-42", "hunter2hunter2", "owner-tab:7f3a"
	ask, err := st.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Hermes, ClientID: ownerID + "a", Ask: &chatrelay.Ask{
		Type: chatrelay.Approval, Prompt: "Deploy?", Details: []chatrelay.Detail{{Label: "DB password for prod", Value: detail}}}})
	if err != nil {
		f.Fatal(err)
	}
	text, err := st.Append(context.Background(), thread, store.NewMessage{Text: "db password=" + secret, ClientID: ownerID})
	if err != nil {
		f.Fatal(err)
	}
	for i := range chatrelay.LimitReactions.Max { // full: a new emoji is refused with the message
		if _, err := st.Change(context.Background(), thread, store.Change{Op: store.React, MessageID: text.ID, Emoji: fmt.Sprintf("e%d", i), By: chatrelay.Operator}); err != nil {
			f.Fatal(err)
		}
	}
	invited := fuzzInvite(f, srv, token)
	routes := []string{chatrelay.PathReact, chatrelay.PathRespond, chatrelay.PathPush, chatrelay.PathPost, chatrelay.PathParticipants}
	for _, s := range []string{
		`{"message_id":"` + text.ID + `","emoji":"🎉"}`, `{"message_id":"` + text.ID + `","emoji":"e3"}`, `{"message_id":"` + text.ID + `","emoji":"e3","remove":true}`,
		`{"message_id":"` + ask.ID + `","emoji":"👍"}`, `{"message_id":"` + ask.ID + `","emoji":"👍","remove":true}`, `{"message_id":"MSG-x","emoji":"👍"}`,
		`{"interaction_id":"` + ask.Interaction.ID + `","decision":"approve"}`, `{"text":"hi","client_id":"` + ownerID + `"}`, `{"emoji":5}`, `null`, "\xff",
	} {
		for i := range routes {
			f.Add(uint8(i), s)
		}
	}
	known := knownCodes()
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		path := routes[int(route)%len(routes)]
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+invited.Token)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		answer := w.Body.String()
		if w.Code >= 500 && w.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, answer)
		}
		if w.Code >= 400 {
			var a struct {
				Success *bool          `json:"success"`
				Code    chatrelay.Code `json:"code"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || a.Success == nil || *a.Success || !known[a.Code] {
				t.Fatalf("%s %q: %d %s", path, body, w.Code, answer)
			}
		}
		for _, s := range []string{detail, secret, ownerID} {
			if strings.Contains(answer, s) && !strings.Contains(body, s) {
				t.Fatalf("%s %q: a participant was answered %d %s", path, body, w.Code, answer)
			}
		}
		// hermes answers, so the commenter may post again (3 at most wait for hermes).
		if path == chatrelay.PathPost && w.Code == http.StatusCreated {
			if _, err := st.Append(t.Context(), thread, store.NewMessage{Author: chatrelay.Hermes, Text: "ok"}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// fuzzInvite makes a commenter's share link (Alex, cap 1000) as token's
// owner, for a fuzz target's setup.
func fuzzInvite(f *testing.F, srv *Server, token string) (invited struct{ Token string }) {
	f.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, chatrelay.PathParticipants, strings.NewReader(`{"name":"Alex","role":"commenter","cap":1000}`))
	r.Header.Set("X-Chat-Token", token)
	srv.ServeHTTP(w, r)
	if err := json.Unmarshal(w.Body.Bytes(), &invited); err != nil || w.Code != http.StatusCreated {
		f.Fatalf("invite: %d %s", w.Code, w.Body)
	}
	return invited
}
