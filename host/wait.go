package host

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// waitEndKey is the context key of WithWaitEnd's end.
type waitEndKey struct{}

// WithWaitEnd returns ctx under which a wait (WaitMessages,
// WaitInteraction) also ends once end is done, as its timeout would end
// it then: wait_messages answers timed_out with its cursor (nothing is
// lost: the next call from that cursor reads what came since),
// wait_interaction the interaction as it stands (timed_out while still
// pending). It is for a caller that will read the answer but no longer
// waits for it, such as an MCP client over stdio that has closed its
// input. Unlike ctx's end, which ends a wait with ctx's error and no
// answer, the store is still read for the answer.
func WithWaitEnd(ctx, end context.Context) context.Context {
	return context.WithValue(ctx, waitEndKey{}, end)
}

// waitContext is the context of a wait's timeout: it ends with ctx, after
// timeout, or once WithWaitEnd's end is done.
func waitContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	end, _ := ctx.Value(waitEndKey{}).(context.Context)
	if end == nil {
		return wctx, cancel
	}
	stop := context.AfterFunc(end, cancel)
	return wctx, func() {
		stop()
		cancel()
	}
}

// WaitMessagesInput is wait_messages's input.
type WaitMessagesInput struct {
	Thread  string `json:"thread,omitempty"`  // "": any thread
	Since   int64  `json:"since,omitempty"`   // an epoch cursor; 0: what hermes has not answered
	Timeout int    `json:"timeout,omitempty"` // seconds, at most 300; 0: 300
}

// ThreadMessage is a message with its thread.
type ThreadMessage struct {
	Thread  string          `json:"thread"`
	Message json.RawMessage `json:"message"` // v2
}

// WaitMessagesResult is wait_messages's result: the messages not by hermes
// after the cursor, oldest first (none if it timed out), and the cursor to
// pass back.
type WaitMessagesResult struct {
	Messages []ThreadMessage `json:"messages"`
	Cursor   int64           `json:"cursor"`
	TimedOut bool            `json:"timed_out"`
}

var errWake = errors.New("host: a message to answer")

// WaitMessages blocks until the thread (or any thread) has a message not
// written by hermes with an epoch past the cursor, or the timeout passes
// (or WithWaitEnd's end comes), or ctx is done (its error). It watches the store's change feed, so it
// wakes as soon as the message is stored, by any process.
//
// Without a cursor it answers at once with what hermes has not answered:
// in each thread, the messages after hermes's newest one (every message
// of a thread hermes never wrote in). If there are none, it waits for the
// next message after the newest one stored.
//
// A store that cannot be reached (StoreUnavailable) is looked at again
// every lookAgain until the timeout, which then ends the wait with that
// error.
func (v *Verbs) WaitMessages(ctx context.Context, in WaitMessagesInput) (WaitMessagesResult, error) {
	if in.Thread != "" {
		if err := v.checkThread(in.Thread); err != nil {
			return WaitMessagesResult{}, err
		}
	}
	if in.Since < 0 {
		return WaitMessagesResult{}, chatrelay.Errorf(chatrelay.InvalidSince, "since is not negative")
	}
	timeout, err := waitLimit(in.Timeout)
	if err != nil {
		return WaitMessagesResult{}, err
	}
	wctx, cancel := waitContext(ctx, timeout)
	defer cancel()
	for {
		r, err := v.waitMessages(ctx, wctx, in)
		if chatrelay.CodeOf(err) != chatrelay.StoreUnavailable || wctx.Err() != nil {
			return r, err
		}
		// The store cannot answer for now (a Redis restarting): the person
		// may write once it can; look again until the timeout, which then
		// ends the wait with that error.
		select {
		case <-wctx.Done():
		case <-time.After(lookAgain):
		}
		if ctx.Err() != nil {
			return WaitMessagesResult{}, ctx.Err()
		}
	}
}

// waitMessages is one try of WaitMessages, until wctx is done.
func (v *Verbs) waitMessages(ctx, wctx context.Context, in WaitMessagesInput) (WaitMessagesResult, error) {
	since := in.Since
	if since == 0 {
		r, err := v.unanswered(ctx, in.Thread)
		if err != nil || len(r.Messages) > 0 {
			return r, err
		}
		// Nothing to answer: wait from the newest message on (from the
		// first, when there is none, so that a message stored before the
		// wait has started is seen all the same).
		since = max(r.Cursor, 1)
	}
	// Watch registers with the feed, then reads the store after since, so
	// a message stored at any moment is seen. One of another thread that
	// comes with an epoch at or before since (epochs are each thread's:
	// a burst puts a thread's ahead of the clock, and nodes' clocks
	// differ) is answered too, with the rest of its thread from it:
	// behind holds where each such thread is read from.
	behind := map[string]int64{}
	err := v.feed().Watch(wctx, since, false, func(thread string, e store.Entry, _ bool) error {
		if e.Author != chatrelay.Hermes && (in.Thread == "" && v.reaches(thread) || thread == in.Thread) {
			if e.Epoch <= since {
				behind[thread] = e.Epoch - 1
			}
			return errWake
		}
		return nil
	}, nil, nil)
	switch {
	case errors.Is(err, errWake):
	case err != nil:
		return WaitMessagesResult{}, err
	case ctx.Err() != nil:
		return WaitMessagesResult{}, ctx.Err()
	default:
		return WaitMessagesResult{Messages: []ThreadMessage{}, Cursor: v.timedOutCursor(ctx, in.Thread, since), TimedOut: true}, nil
	}
	return v.messagesAfter(ctx, in.Thread, since, behind)
}

// timedOutCursor is the cursor of a wait from since that timed out:
// since, or the newest message's epoch when since is past it (a cursor
// made up, or 1e+20), as poll's cursor is, so that the cursor passed back
// waits for the next message rather than for one past since.
func (v *Verbs) timedOutCursor(ctx context.Context, thread string, since int64) int64 {
	var newest int64
	if thread == "" {
		_, n, err := v.threadsWhere(ctx, "", func(store.ThreadInfo) bool { return false })
		if err != nil {
			return since
		}
		newest = n
	} else {
		p, err := v.Store.Since(ctx, thread, 0, 1)
		if err != nil || len(p.Messages) == 0 {
			return since
		}
		newest = p.Messages[len(p.Messages)-1].Epoch
	}
	if newest > 0 && newest < since {
		return newest
	}
	return since
}

// unanswered reads the messages hermes has not answered, of thread or of
// every thread, oldest first: in each thread those after hermes's newest
// message. The cursor is the newest epoch of the threads read (0 if there
// is none). Of every thread, it answers the threads as their list stood
// (upTo): a message stored since is left to the next call.
func (v *Verbs) unanswered(ctx context.Context, thread string) (WaitMessagesResult, error) {
	// A thread whose newest message is not hermes's.
	threads, newest, err := v.threadsWhere(ctx, thread, func(i store.ThreadInfo) bool { return i.Awaiting })
	if err != nil {
		return WaitMessagesResult{}, err
	}
	out := WaitMessagesResult{Messages: []ThreadMessage{}, Cursor: newest}
	upTo := upTo(thread, newest)
	var all []msg
	for _, th := range threads {
		p, err := v.Store.Since(ctx, th, 0, 0)
		if err != nil {
			return WaitMessagesResult{}, err
		}
		msgs := p.Messages
		for len(msgs) > 0 && msgs[len(msgs)-1].Epoch > upTo {
			msgs = msgs[:len(msgs)-1]
		}
		if len(msgs) == len(p.Messages) {
			out.Cursor = max(out.Cursor, p.Cursor)
		}
		from := 0
		for i, e := range msgs {
			if e.Author == chatrelay.Hermes {
				from = i + 1
			}
		}
		for _, e := range msgs[from:] {
			all = append(all, msg{ThreadMessage{th, e.JSON2}, e.Epoch})
		}
	}
	out.Messages = oldestFirst(all)
	return out, nil
}

// upTo is the newest epoch an answer of thread reads: of one thread,
// every message (a read of a thread is whole); of every thread, newest,
// the newest epoch of their list. A message stored after the list was read
// (in a thread the list says has nothing to read, or in one it reads) is
// left to the next call: answering a later message of a thread it reads,
// and passing back that message's epoch as the cursor, passed a message
// stored meanwhile in another thread, which no later call answered.
func upTo(thread string, newest int64) int64 {
	if thread != "" {
		return math.MaxInt64
	}
	return newest
}

// threadsWhere is thread, or with thread "" every thread that keep
// keeps, and the newest epoch of every thread (0 for one thread: its read
// says).
func (v *Verbs) threadsWhere(ctx context.Context, thread string, keep func(store.ThreadInfo) bool) (threads []string, newest int64, err error) {
	if thread != "" {
		return []string{thread}, 0, nil
	}
	infos, err := v.Store.Threads(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, i := range v.inScope(infos) {
		newest = max(newest, i.LastEpoch)
		if keep(i) {
			threads = append(threads, i.Thread)
		}
	}
	return threads, newest, nil
}

// msg is a message of a wait's answer, with its epoch for the order.
type msg struct {
	ThreadMessage
	epoch int64
}

// oldestFirst orders messages of several threads by epoch.
func oldestFirst(all []msg) []ThreadMessage {
	slices.SortStableFunc(all, func(a, b msg) int { return cmp.Compare(a.epoch, b.epoch) })
	out := make([]ThreadMessage, 0, len(all))
	for _, m := range all {
		out = append(out, m.ThreadMessage)
	}
	return out
}

// messagesAfter reads every message not by hermes after since, of thread
// or of every thread, oldest first (a thread of behind after the epoch
// behind names: one whose message came behind since); the cursor is the
// newest epoch read.
func (v *Verbs) messagesAfter(ctx context.Context, thread string, since int64, behind map[string]int64) (WaitMessagesResult, error) {
	threads, newest, err := v.threadsWhere(ctx, thread, func(i store.ThreadInfo) bool {
		_, ok := behind[i.Thread]
		return i.LastEpoch > since || ok
	})
	if err != nil {
		return WaitMessagesResult{}, err
	}
	var all []msg
	out := WaitMessagesResult{Cursor: since}
	upTo := upTo(thread, max(newest, since))
	for _, th := range threads {
		from, ok := behind[th]
		if !ok {
			from = since
		}
		p, err := v.Store.Since(ctx, th, from, 0)
		if err != nil {
			return WaitMessagesResult{}, err
		}
		for _, e := range p.Messages {
			if e.Epoch > upTo {
				break // stored after the list: the next call's
			}
			out.Cursor = max(out.Cursor, e.Epoch)
			if e.Author != chatrelay.Hermes {
				all = append(all, msg{ThreadMessage{th, e.JSON2}, e.Epoch})
			}
		}
	}
	out.Messages = oldestFirst(all)
	return out, nil
}

// WaitInteractionInput is wait_interaction's input.
type WaitInteractionInput struct {
	Thread        string `json:"thread"`
	InteractionID string `json:"interaction_id"`
	Timeout       int    `json:"timeout,omitempty"` // seconds, at most 300 a call; 0: 300
}

// lookAgain is how soon a wait past the deadline on the host's clock, but
// not yet on the store's, asks the store to expire the interaction again.
const lookAgain = 250 * time.Millisecond

// WaitInteraction blocks until the interaction is no longer pending (it is
// answered, expired or canceled), or the timeout passes (or WithWaitEnd's
// end comes: TimedOut, still pending), or ctx is done (its error). A store that cannot be reached
// (StoreUnavailable) is looked at again every lookAgain until the
// timeout, which then ends the wait with that error. At its deadline it asks the store
// to expire it (settle), even if no server did so yet: an answer the store
// took before the deadline is the outcome, never expired. An interaction
// gone from the store ends the wait with not_found: at once when the feed
// tells it (Redis lost its data, retention dropped it on a post or in the
// sweep, the sweep removed its thread), else (a drop the feed lost) at the
// next look, within Recheck.
func (v *Verbs) WaitInteraction(ctx context.Context, in WaitInteractionInput) (InteractionResult, error) {
	timeout, err := waitLimit(in.Timeout)
	if err != nil {
		return InteractionResult{}, err
	}
	wctx, cancel := waitContext(ctx, timeout)
	defer cancel()
	e, err := v.find(ctx, in.Thread, in.InteractionID)
	for {
		if err == nil {
			e, err = v.settle(ctx, in.Thread, e)
		}
		if chatrelay.CodeOf(err) == chatrelay.StoreUnavailable && wctx.Err() == nil {
			// The store cannot answer for now (a Redis restarting): the
			// person may answer once it can; look again until the timeout.
			select {
			case <-wctx.Done():
			case <-time.After(lookAgain):
			}
			if ctx.Err() != nil {
				return InteractionResult{}, ctx.Err()
			}
			e, err = v.find(ctx, in.Thread, in.InteractionID)
			continue
		}
		if err != nil {
			return InteractionResult{}, err
		}
		if e.Interaction.State.Closed() {
			return v.result(in.Thread, e), nil
		}
		if ctx.Err() != nil {
			return InteractionResult{}, ctx.Err()
		}
		if wctx.Err() != nil {
			r := v.result(in.Thread, e)
			r.TimedOut = true
			return r, nil
		}
		// Follow the thread until the deadline; once it passed on this
		// clock but not yet on the store's, for lookAgain at a time.
		wait := time.UnixMilli(e.Interaction.Deadline).Sub(v.now())
		if wait <= 0 {
			wait = lookAgain
		}
		recheck := v.Recheck
		if recheck <= 0 {
			recheck = DefaultRecheck
		}
		wait = min(wait, recheck) // then looks in the store again
		got, closed, ferr := v.followInteraction(wctx, in.Thread, in.InteractionID, wait)
		switch {
		case chatrelay.CodeOf(ferr) == chatrelay.StoreUnavailable:
			err = ferr // the feed failed (Redis died under it): look again, as above
		case ferr != nil:
			return InteractionResult{}, ferr
		case ctx.Err() != nil:
			return InteractionResult{}, ctx.Err()
		case closed:
			e = got
		default:
			e, err = v.find(ctx, in.Thread, in.InteractionID)
		}
	}
}

// followInteraction follows the thread's changes for at most d, or until
// ctx is done, and returns the interaction's message once it is no longer
// pending (closed). An interaction gone from the store (a feed reset, a
// new message, whose append applies retention, the sweep's drop of it
// (Batch.Closed), or the thread's removal, a participants change, finds
// it no more) is a NotFound error.
func (v *Verbs) followInteraction(ctx context.Context, thread, id string, d time.Duration) (e store.Entry, closed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	errClosed := errors.New("closed")
	look := func() error { // in the store
		found, err := v.find(ctx, thread, id)
		switch {
		case chatrelay.CodeOf(err) == chatrelay.NotFound:
			return chatrelay.Errorf(chatrelay.NotFound, "interaction %s is gone: thread %s no longer holds it (the store lost its data, or retention dropped it)", id, thread)
		case err == nil && found.Interaction.State.Closed():
			e = found
			return errClosed
		}
		return nil // pending, or the store cannot answer now: a later batch, or the end of the wait, looks again
	}
	err = v.followThread(ctx, thread, func(b store.Batch) error {
		if b.Participants { // as a removed thread says: its interactions are gone
			return look()
		}
		for _, m := range b.Closed { // retention dropped it pending: gone, as with its thread
			if m.Interaction != nil && m.Interaction.ID == id {
				return look()
			}
		}
		appended := false
		for _, m := range b.Messages {
			if m.Interaction != nil && m.Interaction.ID == id && m.Interaction.State.Closed() {
				e = m
				return errClosed
			}
			appended = appended || m.Rev <= m.Epoch
		}
		if appended { // an append applies retention: it may have dropped the interaction
			return look()
		}
		return nil
	}, look) // registered, or reset: the store may have changed before
	if errors.Is(err, errClosed) {
		return e, true, nil
	}
	return store.Entry{}, false, err
}

// followThread calls fn with the feed's batches of thread until fn or
// ready fails or ctx is done (nil). ready runs once the wait is
// registered with the feed, and again after a Reset batch (the wait may
// have missed a change: it looks in the store).
func (v *Verbs) followThread(ctx context.Context, thread string, fn func(store.Batch) error, ready func() error) error {
	return v.feed().Follow(ctx, thread, func(b store.Batch) error {
		if b.Ready || b.Reset {
			return ready()
		}
		return fn(b)
	})
}
