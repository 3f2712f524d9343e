package transport_test

// Nodes whose wall clocks disagree, or step back (an NTP correction),
// writing to one thread: epochs and revs stay strictly increasing, and
// every cursor (v1 poll, SSE, WebSocket, v2) hands each message on once,
// in order.

import (
	"bufio"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/transport"
)

// skewed is a wall clock off by an offset that a test may step.
type skewed struct{ off atomic.Int64 }

func newSkewed(d time.Duration) *skewed {
	c := &skewed{}
	c.off.Store(int64(d))
	return c
}

func (c *skewed) Now() time.Time               { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *skewed) step(d time.Duration)         { c.off.Add(int64(d)) }
func (c *skewed) offset() time.Duration        { return time.Duration(c.off.Load()) }
func (c *skewed) String() string               { return c.offset().String() }
func (c *skewed) storeOpts() storetest.Options { return storetest.Options{Now: c.Now} }

// startSkewedNodes starts a node per clock on one store of backend, each
// node's store and server reading its own clock.
func startSkewedNodes(t *testing.T, backend string, clocks ...*skewed) []*pushEnv {
	t.Helper()
	be := storetest.Open(t, backend, clocks[0].storeOpts())
	nodes := make([]*pushEnv, len(clocks))
	for i, c := range clocks {
		on := be
		if i > 0 {
			on = be.Another(t, c.storeOpts())
		}
		var key []byte
		if on.Redis != nil {
			k, err := on.Redis.TicketKey(context.Background())
			assert.Success(t, err)
			key = k
		}
		nodes[i] = startPush(t, pushOptions{on: on, store: c.storeOpts(), config: func(cfg *transport.Config) {
			cfg.Now = c.Now
			if key != nil {
				cfg.TicketKey = key
			}
			cfg.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			// The test reads its WebSocket after the posts, and
			// coder/websocket answers a ping only while it reads (a
			// browser answers at any time): on a loaded machine the
			// posts outlasted the heartbeat and the write timeout, and
			// the server dropped the stream as too slow (1013), as it
			// should. No ping within the test.
			cfg.Heartbeat = time.Hour
		}})
	}
	return nodes
}

// TestSkewedClocksLoseAndRepeatNothing: node A runs an hour ahead, B an
// hour behind, C steps back 1 s, 1 min, then 1 h between its posts. Posts
// alternate between them; epochs of the thread strictly increase, v1 polls
// on every node from every cursor answer exactly the later ones, and an
// SSE stream and a WebSocket opened before get each message once, in
// order, as does a stream resumed from a cursor in the middle; reactions
// from the node behind get strictly increasing revs, which v2 streams
// hand on.
func TestSkewedClocksLoseAndRepeatNothing(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{storetest.File, storetest.Redis} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ca, cb, cc := newSkewed(time.Hour), newSkewed(-time.Hour), newSkewed(0)
			nodes := startSkewedNodes(t, backend, ca, cb, cc)
			a, b, c := nodes[0], nodes[1], nodes[2]
			tok := tokenN(1)
			first := a.mustPost(tok, "first, on A (an hour ahead)")
			since := "?since=" + strconv.FormatInt(first.Epoch, 10)
			ws := b.mustWS("/api/chat/ws"+since, tok)
			assert.Equal(t, "WS ready on B", nextWS(t, ws).Type, "ready")
			sse := c.mustSSE("/api/chat/stream"+since, tok, nil)
			assert.Equal(t, "SSE ready on C", sse.nextEvent(t).Event, "ready")
			v2 := v2Streams(t, c, b, tok, first.Epoch)
			watched := startWatch(t, a, first.Epoch) // the CLI, on the real clock
			waiter := &host.Verbs{Store: c.store, Now: cc.Now}
			cursor := first.Epoch // chatrelay_wait_messages's, on C

			type step struct {
				node *pushEnv
				back time.Duration // C's clock steps back this much first
			}
			plan := []step{{b, 0}, {c, 0}, {c, time.Second}, {c, time.Minute}, {c, time.Hour}, {b, 0}, {a, 0}, {c, time.Second}, {b, 0}}
			last := first.Epoch
			var posted []postAnswer
			for i, s := range plan {
				cc.step(-s.back)
				p := s.node.mustPost(tok, "message "+strconv.Itoa(i))
				assert.True(t, p.Epoch > last, "post %d: epoch %d after %d (C at %v)", i, p.Epoch, last, cc)
				last = p.Epoch
				posted = append(posted, p)
				r, err := waiter.WaitMessages(t.Context(), host.WaitMessagesInput{Thread: threadN(1), Since: cursor, Timeout: 5})
				assert.Success(t, err)
				assert.True(t, len(r.Messages) == 1 && decodeMessage(t, r.Messages[0].Message).ID == p.ID && r.Cursor == p.Epoch,
					"wait_messages since %d after post %d: %d messages, cursor %d, want %s at %d", cursor, i, len(r.Messages), r.Cursor, p.ID, p.Epoch)
				cursor = r.Cursor
			}
			for i, p := range posted {
				assert.Equal(t, "chatrelay watch's line "+strconv.Itoa(i), nextLine(t, watched), p.ID)
			}
			rest := a.poll(tok, first.Epoch).Messages
			assert.Equal(t, "messages after the first", len(rest), len(plan))
			for i, p := range posted {
				assert.Equal(t, "poll's message "+strconv.Itoa(i), decodeMessage(t, rest[i]).ID, p.ID)
			}
			expectWSMessages(t, ws, rest)
			expectMessages(t, sse, rest)
			for name, next := range v2 {
				for i, p := range posted {
					ev := next()
					assert.True(t, ev.typ == "message" && ev.msg.ID == p.ID, "%s: event %d %s %s, want message %s", name, i, ev.typ, ev.msg.ID, p.ID)
				}
			}
			for k, p := range posted {
				for _, node := range nodes {
					got := node.poll(tok, p.Epoch).Messages
					assert.Equal(t, "poll since post "+strconv.Itoa(k), len(got), len(posted)-k-1)
				}
			}
			// A stream resumed from the middle on the node behind.
			resumed := b.mustSSE("/api/chat/stream", tok, map[string]string{"Last-Event-ID": strconv.FormatInt(posted[3].Epoch, 10)})
			assert.Equal(t, "resumed SSE ready", resumed.nextEvent(t).Event, "ready")
			expectMessages(t, resumed, rest[4:])

			// Reactions from B, an hour behind, to the first message: each
			// a change after the newest.
			rev := last
			for i := range 3 {
				status, body := b.react(tok, first.ID, []string{"👍", "🎉", "👀"}[i], false)
				assert.Equal(t, "react "+string(body), status, 200)
				for name, next := range v2 {
					ev := next()
					assert.True(t, ev.typ == "update" && ev.msg.ID == first.ID && ev.msg.Rev > rev, "%s: reaction %d: %s %s rev %d after %d", name, i, ev.typ, ev.msg.ID, ev.msg.Rev, rev)
				}
				for _, m := range a.pollV2(tok, 0).Messages {
					if m.ID == first.ID {
						rev = m.Rev
					}
				}
			}
			after := b.mustPost(tok, "after the reactions, on B")
			assert.True(t, after.Epoch > rev, "a post after the reactions: epoch %d, newest rev %d", after.Epoch, rev)

			// The host CLI, on the real clock (between A's and B's), replies.
			ep, err := a.cliReply(t.Context(), mustBinary(t), "never", threadN(1), "from the CLI")
			assert.Success(t, err)
			assert.True(t, ep > after.Epoch, "the CLI's reply: epoch %d after %d", ep, after.Epoch)
			for _, node := range nodes {
				got := node.poll(tok, after.Epoch).Messages
				assert.True(t, len(got) == 1 && decodeMessage(t, got[0]).Epoch == ep, "poll since the last post: %d messages, want the CLI's", len(got))
			}
			assert.Equal(t, "chatrelay watch's line after the reactions", nextLine(t, watched), after.ID)
			nextLine(t, watched) // the CLI's reply
		})
	}
}

// startWatch runs "chatrelay watch --all --since" on e's store until the
// test ends, and returns the ids of the messages it prints, in order.
func startWatch(t *testing.T, e *pushEnv, since int64) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"watch", "--all", "--since", strconv.FormatInt(since, 10)}, e.backend.CLIArgs()...)
	cmd := exec.CommandContext(ctx, mustBinary(t), args...)
	cmd.Env = append(os.Environ(), "CHATRELAY_DATA=", "CHATRELAY_STORE=", "CHATRELAY_REDIS_PREFIX=")
	out, err := cmd.StdoutPipe()
	assert.Success(t, err)
	assert.Success(t, cmd.Start())
	t.Cleanup(func() { cancel(); cmd.Wait() })
	ids := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l struct {
				Message struct{ ID string } `json:"message"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message.ID != "" {
				ids <- l.Message.ID
			}
		}
	}()
	return ids
}

// nextLine is the next id from a watch, waited for up to 10 s.
func nextLine(t *testing.T, ids <-chan string) string {
	t.Helper()
	select {
	case id := <-ids:
		return id
	case <-time.After(10 * time.Second): // a deadline, not a pause
		t.Fatal("chatrelay watch printed nothing within 10s")
		return ""
	}
}

// TestSweptThreadRestartsAboveItsCursorsUnderSkew: a thread's messages
// have all expired, but a reaction to its last one was written a moment
// ago (its rev, a v2 cursor a client holds). A node sweeps just after its
// clock passed that reaction and removes the thread; a node whose clock
// runs a second behind (or the same node after its clock stepped back)
// then writes to the thread again. The new message must come after the
// cursor the client holds: the thread started again below it, and a v2
// client resuming from its cursor never saw the new message.
func TestSweptThreadRestartsAboveItsCursorsUnderSkew(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{storetest.File, storetest.Redis} {
		for _, skew := range []time.Duration{time.Second, time.Minute, chatrelay.RemoveAfter - time.Second} {
			t.Run(backend+"/"+skew.String(), func(t *testing.T) {
				t.Parallel()
				ret := chatrelay.Retention{Messages: 100, Age: time.Hour}
				sweeper := testclock.New(time.UnixMilli(1792778400000))
				behind := testclock.New(sweeper.Now())
				be := storetest.Open(t, backend, storetest.Options{Retention: ret, Now: sweeper.Now})
				other := be.Another(t, storetest.Options{Retention: ret, Now: behind.Now})
				ctx := t.Context()
				th := threadN(1)
				old, err := be.Store.Append(ctx, th, chatrelay.NewMessage{Text: "old"})
				assert.Success(t, err)
				sweeper.Advance(2 * time.Hour)
				reacted, err := be.Store.Change(ctx, th, chatrelay.Change{Op: chatrelay.React, MessageID: old.ID, Emoji: "👍", By: chatrelay.Operator})
				assert.Success(t, err)
				cursor := reacted.Rev
				// Each sweep from the reaction until the writer's clock
				// has passed it; the writer runs skew behind the sweeper.
				for _, at := range []time.Duration{time.Millisecond, skew} {
					sweeper.Set(time.UnixMilli(cursor).Add(at))
					_, err = be.Store.Sweep(ctx)
					assert.Success(t, err)
				}
				behind.Set(sweeper.Now().Add(-skew))
				again, err := other.Store.Append(ctx, th, chatrelay.NewMessage{Text: "again"})
				assert.Success(t, err)
				p, err := other.Store.Changes(ctx, th, cursor, 0)
				assert.Success(t, err)
				assert.True(t, len(p.Messages) == 1 && p.Messages[0].ID == again.ID, "changes after the cursor %d (the reaction): %d messages; the new one's epoch is %d", cursor, len(p.Messages), again.Epoch)

				// Nothing lives forever: RemoveAfter past the newest
				// change, with every message expired, the thread goes.
				sweeper.Set(time.UnixMilli(again.Epoch).Add(ret.Age + chatrelay.RemoveAfter + time.Millisecond))
				st, err := be.Store.Sweep(ctx)
				assert.Success(t, err)
				assert.Equal(t, "threads removed", st.ThreadsRemoved, 1)
			})
		}
	}
}

// TestSkewedNodesExpireOnce: node B runs a minute behind node A. A question
// asked on B with a second to answer is already past its deadline on A's
// clock: A expires it at once (up to the skew early, as
// docs/operations.md says), and that is the one outcome: v2 streams on
// both nodes get one expiry, and an answer on B, whose clock has not
// reached the deadline, is refused.
func TestSkewedNodesExpireOnce(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{storetest.File, storetest.Redis} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			nodes := startSkewedNodes(t, backend, newSkewed(0), newSkewed(-time.Minute))
			a, b := nodes[0], nodes[1]
			tok := tokenN(1)
			first := a.mustPost(tok, "hello")
			reads := v2Streams(t, a, b, tok, first.Epoch)
			ix := b.ask(threadN(1), chatrelay.Ask{Type: chatrelay.Approval, Prompt: "Deploy?", Timeout: time.Second})
			for name, next := range reads {
				ev := next()
				assert.True(t, ev.typ == "message" && ev.msg.ID == ix.ID && ev.msg.Interaction.State == chatrelay.Pending, "%s: the question %+v", name, ev)
				ev = next()
				assert.True(t, ev.typ == "update" && ev.msg.ID == ix.ID && ev.msg.Interaction.State == chatrelay.Expired, "%s: the expiry %+v", name, ev)
			}
			status, body := b.respond(tok, `{"interaction_id":"`+ix.Interaction.ID+`","decision":"approve"}`)
			assert.Equal(t, "an answer on B after A expired it: "+string(body), status, 409)
			after := a.mustPost(tok, "after")
			for name, next := range reads {
				ev := next()
				assert.True(t, ev.typ == "message" && ev.msg.ID == after.ID, "%s: after the expiry %s %+v, want the next message (one expiry stored)", name, ev.typ, ev.msg)
			}
		})
	}
}
