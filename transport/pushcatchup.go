package transport

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A feed's Reset batch says changes may have been missed: the store's
// feed lost its way, or the relay fell behind the Feed. Streams resume
// from their cursors; the pusher keeps one of its own per thread (heard:
// the newest change of the thread its feed handed it), and reads the
// store instead (catchingUp): the changes of the thread (of every thread,
// for Thread "") after its cursor, or after the pusher's start for a
// thread it never heard of, are queued as the feed would have queued
// them. A thread's revs strictly increase whatever the clocks of the
// nodes that write it, and its feed hands its changes on in that order,
// so a change the feed skipped is past the thread's cursor as the Reset
// found it: a node whose clock is behind loses none. A change it had
// queued already is not sent twice: its claim (ClaimPush) is held or
// settled. A change the queue has no room for is caught up the same way
// instead of being dropped.

// pushHeardThreads bounds the threads whose cursors the pusher keeps:
// past it, it forgets them all and reads each from the oldest of them
// (floor) instead: more reads, the same changes.
const pushHeardThreads = 1 << 16

// catchUps is what the pusher has yet to read again from the store.
type catchUps struct {
	mu sync.Mutex
	// floor is where a thread never heard of is read from (ms): the
	// pusher's start, or the oldest cursor it forgot (pushHeardThreads)
	floor int64
	heard map[string]int64 // thread → the newest change (rev) its feed handed on
	// read is thread → the newest change (rev) a catch-up read to its
	// end; kept for a stop's floor only (stoppedAt): a Reset reads from
	// heard, again, as before
	read    map[string]int64
	pending map[string]int64 // thread ("" for every thread) → read its changes after this
	// closed are the interactions retention dropped pending (Batch.Closed)
	// that found the queue full: no read finds them again, so they wait
	// here (at most pushClosedWaiting)
	closed []pushTask
	wake   chan struct{} // cap 1: pending or closed has something
}

// pushClosedWaiting bounds the dropped interactions' closings waiting for
// room in the queue (catchUps.closed): past it, one is not pushed.
const pushClosedWaiting = 1024

// closedLater keeps t, a dropped interaction's closing that found the
// queue full, for the reader to queue (catchUp), and reports whether
// there was room for it.
func (c *catchUps) closedLater(t pushTask) bool {
	c.mu.Lock()
	ok := len(c.closed) < pushClosedWaiting
	if ok {
		c.closed = append(c.closed, t)
	}
	c.mu.Unlock()
	c.poke()
	return ok
}

// takeClosed returns the closings kept by closedLater, and forgets them.
func (c *catchUps) takeClosed() []pushTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.closed
	c.closed = nil
	return t
}

func newCatchUps(now time.Time) *catchUps {
	return &catchUps{floor: now.UnixMilli(), heard: map[string]int64{}, read: map[string]int64{}, pending: map[string]int64{}, wake: make(chan struct{}, 1)}
}

// pushFloor is how far a stopping pusher had taken the store's changes
// (handOver): each of a thread's changes up to its cursor in Threads, of
// any other thread up to Floor (epoch ms), was queued (and so sent or
// handed over) or made no push. The next start reads what is past them
// (takeHandover, missed): the changes written while no pusher ran (a
// restart's gap), which no feed hands on. A handover document with a
// "floor" is one of these, not a change (pushHandover).
type pushFloor struct {
	Floor   int64            `json:"floor"`
	Threads map[string]int64 `json:"threads,omitempty"`
}

// stoppedAt is what c has taken of the store when its pusher stops:
// what its feed handed on (heard) and what its catch-ups read, less
// unread, what they could not read at the stop (missed's again). Nothing
// older than oldest (a push's window before the stop) is kept: the next
// start reads nothing older than its own window anyway.
func (c *catchUps) stoppedAt(oldest int64, unread map[string]int64) pushFloor {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := pushFloor{Floor: max(c.floor, oldest), Threads: map[string]int64{}}
	if since, ok := unread[""]; ok {
		f.Floor = max(min(f.Floor, since), oldest)
	}
	for _, taken := range []map[string]int64{c.heard, c.read} {
		for t, rev := range taken {
			if rev > max(f.Floor, f.Threads[t]) {
				f.Threads[t] = rev
			}
		}
	}
	for t, since := range unread {
		if t == "" {
			continue
		}
		if cur, ok := f.Threads[t]; !ok || since < cur {
			f.Threads[t] = max(since, oldest)
		}
	}
	return f
}

// after notes that f's changes are to be read (the next start's catch-up
// of a stopped pusher's gap), and wakes the reader.
func (c *catchUps) after(f pushFloor) {
	c.mu.Lock()
	c.merge("", f.Floor)
	for t, rev := range f.Threads {
		if chatrelay.ValidThread(t) {
			c.merge(t, rev)
		}
	}
	c.mu.Unlock()
	c.poke()
}

// heardOf notes the changes of a batch of thread (its cursor).
func (c *catchUps) heardOf(thread string, msgs []store.Entry) { c.noteNewest(c.heard, thread, msgs) }

// noteNewest raises cursors[thread] (heard or read) to the newest of msgs.
// Past pushHeardThreads threads it forgets them all, and the floor falls
// to the oldest of them.
func (c *catchUps) noteNewest(cursors map[string]int64, thread string, msgs []store.Entry) {
	if len(msgs) == 0 {
		return
	}
	newest := int64(0)
	for _, e := range msgs {
		newest = max(newest, e.Epoch, e.Rev)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := cursors[thread]; !ok && len(cursors) >= pushHeardThreads {
		for _, rev := range cursors {
			c.floor = min(c.floor, rev)
		}
		clear(cursors)
	}
	cursors[thread] = max(cursors[thread], newest)
}

// readTo notes that a catch-up read thread's changes msgs to their end
// (heardOf's rule, in read).
func (c *catchUps) readTo(thread string, msgs []store.Entry) { c.noteNewest(c.read, thread, msgs) }

// reset notes a Reset batch of thread ("" for every thread): its changes
// after its cursor are to be read again, now.
func (c *catchUps) reset(thread string) {
	c.mu.Lock()
	if thread == "" {
		c.merge("", c.floor)
		for t, rev := range c.heard {
			c.merge(t, rev)
		}
	} else {
		since, ok := c.heard[thread]
		if !ok {
			since = c.floor
		}
		c.merge(thread, since)
	}
	c.mu.Unlock()
	c.poke()
}

// sinceOf is where a thread listed by a catch-up of every thread is read
// from: its own pending cursor (set by reset), else the floor ("" 's).
func sinceOf(pending map[string]int64, thread string, every int64) int64 {
	if since, ok := pending[thread]; ok {
		return since
	}
	return every
}

// add notes that the changes of thread ("" for every thread) after since
// are to be read again, now.
func (c *catchUps) add(thread string, since int64) {
	c.later(thread, since)
	c.poke()
}

// poke wakes the reader.
func (c *catchUps) poke() {
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
	c.merge(thread, since)
}

// merge is later with c.mu held.
func (c *catchUps) merge(thread string, since int64) {
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
	closed := ps.catchUps.takeClosed()
	for i, t := range closed {
		select {
		case ps.queue <- t:
		case <-ctx.Done(): // the rest is handed over (handOver)
			for _, t := range closed[i:] {
				ps.leave(t.thread, t.entry.Message, t.owed)
			}
			return false
		}
	}
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
			keep("", since, err) // the threads' own cursors are read meanwhile
		} else {
			// A thread with a cursor of its own is read after it; one
			// with nothing past its cursor, or no longer listed (the
			// sweep removed it), is not read.
			listed := make(map[string]int64, len(infos))
			for _, info := range infos {
				listed[info.Thread] = info.Rev
			}
			cursors := maps.Clone(pending)
			for thread, from := range pending {
				if rev, ok := listed[thread]; !ok || rev <= from {
					delete(pending, thread)
				}
			}
			for _, info := range infos {
				// From the thread's own cursor where it has one (not the
				// floor: a thread with nothing past its cursor is not read
				// again from before it).
				if from := sinceOf(cursors, info.Thread, since); info.Rev > from {
					pending[info.Thread] = from
				}
			}
		}
	}
	oldest := ps.s.cfg.Now().Add(-pushWindow).UnixMilli() // older changes are not pushed
	for thread, since := range pending {
		if stopped {
			again[thread] = since
			continue
		}
		since = max(since, oldest) // a thread's cursor may be past this node's clock (a node ahead wrote): read all the same
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
		if !stopped {
			// Taken to its end: a stop's floor (stoppedAt) counts it as
			// taken, so that the next start does not read and send again
			// what this one queued.
			ps.catchUps.readTo(thread, p.Messages)
		}
	}
	return again
}
