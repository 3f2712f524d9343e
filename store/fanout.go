package store

import (
	"context"
	"errors"
	"sync"

	"github.com/chatrelay/chatrelay/hub"
)

// FeedBuffer is how many batches a Feed's subscriber may have waiting
// before it is dropped and catches up from the store.
const FeedBuffer = 4096

// anyThread is the hub key under which a Feed publishes every batch, for
// the readers of every thread (a thread id is never empty).
const anyThread = ""

// Feed reads a store's change feed (Store.Follow) once for every reader in
// the process and fans its batches out through a hub.Hub: the transport's
// relay to live streams, Watch (the CLI's watch, the host's waits) and the
// host's interaction waits each follow the Feed, never the store.
//
// The store's feed runs while the Feed has readers: the first one starts
// it, the last one to leave stops it (and waits for it). There is one rule
// for a reader that falls behind: a reader with FeedBuffer batches waiting
// is dropped by the hub and registered again at once, and then handed a
// Reset batch of what it follows (Thread "" for every thread), so it
// catches up from the store, which holds everything. A Feed is safe for
// concurrent use; its zero value is not: use NewFeed.
type Feed struct {
	st Store

	mu  sync.Mutex // guards run and every run's readers
	run *feedRun   // the running store feed; nil when none
}

// feedRun is one run of the store's feed, with the hub it publishes to.
type feedRun struct {
	hub    *hub.Hub[*Batch]
	ready  chan struct{} // closed at the store feed's Ready batch
	done   chan struct{} // closed once Store.Follow returned; err is then set
	err    error
	cancel context.CancelFunc
	once   sync.Once // closes ready
	// readers counts the Follow calls on this run; guarded by Feed.mu.
	readers int
}

// NewFeed returns the Feed of st. Make one per store and process, and
// share it.
func NewFeed(st Store) *Feed { return &Feed{st: st} }

// errDropped says a reader was dropped by the hub: it registers again and
// catches up.
var errDropped = errors.New("store: a feed reader fell behind")

// Follow calls fn with the batches of thread (every thread if thread is
// "") until ctx is done (nil), fn fails (its error) or the store's feed
// ends (its error). It keeps Store.Follow's contract: the first call of
// fn is Batch{Ready: true}, once the reader is registered (a reader that
// then reads the store misses nothing); then every batch, whole and in
// change order; a Reset batch when the reader may have missed some (the
// store's, or the Feed's own for a reader that fell behind: Thread "" when
// it follows every thread). Unlike Store.Follow's, fn may take its time:
// it runs on the caller's goroutine.
func (f *Feed) Follow(ctx context.Context, thread string, fn func(Batch) error) error {
	run, sub, err := f.acquire(thread)
	defer f.release(run)
	if err != nil { // the store's feed just ended
		<-run.done
		return run.err
	}
	select {
	case <-run.ready:
	case <-run.done:
		sub.Close()
		return run.err
	case <-ctx.Done():
		sub.Close()
		return nil
	}
	first := Batch{Ready: true}
	for {
		err := follow(ctx, sub, first, fn)
		sub.Close()
		if err != errDropped {
			if errors.Is(err, hub.ErrClosed) {
				<-run.done
				return run.err
			}
			return err
		}
		// Registered again before fn reads the store: nothing falls between.
		if sub, err = run.hub.Subscribe(thread); err != nil {
			<-run.done
			return run.err
		}
		first = Batch{Thread: thread, Reset: true}
	}
}

// follow hands first, then the subscription's batches, to fn.
func follow(ctx context.Context, sub *hub.Subscription[*Batch], first Batch, fn func(Batch) error) error {
	if err := fn(first); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case b, ok := <-sub.C():
			if !ok {
				if err := sub.Err(); errors.Is(err, hub.ErrClosed) {
					return err
				}
				return errDropped
			}
			if err := fn(*b); err != nil {
				return err
			}
		}
	}
}

// acquire counts a reader in and registers it with the hub, starting the
// store's feed if none runs (after registering: the reader takes every
// batch after the Ready one).
func (f *Feed) acquire(thread string) (*feedRun, *hub.Subscription[*Batch], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := f.run
	var ctx context.Context
	if run == nil {
		ctx, run = f.newRun()
		f.run = run
	}
	run.readers++
	sub, err := run.hub.Subscribe(thread)
	if ctx != nil {
		go f.runFeed(ctx, run)
	}
	return run, sub, err
}

// release counts a reader out of run: the last one stops the store's feed
// and waits for it.
func (f *Feed) release(run *feedRun) {
	f.mu.Lock()
	run.readers--
	last := run.readers == 0
	if last && f.run == run {
		f.run = nil
	}
	f.mu.Unlock()
	if last {
		run.cancel()
		<-run.done
	}
}

// newRun is a run of the store's feed, not started, and the context to
// run it with (cancelled by its last reader).
func (f *Feed) newRun() (context.Context, *feedRun) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, &feedRun{hub: hub.New[*Batch](FeedBuffer), ready: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
}

// runFeed runs the store's feed into run's hub until the last reader
// leaves. If the store's feed ends on its own, its readers are handed its
// error, and the next reader starts it again.
func (f *Feed) runFeed(ctx context.Context, run *feedRun) {
	defer close(run.done)
	run.err = f.st.Follow(ctx, run.publish)
	run.cancel()
	f.mu.Lock()
	if f.run == run {
		f.run = nil
	}
	f.mu.Unlock()
	run.hub.Close()
}

// publish hands a batch of the store's feed to the readers of its thread
// and to those of every thread.
func (run *feedRun) publish(b Batch) {
	if b.Ready {
		run.once.Do(func() { close(run.ready) })
		return
	}
	run.hub.Publish(b.Thread, &b)
	if !b.Agents { // not a thread's: only AgentsTopic's readers take it
		run.hub.Publish(anyThread, &b)
	}
}
