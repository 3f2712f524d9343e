package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/r3labs/sse/v2"
	"gopkg.in/cenkalti/backoff.v1"

	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
)

// churnEnd is the text of the last message: every subscriber reads until it.
const churnEnd = "END"

// churnSub is one subscriber's record: where it started and every message
// it was sent, in arrival order, across all its connections.
type churnSub struct {
	name  string
	start int64 // its first cursor; 0: "the newest 50, then live"
	ready int64 // with start 0: the cursor of its first ready frame
	got   []message
	conns int
}

// last is the cursor to resume from.
func (s *churnSub) last() int64 {
	if n := len(s.got); n > 0 {
		return s.got[n-1].Epoch
	}
	if s.start == 0 {
		return s.ready
	}
	return s.start
}

func (s *churnSub) done() bool { return len(s.got) > 0 && s.got[len(s.got)-1].Text == churnEnd }

// churnSSE runs one subscriber over raw SSE: it drops its connection after
// a random number of messages and resumes with Last-Event-ID.
func churnSSE(ctx context.Context, e *pushEnv, rng *rand.Rand, tok string, s *churnSub) error {
	for !s.done() {
		var hdr map[string]string
		if s.conns > 0 || s.start > 0 {
			hdr = map[string]string{"Last-Event-ID": strconv.FormatInt(s.last(), 10)}
		}
		st, resp, body, err := e.openSSE(ctx, "/api/chat/stream", tok, hdr)
		if err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("SSE: %d %s", resp.StatusCode, body)
		}
		s.conns++
		drop := 1 + rng.IntN(12)
		err = func() error {
			defer st.Close()
			for n := 0; n < drop && !s.done(); {
				f, err := st.NextEvent()
				if err != nil {
					return nil // the server ended the stream: resume
				}
				switch f.Event {
				case "ready":
					if s.conns == 1 && s.start == 0 {
						s.ready = decodeReadyErr(f.Data)
					}
				case "message":
					var m message
					if err := json.Unmarshal([]byte(f.Data), &m); err != nil {
						return err
					}
					if f.ID != strconv.FormatInt(m.Epoch, 10) {
						return fmt.Errorf("id %q for epoch %d", f.ID, m.Epoch)
					}
					s.got = append(s.got, m)
					n++
				default:
					return fmt.Errorf("unexpected SSE event %q", f.Event)
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeReadyErr(data string) int64 {
	var r readyData
	json.Unmarshal([]byte(data), &r)
	return r.Cursor
}

// churnWS is churnSSE over the WebSocket, resuming with ?since=.
func churnWS(ctx context.Context, e *pushEnv, rng *rand.Rand, tok string, s *churnSub) error {
	for !s.done() {
		path := "/api/chat/ws"
		if s.conns > 0 || s.start > 0 {
			path += "?since=" + strconv.FormatInt(s.last(), 10)
		}
		c, _, err := e.dialWS(ctx, path, tok, nil)
		if err != nil {
			return err
		}
		s.conns++
		drop := 1 + rng.IntN(12)
		err = func() error {
			defer c.CloseNow()
			for n := 0; n < drop && !s.done(); {
				f, err := readWS(ctx, c)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					return nil // closed by the server: resume
				}
				switch f.Type {
				case "ready":
					if s.conns == 1 && s.start == 0 {
						s.ready = f.Cursor
					}
				case "message":
					var m message
					if err := json.Unmarshal(f.Message, &m); err != nil {
						return err
					}
					s.got = append(s.got, m)
					n++
				default:
					return fmt.Errorf("unexpected WebSocket frame %s", f.raw)
				}
			}
			if rng.IntN(2) == 0 {
				c.Close(websocket.StatusNormalClosure, "")
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// churnR3 uses the r3labs/sse client as a real third-party SSE client. It
// starts from a cursor > 0 (the client resumes through its LastEventID);
// each drop cancels the subscription, and a new SubscribeWithContext
// resumes with the Last-Event-ID the client kept.
func churnR3(ctx context.Context, e *pushEnv, rng *rand.Rand, tok string, s *churnSub) error {
	c := sse.NewClient(e.url("/api/chat/stream"), sse.ClientMaxBufferSize(1<<20))
	c.Connection = &http.Client{Transport: e.client.Transport}
	c.Headers["X-Chat-Token"] = tok
	c.ReconnectStrategy = &backoff.StopBackOff{} // the test sees every drop
	c.LastEventID.Store([]byte(strconv.FormatInt(s.start, 10)))
	var mu sync.Mutex // guards s and bad against the client's goroutines
	var bad error
	for {
		mu.Lock()
		done := s.done() || bad != nil
		mu.Unlock()
		if done {
			break
		}
		sctx, cancel := context.WithCancel(ctx)
		drop := 1 + rng.IntN(12)
		n := 0
		s.conns++
		err := c.SubscribeWithContext(sctx, "", func(ev *sse.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch string(ev.Event) {
			case "message":
				var m message
				if err := json.Unmarshal(ev.Data, &m); err != nil {
					if sctx.Err() != nil {
						// The client hands over the half-read event of a
						// connection we cut (bufio.Scanner at a read error),
						// and has stored its id: ignored, and the id put
						// back below.
						return
					}
					bad = fmt.Errorf("event %q: %w", ev.Data, err)
					cancel()
					return
				}
				s.got = append(s.got, m) // also after cancel: it is whole, and the client counted it
				if n++; n == drop || s.done() {
					cancel()
				}
			case "ready", "": // ready, the retry hint, ping comments
			default:
				if sctx.Err() != nil {
					return // the half-read event of a connection we cut, as above
				}
				bad = fmt.Errorf("unexpected SSE event %q", ev.Event)
				cancel()
			}
		})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The client's reader has returned: resume from the last whole message.
		c.LastEventID.Store([]byte(strconv.FormatInt(s.last(), 10)))
	}
	return bad
}

// TestExactlyOnceUnderChurn: HTTP posts, WebSocket posts and "chatrelay
// reply" child processes write to one thread while subscribers over SSE
// (raw and the r3labs client) and WebSocket join at random cursors, drop
// after random runs and resume from the last message they got. Each must
// end with exactly the messages after its first cursor, in order, once
// each, as the poll API has them.
func TestExactlyOnceUnderChurn(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		bin := mustBinary(t)
		// A dropped stream may still count while its successor opens.
		e := startPush(t, pushOptions{backend: backend, streamsThread: 100, streamsIP: 1000})
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 3))
		tok := tokenN(1)
		thread := threadN(1)
		// The churn ends when every subscriber has the end, bounded by the
		// test's deadline (less a margin, so that what is missing is
		// reported), not by a time of its own: with two CPU hogs beside
		// it, its 110 writes (30 of them processes) and 8 subscribers
		// took longer than the 90 s it had, and every subscriber failed
		// "context deadline exceeded".
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if d, ok := t.Deadline(); ok { // none with -timeout 0: it waits for good
			var stop context.CancelFunc
			ctx, stop = context.WithDeadline(ctx, d.Add(-10*time.Second))
			defer stop()
		}

		const httpPosts, wsPosts, cliReplies = 60, 20, 30
		kinds := []string{"sse", "ws", "r3labs", "sse", "ws", "r3labs", "sse", "ws"}
		joinAt := map[int][]int{} // HTTP post number -> subscribers that join after it
		for i := range kinds {
			n := 1 + rng.IntN(httpPosts-1)
			joinAt[n] = append(joinAt[n], i)
		}
		subs := make([]*churnSub, len(kinds))
		var subsWG, writers sync.WaitGroup
		errs := make(chan error, 16)
		join := func(i int) {
			s := &churnSub{name: fmt.Sprintf("%s#%d", kinds[i], i)}
			subs[i] = s
			// Its first cursor: "none" sometimes (not for the r3labs client,
			// whose cursor must be an id), or a stored message's epoch.
			page := e.poll(tok, 1)
			if kinds[i] == "r3labs" || rng.IntN(4) > 0 {
				s.start = decodeMessage(t, page.Messages[rng.IntN(len(page.Messages))]).Epoch - int64(rng.IntN(2))
			}
			srng := rand.New(rand.NewPCG(seed, uint64(i)))
			subsWG.Go(func() {
				var err error
				switch kinds[i] {
				case "sse":
					err = churnSSE(ctx, e, srng, tok, s)
				case "ws":
					err = churnWS(ctx, e, srng, tok, s)
				default:
					err = churnR3(ctx, e, srng, tok, s)
				}
				if err != nil {
					errs <- fmt.Errorf("%s: %w", s.name, err)
				}
			})
		}

		first := e.mustPost(tok, "post 0")
		writers.Go(func() { // the host agent, in other processes
			for i := range cliReplies {
				if _, err := e.cliReply(ctx, bin, "never", thread, "reply "+strconv.Itoa(i)); err != nil {
					errs <- err
					return
				}
			}
		})
		writers.Go(func() { // a client posting over its WebSocket
			c, _, err := e.dialWS(ctx, "/api/chat/ws?since="+strconv.FormatInt(first.Epoch, 10), tok, nil)
			if err != nil {
				errs <- err
				return
			}
			defer c.CloseNow()
			for i := 0; i < wsPosts; {
				b, _ := json.Marshal(map[string]string{"type": "post", "text": "ws " + strconv.Itoa(i)})
				if err := c.Write(ctx, websocket.MessageText, b); err != nil {
					errs <- err
					return
				}
				for {
					f, err := readWS(ctx, c)
					if err != nil {
						errs <- err
						return
					}
					if f.Type == "posted" {
						i++
						break
					}
					if f.Type == "error" {
						errs <- fmt.Errorf("ws post: %s", f.raw)
						return
					}
				}
			}
		})
		for i := 1; i < httpPosts; i++ {
			if _, err := e.post(tok, "post "+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
			for _, j := range joinAt[i] {
				join(j)
			}
		}
		writers.Wait()
		e.mustPost(tok, churnEnd)
		subsWG.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if t.Failed() {
			return
		}

		// The truth: every message, from the poll API.
		var all []message
		for _, raw := range e.poll(tok, 1).Messages {
			all = append(all, decodeMessage(t, raw))
		}
		assert.Equal(t, "stored", len(all), httpPosts+wsPosts+cliReplies+1)
		for _, s := range subs {
			// after is the index of the first message after epoch (len(all)
			// if none: a subscriber that joins last may first connect after
			// the end was posted).
			after := func(epoch int64) int {
				if i := slices.IndexFunc(all, func(m message) bool { return m.Epoch > epoch }); i >= 0 {
					return i
				}
				return len(all)
			}
			var want []message
			if s.start == 0 {
				want = all[max(0, after(s.ready)-50):]
			} else {
				want = all[after(s.start):]
			}
			if !slices.Equal(s.got, want) {
				t.Errorf("%s (cursor %d, ready %d, %d connections): got %d messages, want %d\n got: %v\nwant: %v",
					s.name, s.start, s.ready, s.conns, len(s.got), len(want), epochs(s.got), epochs(want))
			}
			t.Logf("%s: cursor %d, %d messages over %d connections", s.name, s.start, len(s.got), s.conns)
		}
	})
}

func epochs(ms []message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Epoch
	}
	return out
}
