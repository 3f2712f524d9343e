package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/assert"
)

func entry(id string, epoch, rev int64) Entry {
	return NewEntry(chatrelay.Message{ID: id, Epoch: epoch, Rev: rev, Author: chatrelay.Hermes, Text: id})
}

func ids(es []Entry) string {
	out := ""
	for _, e := range es {
		out += fmt.Sprintf("%s@%d ", e.ID, e.Rev)
	}
	return out
}

func TestEpochOrder(t *testing.T) {
	t.Parallel()
	self := func(e Entry) Entry { return e }
	for _, tc := range []struct {
		name      string
		batch     []Entry // change order
		want      string
		unchanged bool // returned as it is
	}{
		{"empty", nil, "", true},
		{"one", []Entry{entry("A", 100, 100)}, "A@100 ", true},
		{"in order", []Entry{entry("A", 100, 100), entry("B", 101, 105)}, "A@100 B@105 ", true},
		// The file store's batch: A and B written, then A reacted to.
		{"a message after newer ones", []Entry{entry("B", 101, 101), entry("A", 100, 102)}, "A@102 B@101 ", false},
		// Redis's batch: every change in order, A twice.
		{"a message twice", []Entry{entry("A", 100, 100), entry("B", 101, 101), entry("A", 100, 102)}, "A@102 B@101 ", false},
		{"an old message changed", []Entry{entry("C", 102, 102), entry("X", 50, 103)}, "X@103 C@102 ", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EpochOrder(tc.batch, self)
			assert.Equal(t, "order", ids(got), tc.want)
			same := len(got) == len(tc.batch) && (len(got) == 0 || &got[0] == &tc.batch[0])
			assert.Equal(t, "returned as it is", same, tc.unchanged)
		})
	}
}

// feedOnly is a store whose feed hands on the batches given, then idles;
// with steps, it counts them, and waits for the reader's look at the
// threads once it listens.
type feedOnly struct {
	Store
	batches []Batch
	steps   *feedSteps
}

// feedSteps is where a feedOnly's feed stands: 0 before it listens, 1
// once it does, 1+k once it hands on batch k; it hands on the first once
// looked is closed.
type feedSteps struct {
	n      atomic.Int32
	once   sync.Once
	looked chan struct{}
}

func newFeedSteps() *feedSteps { return &feedSteps{looked: make(chan struct{})} }

// look notes that the threads were read: past the first step, the feed
// goes on.
func (f *feedSteps) look() int {
	n := int(f.n.Load())
	if n >= 1 {
		f.once.Do(func() { close(f.looked) })
	}
	return n
}

func (f feedOnly) Threads(ctx context.Context) ([]ThreadInfo, error) { return nil, nil }

func (f feedOnly) Follow(ctx context.Context, fn func(Batch)) error {
	if f.steps != nil {
		f.steps.n.Add(1)
	}
	fn(Batch{Ready: true})
	if f.steps != nil {
		select {
		case <-f.steps.looked:
		case <-ctx.Done():
			return nil
		}
	}
	for _, b := range f.batches {
		if f.steps != nil {
			f.steps.n.Add(1)
		}
		fn(b)
	}
	<-ctx.Done()
	return nil
}

// TestWatchTakesABatchInEpochOrder: another process replied A and B, then
// reacted to A, and the feed hands on the three writes as one batch in
// change order (B, then A in its reacted state); X, handed on before, also
// changed. Watch must hand on A then B as new messages (before the fix it
// skipped A, whose epoch was below B's), and with updates, X's change.
func TestWatchTakesABatchInEpochOrder(t *testing.T) {
	t.Parallel()
	for _, updates := range []bool{false, true} {
		t.Run(fmt.Sprint("updates=", updates), func(t *testing.T) {
			st := feedOnly{batches: []Batch{
				{Thread: "t1", Messages: []Entry{entry("X", 50, 50)}},
				{Thread: "t1", Messages: []Entry{entry("X", 50, 103), entry("B", 101, 101), entry("A", 100, 102)}},
			}}
			want, calls := "new X@50 new A@102 new B@101 ", 3
			if updates {
				want, calls = want+"update X@103 ", 4
			}
			assert.Equal(t, "handed on", watched(t, st, updates, calls), want)
		})
	}
}

// pagesStore is feedOnly over a thread t1 that holds states[i] at the
// feed's step i (0 before it listens), the last state from then on: what
// a watch reads from the store as it begins and after a Reset batch.
type pagesStore struct {
	feedOnly
	states [][]Entry
}

// held is what t1 holds now.
func (s pagesStore) held() []Entry {
	return s.states[min(s.steps.look(), len(s.states)-1)]
}

func (s pagesStore) Threads(ctx context.Context) ([]ThreadInfo, error) {
	msgs := s.held()
	if len(msgs) == 0 {
		return nil, nil
	}
	info := ThreadInfo{Thread: "t1", Messages: len(msgs)}
	for _, e := range msgs {
		info.LastEpoch = max(info.LastEpoch, e.Epoch)
		info.Rev = max(info.Rev, e.Rev)
	}
	return []ThreadInfo{info}, nil
}

func (s pagesStore) Since(ctx context.Context, thread string, since int64, limit int) (Page, error) {
	p := Page{Thread: thread}
	for _, e := range s.held() {
		if e.Epoch > since {
			p.Messages = append(p.Messages, e)
		}
	}
	return p, nil
}

func (s pagesStore) Changes(ctx context.Context, thread string, since int64, limit int) (Page, error) {
	p := Page{Thread: thread}
	for _, e := range s.held() {
		if e.Rev > since {
			p.Messages = append(p.Messages, e)
		}
	}
	return p, nil
}

// TestWatchCatchUpHandsOnChanges: the feed hands on X, then says it may
// have missed changes of t1 (a Reset batch: the feed was lost a while,
// or the reader fell behind), during which X was answered (rev 103) and
// B written. Watch reads the store: B is new, and with updates X's change
// is handed on too (before the fix the catch-up read new messages only,
// so an answer given while the feed was lost went unsaid).
func TestWatchCatchUpHandsOnChanges(t *testing.T) {
	t.Parallel()
	for _, updates := range []bool{false, true} {
		t.Run(fmt.Sprint("updates=", updates), func(t *testing.T) {
			st := pagesStore{
				feedOnly: feedOnly{batches: []Batch{
					{Thread: "t1", Messages: []Entry{entry("X", 50, 50)}},
					{Thread: "t1", Reset: true},
				}, steps: newFeedSteps()},
				// Nothing as the watch begins, X as the feed hands it on,
				// then X answered and B written, of which the feed is lost.
				states: [][]Entry{nil, nil, {entry("X", 50, 50)}, {entry("X", 50, 103), entry("B", 101, 101)}},
			}
			want, calls := "new X@50 new B@101 ", 2
			if updates {
				want, calls = want+"update X@103 ", 3
			}
			assert.Equal(t, "handed on", watched(t, st, updates, calls), want)
		})
	}
}

// heldStore is feedOnly over threads that held messages before the watch.
type heldStore struct {
	feedOnly
	infos []ThreadInfo
}

func (s heldStore) Threads(ctx context.Context) ([]ThreadInfo, error) { return s.infos, nil }

// TestWatchTakesAnOldMessagesChangeForNoNewMessage: t1 held X (epoch 50)
// when the watch began; a reaction to X comes as X@103, then B is written.
// X is no new message: with updates its change is an update, else nothing.
// Watch handed it on as new (its epoch was past the none handed on in t1):
// chatrelay watch printed an old message as new at each reaction to it.
func TestWatchTakesAnOldMessagesChangeForNoNewMessage(t *testing.T) {
	t.Parallel()
	for _, updates := range []bool{false, true} {
		t.Run(fmt.Sprint("updates=", updates), func(t *testing.T) {
			st := heldStore{
				feedOnly: feedOnly{batches: []Batch{
					{Thread: "t1", Messages: []Entry{entry("X", 50, 103)}},
					{Thread: "t1", Messages: []Entry{entry("B", 101, 101)}},
				}},
				infos: []ThreadInfo{{Thread: "t1", LastEpoch: 50, Rev: 50}},
			}
			want, calls := "new B@101 ", 1
			if updates {
				want, calls = "update X@103 "+want, 2
			}
			assert.Equal(t, "handed on", watched(t, st, updates, calls), want)
		})
	}
}

// TestWatchHandsOnAMessageStoredAsItBegins: t1 held X when the watch
// began, and M was stored in the instant after: before the feed listened
// (the feed never hands it on), or after it listened, before the watch
// read the threads (the feed hands it on). Either way M is new, handed on
// once. Watch read the threads once, after the feed listened, and took M
// for one held before it began: chatrelay watch never printed it.
func TestWatchHandsOnAMessageStoredAsItBegins(t *testing.T) {
	t.Parallel()
	for _, fed := range []bool{false, true} {
		for _, updates := range []bool{false, true} {
			t.Run(fmt.Sprintf("fed=%v,updates=%v", fed, updates), func(t *testing.T) {
				m := entry("M", 60, 60)
				st := pagesStore{
					feedOnly: feedOnly{steps: newFeedSteps()},
					states:   [][]Entry{{entry("X", 50, 50)}, {entry("X", 50, 50), m}},
				}
				if fed {
					st.batches = []Batch{{Thread: "t1", Messages: []Entry{m}}}
				}
				// Z, stored later, ends the watch: M twice would be seen.
				st.batches = append(st.batches, Batch{Thread: "t1", Messages: []Entry{entry("Z", 70, 70)}})
				assert.Equal(t, "handed on", watched(t, st, updates, 2), "new M@60 new Z@70 ")
			})
		}
	}
}

// watched runs Watch on st until it has handed on calls entries (or 5 s
// passed), and returns them as "new ID@REV " and "update ID@REV ".
func watched(t *testing.T, st Store, updates bool, calls int) string {
	t.Helper()
	got := ""
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // or until the calls wanted
	defer cancel()
	n := 0
	err := Watch(ctx, st, 0, updates, func(thread string, e Entry, update bool) error {
		kind := "new"
		if update {
			kind = "update"
		}
		got += fmt.Sprintf("%s %s@%d ", kind, e.ID, e.Rev)
		if n++; n == calls {
			cancel()
		}
		return nil
	}, nil, nil)
	assert.Success(t, err)
	return got
}

// TestWatchCatchUpTakesANewThreadOfASlowerClock: the watch began with no
// thread; its feed was then lost a while (a Reset batch), during which a
// node whose clock runs a minute behind the watcher's created t1 with B.
// t1 did not exist when the watch began, so B is new and must be handed
// on; the catch-up read a thread not seen yet from the watcher's own
// clock at its start, and B's epoch, a minute before that, hid it.
func TestWatchCatchUpTakesANewThreadOfASlowerClock(t *testing.T) {
	t.Parallel()
	behind := time.Now().Add(-time.Minute).UnixMilli()
	for _, updates := range []bool{false, true} {
		t.Run(fmt.Sprint("updates=", updates), func(t *testing.T) {
			st := pagesStore{
				feedOnly: feedOnly{batches: []Batch{{Thread: "t1", Reset: true}}, steps: newFeedSteps()},
				// No thread as the watch begins and once it listens; then
				// t1 with B, of which the feed is lost.
				states: [][]Entry{nil, nil, {entry("B", behind, behind)}},
			}
			assert.Equal(t, "handed on", watched(t, st, updates, 1), fmt.Sprintf("new B@%d ", behind))
		})
	}
}
