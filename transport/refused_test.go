package transport_test

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

// Regression tests for the holes an outside probe found (issue #19,
// "nothing lost, nothing leaked"): what a refused or idempotent request
// spends and leaves.

// TestFullWindowAnswersWhatARetryWould: a request that would change
// nothing, or that no retry can make succeed, gets its own answer even
// when the rate window is full, and spends no place in it: a post's
// replay (201, over HTTP and the WebSocket), a client_id conflict (409
// client_id_conflict, not 429), re-adding a reaction one has or removing
// one one has not (200, no new rev), and a reaction to a message the
// thread does not have (404). A reaction that changes something is 429.
func TestFullWindowAnswersWhatARetryWould(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, windows: chatrelay.Windows{PerThread: 2, PerIP: 100}})
		tok := tokenN(1)
		first := `{"text":"hello","client_id":"tab-1:1"}`
		s, _, b1 := e.do(http.MethodPost, "/api/chat/post", tok, first, nil)
		assert.Equal(t, "first post", s, http.StatusCreated)
		e.mustPost(tok, "second")
		s, _, _ = e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"third"}`, nil)
		assert.Equal(t, "the post window is full", s, http.StatusTooManyRequests)

		s, h, b := e.do(http.MethodPost, "/api/chat/post", tok, first, nil)
		assert.True(t, s == http.StatusCreated && string(b) == string(b1) && h.Get("Idempotent-Replayed") == "true",
			"a replay over a full window: %d %s", s, b)
		s, _, b = e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"another","client_id":"tab-1:1"}`, nil)
		assert.Equal(t, "a client_id conflict over a full window "+string(b), s, http.StatusConflict)
		assert.Equal(t, "its code", decodeError(t, b).Code, "client_id_conflict")

		c := e.mustWS("/api/chat/ws", tok)
		assert.Equal(t, "ready", nextWS(t, c).Type, "ready")
		again, _ := wsAnswer(t, c, map[string]any{"type": "post", "text": "hello", "client_id": "tab-1:1"})
		assert.True(t, again.Type == "posted" && again.ID == decodeMessage(t, b1).ID && strings.Contains(string(again.raw), `"replayed":true`),
			"a WebSocket replay over a full window: %s", again.raw)
		conflict, _ := wsAnswer(t, c, map[string]any{"type": "post", "text": "other", "client_id": "tab-1:1"})
		assert.True(t, conflict.Type == "error" && conflict.Code == "client_id_conflict",
			"a WebSocket client_id conflict over a full window: %s", conflict.raw)
		c.Close(websocket.StatusNormalClosure, "")

		// Reactions have a window of their own, of the same size: two
		// reactions that change something fill it.
		m := e.pollV2(tok, 0).Messages[0]
		for _, emoji := range []string{"👍", "🎉"} {
			s, b := e.react(tok, m.ID, emoji, false)
			assert.Equal(t, "react "+emoji+" "+string(b), s, http.StatusOK)
		}
		before := e.pollV2(tok, 0).Messages[0]
		s, b = e.react(tok, m.ID, "👀", false)
		assert.Equal(t, "a new reaction over the full window "+string(b), s, http.StatusTooManyRequests)
		for _, r := range []struct {
			emoji  string
			remove bool
		}{{"👍", false}, {"🎉", false}, {"🚀", true}} {
			s, b := e.react(tok, m.ID, r.emoji, r.remove)
			assert.Equal(t, "a reaction that changes nothing, over a full window: "+r.emoji+" "+string(b), s, http.StatusOK)
			var a struct{ Message v2msg }
			assert.Success(t, json.Unmarshal(b, &a))
			assert.Equal(t, "its rev", a.Message.Rev, before.Rev)
			assert.Equal(t, "its reactions", a.Message.Reactions, before.Reactions)
		}
		s, b = e.react(tok, "MSG-20260101-000000-abcdef", "👍", false)
		assert.Equal(t, "a reaction to no message, over a full window "+string(b), s, http.StatusNotFound)
		assert.Equal(t, "its code", decodeError(t, b).Code, "not_found")
		assert.Equal(t, "nothing changed", e.pollV2(tok, 0).Messages[0].Rev, before.Rev)
	})
}

// TestRefusedRequestsLeaveNothing: a request refused for a thread that
// does not exist, which anyone with any token can send as often as the
// rate of requests allows, and a post refused on a full disk (Redis: out
// of memory), leave the data as they were: before the fix each left
// <thread>.json.lock in the file store's folder.
func TestRefusedRequestsLeaveNothing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		o := pushOptions{}
		var data func() map[string]string // what the store holds
		var fault func() (restore func())
		switch backend {
		case storetest.File:
			dir := storetest.SmallDisk(t, 1<<20)
			o.on = storetest.OpenFileIn(t, dir, storetest.Options{})
			data = func() map[string]string { return storetest.Files(t, dir) }
			fault = func() func() { return storetest.FillDisk(t, dir, 0) }
		case storetest.Redis:
			srv := storetest.StartServer(t, storetest.ServerOptions{})
			clk := testclock.New(time.Now())
			o.on = storetest.OpenRedis(t, srv, storetest.NewPrefix(), storetest.Options{Now: clk.Now})
			// The rate windows are counted in this process, so that a
			// post reaches the store.
			o.config = func(c *transport.Config) { c.Limiter = transport.NewMemoryLimiter(chatrelay.Windows{}, clk.Now) }
			admin := srv.Client(t)
			data = func() map[string]string {
				keys, err := admin.Keys(t.Context(), o.on.Prefix+"*").Result()
				assert.Success(t, err)
				out := make(map[string]string)
				for _, k := range keys {
					out[k], err = admin.Dump(t.Context(), k).Result()
					assert.Success(t, err)
				}
				return out
			}
			maxmemory := func(v string) {
				t.Helper()
				assert.Success(t, admin.ConfigSet(t.Context(), "maxmemory", v).Err())
			}
			// Out of memory, Redis refuses a script's first write but
			// lets a script that has written go on: a message in the
			// same second as the one before it may first clear the ids
			// cache (a delete, always allowed), and is then stored. A
			// second later, a post's first write is its message.
			fault = func() func() { maxmemory("1"); clk.Advance(time.Second); return func() { maxmemory("0") } }
		}
		e := startPush(t, o)
		owner := tokenN(1)
		m := e.mustPost(owner, "hello")
		p := e.invite(owner, `{"name":"Alex"}`)
		before := data()
		for i := 2; i <= 4; i++ {
			tok := tokenN(i) // a thread with no message
			for _, r := range []struct {
				method, path, body string
				status             int
			}{
				{http.MethodPost, "/api/chat/participants", `{"name":"Alex"}`, http.StatusNotFound},
				{http.MethodDelete, "/api/chat/participants/" + p.Participant.ID, "", http.StatusNotFound},
				{http.MethodGet, "/api/chat/participants", "", http.StatusOK},
				{http.MethodGet, "/api/chat/participants/audit", "", http.StatusOK},
				{http.MethodPost, "/api/chat/react", `{"message_id":"` + m.ID + `","emoji":"👍"}`, http.StatusNotFound},
				{http.MethodPost, "/api/chat/respond", `{"interaction_id":"ix_3f9a0c7e21b4","decision":"approve"}`, http.StatusNotFound},
				{http.MethodGet, "/api/chat/poll", "", http.StatusOK},
			} {
				s, _, b := e.do(r.method, r.path, tok, r.body, nil)
				assert.Equal(t, r.method+" "+r.path+" into a thread with no message "+string(b), s, r.status)
				assert.Equal(t, "the data after "+r.method+" "+r.path, data(), before)
			}
		}

		restore := fault()
		for _, tok := range []string{tokenN(5), owner} { // a new thread, and one that exists
			s, _, b := e.do(http.MethodPost, "/api/chat/post", tok, `{"text":"while the store is full"}`, nil)
			assert.Equal(t, "a post while the store is full "+string(b), s, http.StatusServiceUnavailable)
			assert.Equal(t, "the data after a post while the store is full", data(), before)
		}
		restore()
		e.mustPost(tokenN(5), "once there is room")
	})
}

// TestRefusedPostCountsNothing: a commenter's post that the store refuses
// (503 store_unavailable: a full disk, a Redis that refuses the write)
// counts neither in the grant's sent nor in a rate window: before the fix
// the file store counted it in sent when the participants record had
// room on the disk and the thread's document had none. (Redis writes the
// grant and the message in one script, the message first.)
func TestRefusedPostCountsNothing(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		const window = 6
		o := pushOptions{windows: chatrelay.Windows{PerThread: window, PerIP: 100}}
		var fault func() (restore func())
		switch backend {
		case storetest.File:
			dir := storetest.SmallDisk(t, 1<<20)
			o.on = storetest.OpenFileIn(t, dir, storetest.Options{})
			// Room for the participants record, not for the document.
			fault = func() func() { return storetest.FillDisk(t, dir, 8<<10) }
		case storetest.Redis:
			// Redis out of memory refuses every write (reads go on); the
			// rate windows are counted in this process, so that the post
			// reaches the store.
			srv := storetest.StartServer(t, storetest.ServerOptions{})
			clk := testclock.New(time.Now())
			o.on = storetest.OpenRedis(t, srv, storetest.NewPrefix(), storetest.Options{Now: clk.Now})
			o.config = func(c *transport.Config) { c.Limiter = transport.NewMemoryLimiter(o.windows, clk.Now) }
			admin := srv.Client(t)
			maxmemory := func(v string) {
				t.Helper()
				assert.Success(t, admin.ConfigSet(t.Context(), "maxmemory", v).Err())
			}
			fault = func() func() { maxmemory("1"); clk.Advance(time.Second); return func() { maxmemory("0") } }
		}
		e := startPush(t, o)
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		e.mustPost(owner, strings.Repeat("🪐", chatrelay.MaxText)) // a document larger than the room left
		alex := e.invite(owner, `{"name":"Alex","cap":5}`)
		sent := func() int {
			t.Helper()
			s, _, b := e.do(http.MethodGet, "/api/chat/participants", owner, "", nil)
			assert.Equal(t, "list", s, http.StatusOK)
			var list struct{ Participants []chatrelay.Participant }
			assert.Success(t, json.Unmarshal(b, &list))
			return list.Participants[0].Sent
		}
		commenter := func(text string) (int, []byte) {
			t.Helper()
			return e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"`+text+`"}`)
		}
		s, b := commenter("one")
		assert.Equal(t, "the commenter's first post "+string(b), s, http.StatusCreated)
		posts := 3 // in the thread's window

		restore := fault()
		for i := range 3 {
			s, b := commenter("refused " + strconv.Itoa(i))
			assert.Equal(t, "a commenter's post the store refuses "+string(b), s, http.StatusServiceUnavailable)
			assert.Equal(t, "its code", decodeError(t, b).Code, "store_unavailable")
		}
		s, _, b = e.do(http.MethodPost, "/api/chat/post", owner, `{"text":"refused"}`, nil)
		assert.Equal(t, "the owner's post the store refuses "+string(b), s, http.StatusServiceUnavailable)
		restore()

		assert.Equal(t, "sent after the refused posts", sent(), 1)
		s, b = commenter("two")
		assert.Equal(t, "the commenter's post once the store takes it "+string(b), s, http.StatusCreated)
		assert.Equal(t, "sent", sent(), 2)
		posts++
		for posts < window {
			e.mustPost(owner, "to the end of the window "+strconv.Itoa(posts))
			posts++
		}
		s, _, b = e.do(http.MethodPost, "/api/chat/post", owner, `{"text":"past the window"}`, nil)
		assert.Equal(t, "the window holds the accepted posts only "+string(b), s, http.StatusTooManyRequests)
	})
}

// TestRefusalsKeepTheAuditsLifecycle: a share link's refused requests (a
// viewer's posts, a revoked link's) are audited with no limit, and once
// pushed the owner's issued, first_use and revoked events out of the
// audit's newest 1 000 (an outside probe: 1 200 refused posts in half a
// second left only refusals). Past its bound the audit now drops
// refusals first. The audit is filled to its bound in the store (the
// refusals before), then a few refused requests come over HTTP.
func TestRefusalsKeepTheAuditsLifecycle(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		owner := tokenN(1)
		e.mustPost(owner, "hello")
		viewer := e.invite(owner, `{"name":"Vi","role":"viewer"}`)
		bo := e.invite(owner, `{"name":"Bo"}`)
		status, b := e.asParticipant(http.MethodGet, "/api/chat/poll", bo.Token, "")
		assert.Equal(t, "Bo's poll "+string(b), status, http.StatusOK)
		status, _, b = e.do(http.MethodDelete, "/api/chat/participants/"+bo.Participant.ID, owner, "", nil)
		assert.Equal(t, "revoke Bo "+string(b), status, http.StatusOK)

		p := e.store.(store.Participants)
		for range chatrelay.LimitAuditKept.Max {
			assert.Success(t, p.Audit(t.Context(), threadN(1), chatrelay.AuditEvent{At: time.Now().UnixMilli(), Event: chatrelay.AuditRefused,
				Participant: viewer.Participant.ID, Code: chatrelay.NotPermitted, IP: "127.0.0.1"}))
		}
		for range 3 {
			status, b = e.asParticipant(http.MethodPost, "/api/chat/post", viewer.Token, `{"text":"x"}`)
			assert.Equal(t, "a viewer's post "+string(b), status, http.StatusForbidden)
		}
		for range 2 {
			status, b = e.asParticipant(http.MethodGet, "/api/chat/poll", bo.Token, "")
			assert.Equal(t, "a revoked link's poll "+string(b), status, http.StatusUnauthorized)
		}

		status, _, b = e.do(http.MethodGet, "/api/chat/participants/audit", owner, "", nil)
		assert.Equal(t, "audit", status, http.StatusOK)
		var audit struct{ Events []chatrelay.AuditEvent }
		assert.Success(t, json.Unmarshal(b, &audit))
		evs := audit.Events
		assert.Equal(t, "events kept", len(evs), chatrelay.LimitAuditKept.Max)
		var head, tail []string
		for _, ev := range evs[:4] {
			head = append(head, ev.Event+" "+ev.Participant)
		}
		for _, ev := range evs[len(evs)-5:] {
			tail = append(tail, ev.Event+" "+ev.Participant+" "+string(ev.Code))
		}
		vi, boID := viewer.Participant.ID, bo.Participant.ID
		assert.Equal(t, "the oldest events", head, []string{"issued " + vi, "issued " + boID, "first_use " + boID, "revoked " + boID})
		assert.True(t, evs[2].IP != "", "first_use has no IP: %+v", evs[2])
		assert.Equal(t, "the newest events", tail, []string{
			"refused " + vi + " not_permitted", "refused " + vi + " not_permitted", "refused " + vi + " not_permitted",
			"refused " + boID + " token_revoked", "refused " + boID + " token_revoked"})
		assert.True(t, slices.IsSortedFunc(evs, func(a, b chatrelay.AuditEvent) int { return cmp.Compare(a.At, b.At) }), "the audit is not oldest first")
	})
}

// TestRefusedPostsBeforeTheirAppendCountNowhere: the posts counted in the
// rate windows in a call of their own before their append (one with
// attachments, a participant's: not AppendLimited's one script) and
// that the append then refuses (an unknown attachment, a participant
// past its cap) leave no count behind: the window takes as many posts
// afterwards as before.
func TestRefusedPostsBeforeTheirAppendCountNowhere(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, windows: chatrelay.Windows{PerThread: 3, PerIP: 100, Window: 10 * time.Minute}})
		owner := tokenN(1)
		e.mustPost(owner, "one")
		alex := e.invite(owner, `{"name":"Alex","role":"commenter","cap":1}`)
		s, b := e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"two"}`)
		assert.Equal(t, "the participant's first post "+string(b), s, http.StatusCreated)
		for range 3 {
			s, _, b = e.do(http.MethodPost, "/api/chat/post", owner, `{"text":"x","attachments":["at_000000000000"]}`, nil)
			assert.Equal(t, "a post naming an unknown upload "+string(b), s, http.StatusBadRequest)
			assert.Equal(t, "its code", decodeError(t, b).Code, string(chatrelay.InvalidAttachment))
			s, b = e.asParticipant(http.MethodPost, "/api/chat/post", alex.Token, `{"text":"again"}`)
			assert.True(t, s >= 400 && s < 500, "the participant's post past its cap: %d %s", s, b)
			assert.Equal(t, "its code "+string(b), decodeError(t, b).Code, string(chatrelay.CapReached))
		}
		e.mustPost(owner, "three")
		s, _, b = e.do(http.MethodPost, "/api/chat/post", owner, `{"text":"four"}`, nil)
		assert.Equal(t, "the fourth post taken "+string(b), s, http.StatusTooManyRequests)
	})
}
