package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// resumer is a subscriber that resumes after every drop from the last
// message it got, as a browser client does: SSE with Last-Event-ID, the
// WebSocket with ?since=. It records every message it is sent, in order.
type resumer struct {
	name  string
	node  *pushEnv
	ws    bool
	token string
	// resetOK makes "reset" a legitimate frame: the resumer then forgets
	// what it got, as a page redraws, and counts it. Otherwise a reset
	// fails the test (it would say that messages were lost).
	resetOK bool

	mu      sync.Mutex // guards the fields below
	got     []message  // since the last reset
	cursor  int64      // where to resume: the last message's epoch, or the start cursor
	streams int        // streams that were open (ready) at some point
	drops   int        // open streams that ended
	refused int        // opening attempts that failed
	resets  int        // reset frames
	err     error      // a protocol violation: the test fails with it
}

// resumerState is a copy of a resumer's record.
type resumerState struct {
	got                             []message
	streams, drops, refused, resets int
	err                             error
}

func (r *resumer) snapshot() resumerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return resumerState{slices.Clone(r.got), r.streams, r.drops, r.refused, r.resets, r.err}
}

// reset handles a reset frame; it reports whether one is legitimate here.
func (r *resumer) reset() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.resetOK {
		return false
	}
	r.resets++
	r.got = nil
	return true
}

func (r *resumer) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = fmt.Errorf("%s: %w", r.name, err)
	}
}

func (r *resumer) add(m message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
	r.cursor = m.Epoch
}

// run subscribes until ctx is done, resuming after every end of a stream or
// failed attempt (a node whose Redis is down answers 503).
func (r *resumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		r.mu.Lock()
		cursor := strconv.FormatInt(r.cursor, 10)
		r.mu.Unlock()
		var opened bool
		var err error
		if r.ws {
			opened, err = r.runWS(ctx, cursor)
		} else {
			opened, err = r.runSSE(ctx, cursor)
		}
		if err != nil {
			r.fail(err)
			return
		}
		r.mu.Lock()
		if opened {
			r.drops++
		} else {
			r.refused++
		}
		r.mu.Unlock()
		select { // a client's pause before it tries again
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runSSE reads one SSE stream from cursor until it ends. opened says
// whether it got as far as ready; err is a protocol violation.
func (r *resumer) runSSE(ctx context.Context, cursor string) (opened bool, err error) {
	s, resp, body, err := r.node.openSSE(ctx, "/api/chat/stream", r.token, map[string]string{"Last-Event-ID": cursor})
	if err != nil {
		return false, nil // the node did not answer: try again
	}
	if s == nil {
		if resp.StatusCode != http.StatusServiceUnavailable || decodeErrorCode(body) != "store_unavailable" {
			return false, fmt.Errorf("stream refused with %d %s", resp.StatusCode, body)
		}
		return false, nil
	}
	defer s.Close()
	for {
		f, err := s.NextEvent()
		if err != nil {
			return opened, nil // the stream ended
		}
		switch f.Event {
		case "ready":
			opened = true
			r.mu.Lock()
			r.streams++
			r.mu.Unlock()
		case "message":
			var m message
			if err := json.Unmarshal([]byte(f.Data), &m); err != nil {
				return opened, err
			}
			if f.ID != strconv.FormatInt(m.Epoch, 10) {
				return opened, fmt.Errorf("id %q for epoch %d", f.ID, m.Epoch)
			}
			r.add(m)
		case "reset":
			if !r.reset() {
				return opened, fmt.Errorf("a reset after cursor %s: messages were lost", cursor)
			}
		default:
			return opened, fmt.Errorf("unexpected %q event after cursor %s", f.Event, cursor)
		}
	}
}

func (r *resumer) runWS(ctx context.Context, cursor string) (opened bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, _, err := r.node.dialWS(dctx, "/api/chat/ws?since="+cursor, r.token, nil)
	cancel()
	if err != nil {
		return false, nil
	}
	defer c.CloseNow()
	for {
		f, err := readWS(ctx, c)
		if err != nil {
			return opened, nil // closed: a refusal (1013) before ready, or a drop
		}
		switch f.Type {
		case "ready":
			opened = true
			r.mu.Lock()
			r.streams++
			r.mu.Unlock()
		case "message":
			var m message
			if err := json.Unmarshal(f.Message, &m); err != nil {
				return opened, err
			}
			r.add(m)
		case "reset":
			if !r.reset() {
				return opened, fmt.Errorf("a reset after cursor %s: messages were lost", cursor)
			}
		default:
			return opened, fmt.Errorf("unexpected frame %s after cursor %s", f.raw, cursor)
		}
	}
}

func decodeErrorCode(body []byte) string {
	var e errorAnswer
	json.Unmarshal(body, &e)
	return e.Code
}

// ack is a post a writer was answered 201 for.
type ack struct {
	writer int
	text   string
	epoch  int64
	id     string
}

// rawPost posts text and returns the answer, without touching the test
// (it runs on writer goroutines).
func rawPost(ctx context.Context, e *pushEnv, token, text string) (status int, h http.Header, body []byte, err error) {
	b, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url("/api/chat/post"), strings.NewReader(string(b)))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("X-Chat-Token", token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// TestRedisRestartMidStream: two nodes share a Redis that persists every
// write before it answers (appendonly, appendfsync always). Writers post
// through both nodes while SSE and WebSocket subscribers on both nodes
// follow the thread. Redis is killed (SIGKILL) and restarted on the same
// port. While it is down, posts and polls answer 503 store_unavailable
// with Retry-After and /readyz says not ready. Node A gives up on its lost
// feed quickly (ResetAfter 300ms), so its streams end and their clients
// resume, failing until Redis is back; node B keeps its streams (it never
// gives up) and catches up when its feed is back. Afterwards every
// subscriber has every stored message after its start exactly once, in
// order, every acknowledged post among them, and polls agree on both
// nodes. Nothing was missed, so no stream is cut once Redis is back: A's
// hub dropped its two subscribers once (the feed giving up), B's none (the
// catch-up fits the subscribers' queues).
func TestRedisRestartMidStream(t *testing.T) {
	t.Parallel()
	srv := storetest.StartServer(t, storetest.ServerOptions{Persist: true})
	prefix := storetest.NewPrefix()
	keep := chatrelay.Retention{Messages: 10000} // retention never drops a message here
	a := startPush(t, pushOptions{on: storetest.OpenRedis(t, srv, prefix, storetest.Options{Retention: keep, ResetAfter: 300 * time.Millisecond})})
	b := startPush(t, pushOptions{on: storetest.OpenRedis(t, srv, prefix, storetest.Options{Retention: keep, ResetAfter: -1})})
	nodes := []*pushEnv{a, b}
	tok := tokenN(1)
	start := a.mustPost(tok, "before the subscribers")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	subs := []*resumer{
		{name: "SSE on A", node: a}, {name: "WebSocket on A", node: a, ws: true},
		{name: "SSE on B", node: b}, {name: "WebSocket on B", node: b, ws: true},
	}
	subCtx, stopSubs := context.WithCancel(ctx)
	var subsWG sync.WaitGroup
	defer func() {
		stopSubs()
		subsWG.Wait()
	}()
	for _, s := range subs {
		s.token, s.cursor = tok, start.Epoch
		subsWG.Go(func() { s.run(subCtx) })
	}
	assert.Eventually(t, 10*time.Second, "every subscriber's stream is open", func() bool {
		for _, s := range subs {
			if s.snapshot().streams == 0 {
				return false
			}
		}
		return true
	})

	// Two writers, one per node, each post a new text until stopped. A
	// post is either acknowledged (201) or refused with 503
	// store_unavailable, retryable, with Retry-After: nothing else.
	var (
		mu       sync.Mutex // guards acks and refusals
		acks     []ack
		refusals [2]int
		// down is true from the moment the killed Redis is gone until just
		// before it is started again: a post sent and answered while it
		// holds cannot have been stored, and must not be acknowledged. (A
		// post sent during the outage may still be stored and acknowledged
		// if Redis comes back while it waits: go-redis retries a dial for
		// about half a second.)
		down   atomic.Bool
		badAck atomic.Value
	)
	writeCtx, stopWriters := context.WithCancel(ctx)
	var writersWG sync.WaitGroup
	writerErr := make(chan error, 2)
	for w, node := range nodes {
		writersWG.Go(func() {
			for i := 0; writeCtx.Err() == nil; i++ {
				text := fmt.Sprintf("writer %d post %d", w, i)
				sentDown := down.Load()
				// A post in flight when the writers stop is finished, not
				// cut: a cut one may still be stored after the checker's
				// first read (the server cannot take back what it began).
				status, h, body, err := rawPost(ctx, node, tok, text)
				if err != nil {
					writerErr <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				switch status {
				case http.StatusCreated:
					if sentDown && down.Load() {
						badAck.Store(text)
					}
					var pa postAnswer
					if err := json.Unmarshal(body, &pa); err != nil {
						writerErr <- err
						return
					}
					mu.Lock()
					acks = append(acks, ack{writer: w, text: text, epoch: pa.Epoch, id: pa.ID})
					mu.Unlock()
				case http.StatusServiceUnavailable:
					var ea errorAnswer
					json.Unmarshal(body, &ea)
					if ea.Code != "store_unavailable" || !ea.Retryable || h.Get("Retry-After") == "" {
						writerErr <- fmt.Errorf("writer %d: 503 with Retry-After %q: %s", w, h.Get("Retry-After"), body)
						return
					}
					mu.Lock()
					refusals[w]++
					mu.Unlock()
					select { // the client waits before it tries again
					case <-writeCtx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				default:
					writerErr <- fmt.Errorf("writer %d: %d %s", w, status, body)
					return
				}
			}
		})
	}
	defer func() {
		stopWriters()
		writersWG.Wait()
	}()
	counts := func() (acked int, refused [2]int) {
		mu.Lock()
		defer mu.Unlock()
		return len(acks), refusals
	}
	// Redis fsyncs every write (appendfsync always): on a disk shared with
	// the rest of the suite that can take a while.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, refused := counts()
		if n >= 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: 30 posts acknowledged before the kill: %d acknowledged, %v refused (503)", n, refused)
		}
	}

	srv.Kill()
	down.Store(true)
	killedAt := time.Now()
	ackedBefore, refusedBefore := counts()
	t.Logf("Redis killed after %d acknowledged posts", ackedBefore)

	// While Redis is down: posts (the writers) and polls answer 503
	// store_unavailable with Retry-After, and /readyz says not ready.
	assert.Eventually(t, 10*time.Second, "both writers refused while Redis is down", func() bool {
		_, r := counts()
		return r[0] > refusedBefore[0] && r[1] > refusedBefore[1]
	})
	for i, node := range nodes {
		name := "node " + string(rune('A'+i))
		status, h, body := node.do(http.MethodGet, "/api/chat/poll?since=0", tok, "", nil)
		assert.Equal(t, name+" poll status while Redis is down: "+string(body), status, http.StatusServiceUnavailable)
		ea := decodeError(t, body)
		assert.True(t, ea.Code == "store_unavailable" && ea.Retryable, "%s poll answer %s", name, body)
		assert.True(t, h.Get("Retry-After") != "", "%s poll answer has no Retry-After", name)
		status, _, body = node.do(http.MethodGet, "/readyz", "", "", nil)
		assert.Equal(t, name+" /readyz status while Redis is down: "+string(body), status, http.StatusServiceUnavailable)
		var rd struct {
			Ready bool   `json:"ready"`
			Store string `json:"store"`
		}
		assert.Success(t, json.Unmarshal(body, &rd))
		assert.True(t, !rd.Ready && rd.Store == "not writable", "%s /readyz while Redis is down: %s", name, body)
	}
	// Node A's streams end (its feed gave up) and their clients try again
	// in vain.
	assert.Eventually(t, 10*time.Second, "the streams on node A end while Redis is down", func() bool {
		for _, s := range subs[:2] {
			if s.snapshot().drops == 0 {
				return false
			}
		}
		return true
	})
	down.Store(false)
	srv.Restart(t)
	t.Logf("Redis down for %v", time.Since(killedAt).Round(time.Millisecond))
	for i, node := range nodes {
		assert.Eventually(t, 10*time.Second, "node "+string(rune('A'+i))+" ready again", func() bool {
			status, _, _ := node.do(http.MethodGet, "/readyz", "", "", nil)
			return status == http.StatusOK
		})
	}
	assert.Eventually(t, 20*time.Second, "30 more posts acknowledged after the restart", func() bool { n, _ := counts(); return n >= ackedBefore+30 })
	stopWriters()
	writersWG.Wait()
	close(writerErr)
	for err := range writerErr {
		t.Error(err)
	}
	if v := badAck.Load(); v != nil {
		t.Errorf("%q was acknowledged while Redis was down", v)
	}
	end := b.mustPost(tok, churnEnd)

	// Every subscriber reads to the end.
	assert.Eventually(t, 20*time.Second, "every subscriber has the last message", func() bool {
		for _, s := range subs {
			st := s.snapshot()
			if st.err != nil {
				t.Fatal(st.err)
			}
			if len(st.got) == 0 || st.got[len(st.got)-1].Epoch < end.Epoch {
				return false
			}
		}
		return true
	})

	// The checker. The truth is the store, through a poll of every
	// message; both nodes answer it byte for byte.
	truth := a.pollBody(tok, 1)
	assert.Equal(t, "poll on B", b.pollBody(tok, 1), truth)
	assert.Equal(t, "newest 50 on B", b.pollBody(tok, 0), a.pollBody(tok, 0))
	var stored []message
	for _, raw := range a.poll(tok, 1).Messages {
		stored = append(stored, decodeMessage(t, raw))
	}
	texts := map[string]int{}
	for _, m := range stored {
		texts[m.Text]++
		assert.True(t, texts[m.Text] == 1, "%q is stored twice", m.Text)
	}
	// Every acknowledged post is stored as acknowledged, once, and each
	// writer's posts in the order it made them.
	mu.Lock()
	acked := slices.Clone(acks)
	mu.Unlock()
	byEpoch := map[int64]message{}
	for _, m := range stored {
		byEpoch[m.Epoch] = m
	}
	last := [2]int64{}
	for _, k := range acked {
		m, ok := byEpoch[k.epoch]
		assert.True(t, ok && m.ID == k.id && m.Text == k.text, "acknowledged %+v is stored as %+v", k, m)
		assert.True(t, k.epoch > last[k.writer], "writer %d's posts out of order at %q", k.writer, k.text)
		last[k.writer] = k.epoch
	}
	// Every subscriber got exactly what is stored after its start cursor.
	i := slices.IndexFunc(stored, func(m message) bool { return m.Epoch > start.Epoch })
	want := stored[i:]
	for _, s := range subs {
		st := s.snapshot()
		assert.Success(t, st.err)
		if !slices.Equal(st.got, want) {
			t.Errorf("%s: got %d messages, want %d\n got: %v\nwant: %v", s.name, len(st.got), len(want), epochs(st.got), epochs(want))
		}
		t.Logf("%s: %d messages over %d streams (%d dropped, %d attempts refused)", s.name, len(st.got), st.streams, st.drops, st.refused)
	}
	// Streams cut because messages may have been missed: A's two, once,
	// when its feed gave up; none after Redis was back. (A stream that
	// opened after Redis was back, before A's feed caught up, is cut if the
	// catch-up is larger than its queue: an overflow, documented, counted
	// apart; a slow reader's drop is another reason again.)
	for i, node := range nodes {
		m := opsScrape(t, node.client, node.url("/metrics"))
		name := "node " + string(rune('A'+i))
		assert.Equal(t, name+" subscribers dropped for a reset",
			m[`chatrelay_hub_drops_total{reason="reset"}`], float64(2*(1-i)))
		if n := m[`chatrelay_hub_drops_total{reason="overflow"}`]; n > 0 {
			t.Logf("%s: %v subscribers handed a catch-up larger than their queue", name, n)
		}
	}
	_, refused := counts()
	posts := len(stored) - 2 // not the first message and the last
	t.Logf("writers: %d posts acknowledged, %d refused with 503; %d stored, %d of them without an answer (the kill cut it off)",
		len(acked), refused[0]+refused[1], posts, posts-len(acked))
}
