package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/transport"
)

type readyData struct {
	Thread   string `json:"thread"`
	Cursor   int64  `json:"cursor"`
	Awaiting bool   `json:"awaiting"`
}

func decodeReady(t testing.TB, data string) readyData {
	t.Helper()
	var r readyData
	assert.Success(t, json.Unmarshal([]byte(data), &r))
	return r
}

// expectMessages reads len(want) message events and checks each is exactly
// the poll's message object, with id: <epoch>.
func expectMessages(t testing.TB, s *sseStream, want []json.RawMessage) {
	t.Helper()
	for i, w := range want {
		f := s.nextEvent(t)
		m := decodeMessage(t, w)
		assert.Equal(t, "event of message "+strconv.Itoa(i), f.Event, "message")
		assert.Equal(t, "id of message "+strconv.Itoa(i), f.ID, strconv.FormatInt(m.Epoch, 10))
		assert.Equal(t, "data of message "+strconv.Itoa(i), f.Data, string(w))
	}
}

func TestSSEStream(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		first := e.mustPost(tok, "one")
		e.mustPost(tok, "two <b>&</b>")
		e.mustPost(tok, "three\nlines")

		s := e.mustSSE("/api/chat/stream?since="+strconv.FormatInt(first.Epoch, 10), tok, nil)
		h := s.resp.Header
		assert.Equal(t, "Content-Type", h.Get("Content-Type"), "text/event-stream")
		assert.Equal(t, "Cache-Control", h.Get("Cache-Control"), "no-store, no-transform") // the conversation, stored by no cache, as every answer of the API
		assert.Equal(t, "X-Accel-Buffering", h.Get("X-Accel-Buffering"), "no")

		// The retry hint rides on the ready event: a block of its own is
		// an event with no name and no data to the clients that dispatch
		// every block (httpx-sse 0.4.3 gave Python's json.loads an empty
		// "message"; chatbench's r3labs/sse an empty event).
		ready, err := s.Next()
		assert.Success(t, err)
		assert.Equal(t, "first event", ready.Event, "ready")
		assert.Equal(t, "retry hint", ready.Retry, "2000")
		assert.True(t, !ready.HasID, "the ready event has an id line (%q): it would reset the browser's Last-Event-ID", ready.ID)
		page := e.poll(tok, 0)
		assert.Equal(t, "ready data", decodeReady(t, ready.Data), readyData{Thread: threadN(1), Cursor: page.Cursor, Awaiting: true})

		// The backlog after the cursor, byte for byte the poll's objects.
		expectMessages(t, s, page.Messages[1:])

		// Live: a message to another thread is not sent; this thread's are.
		e.mustPost(tokenN(2), "elsewhere")
		live := e.mustPost(tok, "four")
		expectMessages(t, s, e.poll(tok, live.Epoch-1).Messages)
	})
}

func TestSSEResume(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		tok := tokenN(1)
		for i := range 55 {
			e.mustPost(tok, "message "+strconv.Itoa(i))
		}
		// Each case posts one live message, so positions count from the end.
		for _, tc := range []struct {
			name string
			// since and lastEventID give the cursors by position in every
			// retained message (-1: not sent, -2: "0", -4: empty); from is the position
			// of the first message expected.
			since, lastEventID int
			from               func(n int) int
		}{
			{"no cursor: the newest 50", -1, -1, func(n int) int { return n - 50 }},
			{"since=0: the newest 50", -2, -1, func(n int) int { return n - 50 }},
			{"since: everything after it", 2, -1, func(int) int { return 3 }},
			{"Last-Event-ID", -1, 50, func(int) int { return 51 }},
			{"Last-Event-ID wins over since", 1, 52, func(int) int { return 53 }},
			{"Last-Event-ID 0 wins over since", 1, -2, func(n int) int { return n - 50 }},
			{"an empty Last-Event-ID is none: since resumes", 2, -4, func(int) int { return 3 }},
			{"cursor at the newest: nothing", -3, -1, func(n int) int { return n }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				all := e.poll(tok, 1).Messages // since=1: every retained message
				cursor := func(i int) string {
					switch i {
					case -2:
						return "0"
					case -4:
						return ""
					case -3:
						i = len(all) - 1
					}
					return strconv.FormatInt(decodeMessage(t, all[i]).Epoch, 10)
				}
				path := "/api/chat/stream"
				if tc.since != -1 {
					path += "?since=" + cursor(tc.since)
				}
				var hdr map[string]string
				if tc.lastEventID != -1 {
					hdr = map[string]string{"Last-Event-ID": cursor(tc.lastEventID)}
				}
				s := e.mustSSE(path, tok, hdr)
				ready := s.nextEvent(t)
				assert.Equal(t, "first event", ready.Event, "ready")
				expectMessages(t, s, all[tc.from(len(all)):])
				// Then live, and nothing of the backlog twice.
				live := e.mustPost(tok, "live for "+tc.name)
				f := s.nextEvent(t)
				assert.Equal(t, "live id", f.ID, strconv.FormatInt(live.Epoch, 10))
			})
		}
	})
}

func TestSSERefusesInvalidCursor(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend})
		for _, tc := range []struct {
			name  string
			query string
			hdr   map[string]string
		}{
			{"letters", "?since=abc", nil},
			{"negative", "?since=-1", nil},
			{"fraction", "?since=1.5", nil},
			{"a bad escape", "?since=%zz", nil},
			{"a semicolon", "?since=5;", nil},
			{"Last-Event-ID not a number", "", map[string]string{"Last-Event-ID": "MSG-1"}},
			{"bad Last-Event-ID, good since", "?since=5", map[string]string{"Last-Event-ID": "x"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s, resp, body, err := e.openSSE(context.Background(), "/api/chat/stream"+tc.query, tokenN(1), tc.hdr)
				assert.Success(t, err)
				if s != nil {
					s.Close()
					t.Fatal("stream opened")
				}
				assert.Equal(t, "status", resp.StatusCode, http.StatusBadRequest)
				assert.Equal(t, "code", decodeError(t, body).Code, "invalid_since")
			})
		}
	})
}

func TestSSEResetWhenRetentionDroppedMessages(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Retention: chatrelay.Retention{Messages: 5}}})
		tok := tokenN(1)
		var posted []postAnswer
		for i := range 10 {
			posted = append(posted, e.mustPost(tok, "m"+strconv.Itoa(i)))
		}
		kept := e.poll(tok, 0).Messages
		assert.Equal(t, "retained", len(kept), 5)

		// A cursor before the retained messages: reset, then what was kept.
		s := e.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(posted[1].Epoch, 10)})
		assert.Equal(t, "first event", s.nextEvent(t).Event, "ready")
		reset := s.nextEvent(t)
		assert.Equal(t, "second event", reset.Event, "reset")
		assert.True(t, !reset.HasID, "the reset event has an id line")
		expectMessages(t, s, kept)

		// A cursor inside the retained messages: no reset.
		s2 := e.mustSSE("/api/chat/stream?since="+strconv.FormatInt(posted[6].Epoch, 10), tok, nil)
		assert.Equal(t, "first event", s2.nextEvent(t).Event, "ready")
		expectMessages(t, s2, kept[2:])
	})
}

func TestSSEHeartbeat(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e := startPush(t, pushOptions{backend: backend, config: func(c *transport.Config) { c.Heartbeat = 20 * time.Millisecond }})
		s := e.mustSSE("/api/chat/stream", tokenN(1), nil)
		pings := 0
		for pings < 3 {
			f := within(t, 5*time.Second, "ping", s.Close, s.Next)
			for _, c := range f.Comments {
				if c == "ping" {
					pings++
				}
			}
		}
	})
}

// TestSSEOutlivesWriteTimeout starts the server with a WriteTimeout far
// shorter than the stream's life: the stream must go on.
func TestSSEOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		const writeTimeout = 200 * time.Millisecond
		e := startPush(t, pushOptions{backend: backend,
			config: func(c *transport.Config) { c.Heartbeat = 50 * time.Millisecond },
			http:   func(s *http.Server) { s.WriteTimeout = writeTimeout },
		})
		tok := tokenN(1)
		s := e.mustSSE("/api/chat/stream", tok, nil)
		start := time.Now()
		assert.Equal(t, "first event", s.nextEvent(t).Event, "ready")
		for time.Since(start) < 3*writeTimeout { // pings keep coming
			within(t, 5*time.Second, "ping", s.Close, s.Next)
		}
		m := e.mustPost(tok, "still there?")
		assert.Equal(t, "message after the write timeout", s.nextEvent(t).ID, strconv.FormatInt(m.Epoch, 10))
	})
}

// TestSSEToldWhenRetentionOutrunsTheFeed: while the server's feed is not
// looking, another writer appends more than retention keeps. When the feed
// sees the thread again, the live client must not skip the dropped
// messages silently: its stream ends, and resuming with Last-Event-ID, as
// EventSource does, it is sent "reset" before the retained messages.
//
// (startBlindable says how, on each store.)
func TestSSEToldWhenRetentionOutrunsTheFeed(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e, other, blind, see := startBlindable(t, backend, storetest.Options{Retention: chatrelay.Retention{Messages: 5}})
		tok := tokenN(1)
		first := e.mustPost(tok, "start")
		s := e.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(first.Epoch, 10)})
		assert.Equal(t, "first event", s.nextEvent(t).Event, "ready")
		m, err := other.Append(context.Background(), threadN(1), store.NewMessage{Author: "hermes", Text: "seen live"})
		assert.Success(t, err)
		assert.Equal(t, "live message", s.nextEvent(t).ID, strconv.FormatInt(m.Epoch, 10))

		blind()
		for i := range 8 {
			_, err := other.Append(context.Background(), threadN(1), store.NewMessage{Author: "hermes", Text: "unseen " + strconv.Itoa(i)})
			assert.Success(t, err)
		}
		see()

		// The stream ends (the hub drops it), with nothing sent in between.
		ended := within(t, 10*time.Second, "the stream to end", s.Close, func() (error, error) {
			_, err := s.NextEvent()
			return err, nil
		})
		assert.True(t, ended != nil, "the stream went on after messages were lost to it")
		again := e.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(m.Epoch, 10)})
		assert.Equal(t, "first event", again.nextEvent(t).Event, "ready")
		assert.Equal(t, "second event", again.nextEvent(t).Event, "reset")
		kept := e.poll(tok, 0).Messages
		assert.Equal(t, "retained", len(kept), 5)
		expectMessages(t, again, kept)
	})
}
