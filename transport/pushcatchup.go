package transport

import (
	"context"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A feed's Reset batch says changes may have been missed: the store's
// feed lost its way, or the relay fell behind the Feed. Streams resume
// from their cursors; the pusher has no cursor of its own, so it reads
// the store instead (catchingUp): the changes of the thread (every
// thread for Thread "") after the newest change it heard of, less
// pushCatchUpSlack, are queued as the feed would have queued them. A
// change it had queued already is not sent twice: its claim (ClaimPush)
// is held or settled, and settled claims are kept (pushClaimOpen) longer
// than the slack. A change the queue has no room for is caught up the
// same way instead of being dropped.

// pushCatchUpSlack is how far before the newest change heard of a
// catch-up reads: the changes of different threads reach the feed out
// of their epochs' order by less than that, and the clocks of the nodes
// that write them differ by less.
const pushCatchUpSlack = 10 * time.Second

// catchUps is what the pusher has yet to read again from the store.
type catchUps struct {
	start int64 // when the pusher was made (ms): no catch-up reads before it
	// heard is the newest change epoch (ms) in a batch noted: read and
	// written by the relay's goroutine only (note)
	heard int64

	mu      sync.Mutex
	pending map[string]int64 // thread ("" for every thread) → read its changes after this
	wake    chan struct{}    // cap 1: pending has something
}

func newCatchUps(now time.Time) *catchUps {
	return &catchUps{start: now.UnixMilli(), heard: now.UnixMilli(), pending: map[string]int64{}, wake: make(chan struct{}, 1)}
}

// heardOf notes the changes of a batch.
func (c *catchUps) heardOf(msgs []store.Entry) {
	for _, e := range msgs {
		c.heard = max(c.heard, e.Epoch, e.Rev)
	}
}

// from is where a catch-up noted at now reads from: the newest change
// heard of, or now if that is later than now (a change of a node whose
// clock runs ahead), less the slack; never before the pusher's start.
func (c *catchUps) from(now time.Time) int64 {
	return max(c.start, min(c.heard, now.UnixMilli())-pushCatchUpSlack.Milliseconds())
}

// add notes that the changes of thread ("" for every thread) after since
// are to be read again, now.
func (c *catchUps) add(thread string, since int64) {
	c.later(thread, since)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// later notes, as add, what is to be read again, without waking the
// reader: it reads it when it is next woken, or tries again (catchingUp).
func (c *catchUps) later(thread string, since int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.pending[thread]; !ok || since < old {
		c.pending[thread] = since
	}
}

// take returns what is pending, and forgets it.
func (c *catchUps) take() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending
	c.pending = map[string]int64{}
	return p
}

// catchingUp reads what the feed may have missed from the store and
// queues its changes, until ctx is done. A read the store cannot answer
// (store_unavailable) is tried again a second later, within pushWindow.
func (ps *pusher) catchingUp(ctx context.Context) {
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ps.catchUps.wake:
		case <-again.C:
		}
		if ps.catchUp(ctx, ps.catchUps.take()) {
			again.Reset(time.Second)
		}
	}
}

// catchUp queues the changes of pending (thread → after which epoch) and
// reports whether some are to be read again later: those the store could
// not read now, noted to be tried again a second later (catchingUp). What
// it had yet to queue when ctx is done stays noted for the handover
// (handOver).
func (ps *pusher) catchUp(ctx context.Context, pending map[string]int64) (later bool) {
	queued := 0
	again := ps.missed(ctx, pending, func(thread string, m chatrelay.Message) bool {
		select {
		case ps.queue <- pushTask{thread: thread, entry: store.Entry{Message: m}, owed: pushOwed{caught: true}}:
			queued++
			return true
		case <-ctx.Done():
			return false
		}
	})
	for thread, since := range again {
		ps.catchUps.later(thread, since)
	}
	if queued > 0 {
		ps.s.log.Info("push: caught up with what the feed missed", "threads", len(pending), "changes", queued)
	}
	return len(again) > 0 && ctx.Err() == nil
}

// missed reads the changes of pending (thread, "" for every thread →
// after which epoch, never before a push's window of retries) that make
// a push, and calls fn with each, in its current state, as the feed would
// have had it when new (an approval answered meanwhile pushes only its
// closing). It returns what is still to be read: what the store could not
// read (store_unavailable), and, once fn returns false or ctx is done,
// every thread not read to its end.
func (ps *pusher) missed(ctx context.Context, pending map[string]int64, fn func(thread string, m chatrelay.Message) bool) (again map[string]int64) {
	again = map[string]int64{}
	stopped := false
	keep := func(thread string, since int64, err error) {
		switch {
		case ctx.Err() != nil:
			stopped = true
		case chatrelay.CodeOf(err) == chatrelay.StoreUnavailable:
		default:
			ps.s.log.Warn("push: could not read what the feed missed", "thread", thread, "err", err)
			return
		}
		again[thread] = since
	}
	if since, ok := pending[""]; ok {
		delete(pending, "")
		infos, err := ps.s.store.Threads(ctx)
		if err != nil {
			keep("", since, err)
		}
		for _, info := range infos {
			if old, ok := pending[info.Thread]; info.Rev > since && (!ok || since < old) {
				pending[info.Thread] = since
			}
		}
	}
	oldest := ps.s.cfg.Now().Add(-pushWindow).UnixMilli() // older changes are not pushed
	for thread, since := range pending {
		if stopped {
			again[thread] = since
			continue
		}
		if since = max(since, oldest); since >= ps.s.cfg.Now().UnixMilli() {
			continue
		}
		p, err := ps.s.store.Changes(ctx, thread, since, 0)
		if err != nil {
			keep(thread, since, err)
			continue
		}
		for _, e := range p.Messages {
			m := e.Message
			if m.Epoch > since {
				m.Rev = m.Epoch
			}
			if pushTypeOf(m) == "" {
				continue
			}
			if !fn(thread, m) {
				stopped = true
				again[thread] = since
				break
			}
		}
	}
	return again
}
