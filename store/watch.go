package store

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Watch calls fn with every message appended to any thread of st from now
// on, by any process, once each and in epoch order within a thread; with
// since > 0 it first calls fn with every stored message with epoch >
// since, oldest first across threads. With updates, it also calls fn
// (update true) with each later change of a message it already handed on,
// in its new state. It reads the change feed (st.Follow) through a
// bounded queue, so a slow fn never blocks the feed: past the queue, and
// after a Reset batch, it catches up from the store instead (new messages
// only). A thread it cannot read is reported to skipped and left out.
// Watch returns when ctx is done (nil) or fn fails (fn's error).
func Watch(ctx context.Context, st Store, since int64, updates bool, fn func(thread string, e Entry, update bool) error, skipped func(thread string, err error)) error {
	q := newBatchQueue(4096)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { st.Follow(ctx, q.push) })
	select { // the feed is registered before the store is read: nothing falls between
	case <-q.ready:
	case <-ctx.Done():
		return nil
	}

	last := map[string]int64{}    // per thread, the newest epoch handed on
	lastRev := map[string]int64{} // per thread, the newest change handed on
	// deliver hands on a batch (in change order): its new messages in epoch
	// order, then, with updates, the changes of messages handed on before.
	deliver := func(thread string, msgs []Entry) error {
		base, baseRev := last[thread], lastRev[thread]
		for _, e := range EpochOrder(msgs, func(e Entry) Entry { return e }) {
			if e.Epoch <= last[thread] {
				continue
			}
			last[thread] = e.Epoch
			lastRev[thread] = max(lastRev[thread], e.Rev)
			if err := fn(thread, e, false); err != nil {
				return err
			}
		}
		if !updates {
			return nil
		}
		for _, e := range msgs {
			if e.Epoch > base || e.Rev <= baseRev {
				continue
			}
			lastRev[thread] = max(lastRev[thread], e.Rev)
			if err := fn(thread, e, true); err != nil {
				return err
			}
		}
		return nil
	}
	// catchUp delivers what the store has after each thread's last epoch
	// (after from, for threads not seen yet), oldest first across threads.
	catchUp := func(from int64, only string) error {
		infos, err := st.Threads(ctx)
		if err != nil {
			return err
		}
		type entry struct {
			thread string
			e      Entry
		}
		var backlog []entry
		for _, info := range infos {
			if only != "" && info.Thread != only {
				continue
			}
			after, seen := last[info.Thread]
			if !seen {
				after = from
			}
			p, err := st.Since(ctx, info.Thread, after, 0)
			if err != nil {
				if skipped != nil {
					skipped(info.Thread, err)
				}
				continue
			}
			for _, e := range p.Messages {
				backlog = append(backlog, entry{info.Thread, e})
			}
		}
		slices.SortStableFunc(backlog, func(a, b entry) int { return int(a.e.Epoch - b.e.Epoch) })
		for _, b := range backlog {
			if err := deliver(b.thread, []Entry{b.e}); err != nil {
				return err
			}
		}
		return nil
	}
	if since > 0 {
		if err := catchUp(since, ""); err != nil {
			return err
		}
	}
	start := time.Now().UnixMilli()
	for {
		batches, lost, ok := q.pop(ctx)
		if !ok {
			return nil
		}
		if lost { // the queue overflowed: the store has everything
			if err := catchUp(start, ""); err != nil {
				return err
			}
			continue
		}
		for _, b := range batches {
			var err error
			if b.Reset {
				err = catchUp(start, b.Thread)
			} else {
				err = deliver(b.Thread, b.Messages)
			}
			if err != nil {
				return err
			}
		}
	}
}

// batchQueue takes feed batches without blocking the feed; past max
// batches it drops them and says so, and the reader catches up from the
// store.
type batchQueue struct {
	max   int
	ready chan struct{}
	wake  chan struct{}
	mu    sync.Mutex // guards items and lost
	items []Batch
	lost  bool
}

func newBatchQueue(max int) *batchQueue {
	return &batchQueue{max: max, ready: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (q *batchQueue) push(b Batch) {
	if b.Ready {
		close(q.ready)
		return
	}
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.items, q.lost = nil, true
	} else if !q.lost {
		q.items = append(q.items, b)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *batchQueue) pop(ctx context.Context) ([]Batch, bool, bool) {
	for {
		q.mu.Lock()
		items, lost := q.items, q.lost
		q.items, q.lost = nil, false
		q.mu.Unlock()
		if len(items) > 0 || lost {
			return items, lost, true
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, false, false
		}
	}
}
