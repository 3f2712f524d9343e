package store

import (
	"context"
	"slices"
)

// Watch is NewFeed(st).Watch: for a process that watches once (the CLI's
// watch). A process with several readers shares one Feed.
func Watch(ctx context.Context, st Store, since int64, updates bool, fn func(thread string, e Entry, update bool) error, gap func(thread string) error, skipped func(thread string, err error)) error {
	return NewFeed(st).Watch(ctx, since, updates, fn, gap, skipped)
}

// Watch calls fn with every message appended to any thread of the store
// from now on (from its first read of the threads, even before the feed
// listens), by any process, once each and in epoch order within a
// thread; with since > 0 it first calls fn with every stored message with
// epoch > since, oldest first across threads. With updates, it also calls
// fn (update true) with each later change of a message it already handed
// on, in its new state. It follows the Feed, so a slow fn never blocks
// the store's feed: after a Reset batch (the store's, or the Feed's when
// fn fell behind) it catches up from the store instead (new messages,
// and with updates the changes of those it handed on). A thread it
// cannot read is reported to skipped and left out; gap, if not nil, is
// called with a thread whose catch-up finds that retention dropped
// messages after what was handed on (or after since), before that
// thread's messages: the reader missed messages it can no longer get.
// Watch returns when
// ctx is done (nil), fn fails (fn's error) or the store's feed ends (its
// error).
func (f *Feed) Watch(ctx context.Context, since int64, updates bool, fn func(thread string, e Entry, update bool) error, gap func(thread string) error, skipped func(thread string, err error)) error {
	w := &watcher{st: f.st, updates: updates, fn: fn, gap: gap, skipped: skipped, last: map[string]int64{}, lastRev: map[string]int64{}}
	if since == 0 {
		// What the threads hold before the watch listens is old; what is
		// stored from this read on is new: the catch-up once it listens
		// reads what came before the feed had it registered.
		infos, err := w.st.Threads(ctx)
		if err != nil {
			return err
		}
		w.known(infos)
	}
	return f.Follow(ctx, anyThread, func(b Batch) error {
		switch {
		case b.Ready: // registered before the store is read: nothing falls between
			infos, err := w.st.Threads(ctx) // before the catch-up: what came after it is new
			if err != nil {
				return err
			}
			if err := w.catchUpThreads(ctx, infos, since, anyThread); err != nil {
				return err
			}
			w.known(infos)
			return nil
		case b.Reset:
			// A thread not seen yet did not exist when the store was
			// read as the watch began (known marks those that did): each of its
			// messages past since is new, whatever the clock of the
			// node that wrote it, so it is read from since, not from
			// this process's clock at Ready (a node behind it wrote
			// below that).
			return w.catchUp(ctx, since, b.Thread)
		}
		return w.deliver(b.Thread, b.Messages)
	})
}

// watcher is the state of a Watch: what it handed on so far.
type watcher struct {
	st      Store
	updates bool
	fn      func(thread string, e Entry, update bool) error
	gap     func(thread string) error // nil: gaps are not reported
	skipped func(thread string, err error)
	last    map[string]int64 // per thread, the newest epoch handed on
	lastRev map[string]int64 // per thread, the newest change handed on
}

// deliver hands on a batch (in change order): its new messages in epoch
// order, then, with updates, the changes of messages handed on before.
func (w *watcher) deliver(thread string, msgs []Entry) error {
	base, baseRev := w.last[thread], w.lastRev[thread]
	for _, e := range EpochOrder(msgs, func(e Entry) Entry { return e }) {
		if e.Epoch <= w.last[thread] {
			continue
		}
		w.last[thread] = e.Epoch
		w.lastRev[thread] = max(w.lastRev[thread], e.Rev)
		if err := w.fn(thread, e, false); err != nil {
			return err
		}
	}
	if !w.updates {
		return nil
	}
	for _, e := range msgs {
		if e.Epoch > base || e.Rev <= baseRev {
			continue
		}
		w.lastRev[thread] = max(w.lastRev[thread], e.Rev)
		if err := w.fn(thread, e, true); err != nil {
			return err
		}
	}
	return nil
}

// known marks what the threads held as the watch began (infos, read
// before since's catch-up) as handed on: a batch the feed hands on late,
// or a change of a message written before (a reaction to it), is then no
// new message, though its epoch is past those handed on in its thread
// (none, in a thread with nothing after since); with updates, a later
// change of it is an update. A message stored after infos were read has
// a greater epoch, and is handed on.
func (w *watcher) known(infos []ThreadInfo) {
	for _, info := range infos {
		w.last[info.Thread] = max(w.last[info.Thread], info.LastEpoch)
		w.lastRev[info.Thread] = max(w.lastRev[info.Thread], info.Rev)
	}
}

// catchUp delivers what the store has after each thread's last epoch
// (after from, for threads not seen yet), oldest first across threads;
// of only, if not "". With updates, a thread seen already is read by its
// changes after the newest one handed on, and delivered as one batch: its
// new messages, then the messages it had handed on that changed meanwhile
// (an interaction answered while the feed was lost), which a read of new
// messages alone would leave unsaid.
func (w *watcher) catchUp(ctx context.Context, from int64, only string) error {
	infos, err := w.st.Threads(ctx)
	if err != nil {
		return err
	}
	return w.catchUpThreads(ctx, infos, from, only)
}

// catchUpThreads is catchUp over the threads infos lists.
func (w *watcher) catchUpThreads(ctx context.Context, infos []ThreadInfo, from int64, only string) error {
	type entry struct {
		thread string
		e      Entry
	}
	var backlog []entry
	type changes struct {
		thread string
		msgs   []Entry
	}
	var changed []changes // threads seen already, with updates
	for _, info := range infos {
		if only != "" && info.Thread != only {
			continue
		}
		after, seen := w.last[info.Thread]
		switch {
		case seen && w.updates && info.Rev <= w.lastRev[info.Thread],
			seen && !w.updates && info.LastEpoch <= after,
			!seen && info.LastEpoch <= from:
			continue // nothing in it to hand on
		}
		var p Page
		var err error
		switch {
		case seen && w.updates:
			p, err = w.st.Changes(ctx, info.Thread, w.lastRev[info.Thread], 0)
		case seen:
			p, err = w.st.Since(ctx, info.Thread, after, 0)
		default:
			p, err = w.st.Since(ctx, info.Thread, from, 0)
		}
		if err != nil {
			if w.skipped != nil {
				w.skipped(info.Thread, err)
			}
			continue
		}
		if p.Reset && w.gap != nil {
			if err := w.gap(info.Thread); err != nil {
				return err
			}
		}
		if p.Reset && len(p.Messages) == 0 {
			// Nothing newer than what was handed on is left: the
			// thread as listed is handed on, so that the next catch-up
			// of it does not find the same gap and report it again (a
			// message stored after the list has a greater epoch and rev).
			w.last[info.Thread] = max(w.last[info.Thread], info.LastEpoch)
			w.lastRev[info.Thread] = max(w.lastRev[info.Thread], info.Rev)
			continue
		}
		if seen && w.updates {
			changed = append(changed, changes{info.Thread, p.Messages})
			continue
		}
		for _, e := range p.Messages {
			backlog = append(backlog, entry{info.Thread, e})
		}
	}
	slices.SortStableFunc(backlog, func(a, b entry) int { return int(a.e.Epoch - b.e.Epoch) })
	for _, b := range backlog {
		if err := w.deliver(b.thread, []Entry{b.e}); err != nil {
			return err
		}
	}
	for _, c := range changed {
		if err := w.deliver(c.thread, c.msgs); err != nil {
			return err
		}
	}
	return nil
}
