package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// v2msg is the v2 message object as a client decodes it.
type v2msg struct {
	ID          string                 `json:"id"`
	Epoch       int64                  `json:"epoch"`
	Rev         int64                  `json:"rev"`
	Author      string                 `json:"author"`
	Text        string                 `json:"text"`
	ClientID    string                 `json:"client_id"`
	Interaction *chatrelay.Interaction `json:"interaction"`
	Reactions   chatrelay.Reactions    `json:"reactions"`
}

type v2page struct {
	Success  bool    `json:"success"`
	Thread   string  `json:"thread"`
	Messages []v2msg `json:"messages"`
	Reset    bool    `json:"reset"`
	Awaiting bool    `json:"awaiting"`
	Cursor   int64   `json:"cursor"`
}

func (e *pushEnv) pollV2(token string, since int64) v2page {
	e.t.Helper()
	status, _, body := e.do(http.MethodGet, "/api/chat/poll?v=2&since="+strconv.FormatInt(since, 10), token, "", nil)
	assert.Equal(e.t, "v2 poll status "+string(body), status, http.StatusOK)
	var p v2page
	assert.Success(e.t, json.Unmarshal(body, &p))
	return p
}

// ask posts an interaction as hermes, through the store (as the host CLI
// does).
func (e *pushEnv) ask(thread string, a chatrelay.Ask) store.Entry {
	e.t.Helper()
	en, err := e.store.Append(context.Background(), thread, store.NewMessage{Author: chatrelay.Hermes, Ask: &a, MustExist: true})
	assert.Success(e.t, err)
	return en
}

func (e *pushEnv) respond(token, body string) (int, []byte) {
	e.t.Helper()
	status, _, b := e.do(http.MethodPost, "/api/chat/respond", token, body, nil)
	return status, b
}

func (e *pushEnv) react(token, id, emoji string, remove bool) (int, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]any{"message_id": id, "emoji": emoji, "remove": remove})
	status, _, body := e.do(http.MethodPost, "/api/chat/react", token, string(b), nil)
	return status, body
}

// change is one change as a v2 client sees it: which message, at which
// rev, as a new message or an update.
type change struct {
	id, typ string
	rev     int64
}

// TestV2ResumeFromEveryCursor: across a mix of messages, reactions and
// interaction changes, the v2 poll and both v2 streams, resumed from every
// cursor position, send each change after the cursor once, in order, as a
// message if the client cannot have it yet, else as an update (SSE id =
// the change's epoch). v1 streams see only the new messages.
func TestV2ResumeFromEveryCursor(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		th := threadN(1)
		m1 := e.mustPost(tok, "first")
		ix := e.ask(th, chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy build 412?"})
		m3 := e.mustPost(tok, "third")
		status, body := e.react(tok, m1.ID, "👍", false)
		assert.Equal(t, "react "+string(body), status, http.StatusOK)
		status, body = e.respond(tok, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"approve"}`)
		assert.Equal(t, "respond "+string(body), status, http.StatusOK)
		m4 := e.mustPost(tok, "fourth")
		status, _ = e.react(tok, m3.ID, "🎉", false)
		assert.Equal(t, "react", status, http.StatusOK)

		// The history as the store has it, one change per rev.
		final := e.pollV2(tok, 0)
		assert.Equal(t, "messages", len(final.Messages), 4)
		type rec struct {
			id    string
			epoch int64
			rev   int64
		}
		var changes []int64 // every change's epoch, in order
		byRev := map[int64]rec{}
		for _, m := range final.Messages {
			byRev[m.Epoch] = rec{m.ID, m.Epoch, m.Rev}
		}
		_ = m4
		// Reconstruct the change epochs: the new messages, and the revs of
		// the changed ones (two reactions and one answer).
		for _, m := range final.Messages {
			changes = append(changes, m.Epoch)
			if m.Rev != m.Epoch {
				changes = append(changes, m.Rev)
			}
		}
		slices.Sort(changes)
		assert.Equal(t, "changes", len(changes), 7)
		// want lists, for a cursor, what a v2 client gets after it.
		want := func(c int64) []change {
			var out []change
			for _, m := range final.Messages {
				if m.Rev <= c {
					continue
				}
				typ := "update"
				if m.Epoch > c {
					typ = "message"
				}
				out = append(out, change{m.ID, typ, m.Rev})
			}
			slices.SortFunc(out, func(a, b change) int { return int(a.rev - b.rev) })
			return out
		}
		for _, c := range changes[:len(changes)-1] {
			cs := strconv.FormatInt(c, 10)
			// poll
			var got []change
			for _, m := range e.pollV2(tok, c).Messages {
				typ := "update"
				if m.Epoch > c {
					typ = "message"
				}
				got = append(got, change{m.ID, typ, m.Rev})
			}
			assert.Equal(t, "v2 poll after "+cs, got, want(c))
			n := len(want(c))
			// SSE
			s := e.mustSSE("/api/chat/stream?v=2", tok, map[string]string{"Last-Event-ID": cs})
			ready := s.nextEvent(t)
			assert.Equal(t, "SSE ready", ready.Event, "ready")
			got = got[:0]
			for range n {
				f := s.nextEvent(t)
				var m v2msg
				assert.Success(t, json.Unmarshal([]byte(f.Data), &m))
				assert.Equal(t, "SSE id", f.ID, strconv.FormatInt(m.Rev, 10))
				got = append(got, change{m.ID, f.Event, m.Rev})
			}
			assert.Equal(t, "v2 SSE after "+cs, got, want(c))
			s.Close()
			// WebSocket
			ws := e.mustWS("/api/chat/ws?v=2&since="+cs, tok)
			assert.Equal(t, "WS ready", nextWS(t, ws).Type, "ready")
			got = got[:0]
			for range n {
				f := nextWS(t, ws)
				var m v2msg
				assert.Success(t, json.Unmarshal(f.Message, &m))
				got = append(got, change{m.ID, f.Type, m.Rev})
			}
			assert.Equal(t, "v2 WS after "+cs, got, want(c))
			ws.CloseNow()
		}

		// Live: a v2 stream gets the update of an answer and a reaction; a v1
		// stream of the same thread gets only the new message, as v1.
		v2s := e.mustSSE("/api/chat/stream?v=2&since="+strconv.FormatInt(final.Cursor, 10), tok, nil)
		assert.Equal(t, "ready", v2s.nextEvent(t).Event, "ready")
		v1s := e.mustSSE("/api/chat/stream?since="+strconv.FormatInt(final.Cursor, 10), tok, nil)
		assert.Equal(t, "ready", v1s.nextEvent(t).Event, "ready")
		status, _ = e.react(tok, m4.ID, "👀", false)
		assert.Equal(t, "react", status, http.StatusOK)
		last := e.mustPost(tok, "last")
		u := v2s.nextEvent(t)
		assert.True(t, u.Event == "update" && strings.Contains(u.Data, `"👀":["operator"]`), "v2 live update: %+v", u)
		mf := v2s.nextEvent(t)
		assert.True(t, mf.Event == "message" && strings.Contains(mf.Data, last.ID), "v2 live message: %+v", mf)
		f := v1s.nextEvent(t)
		assert.True(t, f.Event == "message" && f.ID == strconv.FormatInt(last.Epoch, 10), "v1 live: %+v", f)
		var fields map[string]any
		assert.Success(t, json.Unmarshal([]byte(f.Data), &fields))
		assert.Equal(t, "v1 fields", len(fields), 5)
	})
}

// TestRespondFirstWins: of 20 concurrent answers over HTTP, exactly one
// gets 200; the others 409 interaction_closed with the answered message.
func TestRespondFirstWins(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		ix := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?"})
		var wg sync.WaitGroup
		var mu sync.Mutex
		statuses := map[int]int{}
		for i := range 20 {
			decision := []string{"approve", "deny"}[i%2]
			wg.Go(func() {
				status, body := e.respond(tok, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"`+decision+`"}`)
				mu.Lock()
				defer mu.Unlock()
				statuses[status]++
				if status == http.StatusConflict {
					var eb struct {
						Code    string `json:"code"`
						Message v2msg  `json:"message"`
					}
					if json.Unmarshal(body, &eb) != nil || eb.Code != "interaction_closed" || eb.Message.Interaction == nil || eb.Message.Interaction.State == chatrelay.Pending {
						t.Errorf("a refused answer: %s", body)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, "statuses", statuses, map[int]int{200: 1, 409: 19})
	})
}

// TestRespondRefusals: every refusal of respond and react has its code.
func TestRespondRefusals(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testRespondRefusals)
}

func testRespondRefusals(t *testing.T, backend string) {
	e := startPush(t, pushOptions{backend: backend})
	tok := tokenN(1)
	m := e.mustPost(tok, "hello")
	ap := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?"})
	in := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Prompt: "Branch?", Choices: []chatrelay.Choice{{Value: "main"}}})
	for _, tc := range []struct {
		name, token, body string
		status            int
		code              string
	}{
		{"no token", "", `{}`, 401, "unauthorized"},
		{"not JSON", tok, `nope`, 400, "invalid_json"},
		{"no interaction", tok, `{"decision":"approve"}`, 400, "invalid_json"},
		{"interaction id of the wrong type", tok, `{"interaction_id":5,"decision":"approve"}`, 400, "invalid_json"},
		{"unknown interaction", tok, `{"interaction_id":"ix_000000000000","decision":"approve"}`, 404, "not_found"},
		{"another thread's interaction", tokenN(2), `{"interaction_id":"` + ap.Interaction.ID + `","decision":"approve"}`, 404, "not_found"},
		{"no answer", tok, `{"interaction_id":"` + ap.Interaction.ID + `"}`, 400, "invalid_answer"},
		{"both", tok, `{"interaction_id":"` + ap.Interaction.ID + `","decision":"approve","value":"x"}`, 400, "invalid_answer"},
		{"a value on an approval", tok, `{"interaction_id":"` + ap.Interaction.ID + `","value":"yes"}`, 400, "invalid_answer"},
		{"a decision on an input", tok, `{"interaction_id":"` + in.Interaction.ID + `","decision":"approve"}`, 400, "invalid_answer"},
		{"a value not among the choices", tok, `{"interaction_id":"` + in.Interaction.ID + `","value":"develop"}`, 400, "invalid_answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.respond(tc.token, tc.body)
			assert.Equal(t, "status "+string(body), status, tc.status)
			assert.Equal(t, "code", decodeError(t, body).Code, tc.code)
		})
	}
	for _, tc := range []struct {
		name, id, emoji string
		status          int
		code            string
	}{
		{"empty emoji", m.ID, "", 400, "invalid_emoji"},
		{"white space", m.ID, "a b", 400, "invalid_emoji"},
		{"65 code points", m.ID, strings.Repeat("😀", 65), 400, "invalid_emoji"},
		{"a right-to-left override", m.ID, "👍\u202e", 400, "invalid_emoji"},
		{"a zero width space", m.ID, "\u200b", 400, "invalid_emoji"},
		{"a byte order mark", m.ID, "👍\ufeff", 400, "invalid_emoji"},
		{"an isolate", m.ID, "\u2066👍\u2069", 400, "invalid_emoji"},
		{"unknown message", "MSG-20261023-184000-000000", "👍", 404, "not_found"},
		{"not a message id", "nope", "👍", 404, "not_found"},
	} {
		t.Run("react "+tc.name, func(t *testing.T) {
			status, body := e.react(tok, tc.id, tc.emoji, false)
			assert.Equal(t, "status "+string(body), status, tc.status)
			assert.Equal(t, "code", decodeError(t, body).Code, tc.code)
		})
	}
	for _, path := range []string{"/api/chat/poll?v=3", "/api/chat/stream?v=x", "/api/chat/ws?v=0"} {
		status, _, body := e.do(http.MethodGet, path, tok, "", nil)
		if strings.Contains(path, "/ws") {
			resp, eb := e.refusedWS(path, tok, nil)
			status, body = resp.StatusCode, []byte(`{"code":"`+eb.Code+`"}`)
		}
		assert.Equal(t, path+" status", status, http.StatusBadRequest)
		assert.Equal(t, path+" code", decodeError(t, body).Code, "invalid_version")
	}
	// An answer never stored anything: both are still pending.
	for _, m := range e.pollV2(tok, 0).Messages {
		if m.Interaction != nil {
			assert.Equal(t, "state of "+m.Interaction.ID, m.Interaction.State, chatrelay.Pending)
		}
	}
}

// TestIdempotentPosts: a post repeated with its client_id answers the
// first 201 again with Idempotent-Replayed: true, stores nothing and
// spends no rate window (even a full one); another text under the same
// client_id is 409 client_id_conflict; the WebSocket post frame replays
// with "replayed": true.
func TestIdempotentPosts(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, windows: chatrelay.Windows{PerThread: 2, PerIP: 100}})
		tok := tokenN(1)
		body := `{"text":"hello","client_id":"tab-1:1"}`
		s1, h1, b1 := e.do(http.MethodPost, "/api/chat/post", tok, body, nil)
		assert.Equal(t, "first", s1, http.StatusCreated)
		assert.Equal(t, "first header", h1.Get("Idempotent-Replayed"), "")
		for range 5 {
			s, h, b := e.do(http.MethodPost, "/api/chat/post", tok, body, nil)
			assert.Equal(t, "replay", s, http.StatusCreated)
			assert.Equal(t, "replay body", string(b), string(b1))
			assert.Equal(t, "replay header", h.Get("Idempotent-Replayed"), "true")
		}
		assert.Equal(t, "stored", len(e.poll(tok, 0).Messages), 1)
		s, _, b := e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"another","client_id":"tab-1:1"}`, nil)
		assert.Equal(t, "conflict", s, http.StatusConflict)
		assert.Equal(t, "conflict code", decodeError(t, b).Code, "client_id_conflict")
		s, _, b = e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"x","client_id":"a b"}`, nil)
		assert.Equal(t, "bad client_id", s, http.StatusBadRequest)
		assert.Equal(t, "bad client_id code", decodeError(t, b).Code, "invalid_client_id")
		// The window (2 per thread) still has room for one: no replay spent it.
		e.mustPost(tok, "second")
		s, _, _ = e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"third"}`, nil)
		assert.Equal(t, "third is over the window", s, http.StatusTooManyRequests)
		// A replay while the window is full still answers.
		s, h, b := e.do(http.MethodPost, "/api/chat/post", tok, body, nil)
		assert.True(t, s == http.StatusCreated && string(b) == string(b1) && h.Get("Idempotent-Replayed") == "true", "replay over a full window: %d %s", s, b)

		c := e.mustWS("/api/chat/ws", tokenN(2))
		assert.Equal(t, "ready", nextWS(t, c).Type, "ready")
		frame := map[string]any{"type": "post", "text": "over the socket", "client_id": "ws-1"}
		first, _ := wsAnswer(t, c, frame)
		again, _ := wsAnswer(t, c, frame)
		assert.True(t, first.Type == "posted" && !strings.Contains(string(first.raw), "replayed"), "first: %s", first.raw)
		assert.True(t, again.Type == "posted" && again.ID == first.ID && strings.Contains(string(again.raw), `"replayed":true`), "again: %s", again.raw)
		assert.Equal(t, "stored over the socket", len(e.poll(tokenN(2), 0).Messages), 1)
		c.Close(websocket.StatusNormalClosure, "")
	})
}

// TestExpiry: a running server writes "expired" within 1 s of a deadline
// with no client connected, and a server started after a restart expires
// the interactions that were pending.
func TestExpiry(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		e.mustPost(tok, "hello")
		ix := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Prompt: "Quick?", AllowText: true, Timeout: time.Second})
		waitExpired(t, e, tok, ix)

		// Pending when the server stops; the deadline passes while no
		// server runs; the next server expires it.
		ix2 := e.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Prompt: "Later?", AllowText: true, Timeout: 1500 * time.Millisecond})
		e.stop()
		for time.Now().UnixMilli() < ix2.Interaction.Deadline+200 {
			time.Sleep(50 * time.Millisecond)
		}
		e2 := startPush(t, pushOptions{on: e.backend.Another(t, storetest.Options{})})
		waitExpired(t, e2, tok, ix2)
	})
}

// waitExpired waits for ix to be stored expired, failing if that takes
// more than a second past its deadline.
func waitExpired(t *testing.T, e *pushEnv, tok string, ix store.Entry) {
	t.Helper()
	deadline := time.UnixMilli(ix.Interaction.Deadline)
	for {
		for _, m := range e.pollV2(tok, 0).Messages {
			if m.ID == ix.ID && m.Interaction.State == chatrelay.Expired {
				late := time.Since(deadline)
				t.Logf("expired %v after the deadline", late.Round(time.Millisecond))
				assert.True(t, m.Rev > ix.Rev, "the expiry took no new rev")
				return
			}
		}
		if time.Since(deadline) > time.Second {
			t.Fatalf("%s not expired 1 s after its deadline", ix.Interaction.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestV2BacklogIDsGrow: a v2 stream opened with no cursor sends the newest
// messages in change order, so its SSE ids only grow and a client that
// resumes with Last-Event-ID (any EventSource) gets nothing twice.
func TestV2BacklogIDsGrow(t *testing.T) {
	t.Parallel()
	e := startPush(t, pushOptions{})
	tok := tokenN(1)
	m1 := e.mustPost(tok, "one")
	e.mustPost(tok, "two")
	status, _ := e.react(tok, m1.ID, "👍", false) // m1 now changed after m2
	assert.Equal(t, "react", status, http.StatusOK)
	s := e.mustSSE("/api/chat/stream?v=2", tok, nil)
	assert.Equal(t, "ready", s.nextEvent(t).Event, "ready")
	a, b := s.nextEvent(t), s.nextEvent(t)
	ia, _ := strconv.ParseInt(a.ID, 10, 64)
	ib, _ := strconv.ParseInt(b.ID, 10, 64)
	assert.True(t, ia < ib, "SSE ids %s then %s", a.ID, b.ID)
	// Resume from the last id: nothing more.
	s2 := e.mustSSE("/api/chat/stream?v=2", tok, map[string]string{"Last-Event-ID": b.ID})
	assert.Equal(t, "ready", s2.nextEvent(t).Event, "ready")
	next := e.mustPost(tok, "three")
	f := s2.nextEvent(t)
	assert.True(t, f.Event == "message" && strings.Contains(f.Data, next.ID), "after the resume: %+v", f)
}
