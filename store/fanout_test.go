package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay/internal/assert"
)

// chanFeed is a store whose feed hands on what the test sends (send),
// and counts the feeds that run.
type chanFeed struct {
	Store
	c       chan Batch
	handed  chan struct{} // the feed handed on what was sent
	running atomic.Int32
	started atomic.Int32
	end     chan error // a value ends the feed with it
}

func newChanFeed() *chanFeed {
	return &chanFeed{c: make(chan Batch), handed: make(chan struct{}), end: make(chan error, 1)}
}

// send has the feed hand on b, and returns once it has.
func (f *chanFeed) send(b Batch) {
	f.c <- b
	<-f.handed
}

func (f *chanFeed) Follow(ctx context.Context, fn func(Batch)) error {
	f.started.Add(1)
	f.running.Add(1)
	defer f.running.Add(-1)
	fn(Batch{Ready: true})
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-f.end:
			return err
		case b := <-f.c:
			fn(b)
			f.handed <- struct{}{}
		}
	}
}

// followInto starts a reader of f's thread with fn; stop (or the test's
// end) ends it and returns what Follow returned.
func followInto(t *testing.T, f *Feed, thread string, fn func(Batch) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Follow(ctx, thread, fn) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestFeedReadsTheStoreOnce: two readers of a Feed share one store feed,
// each takes the batches of what it follows, whole; the last to leave
// stops the store's feed, and a later reader starts it again.
func TestFeedReadsTheStoreOnce(t *testing.T) {
	st := newChanFeed()
	f := NewFeed(st)
	all, one := make(chan Batch, 16), make(chan Batch, 16)
	readyAll, readyOne := make(chan struct{}), make(chan struct{})
	into := func(c chan Batch, ready chan struct{}) func(Batch) error {
		return func(b Batch) error {
			if b.Ready {
				close(ready)
				return nil
			}
			c <- b
			return nil
		}
	}
	stopAll := followInto(t, f, "", into(all, readyAll))
	stopOne := followInto(t, f, "t1", into(one, readyOne))
	<-readyAll
	<-readyOne
	assert.Equal(t, "store feeds started", st.started.Load(), int32(1))
	st.send(Batch{Thread: "t2", Messages: []Entry{entry("A", 1, 1)}})
	st.send(Batch{Thread: "t1", Messages: []Entry{entry("B", 2, 2), entry("C", 3, 3)}})
	for _, want := range []string{"t2 A@1 ", "t1 B@2 C@3 "} {
		b := <-all
		assert.Equal(t, "every thread's reader", b.Thread+" "+ids(b.Messages), want)
	}
	b := <-one
	assert.Equal(t, "t1's reader", b.Thread+" "+ids(b.Messages), "t1 B@2 C@3 ")
	assert.Success(t, stopAll())
	assert.Equal(t, "store feeds running with one reader left", st.running.Load(), int32(1))
	assert.Success(t, stopOne())
	assert.Equal(t, "store feeds running with none", st.running.Load(), int32(0))
	again := make(chan struct{})
	followInto(t, f, "", into(make(chan Batch, 1), again))
	<-again
	assert.Equal(t, "store feeds started", st.started.Load(), int32(2))
}

// TestFeedReaderThatFallsBehindCatchesUp: a reader that lets more than
// FeedBuffer batches wait is dropped and handed a Reset batch of what it
// follows once registered again, then the batches after; a reader that
// keeps up is not disturbed.
func TestFeedReaderThatFallsBehindCatchesUp(t *testing.T) {
	st := newChanFeed()
	f := NewFeed(st)
	release := make(chan struct{})
	var slow, fast []Batch
	var mu sync.Mutex
	ready := make(chan struct{}, 2)
	followInto(t, f, "", func(b Batch) error {
		if b.Ready {
			ready <- struct{}{}
			return nil
		}
		if len(slow) == 0 {
			<-release
		}
		mu.Lock()
		slow = append(slow, b)
		mu.Unlock()
		return nil
	})
	followInto(t, f, "t1", func(b Batch) error {
		if b.Ready {
			ready <- struct{}{}
			return nil
		}
		mu.Lock()
		fast = append(fast, b)
		mu.Unlock()
		return nil
	})
	<-ready
	<-ready
	for i := range FeedBuffer + 2 { // one taken and held, FeedBuffer waiting, one too many
		st.send(Batch{Thread: "t1", Messages: []Entry{entry("m", int64(i+1), int64(i+1))}})
	}
	close(release)
	last := Batch{Thread: "t1", Messages: []Entry{entry("last", 1e6, 1e6)}}
	assert.Eventually(t, 10*time.Second, "the slow reader to be reset", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(slow) > 0 && slow[len(slow)-1].Reset
	})
	st.send(last)
	assert.Eventually(t, 10*time.Second, "both readers to take the batch after", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fast) == FeedBuffer+3 && ids(slow[len(slow)-1].Messages) == "last@1000000 "
	})
	mu.Lock()
	defer mu.Unlock()
	r := slow[len(slow)-2]
	assert.Equal(t, "the reset", r, Batch{Thread: "", Reset: true})
	for _, b := range fast {
		assert.True(t, !b.Reset, "the fast reader was reset")
	}
}

// TestFeedEndsWithTheStoresError: when the store's feed ends on its own,
// its readers end with its error.
func TestFeedEndsWithTheStoresError(t *testing.T) {
	st := newChanFeed()
	f := NewFeed(st)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- f.Follow(t.Context(), "", func(b Batch) error {
			if b.Ready {
				close(ready)
			}
			return nil
		})
	}()
	<-ready
	errGone := errors.New("the store is gone")
	st.end <- errGone
	select {
	case err := <-done:
		assert.True(t, errors.Is(err, errGone), "Follow ended with %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end")
	}
}
