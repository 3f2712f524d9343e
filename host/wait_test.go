package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/host"
	"github.com/chatrelay/chatrelay/internal/assert"
	"github.com/chatrelay/chatrelay/internal/storetest"
	"github.com/chatrelay/chatrelay/internal/testclock"
	"github.com/chatrelay/chatrelay/store"
	"github.com/chatrelay/chatrelay/store/filestore"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// within bounds every wait of these tests: reaching it is a failure, not
// a measure of speed.
const within = 10 * time.Second

// recv returns what ch brings, failing the test if nothing comes within.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("%s: nothing within %v", what, within)
		panic("unreachable")
	}
}

type readResult struct {
	r   host.InteractionResult
	err error
}

// readers are the verbs that tell the host an interaction's outcome.
var readers = map[string]func(ctx context.Context, v *host.Verbs, thread, id string) (host.InteractionResult, error){
	"check_interaction": func(ctx context.Context, v *host.Verbs, thread, id string) (host.InteractionResult, error) {
		return v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: id})
	},
	"wait_interaction": func(ctx context.Context, v *host.Verbs, thread, id string) (host.InteractionResult, error) {
		return v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: id, Timeout: 5})
	},
}

// TestAnswerBeforeTheDeadlineIsTheOutcome: an answer that the store takes
// just before the deadline, but that is still being written when the
// deadline passes, is the outcome every reader reports: check_interaction
// and wait_interaction, reading it meanwhile (pending, past its deadline
// on their clock), never say expired once the answer was accepted, on
// every store. The server that answers and the host that reads are two
// stores on one data set and one clock, as two processes are. The
// answer's store holds its write (in its clock reading, once it has taken
// the answer's time) until the reader has read the interaction and looked
// at its own clock, so the race is the same every run.
func TestAnswerBeforeTheDeadlineIsTheOutcome(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		for name, read := range readers {
			t.Run(name, func(t *testing.T) {
				clk := testclock.New(time.Now())
				var (
					hold        atomic.Bool // the server's next clock reading waits for release
					stamped     = make(chan struct{})
					readerArmed atomic.Bool // the reader's next clock reading releases the answer
					release     = make(chan struct{})
					released    atomic.Bool
					answered    = make(chan struct{})
					once        sync.Once
				)
				server := storetest.Open(t, backend, storetest.Options{Now: func() time.Time {
					now := clk.Now()
					if hold.CompareAndSwap(true, false) {
						close(stamped)
						<-release
					}
					return now
				}})
				// Once released, the reader's store waits for the answer
				// to be stored before it takes its time: the answer wins
				// even where nothing else would order them (Redis's
				// compare-and-set).
				reader := server.Another(t, storetest.Options{Now: func() time.Time {
					now := clk.Now()
					if released.Load() {
						<-answered
					}
					return now
				}})
				v := &host.Verbs{Store: reader.Store, Now: func() time.Time {
					if readerArmed.CompareAndSwap(true, false) {
						once.Do(func() { released.Store(true); close(release) })
					}
					return clk.Now()
				}}
				ctx := t.Context()
				_, err := server.Store.Append(ctx, thread, store.NewMessage{Text: "which branch?"})
				assert.Success(t, err)
				asked, err := v.RequestInput(ctx, host.RequestInputInput{Thread: thread, Prompt: "Which branch?", AllowText: true, Timeout: 1})
				assert.Success(t, err)
				id, deadline := asked.Interaction.ID, asked.Interaction.Deadline

				clk.Set(time.UnixMilli(deadline - 1))
				hold.Store(true)
				respond := make(chan error, 1)
				go func() {
					defer close(answered)
					_, err := server.Store.Change(ctx, thread, store.Change{Op: store.Respond, InteractionID: id, Answer: chatrelay.Answer{Value: "main"}, By: chatrelay.Operator})
					respond <- err
				}()
				recv(t, stamped, "the answer taking its time")
				clk.Set(time.UnixMilli(deadline + 1))
				readerArmed.Store(true)
				got := make(chan readResult, 1)
				go func() {
					r, err := read(ctx, v, thread, id)
					got <- readResult{r, err}
				}()
				assert.Success(t, recv(t, respond, "the answer"))
				rr := recv(t, got, name)
				assert.Success(t, rr.err)
				assert.Equal(t, name+": the state after an accepted answer", rr.r.Interaction.State, chatrelay.Answered)
				assert.Equal(t, name+": the answer", rr.r.Interaction.Answer, &chatrelay.Answer{Value: "main"})
				again, err := v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: id})
				assert.Success(t, err)
				assert.Equal(t, "check_interaction afterwards", again.Interaction.State, chatrelay.Answered)
			})
		}
	})
}

// TestAnswerAtTheDeadlineIsRefused: once the deadline has passed, a
// reader reports expired, and an answer is then refused with
// interaction_closed: the expiry is the outcome for everyone.
func TestAnswerAtTheDeadlineIsRefused(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		for name, read := range readers {
			t.Run(name, func(t *testing.T) {
				clk := testclock.New(time.Now())
				server := storetest.Open(t, backend, storetest.Options{Now: clk.Now})
				reader := server.Another(t, storetest.Options{Now: clk.Now})
				v := &host.Verbs{Store: reader.Store, Now: clk.Now}
				ctx := t.Context()
				_, err := server.Store.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
				assert.Success(t, err)
				asked, err := v.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 1})
				assert.Success(t, err)
				clk.Set(time.UnixMilli(asked.Interaction.Deadline))
				r, err := read(ctx, v, thread, asked.Interaction.ID)
				assert.Success(t, err)
				assert.Equal(t, name+": at the deadline", r.Interaction.State, chatrelay.Expired)
				_, err = server.Store.Change(ctx, thread, store.Change{Op: store.Respond, InteractionID: asked.Interaction.ID, Answer: chatrelay.Answer{Decision: chatrelay.Approve}, By: chatrelay.Operator})
				assert.Code(t, err, chatrelay.InteractionClosed)
				r, err = v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: asked.Interaction.ID})
				assert.Success(t, err)
				assert.Equal(t, "check_interaction after the refused answer", r.Interaction.State, chatrelay.Expired)
			})
		}
	})
}

// TestDeadlineIsTheStoresWord: a host whose clock is past the deadline
// while the store's is not yet reports the interaction pending (the store
// would still take an answer), and a wait running meanwhile ends expired
// once the store's clock reaches the deadline.
func TestDeadlineIsTheStoresWord(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		clk := testclock.New(time.Now())
		b := storetest.Open(t, backend, storetest.Options{Now: clk.Now})
		v := &host.Verbs{Store: b.Store, Now: func() time.Time { return clk.Now().Add(time.Minute) }}
		ctx := t.Context()
		_, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "which branch?"})
		assert.Success(t, err)
		asked, err := v.RequestInput(ctx, host.RequestInputInput{Thread: thread, Prompt: "Which branch?", AllowText: true, Timeout: 1})
		assert.Success(t, err)
		id := asked.Interaction.ID
		r, err := v.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: id})
		assert.Success(t, err)
		assert.Equal(t, "past the deadline on the host's clock only", r.Interaction.State, chatrelay.Pending)
		got := make(chan readResult, 1)
		go func() {
			r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: id, Timeout: 30})
			got <- readResult{r, err}
		}()
		clk.Set(time.UnixMilli(asked.Interaction.Deadline))
		rr := recv(t, got, "wait_interaction")
		assert.Success(t, rr.err)
		assert.Equal(t, "at the store's deadline", rr.r.Interaction.State, chatrelay.Expired)
	})
}

// TestWaitEndsWhenRedisLosesTheInteraction: a wait_interaction running
// while Redis loses its data ends with not_found (the interaction is
// gone), instead of waiting for a deadline nothing can reach any more:
// at once when Redis restarts without its data (the feed tells it), and
// at the wait's next look in the store (Recheck) when it is flushed by
// hand with no restart, which no feed tells (it waited out its round,
// up to 5 minutes).
func TestWaitEndsWhenRedisLosesTheInteraction(t *testing.T) {
	for _, c := range []struct {
		name    string
		recheck time.Duration // the default for a restart: its feed must tell it, well before
		lose    func(t *testing.T, srv *storetest.Server)
	}{
		// No persistence: Redis comes back empty.
		{"restart", 0, func(t *testing.T, srv *storetest.Server) { srv.Restart(t) }},
		{"flushall", 100 * time.Millisecond, func(t *testing.T, srv *storetest.Server) {
			assert.Success(t, srv.Client(t).FlushAll(t.Context()).Err())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := storetest.StartServer(t, storetest.ServerOptions{})
			b := storetest.OpenRedis(t, srv, storetest.NewPrefix(), storetest.Options{})
			v := &host.Verbs{Store: b.Store, Recheck: c.recheck}
			ctx := t.Context()
			_, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
			assert.Success(t, err)
			asked, err := v.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
			assert.Success(t, err)
			got := make(chan readResult, 1)
			go func() {
				r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: asked.Interaction.ID})
				got <- readResult{r, err}
			}()
			waitForFeed(t, srv, b.Prefix)
			c.lose(t, srv)
			rr := recv(t, got, "wait_interaction after Redis lost its data ("+c.name+")")
			assert.Code(t, rr.err, chatrelay.NotFound)
		})
	}
}

// TestWaitEndsWhenRetentionDropsTheInteraction: a wait_interaction
// running while another process's posts push its question out of the
// thread's retention ends at once with not_found, as check_interaction
// then answers, instead of waiting out its round (up to 5 minutes) for a
// deadline nothing can reach any more. The posts are stored right after
// the wait's look at the store once it follows the feed (its second
// read), so only the feed can tell it.
func TestWaitEndsWhenRetentionDropsTheInteraction(t *testing.T) {
	storetest.Run(t, func(t *testing.T, backend string) {
		opts := storetest.Options{Retention: chatrelay.Retention{Messages: 2}}
		server := storetest.Open(t, backend, opts)
		asker := &host.Verbs{Store: server.Store}
		ctx := t.Context()
		_, err := server.Store.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
		assert.Success(t, err)
		asked, err := asker.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
		assert.Success(t, err)
		posted := make(chan error, 1)
		reader := &readHook{Store: server.Another(t, opts).Store, after: func(n int) {
			if n != 2 {
				return
			}
			for i := range 3 {
				if _, err := server.Store.Append(ctx, thread, store.NewMessage{Text: fmt.Sprintf("later %d", i)}); err != nil {
					posted <- err
					return
				}
			}
			posted <- nil
		}}
		v := &host.Verbs{Store: reader}
		got := make(chan readResult, 1)
		go func() {
			r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: asked.Interaction.ID, Timeout: 60})
			got <- readResult{r, err}
		}()
		assert.Success(t, recv(t, posted, "the posts after the wait's look"))
		_, err = asker.CheckInteraction(ctx, host.InteractionInput{Thread: thread, InteractionID: asked.Interaction.ID})
		assert.Code(t, err, chatrelay.NotFound)
		rr := recv(t, got, "wait_interaction after retention dropped the question")
		assert.Code(t, rr.err, chatrelay.NotFound)
	})
}

// TestWaitEndsWhenTheSweepRemovesTheThread: a wait_interaction running
// while another process's sweep removes the thread (every message past
// the retention age), or drops the question past the age from a thread it
// keeps (a newer message), ends at once with not_found, not at its next
// look in the store (Recheck, 30 s) or at its timeout. The sweep told no
// waiter: the CLI's check --wait and MCP's wait_interaction learned the
// removal 23 s later, on both stores (lifeprobe), and the drop at their
// timeout.
func TestWaitEndsWhenTheSweepRemovesTheThread(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kept    bool // a newer message keeps the thread
		dropped int  // messages the sweep drops
		removed int  // threads it removes
	}{
		{"the thread removed", false, 2, 1},
		{"the question dropped, the thread kept", true, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T, backend string) {
				clk := testclock.New(time.Now())
				opts := storetest.Options{Now: clk.Now, Retention: chatrelay.Retention{Age: time.Minute}}
				server := storetest.Open(t, backend, opts)
				asker := &host.Verbs{Store: server.Store, Now: clk.Now}
				ctx := t.Context()
				_, err := server.Store.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
				assert.Success(t, err)
				asked, err := asker.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
				assert.Success(t, err)
				clk.Advance(30 * time.Second)
				if tc.kept {
					_, err = server.Store.Append(ctx, thread, store.NewMessage{Text: "still here"})
					assert.Success(t, err)
				}
				swept := make(chan error, 1)
				reader := &readHook{Store: server.Another(t, opts).Store, after: func(n int) {
					if n != 2 {
						return
					}
					clk.Advance(40 * time.Second) // the question is 70 s old, the newer message 40 s
					st, err := server.Store.Sweep(ctx)
					if err == nil && (st.Dropped != tc.dropped || st.ThreadsRemoved != tc.removed) {
						err = fmt.Errorf("dropped %d, threads removed %d", st.Dropped, st.ThreadsRemoved)
					}
					swept <- err
				}}
				v := &host.Verbs{Store: reader, Now: clk.Now, Recheck: time.Hour} // only the feed can tell it in time
				got := make(chan readResult, 1)
				go func() {
					r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: asked.Interaction.ID, Timeout: 20})
					got <- readResult{r, err}
				}()
				assert.Success(t, recv(t, swept, "the sweep after the wait's look"))
				rr := recv(t, got, "wait_interaction after the sweep")
				assert.True(t, chatrelay.CodeOf(rr.err) == chatrelay.NotFound, "the wait after the sweep: %+v, %v (want not_found at once)", rr.r, rr.err)
			})
		})
	}
}

// readHook is a store whose Changes calls after(n) once its nth read is
// done, before it returns that read.
type readHook struct {
	store.Store
	n     atomic.Int32
	after func(n int)
}

func (s *readHook) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	p, err := s.Store.Changes(ctx, thread, since, limit)
	s.after(int(s.n.Add(1)))
	return p, err
}

// waitForFeed waits until a store under prefix follows its change feed on
// srv (a wait is registered).
func waitForFeed(t *testing.T, srv *storetest.Server, prefix string) {
	t.Helper()
	c := srv.Client(t)
	assert.Eventually(t, within, "a feed subscriber", func() bool {
		n, err := c.PubSubNumSub(t.Context(), prefix+"feed").Result()
		return err == nil && n[prefix+"feed"] > 0
	})
}

// TestWaitMessagesWithoutSince: with no cursor, wait_messages answers at
// once with what hermes has not answered: in a thread, the messages after
// hermes's newest one (all of them in a thread hermes never wrote in); of
// every thread, all of those, oldest first. Its cursor is the newest
// epoch, so that passing it back waits for what comes next. With nothing
// to answer it waits, and the next message ends the wait.
func TestWaitMessagesWithoutSince(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	clock := time.Now()
	tick := func() time.Time { // a second a message, so that epochs follow the posting order across threads
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Now: tick, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	v := &host.Verbs{Store: st}
	const a, b, c = "00000000000000a1", "00000000000000b2", "00000000000000c3"
	post := func(thread string, author chatrelay.Author, text string) store.Entry {
		t.Helper()
		e, err := st.Append(ctx, thread, store.NewMessage{Author: author, Text: text})
		assert.Success(t, err)
		return e
	}
	post(a, chatrelay.Operator, "first question")
	post(a, chatrelay.Hermes, "first answer")
	post(a, chatrelay.Operator, "second question")
	post(b, chatrelay.Operator, "hello?")
	a3 := post(a, chatrelay.Operator, "and a third")
	post(c, chatrelay.Operator, "done?")
	c2 := post(c, chatrelay.Hermes, "done.")
	texts := func(r host.WaitMessagesResult) []string {
		t.Helper()
		out := []string{}
		for _, m := range r.Messages {
			var msg chatrelay.Message
			assert.Success(t, json.Unmarshal(m.Message, &msg))
			out = append(out, m.Thread+": "+msg.Text)
		}
		return out
	}

	r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: a, Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "thread a's unanswered", texts(r), []string{a + ": second question", a + ": and a third"})
	assert.Equal(t, "timed out", r.TimedOut, false)
	assert.Equal(t, "cursor", r.Cursor, a3.Epoch)

	r, err = v.WaitMessages(ctx, host.WaitMessagesInput{Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "every thread's unanswered", texts(r), []string{a + ": second question", b + ": hello?", a + ": and a third"})
	assert.Equal(t, "cursor", r.Cursor, c2.Epoch)

	r, err = v.WaitMessages(ctx, host.WaitMessagesInput{Thread: c, Timeout: 1})
	assert.Success(t, err)
	assert.Equal(t, "nothing to answer in c", [3]any{len(r.Messages), r.TimedOut, r.Cursor}, [3]any{0, true, c2.Epoch})

	waited := make(chan host.WaitMessagesResult, 1)
	go func() {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: c, Timeout: 60})
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	c3 := post(c, chatrelay.Operator, "one more thing")
	select {
	case r := <-waited:
		assert.Equal(t, "the next message", texts(r), []string{c + ": one more thing"})
		assert.Equal(t, "cursor", r.Cursor, c3.Epoch)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end on the next message")
	}
}

// TestWaitMessagesPastEveryCursor: a since past every message (a made-up
// cursor, a microsecond clock, 1e+20) reads as "nothing newer", and the
// timed-out answer's cursor is the newest message's epoch, as poll's and
// read_thread's are, so that passing it back waits for the next message.
// Before, the cursor echoed the since: an agent passing it back waited
// for ever and never saw a message again.
func TestWaitMessagesPastEveryCursor(t *testing.T) {
	ctx := t.Context()
	st, err := filestore.OpenFile(t.TempDir(), filestore.FileOptions{NoFsync: true, Log: slog.New(slog.DiscardHandler)})
	assert.Success(t, err)
	t.Cleanup(func() { st.Close() })
	v := &host.Verbs{Store: st}
	const a, b = "00000000000000a1", "00000000000000b2"
	_, err = st.Append(ctx, a, store.NewMessage{Author: chatrelay.Operator, Text: "in a"})
	assert.Success(t, err)
	newest, err := st.Append(ctx, b, store.NewMessage{Author: chatrelay.Operator, Text: "in b"})
	assert.Success(t, err)
	for _, thread := range []string{b, ""} {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: thread, Since: math.MaxInt64, Timeout: 1})
		assert.Success(t, err)
		assert.Equal(t, "thread "+thread+": nothing newer, timed out", [2]any{len(r.Messages), r.TimedOut}, [2]any{0, true})
		assert.Equal(t, "thread "+thread+": the cursor", r.Cursor, newest.Epoch)
	}

	waited := make(chan host.WaitMessagesResult, 1)
	go func() {
		r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: b, Since: newest.Epoch, Timeout: 60})
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	next, err := st.Append(ctx, b, store.NewMessage{Author: chatrelay.Operator, Text: "the next"})
	assert.Success(t, err)
	select {
	case r := <-waited:
		assert.Equal(t, "the cursor passed back", r.Cursor, next.Epoch)
	case <-time.After(10 * time.Second):
		t.Fatal("the wait from the cursor given back did not end on the next message")
	}
}

// TestWaitMessagesBehindTheCursor: an any-thread wait from a cursor that
// one thread's epochs put ahead of another's (a burst puts a thread's
// epochs ahead of the clock; nodes' clocks differ) answers a message of
// the other thread that comes during the wait with an epoch behind the
// cursor: it woke the wait, and answering none of it lost it, since the
// cursor passed back is past it.
func TestWaitMessagesBehindTheCursor(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		clock := testclock.New(time.Now())
		st := storetest.Open(t, backend, storetest.Options{Now: clock.Now}).Store
		v := &host.Verbs{Store: st}
		ctx := t.Context()
		const ahead, other = "00000000000000a1", "00000000000000b2"
		clock.Advance(time.Minute) // the thread whose epochs run ahead
		cursor, err := st.Append(ctx, ahead, store.NewMessage{Author: chatrelay.Operator, Text: "ahead"})
		assert.Success(t, err)
		clock.Advance(-time.Minute)
		_, err = st.Append(ctx, other, store.NewMessage{Author: chatrelay.Hermes, Text: "hermes opened it"})
		assert.Success(t, err)

		waited := make(chan host.WaitMessagesResult, 1)
		go func() {
			r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Since: cursor.Epoch, Timeout: 60})
			if err != nil {
				t.Error(err)
			}
			waited <- r
		}()
		// Posts in the other thread until the wait answers (one posted
		// before the wait registered is between two calls: see docs).
		var r host.WaitMessagesResult
		deadline := time.Now().Add(10 * time.Second)
		for answered := false; !answered; {
			if time.Now().After(deadline) {
				t.Fatal("the wait did not answer within 10 s of posts behind its cursor")
			}
			_, err := st.Append(ctx, other, store.NewMessage{Author: chatrelay.Operator, Text: "behind"})
			assert.Success(t, err)
			select {
			case r = <-waited:
				answered = true
			case <-time.After(50 * time.Millisecond): // a post's pace, not a condition
			}
		}
		assert.True(t, len(r.Messages) > 0, "the wait woke and answered nothing: %+v", r)
		for _, m := range r.Messages {
			assert.Equal(t, "the thread", m.Thread, other)
		}
		assert.Equal(t, "the cursor", r.Cursor, cursor.Epoch)
	})
}

// threadsHook is a store that signals once its Threads was read: a
// wait_messages has registered with the feed and reads the store.
type threadsHook struct {
	store.Store
	once sync.Once
	read chan struct{}
}

func (s *threadsHook) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	infos, err := s.Store.Threads(ctx)
	s.once.Do(func() { close(s.read) })
	return infos, err
}

// TestWaitMessagesNotWokenByAnOldMessagesChange: a wait_messages from the
// cursor of the messages it answered is woken by the next message only. A
// reaction to one of them (or any change of it) reached the wait as a
// message at or behind its cursor, which it took for a message of another
// thread behind the cursor: it answered the old messages again, as new
// (on both stores; lossprobe's agent loop got 11 repeats in 140 messages
// from the server's posts noticed late, and every reaction repeated them).
func TestWaitMessagesNotWokenByAnOldMessagesChange(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, backend string) {
		b := storetest.Open(t, backend, storetest.Options{})
		ctx := t.Context()
		const th = "00000000000000a1"
		first, err := b.Store.Append(ctx, th, store.NewMessage{Author: chatrelay.Operator, Text: "question 1"})
		assert.Success(t, err)
		second, err := b.Store.Append(ctx, th, store.NewMessage{Author: chatrelay.Operator, Text: "question 2"})
		assert.Success(t, err)
		for i, thread := range []string{th, ""} {
			hook := &threadsHook{Store: b.Another(t, storetest.Options{}).Store, read: make(chan struct{})}
			v := &host.Verbs{Store: hook}
			waited := make(chan host.WaitMessagesResult, 1)
			go func() {
				r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Thread: thread, Since: second.Epoch, Timeout: 60})
				if err != nil {
					t.Error(err)
				}
				waited <- r
			}()
			recv(t, hook.read, "the wait reading the store")
			_, err := b.Store.Change(ctx, th, store.Change{Op: store.React, MessageID: first.ID, Emoji: []string{"👍", "🎉"}[i], By: chatrelay.Operator})
			assert.Success(t, err)
			next, err := b.Store.Append(ctx, th, store.NewMessage{Author: chatrelay.Operator, Text: "the next"})
			assert.Success(t, err)
			r := recv(t, waited, "wait_messages after the next message")
			var texts []string
			for _, m := range r.Messages {
				var msg struct{ Text string }
				assert.Success(t, json.Unmarshal(m.Message, &msg))
				texts = append(texts, msg.Text)
			}
			assert.Equal(t, "thread "+thread+": the messages answered", fmt.Sprint(texts), "[the next]")
			assert.Equal(t, "thread "+thread+": the cursor", r.Cursor, next.Epoch)
			second = next
		}
	})
}

// downStore is a store whose reads of changes fail as a Redis that
// restarts does (store_unavailable) while down is set, counting them.
type downStore struct {
	store.Store
	down     atomic.Bool
	failed   atomic.Int32
	feedDown atomic.Bool  // Follow fails at once, as a subscription to a Redis that died
	follows  atomic.Int32 // Follow's failures while feedDown
}

func (s *downStore) Follow(ctx context.Context, fn func(store.Batch)) error {
	if s.feedDown.Load() {
		s.follows.Add(1)
		return &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store cannot be reached: redis changes: EOF"}
	}
	return s.Store.Follow(ctx, fn)
}

func (s *downStore) Changes(ctx context.Context, thread string, since int64, limit int) (store.Page, error) {
	if s.down.Load() {
		s.failed.Add(1)
		return store.Page{}, &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store cannot be reached"}
	}
	return s.Store.Changes(ctx, thread, since, limit)
}

func (s *downStore) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	if s.down.Load() {
		s.failed.Add(1)
		return nil, &chatrelay.Error{Code: chatrelay.StoreUnavailable, Message: "the store cannot be reached"}
	}
	return s.Store.Threads(ctx)
}

// awaitFailedTwice waits until the wait that answers on got found the
// store unreachable twice (failed counts it), and fails the test if it
// answered before.
func awaitFailedTwice[T any](t *testing.T, failed *atomic.Int32, got <-chan T) {
	t.Helper()
	assert.Eventually(t, within, "the wait looking at the unreachable store twice", func() bool {
		select {
		case rr := <-got:
			t.Fatalf("the wait ended while the store was unreachable: %+v", rr)
		default:
		}
		return failed.Load() >= 2
	})
}

// TestWaitOutlastsTheStoreBeingUnreachable: a wait_interaction (and so
// check --wait and ask --wait) that finds the store unreachable for a
// moment (a Redis restarting, its data kept) looks again until its
// timeout, and answers the approval given once the store is back. It
// ended at once with store_unavailable: ask --wait and check --wait
// exited 1 and left the question pending, with nobody waiting for the
// answer the person then gave (lossprobe: Redis down 5 s across a 4 s
// deadline ended every wait).
func TestWaitOutlastsTheStoreBeingUnreachable(t *testing.T) {
	t.Parallel()
	waitThroughOutage(t, false)
}

// waitThroughOutage asks for an approval, waits for it through a reader
// whose reads (or, with feed, whose feed) fail until the wait met the
// failure twice, then approves it: the wait must answer the approval.
func waitThroughOutage(t *testing.T, feed bool) {
	b := storetest.Open(t, storetest.File, storetest.Options{})
	ctx := t.Context()
	_, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "deploy?"})
	assert.Success(t, err)
	asker := &host.Verbs{Store: b.Store}
	asked, err := asker.RequestApproval(ctx, host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
	assert.Success(t, err)
	reader := &downStore{Store: b.Another(t, storetest.Options{}).Store}
	down, failed := &reader.down, &reader.failed
	if feed {
		down, failed = &reader.feedDown, &reader.follows
	}
	down.Store(true)
	v := &host.Verbs{Store: reader}
	got := make(chan readResult, 1)
	go func() {
		r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: asked.Interaction.ID, Timeout: 60})
		got <- readResult{r, err}
	}()
	awaitFailedTwice(t, failed, got)
	down.Store(false)
	_, err = b.Store.Change(ctx, thread, store.Change{Op: store.Respond, InteractionID: asked.Interaction.ID, Answer: chatrelay.Answer{Decision: "approve"}, By: chatrelay.Operator})
	assert.Success(t, err)
	rr := recv(t, got, "wait_interaction once the store is back")
	assert.Success(t, rr.err)
	assert.Equal(t, "the outcome", rr.r.Interaction.State, chatrelay.Approved)
}

// TestWaitOutlastsTheFeedFailing: a wait_interaction whose feed fails
// (the subscription to a Redis that died: "redis changes: EOF") while it
// follows the thread looks again until its timeout, as it does when a
// read fails, and answers the approval given once the store is back. It
// answered store_unavailable at once: ask --wait exited 1 and left the
// question pending (CI, TestInterruptWithTheStoreDownSaysStillPending,
// whose Redis died before its interrupt came).
func TestWaitOutlastsTheFeedFailing(t *testing.T) {
	t.Parallel()
	waitThroughOutage(t, true)
}

// TestWaitMessagesOutlastsTheStoreBeingUnreachable: a wait_messages (and
// so an agent's loop over it) that finds the store unreachable for a
// moment looks again until its timeout, as wait_interaction does, and
// answers the message written once the store is back; with and without a
// cursor, for one thread and for every thread. It answered
// store_unavailable at once.
func TestWaitMessagesOutlastsTheStoreBeingUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		withSince bool
		thread    string
	}{{"cursor, thread", true, thread}, {"cursor, every thread", true, ""}, {"no cursor, thread", false, thread}, {"no cursor, every thread", false, ""}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := storetest.Open(t, storetest.File, storetest.Options{})
			ctx := t.Context()
			first, err := b.Store.Append(ctx, thread, store.NewMessage{Text: "hello"})
			assert.Success(t, err)
			_, err = b.Store.Append(ctx, thread, store.NewMessage{Author: chatrelay.Hermes, Text: "hi"})
			assert.Success(t, err)
			reader := &downStore{Store: b.Another(t, storetest.Options{}).Store}
			reader.down.Store(true)
			v := &host.Verbs{Store: reader}
			in := host.WaitMessagesInput{Thread: tc.thread, Timeout: 60}
			if tc.withSince {
				in.Since = first.Epoch + 1
			}
			type waited struct {
				r   host.WaitMessagesResult
				err error
			}
			got := make(chan waited, 1)
			go func() {
				r, err := v.WaitMessages(ctx, in)
				got <- waited{r, err}
			}()
			awaitFailedTwice(t, &reader.failed, got)
			reader.down.Store(false)
			_, err = b.Store.Append(ctx, thread, store.NewMessage{Text: "still there?"})
			assert.Success(t, err)
			rr := recv(t, got, "wait_messages once the store is back")
			assert.Success(t, rr.err)
			assert.Equal(t, "messages", len(rr.r.Messages), 1)
			var m chatrelay.Message
			assert.Success(t, json.Unmarshal(rr.r.Messages[0].Message, &m))
			assert.Equal(t, "the message", m.Text, "still there?")
		})
	}
}

// TestWaitInterruptedWhileTheStoreIsUnreachable: a wait_interaction
// interrupted (ctx canceled) while it looks again at an unreachable store
// ends with the interrupt, not store_unavailable: ask --wait withdraws its
// question only on a context error.
func TestWaitInterruptedWhileTheStoreIsUnreachable(t *testing.T) {
	t.Parallel()
	b := storetest.Open(t, storetest.File, storetest.Options{})
	_, err := b.Store.Append(t.Context(), thread, store.NewMessage{Text: "deploy?"})
	assert.Success(t, err)
	asker := &host.Verbs{Store: b.Store}
	asked, err := asker.RequestApproval(t.Context(), host.RequestApprovalInput{Thread: thread, Summary: "Deploy?", Timeout: 3600})
	assert.Success(t, err)
	reader := &downStore{Store: b.Another(t, storetest.Options{}).Store}
	reader.down.Store(true)
	v := &host.Verbs{Store: reader}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan readResult, 1)
	go func() {
		r, err := v.WaitInteraction(ctx, host.WaitInteractionInput{Thread: thread, InteractionID: asked.Interaction.ID, Timeout: 60})
		got <- readResult{r, err}
	}()
	assert.Eventually(t, within, "the wait looking at the unreachable store", func() bool { return reader.failed.Load() >= 1 })
	cancel()
	rr := recv(t, got, "wait_interaction once interrupted")
	if !errors.Is(rr.err, context.Canceled) {
		t.Fatalf("the interrupted wait ended with %v, want context.Canceled", rr.err)
	}
}

// afterThreads is a store that runs then once, just after the first read
// of its threads that follows arm: writes that land between a wait's
// list of the threads and its reads of them.
type afterThreads struct {
	store.Store
	armed atomic.Bool
	then  func()
}

func (s *afterThreads) Threads(ctx context.Context) ([]store.ThreadInfo, error) {
	infos, err := s.Store.Threads(ctx)
	if s.armed.CompareAndSwap(true, false) {
		s.then()
	}
	return infos, err
}

// TestWaitMessagesAnyThreadMissesNothing: an any-thread wait_messages,
// then one from its cursor, answer every message of every thread once,
// with two posts landing between the first wait's list of the threads and
// its reads of them: one in a thread it does not read (nothing to answer
// there when it listed them), then one in a thread it reads. The first
// answered the second post and passed back its epoch as the cursor, past
// the first post's, which no later wait from that cursor answered: lost,
// with every clock right (no burst, no skew: the docs' case of a message
// behind the cursor between two calls is another).
func TestWaitMessagesAnyThreadMissesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := testclock.New(time.Now())
	tick := func() { clock.Advance(time.Second) } // epochs follow the posting order across threads
	st := &afterThreads{Store: storetest.Open(t, storetest.File, storetest.Options{Now: clock.Now}).Store}
	v := &host.Verbs{Store: st}
	const a, d = "00000000000000a1", "00000000000000d4"
	post := func(thread string, author chatrelay.Author, text string) {
		t.Helper()
		tick()
		_, err := st.Store.Append(ctx, thread, store.NewMessage{Author: author, Text: text})
		assert.Success(t, err)
	}
	post(a, chatrelay.Operator, "question in a")
	post(d, chatrelay.Operator, "question in d")
	post(d, chatrelay.Hermes, "answer in d")
	st.then = func() {
		post(d, chatrelay.Operator, "written in d meanwhile")
		post(a, chatrelay.Operator, "written in a after it")
	}
	st.armed.Store(true)
	seen := map[string]int{}
	r, err := v.WaitMessages(ctx, host.WaitMessagesInput{Timeout: 1})
	assert.Success(t, err)
	for range 2 {
		for _, m := range r.Messages {
			var msg chatrelay.Message
			assert.Success(t, json.Unmarshal(m.Message, &msg))
			seen[m.Thread+": "+msg.Text]++
		}
		if r, err = v.WaitMessages(ctx, host.WaitMessagesInput{Since: r.Cursor, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
	}
	assert.Equal(t, "each message answered, once", seen, map[string]int{
		a + ": question in a": 1, d + ": written in d meanwhile": 1, a + ": written in a after it": 1})
}
