package hub_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/chatrelay/chatrelay/hub"
	"github.com/chatrelay/chatrelay/internal/assert"
)

const (
	threadA = "a1b2c3d4e5f60718"
	threadB = "0123456789abcdef"
)

// testEvent stands for what a transport publishes: the hub never looks inside.
type testEvent struct {
	Thread string
	Epoch  int64
}

func event(thread string, epoch int64) *testEvent { return &testEvent{thread, epoch} }

// drain returns the epochs queued on s without waiting, and whether C is
// closed.
func drain(s *hub.Subscription[*testEvent]) (epochs []int64, closed bool) {
	for {
		select {
		case ev, ok := <-s.C():
			if !ok {
				return epochs, true
			}
			epochs = append(epochs, ev.Epoch)
		default:
			return epochs, false
		}
	}
}

func subscribe(t *testing.T, h *hub.Hub[*testEvent], thread string) *hub.Subscription[*testEvent] {
	t.Helper()
	s, err := h.Subscribe(thread)
	assert.Success(t, err)
	t.Cleanup(s.Close)
	return s
}

// dropLog records the hub's drop reasons.
type dropLog struct {
	mu   sync.Mutex
	errs []error
}

func (d *dropLog) add(err error) { d.mu.Lock(); d.errs = append(d.errs, err); d.mu.Unlock() }
func (d *dropLog) get() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.errs...)
}

func TestHub(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		buffer int
		// run acts on a hub with subscribers a1, a2 (thread A) and b (thread B).
		run func(t *testing.T, h *hub.Hub[*testEvent], a1, a2, b *hub.Subscription[*testEvent])
		// Each subscriber's queued epochs, whether its channel is closed, and its Err.
		wantA1, wantA2, wantB []int64
		closedA1, closedA2    bool
		errA1, errA2, errB    error
		drops                 []error
	}{
		{
			name:   "fan-out in order to the thread's subscribers only",
			buffer: 8,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, _, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadA, event(threadA, 1), event(threadA, 2))
				h.Publish(threadA, event(threadA, 3))
			},
			wantA1: []int64{1, 2, 3}, wantA2: []int64{1, 2, 3},
		},
		{
			name:   "a slow subscriber is dropped with ErrSlow; the others still get the message",
			buffer: 2,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, a2, _ *hub.Subscription[*testEvent]) {
				for e := int64(1); e <= 3; e++ {
					h.Publish(threadA, event(threadA, e))
					if e == 2 {
						// a2 keeps up, a1 never reads.
						got, _ := drain(a2)
						assert.Equal(t, "a2 after two", got, []int64{1, 2})
					}
				}
			},
			wantA1: []int64{1, 2}, closedA1: true, errA1: hub.ErrSlow,
			wantA2: []int64{3},
			drops:  []error{hub.ErrSlow},
		},
		{
			name:   "a batch bigger than the room left drops the subscriber without a partial batch",
			buffer: 4,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, a2, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadA, event(threadA, 1), event(threadA, 2))
				got, _ := drain(a2)
				assert.Equal(t, "a2 first batch", got, []int64{1, 2})
				h.Publish(threadA, event(threadA, 3), event(threadA, 4), event(threadA, 5))
			},
			wantA1: []int64{1, 2}, closedA1: true, errA1: hub.ErrSlow,
			wantA2: []int64{3, 4, 5},
			drops:  []error{hub.ErrSlow},
		},
		{
			name:   "Reset drops the thread's subscribers with ErrReset, other threads untouched",
			buffer: 8,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, _, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadA, event(threadA, 1))
				h.Reset(threadA)
				h.Publish(threadA, event(threadA, 2)) // nobody left to get it
				h.Publish(threadB, event(threadB, 7))
				assert.True(t, !h.Has(threadA), "thread A still has subscribers after Reset")
				s := subscribe(t, h, threadA) // a resuming client subscribes again
				h.Publish(threadA, event(threadA, 3))
				got, closed := drain(s)
				assert.Equal(t, "resubscribed", got, []int64{3})
				assert.True(t, !closed, "a new subscription after Reset is closed")
			},
			wantA1: []int64{1}, closedA1: true, errA1: hub.ErrReset,
			wantA2: []int64{1}, closedA2: true, errA2: hub.ErrReset,
			wantB: []int64{7},
			drops: []error{hub.ErrReset, hub.ErrReset},
		},
		{
			name:   "ResetAll drops every thread's subscribers with ErrReset; new ones are welcome",
			buffer: 8,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, _, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadB, event(threadB, 5))
				h.ResetAll()
				assert.Equal(t, "subscribers after ResetAll", h.Subscribers(), 0)
				s := subscribe(t, h, threadA)
				h.Publish(threadA, event(threadA, 6))
				got, closed := drain(s)
				assert.Equal(t, "resubscribed", got, []int64{6})
				assert.True(t, !closed, "a new subscription after ResetAll is closed")
			},
			closedA1: true, errA1: hub.ErrReset,
			closedA2: true, errA2: hub.ErrReset,
			wantB: []int64{5}, errB: hub.ErrReset,
			drops: []error{hub.ErrReset, hub.ErrReset, hub.ErrReset},
		},
		{
			name:   "Close drops everyone with ErrClosed and refuses new subscribers",
			buffer: 8,
			run: func(t *testing.T, h *hub.Hub[*testEvent], _, _, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadB, event(threadB, 5))
				h.Close()
				h.Close() // idempotent
				h.Publish(threadA, event(threadA, 6))
				_, err := h.Subscribe(threadA)
				assert.ErrorIs(t, err, hub.ErrClosed)
				assert.Equal(t, "subscribers after Close", h.Subscribers(), 0)
			},
			closedA1: true, errA1: hub.ErrClosed,
			closedA2: true, errA2: hub.ErrClosed,
			wantB: []int64{5}, errB: hub.ErrClosed,
			drops: []error{hub.ErrClosed, hub.ErrClosed, hub.ErrClosed},
		},
		{
			name:   "a subscriber that unsubscribes is not counted as dropped and gets nothing more",
			buffer: 8,
			run: func(t *testing.T, h *hub.Hub[*testEvent], a1, _, _ *hub.Subscription[*testEvent]) {
				h.Publish(threadA, event(threadA, 1))
				a1.Close()
				a1.Close() // idempotent
				h.Publish(threadA, event(threadA, 2))
				assert.Equal(t, "subscribers", h.Subscribers(), 2)
			},
			wantA1: []int64{1}, closedA1: true,
			wantA2: []int64{1, 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := hub.New[*testEvent](tc.buffer)
			var drops dropLog
			h.OnDrop(drops.add)
			a1, a2, b := subscribe(t, h, threadA), subscribe(t, h, threadA), subscribe(t, h, threadB)
			tc.run(t, h, a1, a2, b)

			for _, c := range []struct {
				name   string
				s      *hub.Subscription[*testEvent]
				want   []int64
				closed bool
				err    error
			}{{"a1", a1, tc.wantA1, tc.closedA1, tc.errA1}, {"a2", a2, tc.wantA2, tc.closedA2, tc.errA2}, {"b", b, tc.wantB, tc.errB != nil, tc.errB}} {
				got, closed := drain(c.s)
				assert.Equal(t, c.name+" epochs", got, c.want)
				assert.Equal(t, c.name+" closed", closed, c.closed)
				if c.err != nil {
					assert.ErrorIs(t, c.s.Err(), c.err)
				} else if !c.closed {
					assert.Equal(t, c.name+" Err", c.s.Err(), nil)
				}
			}
			assert.Equal(t, "drop reasons", drops.get(), tc.drops)
		})
	}
}

func TestDroppedSubscriptionKeepsItsReason(t *testing.T) {
	t.Parallel()
	h := hub.New[*testEvent](1)
	s := subscribe(t, h, threadA)
	h.Publish(threadA, event(threadA, 1))
	h.Publish(threadA, event(threadA, 2)) // the queue of one is full: slow
	assert.ErrorIs(t, s.Err(), hub.ErrSlow)
	s.Close() // after a drop: no panic, reason kept
	h.Close() // no second close of the channel
	h.Reset(threadA)
	assert.ErrorIs(t, s.Err(), hub.ErrSlow)
	assert.Equal(t, "Has", h.Has(threadA), false)
}

func TestBatchLargerThanQueueIsAnOverflowNotSlow(t *testing.T) {
	t.Parallel()
	h := hub.New[*testEvent](2)
	s := subscribe(t, h, threadA)
	h.Publish(threadA, event(threadA, 1), event(threadA, 2), event(threadA, 3))
	assert.ErrorIs(t, s.Err(), hub.ErrOverflow) // idle, yet it cannot take the batch: resume from the cursor
}

func TestPublishNeverBlocks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := hub.New[*testEvent](4)
		stuck := subscribe(t, h, threadA) // never reads
		other := subscribe(t, h, threadB)
		got := make(chan int64) // thread B's reader hands over each event
		go func() {
			for ev := range other.C() {
				got <- ev.Epoch
			}
		}()
		done := make(chan struct{})
		var received []int64
		go func() {
			defer close(done)
			for e := int64(1); e <= 500; e++ {
				h.Publish(threadA, event(threadA, e))
				h.Publish(threadB, event(threadB, e))
				received = append(received, <-got)
			}
		}()
		synctest.Wait() // every goroutine of the bubble is idle or done
		select {
		case <-done:
		default:
			t.Fatal("Publish blocked on a subscriber that does not read")
		}
		assert.ErrorIs(t, stuck.Err(), hub.ErrSlow)
		assert.Equal(t, "thread B deliveries", len(received), 500)
		assert.Equal(t, "thread B last", received[499], int64(500))
		assert.Equal(t, "thread B subscriber Err", other.Err(), nil)
	})
}

// TestConcurrentUse runs publishers, subscribers and resets at once (for
// the race detector) and checks that every subscriber that was not dropped
// saw a gap-free, ordered run of epochs.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := hub.New[*testEvent](16)
		var wg sync.WaitGroup
		threads := []string{threadA, threadB}
		for _, th := range threads {
			wg.Go(func() {
				for e := int64(1); e <= 300; e++ {
					h.Publish(th, event(th, e))
					if e%100 == 0 {
						h.Reset(th)
					}
				}
			})
		}
		errs := make(chan error, 40)
		for i := range 40 {
			th := threads[i%2]
			wg.Go(func() {
				s, err := h.Subscribe(th)
				if err != nil {
					errs <- err
					return
				}
				defer s.Close()
				var prev int64
				n := 0
				for ev := range s.C() {
					if prev != 0 && ev.Epoch != prev+1 {
						errs <- fmt.Errorf("subscriber of %s: %d after %d", th, ev.Epoch, prev)
						return
					}
					if ev.Thread != th {
						errs <- fmt.Errorf("subscriber of %s got an event of %s", th, ev.Thread)
						return
					}
					prev = ev.Epoch
					if n++; n == 50 {
						return // unsubscribe while publishers run
					}
				}
			})
		}
		synctest.Wait()
		h.Close() // ends the subscribers still waiting
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// BenchmarkPublish fans one prebuilt event out to n subscribers of a
// thread. Subscribers are drained (timer stopped) before their queues fill,
// so nobody is dropped.
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run("subscribers="+strconv.Itoa(n), func(b *testing.B) {
			h := hub.New[*testEvent](hub.DefaultBuffer)
			subs := make([]*hub.Subscription[*testEvent], n)
			for i := range subs {
				s, err := h.Subscribe(threadA)
				if err != nil {
					b.Fatal(err)
				}
				subs[i] = s
			}
			ev := event(threadA, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				h.Publish(threadA, ev)
				if i++; i%hub.DefaultBuffer == 0 {
					b.StopTimer()
					for _, s := range subs {
						for len(s.C()) > 0 {
							<-s.C()
						}
					}
					b.StartTimer()
				}
			}
			b.StopTimer()
			if got := h.Subscribers(); got != n {
				b.Fatalf("%d subscribers left of %d: some were dropped", got, n)
			}
		})
	}
}

// TestSubscribeFuncNotifies: a subscriber without a goroutine on C is
// told each time there is something to drain: events queued for its
// thread, or its channel closed by a drop, a reset or Close; never for
// another thread's events, nor when it unsubscribes itself.
func TestSubscribeFuncNotifies(t *testing.T) {
	t.Parallel()
	h := hub.New[*testEvent](2)
	var n [2]int // notifications, under the hub's lock
	sub := func(i int, thread string) *hub.Subscription[*testEvent] {
		s, err := h.SubscribeFunc(thread, func() { n[i]++ })
		assert.Success(t, err)
		return s
	}
	a, b := sub(0, threadA), sub(1, threadB)

	h.Publish(threadA, event(threadA, 1), event(threadA, 2))
	assert.Equal(t, "notifications after one batch", n, [2]int{1, 0})
	got, _ := drain(a)
	assert.Equal(t, "queued", got, []int64{1, 2})

	h.Publish(threadA, event(threadA, 3), event(threadA, 4))
	h.Publish(threadA, event(threadA, 5)) // no room: dropped as slow
	assert.Equal(t, "notifications after a drop", n, [2]int{3, 0})
	got, closed := drain(a)
	assert.Equal(t, "queued before the drop", got, []int64{3, 4})
	assert.True(t, closed, "C is open after the drop")
	assert.ErrorIs(t, a.Err(), hub.ErrSlow)

	h.Reset(threadB)
	assert.Equal(t, "notifications after a reset", n, [2]int{3, 1})
	_, closed = drain(b)
	assert.True(t, closed, "reset subscriber's C is open")
	sub(1, threadB).Close()
	assert.Equal(t, "after unsubscribing", n, [2]int{3, 1})
	d := sub(1, threadB)
	h.Close()
	assert.Equal(t, "after Close", n, [2]int{3, 2})
	_, closed = drain(d)
	assert.True(t, closed, "C is open after Close")
}
