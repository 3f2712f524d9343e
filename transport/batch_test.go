package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/store"
)

// startBlindable starts a server whose change feed can be made blind for a
// while (blind), then let see again (see), and a store other that writes
// as another process or node does: what other writes while the feed is
// blind reaches the server's streams as one batch once it sees again.
//
// On the file store the feed is stopped, as a lost folder watch would be,
// and other is another process's store on the folder. On Redis the node's
// feed connection is lost and cannot come back for a while (its Redis user
// loses the right to the feed channel: Redis drops the subscription and
// refuses a new one), and other is another node; coming back, the feed
// catches up from the store.
func startBlindable(t *testing.T, backend string, opt storetest.Options) (e *pushEnv, other store.Store, blind, see func()) {
	t.Helper()
	switch backend {
	case storetest.File:
		e = startPush(t, pushOptions{store: opt})
		return e, e.backend.Another(t, opt).Store, e.stopFeed, e.startFeed
	case storetest.Redis:
		be := storetest.Open(t, backend, opt)
		admin := be.Client(t)
		ctx := context.Background()
		user := "node-" + strings.TrimSuffix(be.Prefix, ":")
		acl := func(rules ...any) {
			t.Helper()
			assert.Success(t, admin.Do(ctx, append([]any{"ACL", "SETUSER", user}, rules...)...).Err())
		}
		acl("on", ">secret", "~"+be.Prefix+"*", "&"+be.Prefix+"*", "+@all")
		nodeOpt := opt
		nodeOpt.User, nodeOpt.Password = user, "secret"
		e = startPush(t, pushOptions{on: be.Another(t, nodeOpt)})
		feedClients := func() int {
			list, err := admin.ClientList(ctx).Result()
			assert.Success(t, err)
			n := 0
			for _, line := range strings.Split(list, "\n") {
				if strings.Contains(line, " user="+user+" ") && strings.Contains(line, " sub=1 ") {
					n++
				}
			}
			return n
		}
		blind = func() {
			acl("resetchannels")
			assert.Eventually(t, 5*time.Second, "the node's feed to lose its subscription", func() bool { return feedClients() == 0 })
		}
		see = func() { acl("&" + be.Prefix + "*") }
		return e, be.Store, blind, see
	}
	t.Fatalf("no backend %q", backend)
	return nil, nil, nil, nil
}

// viewFrame is one message or update a stream sent, as its client reads
// it: the frame's kind, the cursor it moves the client to (the SSE id; on
// the WebSocket the message's epoch in v1, its rev in v2), the message.
type viewFrame struct {
	kind   string
	cursor int64
	msg    v2msg
}

// viewStream is one stream of a view (v1 or v2) over a transport (SSE or
// WebSocket).
type viewStream struct {
	name string
	v2   bool
	next func(ctx context.Context) (viewFrame, error)
	stop func()
}

var viewNames = []struct {
	name   string
	v2, ws bool
}{{"v1 SSE", false, false}, {"v2 SSE", true, false}, {"v1 WS", false, true}, {"v2 WS", true, true}}

// openView opens a stream of the view from cursor (a cursor of the view:
// an epoch in v1, a change in v2) and reads its ready frame. A frame other
// than message or update (a reset) comes with its kind alone.
func (e *pushEnv) openView(ctx context.Context, tok string, v2, ws bool, cursor int64) (*viewStream, error) {
	q := "?since=" + strconv.FormatInt(cursor, 10)
	if v2 {
		q += "&v=2"
	}
	vs := &viewStream{v2: v2}
	decode := func(kind string, cursor int64, raw []byte) (viewFrame, error) {
		if kind != "message" && kind != "update" { // a reset
			return viewFrame{kind: kind}, nil
		}
		var m v2msg
		if err := json.Unmarshal(raw, &m); err != nil {
			return viewFrame{}, err
		}
		if cursor == 0 { // the WebSocket: the message's own cursor
			cursor = m.Epoch
			if v2 {
				cursor = m.Rev
			}
		}
		return viewFrame{kind, cursor, m}, nil
	}
	if !ws {
		s, resp, body, err := e.openSSE(ctx, "/api/chat/stream"+q, tok, nil)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, fmt.Errorf("stream refused: %d %s", resp.StatusCode, body)
		}
		if f, err := s.NextEvent(); err != nil || f.Event != "ready" {
			s.Close()
			return nil, fmt.Errorf("first frame %+v: %v", f, err)
		}
		vs.stop = s.Close
		vs.next = func(context.Context) (viewFrame, error) { // ended by stop
			f, err := s.NextEvent()
			if err != nil {
				return viewFrame{}, err
			}
			id, err := strconv.ParseInt(f.ID, 10, 64)
			if err != nil {
				return viewFrame{}, fmt.Errorf("SSE id %q: %w", f.ID, err)
			}
			return decode(f.Event, id, []byte(f.Data))
		}
		return vs, nil
	}
	c, _, err := e.dialWS(ctx, "/api/chat/ws"+q, tok, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	if f, err := readWS(ctx, c); err != nil || f.Type != "ready" {
		c.CloseNow()
		return nil, fmt.Errorf("first frame %+v: %v", f, err)
	}
	vs.stop = func() { c.CloseNow() }
	vs.next = func(ctx context.Context) (viewFrame, error) {
		f, err := readWS(ctx, c)
		if err != nil {
			return viewFrame{}, err
		}
		return decode(f.Type, 0, f.Message)
	}
	return vs, nil
}

// mustOpenViews opens a stream of every view, each from cursor(its view).
func (e *pushEnv) mustOpenViews(t *testing.T, tok string, cursor func(v2 bool) int64) []*viewStream {
	t.Helper()
	var out []*viewStream
	for _, vn := range viewNames {
		vs, err := e.openView(t.Context(), tok, vn.v2, vn.ws, cursor(vn.v2))
		assert.Success(t, err)
		vs.name = vn.name
		t.Cleanup(vs.stop)
		out = append(out, vs)
	}
	return out
}

// nextFrames reads n frames of the stream, each within 5s.
func (vs *viewStream) nextFrames(t *testing.T, n int) []viewFrame {
	t.Helper()
	var out []viewFrame
	for range n {
		f := within(t, 5*time.Second, vs.name+" frame", vs.stop, func() (viewFrame, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return vs.next(ctx)
		})
		out = append(out, f)
	}
	return out
}

// TestBatchOfNewAndChangedMessagesReachesEveryView: another process
// replies A, replies B and reacts to A while the server is not looking, so
// that the server's feed hands on the three writes as one batch, in change
// order: B, then A in its reacted state. Every view must get both, live
// and from its backlog: v1 sends A then B (epoch order; an epoch cursor
// past B must not have skipped A), v2 sends B then A, both as new
// messages, the SSE ids growing. Before the fix a v1 stream got B only,
// and resuming from B lost A for good.
func TestBatchOfNewAndChangedMessagesReachesEveryView(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		e, other, blind, see := startBlindable(t, backend, storetest.Options{})
		tok, thread := tokenN(1), threadN(1)
		first := e.mustPost(tok, "start")
		// A message's epoch is the rev of its creation: a cursor of both views.
		fromFirst := func(bool) int64 { return first.Epoch }
		live := e.mustOpenViews(t, tok, fromFirst)

		blind()
		ctx := context.Background()
		a, err := other.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, Text: "reply A", MustExist: true})
		assert.Success(t, err)
		b, err := other.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, Text: "reply B", MustExist: true})
		assert.Success(t, err)
		reacted, err := other.Change(ctx, thread, store.Change{Op: store.React, MessageID: a.ID, Emoji: "👍", By: chatrelay.Hermes})
		assert.Success(t, err)
		see()

		check := func(when string, streams []*viewStream) {
			for _, vs := range streams {
				got := vs.nextFrames(t, 2)
				what := when + " " + vs.name
				if !vs.v2 {
					assert.Equal(t, what+": the first message", got[0].msg.ID, a.ID)
					assert.Equal(t, what+": the first cursor", got[0].cursor, a.Epoch)
					assert.Equal(t, what+": the second message", got[1].msg.ID, b.ID)
					assert.Equal(t, what+": the second cursor", got[1].cursor, b.Epoch)
					continue
				}
				for i, want := range []store.Entry{b, reacted} {
					n := strconv.Itoa(i)
					assert.Equal(t, what+": frame "+n+" kind", got[i].kind, "message")
					assert.Equal(t, what+": frame "+n+" message", got[i].msg.ID, want.ID)
					assert.Equal(t, what+": frame "+n+" cursor", got[i].cursor, want.Rev)
				}
				assert.Equal(t, what+": A's reactions", len(got[1].msg.Reactions["👍"]), 1)
			}
		}
		check("live", live)
		check("backlog", e.mustOpenViews(t, tok, fromFirst))

		// Nothing more is owed: resuming from what each stream was sent
		// sends nothing before the next post.
		next := e.mustPost(tok, "after")
		resumed := e.mustOpenViews(t, tok, func(v2 bool) int64 {
			if v2 {
				return reacted.Rev
			}
			return b.Epoch
		})
		for _, vs := range resumed {
			got := vs.nextFrames(t, 1)
			assert.Equal(t, "resumed "+vs.name+": the next message", got[0].msg.ID, next.ID)
		}
	})
}

// collector follows a thread on one view as a client would: it reads
// every frame and, when the stream ends (the hub drops a slow subscriber),
// resumes from the last cursor it was sent.
type collector struct {
	name   string
	v2, ws bool

	mu     sync.Mutex // guards what follows
	frames []viewFrame
	cursor int64
	resets int
	opened int   // streams opened
	err    error // the last failure to open a stream
}

func (c *collector) run(ctx context.Context, e *pushEnv, tok string) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		c.mu.Lock()
		cursor := c.cursor
		c.mu.Unlock()
		vs, err := e.openView(ctx, tok, c.v2, c.ws, cursor)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			select { // a stream slot not yet given back: try again
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		c.mu.Lock()
		c.opened++
		c.mu.Unlock()
		stop := context.AfterFunc(ctx, vs.stop)
		for {
			f, err := vs.next(ctx)
			if err != nil {
				break
			}
			c.mu.Lock()
			if f.kind == "message" || f.kind == "update" {
				c.frames = append(c.frames, f)
				c.cursor = f.cursor
			} else {
				c.resets++
			}
			c.mu.Unlock()
		}
		stop()
		vs.stop()
	}
}

// has reports whether c was sent every message of want (id → its final
// rev) but the one at its first cursor (from, unless v2 and it changed),
// each in its final state in v2.
func (c *collector) has(want map[string]int64, from postAnswer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := make(map[string]int64, len(want))
	for _, f := range c.frames {
		got[f.msg.ID] = f.msg.Rev
	}
	for id, rev := range want {
		if id == from.ID && (!c.v2 || rev == from.Epoch) {
			continue
		}
		r, ok := got[id]
		if !ok || (c.v2 && r != rev) {
			return false
		}
	}
	return true
}

// retryBusy sends a request as a careful client does: again after its
// Retry-After (at most 2 s) while it is answered 503 store_unavailable
// (retryable: the store busy past its lock wait, or a Redis call past its
// timeout, on a loaded machine), at most 5 times. A post it sends carries
// a client_id, so that it is stored once whatever an earlier try did.
func retryBusy(send func() (int, http.Header, []byte)) (int, []byte) {
	for try := 1; ; try++ {
		status, h, body := send()
		if status != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"retryable":true`)) || try == 5 {
			return status, body
		}
		wait, _ := strconv.Atoi(h.Get("Retry-After"))
		time.Sleep(min(time.Duration(max(wait, 1))*time.Second, 2*time.Second))
	}
}

// TestEveryViewGetsEveryMessageOnceUnderMixedWriters: eight writers at
// once, three of them host CLI processes (reply and react, as hermes
// does), five over HTTP (posts and reactions), 2 000 operations in all,
// while streams of every view (v1 and v2, SSE and WebSocket) follow the
// thread: four from the start (live) and four opened halfway from the
// first message's cursor (backlog, then live). A stream the hub drops
// resumes from its cursor, as clients do, and an HTTP writer sends a
// retryable 503 again (retryBusy), as clients do. Every view must get every
// message exactly once: v1 in epoch order; v2 each message once as new,
// its changes after, ending in the stored state, the cursor always
// growing.
func TestEveryViewGetsEveryMessageOnceUnderMixedWriters(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		bin := mustBinary(t)
		// Every writer keeps every message: the CLI's retention is its own flag.
		const retain = "5000"
		e := startPush(t, pushOptions{backend: backend, store: storetest.Options{Retention: chatrelay.Retention{Messages: 5000}}})
		tok, thread := tokenN(1), threadN(1)
		first := e.mustPost(tok, "start")

		ctx, cancel := context.WithCancel(context.Background())
		var readers sync.WaitGroup
		t.Cleanup(func() {
			cancel()
			readers.Wait()
		})
		var cols []*collector
		follow := func(when string) {
			for _, vn := range viewNames {
				c := &collector{name: when + " " + vn.name, v2: vn.v2, ws: vn.ws, cursor: first.Epoch}
				cols = append(cols, c)
				readers.Go(func() { c.run(ctx, e, tok) })
			}
		}
		follow("live")
		for _, c := range cols { // every live stream is open before the first write
			assert.Eventually(t, 5*time.Second, c.name+" to open", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.opened > 0
			})
		}

		var mu sync.Mutex // guards ids and epochs
		ids, epochs := []string{first.ID}, []int64{first.Epoch}
		posted := func(id string, epoch int64) {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, id)
			epochs = append(epochs, epoch)
		}
		someID := func(r *rand.Rand) string {
			mu.Lock()
			defer mu.Unlock()
			return ids[r.IntN(len(ids))]
		}
		emoji := []string{"👍", "🎉", "👀", "❤️", "🚀"}

		const httpWriters, cliWriters, httpOps, cliOps = 5, 3, 370, 50 // 5×370 + 3×50 = 2 000
		var writers sync.WaitGroup
		var done sync.WaitGroup
		done.Add(httpWriters * httpOps / 2)
		for w := range httpWriters {
			writers.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for i := range httpOps {
					if r.IntN(3) == 0 {
						id, em, remove := someID(r), emoji[r.IntN(len(emoji))], r.IntN(2) == 0
						status, body := retryBusy(func() (int, http.Header, []byte) {
							b, _ := json.Marshal(map[string]any{"message_id": id, "emoji": em, "remove": remove})
							return e.do(http.MethodPost, "/api/chat/react", tok, string(b), nil)
						})
						if status != http.StatusOK {
							t.Errorf("react: %d %s", status, body)
						}
					} else {
						b, _ := json.Marshal(map[string]string{"text": "writer " + strconv.Itoa(w) + " post " + strconv.Itoa(i),
							"client_id": fmt.Sprintf("w%d-%d", w, i)})
						status, body := retryBusy(func() (int, http.Header, []byte) {
							return e.do(http.MethodPost, "/api/chat/post", tok, string(b), nil)
						})
						var m postAnswer
						if status != http.StatusCreated || json.Unmarshal(body, &m) != nil {
							t.Errorf("post: %d %s", status, body)
						} else {
							posted(m.ID, m.Epoch)
						}
					}
					if i < httpOps/2 {
						done.Done()
					}
				}
			})
		}
		for w := range cliWriters {
			writers.Go(func() {
				r := rand.New(rand.NewPCG(uint64(100+w), 1))
				for i := range cliOps {
					if r.IntN(2) == 0 {
						args := append([]string{"react"}, e.backend.CLIArgs()...)
						args = append(args, "--fsync", "never", "--retention-messages", retain, thread, someID(r), emoji[r.IntN(len(emoji))])
						if r.IntN(2) == 0 {
							args = append(args, "--remove")
						}
						if out, err := e.cli(ctx, bin, args...); err != nil {
							t.Errorf("chatrelay react: %v: %s", err, out)
						}
						continue
					}
					var a struct {
						ID    string
						Epoch int64
					}
					args := append([]string{"reply"}, e.backend.CLIArgs()...)
					out, err := e.cli(ctx, bin, append(args, "--fsync", "never", "--retention-messages", retain, thread, "cli "+strconv.Itoa(w)+" reply "+strconv.Itoa(i))...)
					if err == nil {
						err = json.Unmarshal(out, &a)
					}
					if err != nil {
						t.Errorf("chatrelay reply: %v: %s", err, out)
						continue
					}
					posted(a.ID, a.Epoch)
				}
			})
		}
		done.Wait()
		follow("halfway")
		writers.Wait()
		if t.Failed() {
			return
		}

		// What the store holds at the end: every message, in its final state.
		want := make(map[string]int64)
		for _, m := range e.pollV2(tok, 1).Messages {
			want[m.ID] = m.Rev
		}
		assert.Equal(t, "messages stored (every acknowledged one)", len(want), len(ids))
		for _, id := range ids {
			if _, ok := want[id]; !ok {
				t.Fatalf("acknowledged message %s is not stored", id)
			}
		}
		slices.Sort(epochs)
		for _, c := range cols {
			assert.Eventually(t, 20*time.Second, c.name+" to be sent every message in its final state", func() bool { return c.has(want, first) })
		}
		cancel()
		readers.Wait()
		for _, c := range cols {
			assert.Equal(t, c.name+": resets", c.resets, 0)
			var last int64
			news := map[string]int{}
			var order []int64
			for i, f := range c.frames {
				if f.cursor <= last {
					t.Fatalf("%s: frame %d (%s %s) moves the cursor from %d to %d", c.name, i, f.kind, f.msg.ID, last, f.cursor)
				}
				last = f.cursor
				if f.kind == "message" {
					news[f.msg.ID]++
					order = append(order, f.msg.Epoch)
				} else if news[f.msg.ID] == 0 && f.msg.ID != first.ID {
					t.Fatalf("%s: an update of %s, which it was never sent", c.name, f.msg.ID)
				}
			}
			for id, n := range news {
				if n != 1 {
					t.Fatalf("%s: message %s sent %d times", c.name, id, n)
				}
			}
			if !c.v2 {
				// first is the cursor: every later message, once, in epoch order
				assert.Equal(t, c.name+": the messages in epoch order", fmt.Sprint(order), fmt.Sprint(epochs[1:]))
			} else {
				assert.Equal(t, c.name+": new messages", len(news), len(ids)-1)
			}
		}
		t.Logf("%s: %d messages; streams opened (resumed) per view: %v", backend, len(ids), opened(cols))
	})
}

func opened(cols []*collector) map[string]int {
	n := make(map[string]int)
	for _, c := range cols {
		c.mu.Lock()
		n[c.name] = c.opened
		c.mu.Unlock()
	}
	return n
}
