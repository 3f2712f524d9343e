// Package hub fans events out to the live subscribers of each thread. It
// does no I/O and knows nothing of what an event holds or how it is
// framed: the transport encodes each change once and hands the hub that
// value (its type parameter E), which every subscriber of the thread then
// receives, shared and read-only. The transport's hub takes the store's
// change feed to the live streams, a store.Feed's takes the feed's
// batches to its readers; the outputs are bounded channels that the
// subscribers drain.
package hub

import (
	"errors"
	"sync"
)

// Why a subscription ended.
var (
	ErrSlow   = errors.New("hub: subscriber too slow; resume from the cursor")
	ErrClosed = errors.New("hub: shutting down")
	ErrReset  = errors.New("hub: messages may have been missed; resume from the store")
	// ErrOverflow: an idle subscriber was handed a batch (a feed's
	// catch-up) larger than its whole queue. It is not slow and missed
	// nothing the store does not hold: it resumes from its cursor.
	ErrOverflow = errors.New("hub: a batch larger than the queue; resume from the cursor")
)

// DefaultBuffer is the default per-subscriber queue length.
const DefaultBuffer = 64

// Hub is safe for concurrent use. One mutex guards the map of threads to
// subscriptions; Publish holds it only to make non-blocking sends, so it
// never waits on a subscriber and one thread's subscribers never delay
// another's. A subscriber whose queue is full is dropped (its channel is
// closed and Err says ErrSlow); its transport closes the connection and the
// client resumes from its cursor, losing nothing because the store is the
// truth. The hub starts no goroutines.
type Hub[E any] struct {
	buffer int

	mu      sync.Mutex // guards threads, closed and every Subscription's err and channel close
	threads map[string]map[*Subscription[E]]struct{}
	closed  bool
	// The OnDrop functions, called in order (under the hub's lock: keep
	// them cheap) when a subscriber is dropped, with the reason.
	onDrop []func(error)
}

// New returns a hub whose subscribers each queue up to buffer events
// (DefaultBuffer if buffer <= 0).
func New[E any](buffer int) *Hub[E] {
	if buffer <= 0 {
		buffer = DefaultBuffer
	}
	return &Hub[E]{buffer: buffer, threads: make(map[string]map[*Subscription[E]]struct{})}
}

// OnDrop adds a function called with the reason whenever a subscriber is
// dropped by the hub (not when it unsubscribes); each added function is
// called, in order. Add them before use. (The transport adds one that
// counts drops for its metrics.)
func (h *Hub[E]) OnDrop(fn func(error)) { h.onDrop = append(h.onDrop, fn) }

// Subscription is one live subscriber of one thread.
type Subscription[E any] struct {
	h      *Hub[E]
	thread string
	c      chan E
	err    error  // set under h.mu before c is closed
	notify func() // called after events are queued on c or c is closed by the hub; may be nil
}

// C delivers the thread's events in the order they were published. It is closed when the hub drops
// the subscriber; Err then says why.
func (s *Subscription[E]) C() <-chan E { return s.c }

// Err is nil while the subscription is live, then the reason it ended.
func (s *Subscription[E]) Err() error {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.err
}

// Close unsubscribes. It is safe to call more than once, and after a drop.
func (s *Subscription[E]) Close() {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.h.remove(s, errors.New("hub: unsubscribed"))
}

// Subscribe registers a subscriber of thread. It returns ErrClosed after
// Close.
func (h *Hub[E]) Subscribe(thread string) (*Subscription[E], error) {
	return h.SubscribeFunc(thread, nil)
}

// SubscribeFunc is Subscribe for a subscriber that holds no goroutine
// waiting on C: notify is called each time events are queued on C or the
// hub closes C, so that the subscriber can start draining C. It is called
// with the hub's lock held: it must be quick and must not call the hub.
func (h *Hub[E]) SubscribeFunc(thread string, notify func()) (*Subscription[E], error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	s := &Subscription[E]{h: h, thread: thread, c: make(chan E, h.buffer), notify: notify}
	subs := h.threads[thread]
	if subs == nil {
		subs = make(map[*Subscription[E]]struct{})
		h.threads[thread] = subs
	}
	subs[s] = struct{}{}
	return s, nil
}

// Publish hands events (of one thread, in the order they happened) to that thread's
// subscribers without blocking. A subscriber without room for all of them
// is dropped with ErrSlow, or ErrOverflow if its queue was empty.
func (h *Hub[E]) Publish(thread string, events ...E) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.threads[thread] {
		if cap(s.c)-len(s.c) < len(events) {
			why := ErrSlow
			if len(s.c) == 0 { // idle, but the batch is larger than any queue: not slow
				why = ErrOverflow
			}
			h.drop(s, why)
			continue
		}
		for _, ev := range events {
			s.c <- ev // cannot block: room was checked under h.mu, and only Publish sends
		}
		if s.notify != nil {
			s.notify()
		}
	}
}

// Reset drops every subscriber of thread with ErrReset, so each resumes
// from the store (the feed may have missed messages of that thread).
func (h *Hub[E]) Reset(thread string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.threads[thread] {
		h.drop(s, ErrReset)
	}
}

// ResetAll drops every subscriber of every thread with ErrReset (the
// feed may have missed messages of any thread).
func (h *Hub[E]) ResetAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.threads {
		for s := range subs {
			h.drop(s, ErrReset)
		}
	}
}

// Has reports whether thread has a live subscriber. A publisher may skip
// building events for a thread without one: a subscriber that registers
// later reads the store, which already holds the message.
func (h *Hub[E]) Has(thread string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.threads[thread]) > 0
}

// Subscribers returns the number of live subscribers.
func (h *Hub[E]) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, subs := range h.threads {
		n += len(subs)
	}
	return n
}

// Close drops every subscriber with ErrClosed; later Subscribes fail.
// It is idempotent.
func (h *Hub[E]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, subs := range h.threads {
		for s := range subs {
			h.drop(s, ErrClosed)
		}
	}
}

func (h *Hub[E]) drop(s *Subscription[E], why error) {
	if h.remove(s, why) {
		for _, fn := range h.onDrop {
			fn(why)
		}
		if s.notify != nil {
			s.notify()
		}
	}
}

// remove ends s with why; it reports whether s was live. h.mu is held.
func (h *Hub[E]) remove(s *Subscription[E], why error) bool {
	if s.err != nil {
		return false
	}
	s.err = why
	close(s.c)
	subs := h.threads[s.thread]
	delete(subs, s)
	if len(subs) == 0 {
		delete(h.threads, s.thread)
	}
	return true
}
