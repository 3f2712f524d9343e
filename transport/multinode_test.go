package transport_test

// Several nodes, one Redis: each node is a transport.Server with its own
// Redis store (same server, same key prefix), its own hub and change feed,
// and the Redis limiters and ticket key, as "chatrelay serve --store
// redis://…" sets them up.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
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
	"github.com/chatrelay/chatrelay/transport"
)

// startNodes starts n nodes on one Redis under a key prefix of the test's.
// Each node's ticket key is the one kept in Redis (TicketKey), and the
// nodes believe X-Forwarded-For from loopback, so a test can post as
// different client addresses.
func startNodes(t testing.TB, n int, o pushOptions) (*storetest.Backend, []*pushEnv) {
	t.Helper()
	be := storetest.Open(t, storetest.Redis, o.store)
	nodes := make([]*pushEnv, n)
	for i := range nodes {
		no := o
		no.on = be.Another(t, o.store)
		key, err := no.on.Redis.TicketKey(context.Background())
		assert.Success(t, err)
		no.config = func(c *transport.Config) {
			c.TicketKey = key
			c.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			if o.config != nil {
				o.config(c)
			}
		}
		nodes[i] = startPush(t, no)
	}
	return be, nodes
}

// postAs posts text to token's thread as the client at ip, and returns the
// status and body.
func (e *pushEnv) postAs(token, ip, text string) (int, http.Header, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	return e.do(http.MethodPost, "/api/chat/post", token, string(b), map[string]string{"X-Forwarded-For": ip})
}

// pollBody is the exact bytes of a poll answer.
func (e *pushEnv) pollBody(token string, since int64) string {
	e.t.Helper()
	status, _, body := e.do(http.MethodGet, "/api/chat/poll?since="+strconv.FormatInt(since, 10), token, "", nil)
	assert.Equal(e.t, "poll status of "+string(body), status, http.StatusOK)
	return string(body)
}

// TestNodesShareOneRedis: nodes A, B and C share one Redis. A post to any
// node reaches a WebSocket on B and an SSE stream on C, as does a reply of
// the host CLI (another process); polls on every node agree byte for byte.
func TestNodesShareOneRedis(t *testing.T) {
	t.Parallel()
	be, nodes := startNodes(t, 3, pushOptions{})
	a, b, c := nodes[0], nodes[1], nodes[2]
	tok := tokenN(1)
	first := a.mustPost(tok, "first, on A")
	since := "?since=" + strconv.FormatInt(first.Epoch, 10)
	ws := b.mustWS("/api/chat/ws"+since, tok)
	assert.Equal(t, "WS ready on B", nextWS(t, ws).Type, "ready")
	sse := c.mustSSE("/api/chat/stream"+since, tok, nil)
	assert.Equal(t, "SSE ready on C", sse.nextEvent(t).Event, "ready")

	var posted []postAnswer
	for i := range 9 {
		node := nodes[i%3]
		posted = append(posted, node.mustPost(tok, "message "+strconv.Itoa(i)+" via node "+strconv.Itoa(i%3)))
		if i == 0 {
			// The first one, from A, is there before anything else is posted.
			want := a.poll(tok, first.Epoch).Messages
			expectWSMessages(t, ws, want)
			expectMessages(t, sse, want)
		}
	}
	a.mustPost(tokenN(2), "another thread, not pushed to these streams")
	rest := a.poll(tok, posted[0].Epoch).Messages
	assert.Equal(t, "messages after the first", len(rest), 8)
	expectWSMessages(t, ws, rest)
	expectMessages(t, sse, rest)

	// Polls agree on every node, byte for byte, whatever the cursor.
	pollsAgree := func(sinces ...int64) {
		t.Helper()
		for _, since := range sinces {
			want := a.pollBody(tok, since)
			for i, node := range nodes[1:] {
				assert.Equal(t, "poll since "+strconv.FormatInt(since, 10)+" on node "+strconv.Itoa(i+1), node.pollBody(tok, since), want)
			}
		}
	}
	pollsAgree(0, 1, first.Epoch, posted[4].Epoch, posted[8].Epoch)
	assert.Equal(t, "threads", len(be.Threads(t)), 2)

	// The host CLI, another process, writes straight to Redis: its reply
	// reaches the streams on B and C.
	bin := mustBinary(t)
	epoch, err := a.cliReply(context.Background(), bin, "always", threadN(1), "a reply of the host")
	assert.Success(t, err)
	reply := c.poll(tok, epoch-1).Messages
	assert.Equal(t, "the reply, polled on C", len(reply), 1)
	assert.Equal(t, "the reply's epoch", decodeMessage(t, reply[0]).Epoch, epoch)
	expectWSMessages(t, ws, reply)
	expectMessages(t, sse, reply)
	pollsAgree(0, posted[8].Epoch)
}

// TestNodesThreadLimit: the thread limit (507) counts every node's
// threads, also when new threads are created through several nodes at
// once.
func TestNodesThreadLimit(t *testing.T) {
	t.Parallel()
	const limit = 3
	be, nodes := startNodes(t, 3, pushOptions{store: storetest.Options{MaxThreads: limit}})

	// Nine new threads at once, three through each node: three are created.
	status := make([]int, 9)
	var wg sync.WaitGroup
	for i := range status {
		wg.Go(func() {
			status[i], _, _ = nodes[i%3].postAs(tokenN(100+i), "203.0.113.1", "new thread "+strconv.Itoa(i))
		})
	}
	wg.Wait()
	var created []int
	for i, s := range status {
		switch s {
		case http.StatusCreated:
			created = append(created, i)
		case http.StatusInsufficientStorage:
		default:
			t.Fatalf("post %d: status %d", i, s)
		}
	}
	assert.Equal(t, "threads created of 9 posted at once", len(created), limit)
	stored := be.Threads(t)
	assert.Equal(t, "stored threads", len(stored), limit)
	for _, i := range created {
		assert.True(t, slices.Contains(stored, threadN(100+i)), "created thread %d is not stored", i)
	}

	// Every node refuses one more, and every created thread still takes
	// posts on every node.
	for i, node := range nodes {
		st, _, body := node.postAs(tokenN(200), "203.0.113.1", "one thread too many")
		assert.Equal(t, "status of a new thread on node "+strconv.Itoa(i), st, http.StatusInsufficientStorage)
		assert.Equal(t, "code", decodeError(t, body).Code, "thread_limit")
		for _, j := range created {
			node.mustPost(tokenN(100+j), "still open on node "+strconv.Itoa(i))
		}
		assert.Equal(t, "messages of the refused thread on node "+strconv.Itoa(i), len(node.poll(tokenN(200), 0).Messages), 0)
	}
	assert.Equal(t, "stored threads at the end", len(be.Threads(t)), limit)
}

// TestNodesRateWindows: the rate windows per thread and per client
// address count the posts of every node. The windows are on Redis's own
// clock (the nodes' clocks move, theirs does not), so the waits the nodes
// announce are bounded by the time the posts took: the window less the
// time from the first post to the refusal, within the span of the calls.
// The window slides: once the first post has left it, a post passes.
func TestNodesRateWindows(t *testing.T) {
	t.Parallel()
	clock := &testClock{t: time.Date(2026, 10, 23, 18, 40, 0, 0, time.UTC)}
	const window = 10 * time.Minute
	_, nodes := startNodes(t, 3, pushOptions{
		store:   storetest.Options{Now: clock.Now},
		windows: chatrelay.Windows{PerThread: 3, PerIP: 5, Window: window},
	})
	// limited checks a refusal sent at sent and answered at answered, of
	// a post whose wait is on the first post counted in its window, sent
	// at firstSent and answered at firstAnswered: it waits win from that
	// post, less the time since, in ms.
	limited := func(t *testing.T, st int, h http.Header, body []byte, win time.Duration, firstSent, firstAnswered, sent, answered time.Time) {
		t.Helper()
		assert.Equal(t, "status of "+string(body), st, http.StatusTooManyRequests)
		var ea struct {
			Code         string `json:"code"`
			RetryAfterMS int64  `json:"retry_after_ms"`
		}
		assert.Success(t, json.Unmarshal(body, &ea))
		assert.Equal(t, "code", ea.Code, "rate_limited")
		lo := (win - answered.Sub(firstSent)).Milliseconds() - 1
		hi := (win - sent.Sub(firstAnswered)).Milliseconds() + 1
		assert.True(t, ea.RetryAfterMS >= lo && ea.RetryAfterMS <= hi, "retry_after_ms %d, want between %d and %d", ea.RetryAfterMS, lo, hi)
		assert.Equal(t, "Retry-After", h.Get("Retry-After"), strconv.FormatInt((ea.RetryAfterMS+999)/1000, 10))
	}
	// post posts as postAs does, and says when it sent and when it had
	// the answer.
	post := func(node *pushEnv, token, ip, text string) (st int, h http.Header, body []byte, sent, answered time.Time) {
		sent = time.Now()
		st, h, body = node.postAs(token, ip, text)
		return st, h, body, sent, time.Now()
	}

	t.Run("per thread", func(t *testing.T) {
		tok := tokenN(1)
		// Three posts, one through each node, from three addresses, the
		// nodes' clock a second further each time: the thread's window is
		// full on every node.
		var firstSent, firstAnswered time.Time
		for i, node := range nodes {
			st, _, body, sent, answered := post(node, tok, "198.51.100."+strconv.Itoa(i+1), "post "+strconv.Itoa(i))
			assert.Equal(t, "status of post "+strconv.Itoa(i)+": "+string(body), st, http.StatusCreated)
			if i == 0 {
				firstSent, firstAnswered = sent, answered
			}
			clock.Advance(time.Second)
		}
		for _, node := range nodes {
			st, h, body, sent, answered := post(node, tok, "198.51.100.9", "one too many")
			limited(t, st, h, body, window, firstSent, firstAnswered, sent, answered) // the first post leaves the window 10 min after it
		}
		assert.Equal(t, "stored", len(nodes[0].poll(tok, 0).Messages), 3)
		clock.Advance(10*time.Minute - 2*time.Second) // the nodes' clock: the window does not move with it
		st, h, body, sent, answered := post(nodes[1], tok, "198.51.100.9", "no room yet")
		limited(t, st, h, body, window, firstSent, firstAnswered, sent, answered)
	})

	t.Run("per client address", func(t *testing.T) {
		const ip = "203.0.113.77"
		// Five posts to five threads, alternating nodes.
		var firstSent, firstAnswered time.Time
		for i := range 5 {
			st, _, body, sent, answered := post(nodes[i%3], tokenN(10+i), ip, "post "+strconv.Itoa(i))
			assert.Equal(t, "status of post "+strconv.Itoa(i)+": "+string(body), st, http.StatusCreated)
			if i == 0 {
				firstSent, firstAnswered = sent, answered
			}
		}
		for _, node := range nodes {
			st, h, body, sent, answered := post(node, tokenN(20), ip, "a sixth")
			limited(t, st, h, body, window, firstSent, firstAnswered, sent, answered)
		}
		st, _, body := nodes[2].postAs(tokenN(20), "203.0.113.78", "another address")
		assert.Equal(t, "status from another address: "+string(body), st, http.StatusCreated)
	})

	t.Run("sliding", func(t *testing.T) {
		// Nodes of their own, with a short window: two posts through two
		// nodes fill a thread's; a post passes again once the first has
		// left it, and not before.
		const win = 1500 * time.Millisecond
		_, nodes := startNodes(t, 2, pushOptions{
			store:   storetest.Options{Now: clock.Now},
			windows: chatrelay.Windows{PerThread: 2, PerIP: 100, Window: win},
		})
		tok := tokenN(30)
		st, _, body, firstSent, firstAnswered := post(nodes[0], tok, "198.51.100.1", "one")
		assert.Equal(t, "status of the first post: "+string(body), st, http.StatusCreated)
		st, _, body = nodes[1].postAs(tok, "198.51.100.2", "two")
		assert.Equal(t, "status of the second post: "+string(body), st, http.StatusCreated)
		assert.Eventually(t, 10*time.Second, "the first post to leave the window", func() bool {
			st, h, body, sent, answered := post(nodes[1], tok, "198.51.100.3", "three")
			if st != http.StatusCreated {
				limited(t, st, h, body, win, firstSent, firstAnswered, sent, answered)
			}
			return st == http.StatusCreated
		})
		assert.True(t, time.Since(firstSent) >= win-time.Millisecond, "a post passed %s after the first, before the window (%s) was over", time.Since(firstSent), win)
	})
}

// TestNodesTicketsAndStreamLimits: a ticket minted on one node opens
// streams on the others (the key is shared through Redis), and the open
// streams of every node count against one limit.
func TestNodesTicketsAndStreamLimits(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 3, pushOptions{streamsThread: 2, streamsIP: 100})
	a, b, c := nodes[0], nodes[1], nodes[2]
	tok := tokenN(1)
	hello := a.mustPost(tok, "hello")

	ticket := a.ticket(tok)
	sse := b.mustSSE("/api/chat/stream?ticket="+ticket, "", nil)
	ready := sse.nextEvent(t)
	assert.Equal(t, "ready on B with A's ticket", decodeReady(t, ready.Data), readyData{Thread: threadN(1), Cursor: hello.Epoch, Awaiting: true})
	expectMessages(t, sse, a.poll(tok, 0).Messages)
	ws := c.mustWS("/api/chat/ws?ticket="+ticket, "")
	assert.Equal(t, "WS ready on C with A's ticket", nextWS(t, ws).Thread, threadN(1))
	expectWSMessages(t, ws, a.poll(tok, 0).Messages)

	// Two streams of the thread are open (on B and C): A refuses a third.
	s, resp, body, err := a.openSSE(context.Background(), "/api/chat/stream", tok, nil)
	assert.Success(t, err)
	if s != nil {
		s.Close()
		t.Fatal("a third stream of the thread opened on A")
	}
	assert.Equal(t, "status of a third stream on A", resp.StatusCode, http.StatusTooManyRequests)
	assert.Equal(t, "code", decodeError(t, body).Code, "too_many_streams")

	// The WebSocket on C ends: its place is free on A.
	ws.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, resp, _, err := a.openSSE(context.Background(), "/api/chat/stream", tok, nil)
		assert.Success(t, err)
		if s != nil {
			t.Cleanup(s.Close)
			assert.Equal(t, "ready on A", s.nextEvent(t).Event, "ready")
			break
		}
		assert.Equal(t, "status while C's stream ends", resp.StatusCode, http.StatusTooManyRequests)
		assert.True(t, time.Now().Before(deadline), "the stream closed on C still counts 5s later")
		<-time.After(10 * time.Millisecond) // C notices the close
	}
	live := b.mustPost(tok, "live, via B")
	assert.Equal(t, "live on B's ticket stream", sse.nextEvent(t).ID, strconv.FormatInt(live.Epoch, 10))
}

// TestNodesLatency measures delivery from a post on node A to a
// WebSocket on node B. It logs the figures; it asserts only that every
// message arrives.
func TestNodesLatency(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 2, pushOptions{})
	lat := crossNodeLatency(t, nodes[0], nodes[1], 200)
	t.Logf("post on A -> WebSocket on B, %d messages (-race, shared machine): p50 %v, p99 %v, max %v",
		len(lat), percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1])
}

// crossNodeLatency posts n messages on a, one at a time, and times each
// from the start of the post to its arrival on a WebSocket on b. It
// returns the times sorted.
func crossNodeLatency(t testing.TB, a, b *pushEnv, n int) []time.Duration {
	tok := tokenN(7)
	ws := b.mustWS("/api/chat/ws", tok)
	assert.Equal(t, "WS ready on B", nextWS(t, ws).Type, "ready")
	lat := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		m, err := a.post(tok, "latency "+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		f := nextWS(t, ws)
		lat = append(lat, time.Since(start))
		if got := decodeMessage(t, f.Message).Epoch; got != m.Epoch {
			t.Fatalf("message %d: got epoch %d on B, posted %d", i, got, m.Epoch)
		}
	}
	slices.Sort(lat)
	return lat
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)]
}

// v2Event is a v2 change as a stream on one node sends it: "message" or
// "update", and the message in its new state.
type v2Event struct {
	typ string
	msg v2msg
}

// nextV2SSE reads the next event of a v2 SSE stream.
func nextV2SSE(t *testing.T, s *sseStream) v2Event {
	t.Helper()
	f := s.nextEvent(t)
	var m v2msg
	assert.Success(t, json.Unmarshal([]byte(f.Data), &m))
	assert.Equal(t, "SSE id of "+f.Data, f.ID, strconv.FormatInt(m.Rev, 10))
	return v2Event{f.Event, m}
}

// v2Streams opens a v2 SSE stream on node a and a v2 WebSocket on node b
// from cursor since, reads their ready, and returns a reader of each's
// next event, by name.
func v2Streams(t *testing.T, a, b *pushEnv, tok string, since int64) map[string]func() v2Event {
	t.Helper()
	q := "?v=2&since=" + strconv.FormatInt(since, 10)
	sse := a.mustSSE("/api/chat/stream"+q, tok, nil)
	assert.Equal(t, "SSE ready on A", sse.nextEvent(t).Event, "ready")
	ws := b.mustWS("/api/chat/ws"+q, tok)
	assert.Equal(t, "WS ready on B", nextWS(t, ws).Type, "ready")
	return map[string]func() v2Event{"SSE on A": func() v2Event { return nextV2SSE(t, sse) }, "WS on B": func() v2Event { return nextV2WS(t, ws) }}
}

// nextV2WS reads the next frame of a v2 WebSocket.
func nextV2WS(t *testing.T, ws *websocket.Conn) v2Event {
	t.Helper()
	f := nextWS(t, ws)
	var m v2msg
	assert.Success(t, json.Unmarshal(f.Message, &m))
	return v2Event{f.Type, m}
}

// TestNodesRespondFirstWins: 20 answers to one question, sent at once to
// two nodes: Redis's script decides, so exactly one gets 200 and 19 get
// 409 interaction_closed; v2 streams on both nodes get that one answer,
// once, and nothing else before the next message.
func TestNodesRespondFirstWins(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 2, pushOptions{})
	a, b := nodes[0], nodes[1]
	tok := tokenN(1)
	a.mustPost(tok, "hello")
	ix := a.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy build 412?", Timeout: time.Hour})
	reads := v2Streams(t, a, b, tok, ix.Epoch)

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var winner v2msg
	for i := range 20 {
		node := nodes[i%2]
		decision := []string{"approve", "deny"}[i/2%2]
		wg.Go(func() {
			status, body := node.respond(tok, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"`+decision+`"}`)
			var answer struct {
				Code    string `json:"code"`
				Message v2msg  `json:"message"`
			}
			if err := json.Unmarshal(body, &answer); err != nil {
				t.Errorf("respond answer %s: %v", body, err)
			}
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == http.StatusOK {
				winner = answer.Message
			} else if answer.Code != "interaction_closed" {
				t.Errorf("a refused answer: %d %s", status, body)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, "statuses", statuses, map[int]int{http.StatusOK: 1, http.StatusConflict: 19})
	assert.True(t, winner.Interaction.State == chatrelay.Approved || winner.Interaction.State == chatrelay.Denied, "the winner %+v", winner.Interaction)

	after := b.mustPost(tok, "after the answers")
	for name, next := range reads {
		ev := next()
		assert.True(t, ev.typ == "update" && ev.msg.ID == ix.ID && ev.msg.Rev == winner.Rev && ev.msg.Interaction.State == winner.Interaction.State,
			"%s: first %s %+v, want the winning answer", name, ev.typ, ev.msg)
		ev = next()
		assert.True(t, ev.typ == "message" && ev.msg.ID == after.ID, "%s: then %s %s, want the next message", name, ev.typ, ev.msg.ID)
	}
}

// TestNodesExpireOnce: both nodes time a question's deadline and write
// its expiry at once; one expiry is stored, within a second of the
// deadline, and streams on both nodes get it once.
func TestNodesExpireOnce(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 2, pushOptions{})
	a, b := nodes[0], nodes[1]
	tok := tokenN(1)
	first := a.mustPost(tok, "hello")
	reads := v2Streams(t, a, b, tok, first.Epoch)
	ix := b.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Input, Prompt: "Quick?", AllowText: true, Timeout: time.Second})
	deadline := time.UnixMilli(ix.Interaction.Deadline)

	var expired v2msg
	for name, next := range reads {
		ev := next()
		assert.True(t, ev.typ == "message" && ev.msg.ID == ix.ID && ev.msg.Interaction.State == chatrelay.Pending, "%s: the question %+v", name, ev)
		ev = next()
		late := time.Since(deadline)
		assert.True(t, ev.typ == "update" && ev.msg.ID == ix.ID && ev.msg.Interaction.State == chatrelay.Expired, "%s: the expiry %+v", name, ev)
		assert.True(t, late <= time.Second, "%s: the expiry came %v after the deadline", name, late)
		t.Logf("%s: the expiry came %v after the deadline", name, late.Round(time.Millisecond))
		expired = ev.msg
	}
	after := a.mustPost(tok, "after the deadline")
	for name, next := range reads {
		ev := next()
		assert.True(t, ev.typ == "message" && ev.msg.ID == after.ID, "%s: after the expiry %s %+v, want the next message (one expiry stored)", name, ev.typ, ev.msg)
	}
	for _, m := range a.pollV2(tok, 0).Messages {
		if m.ID == ix.ID {
			assert.Equal(t, "the stored expiry's rev", m.Rev, expired.Rev)
		}
	}
}

// TestNodesRevokeEndsStreams: a grant made on node B works on node A at
// once; its revoke on node B ends the participant's SSE stream and
// WebSocket on node A within a second, and A refuses the token after.
func TestNodesRevokeEndsStreams(t *testing.T) {
	t.Parallel()
	_, nodes := startNodes(t, 2, pushOptions{})
	a, b := nodes[0], nodes[1]
	owner := tokenN(1)
	a.mustPost(owner, "hello")
	alex := b.invite(owner, `{"name":"Alex"}`)
	sse := a.mustSSE("/api/chat/stream", "", bearer(alex.Token))
	assert.Equal(t, "ready", sse.nextEvent(t).Event, "ready")
	assert.Equal(t, "the backlog", sse.nextEvent(t).Event, "message")
	ws, _, err := a.dialWS(t.Context(), "/api/chat/ws", "", http.Header{"Authorization": {"Bearer " + alex.Token}})
	assert.Success(t, err)
	defer ws.CloseNow()
	assert.Equal(t, "ws ready", nextWS(t, ws).Type, "ready")
	assert.Equal(t, "ws backlog", nextWS(t, ws).Type, "message")

	start := time.Now()
	status, _, _ := b.do(http.MethodDelete, "/api/chat/participants/"+alex.Participant.ID, owner, "", nil)
	assert.Equal(t, "revoke on B", status, http.StatusOK)
	f := within(t, 2*time.Second, "the revoked event on A", sse.Close, sse.NextEvent)
	took := time.Since(start)
	assert.True(t, f.Event == "revoked" && f.Data == `{"code":"token_revoked"}`, "revoked event %+v", f)
	assert.True(t, took <= time.Second, "A's SSE stream ended %v after the revoke on B", took)
	_, err = readWS(t.Context(), ws)
	wsTook := time.Since(start)
	var ce websocket.CloseError
	assert.True(t, errors.As(err, &ce) && ce.Code == websocket.StatusPolicyViolation && ce.Reason == "token_revoked", "WS close %v", err)
	assert.True(t, wsTook <= time.Second, "A's WebSocket closed %v after the revoke on B", wsTook)
	t.Logf("revoke on B: SSE on A ended after %v, WebSocket after %v", took.Round(time.Millisecond), wsTook.Round(time.Millisecond))
	status, body := a.asParticipant(http.MethodGet, "/api/chat/poll", alex.Token, "")
	assert.True(t, status == 401 && decodeError(t, body).Code == "token_revoked", "the token on A after the revoke: %d %s", status, body)
}

// TestNodesHostVerbs: the host's verbs in another process, on Redis. The
// question of an `ask --wait` reaches a v2 stream on a node; an answer
// over HTTP on another node ends the wait with exit status 0 and the
// answer; a `react` reaches the stream as an update.
func TestNodesHostVerbs(t *testing.T) {
	t.Parallel()
	bin := mustBinary(t)
	be, nodes := startNodes(t, 2, pushOptions{})
	a, b := nodes[0], nodes[1]
	tok := tokenN(1)
	first := a.mustPost(tok, "can you deploy?")
	sse := b.mustSSE("/api/chat/stream?v=2&since="+strconv.FormatInt(first.Epoch, 10), tok, nil)
	assert.Equal(t, "SSE ready on B", sse.nextEvent(t).Event, "ready")
	cli := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(t.Context(), bin, append(args, be.CLIArgs()...)...)
		cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_REDIS_PREFIX=")
		return cmd
	}

	ask := cli("ask", threadN(1), "--approval", "Deploy build 412?", "--timeout", "1m", "--wait")
	var out, errOut bytes.Buffer
	ask.Stdout, ask.Stderr = &out, &errOut
	assert.Success(t, ask.Start())
	ev := nextV2SSE(t, sse)
	assert.True(t, ev.typ == "message" && ev.msg.Author == "hermes" && ev.msg.Interaction != nil && ev.msg.Interaction.State == chatrelay.Pending,
		"the question on B: %s %+v", ev.typ, ev.msg)
	status, body := a.respond(tok, `{"interaction_id":"`+ev.msg.Interaction.ID+`","decision":"approve"}`)
	assert.Equal(t, "respond on A "+string(body), status, http.StatusOK)
	ev = nextV2SSE(t, sse)
	assert.True(t, ev.typ == "update" && ev.msg.Interaction.State == chatrelay.Approved, "the answer on B: %s %+v", ev.typ, ev.msg)
	within(t, 10*time.Second, "ask --wait to end", func() { ask.Process.Kill() }, func() (struct{}, error) { return struct{}{}, ask.Wait() })
	assert.True(t, ask.ProcessState.ExitCode() == 0 && strings.Contains(out.String(), `"approved"`), "ask --wait: exit %d, %s %s", ask.ProcessState.ExitCode(), out.String(), errOut.String())

	react, rerr := cli("react", threadN(1), first.ID, "👍").CombinedOutput()
	assert.True(t, rerr == nil, "chatrelay react: %v %s", rerr, react)
	ev = nextV2SSE(t, sse)
	assert.True(t, ev.typ == "update" && ev.msg.ID == first.ID && slices.Equal(ev.msg.Reactions["👍"], []chatrelay.Author{chatrelay.Hermes}),
		"the reaction on B: %s %+v", ev.typ, ev.msg)
}
