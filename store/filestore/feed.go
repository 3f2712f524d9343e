package filestore

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

type feed struct{ fn func(store.Batch) }

// ErrClosed is what Follow returns when the store closes under it.
var ErrClosed = errors.New("filestore: closed")

// Follow implements Store. Appends by this process are handed to fn inside
// Append, after the document is durable and before Append returns. Appends
// by other processes (the host CLI) are noticed by watching the chat folder,
// with a rescan every FileOptions.Rescan in case the watch misses or loses
// events. Either way a thread's messages go to fn once each, in order.
// Follow returns nil when ctx is done, and ErrClosed once the store is
// closed: it reads nothing of a closed store's folder.
func (s *File) Follow(ctx context.Context, fn func(store.Batch)) error {
	s.baseline.Do(s.recordBaseline)
	// The watch first, then ready: a feed told ready before its watch
	// began missed a thread removed between them (a removal is announced
	// by its event only; the rescans look at the documents there are).
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(s.dir); err != nil {
			w.Close()
		}
	}
	f := &feed{fn: fn}
	s.feedMu.Lock()
	s.feeds[f] = struct{}{}
	fn(store.Batch{Ready: true})
	s.feedMu.Unlock()
	defer func() {
		s.feedMu.Lock()
		delete(s.feeds, f)
		s.feedMu.Unlock()
	}()

	var events <-chan fsnotify.Event
	var errs <-chan error
	if err != nil {
		s.log.Warn("store: cannot watch the chat folder; rescanning instead", "err", err)
	} else {
		defer w.Close()
		events, errs = w.Events, w.Errors
		s.rescan() // what was appended before the watch began
	}
	tick := time.NewTicker(s.opt.Rescan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return ErrClosed
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			base := filepath.Base(ev.Name)
			if base == agentsFile {
				s.pokeAgents()
			} else if name, ok := strings.CutSuffix(base, ".participants.json"); ok && chatrelay.ValidThread(name) {
				s.pokeParticipants(name)
			} else if name, ok := strings.CutSuffix(base, ".json"); ok && chatrelay.ValidThread(name) {
				s.poke(name)
			} else if name, ok := strings.CutSuffix(base, ".log"); ok && chatrelay.ValidThread(name) {
				s.poke(name) // an append to the thread's log (log.go)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn("store: folder watch", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.rescan()
			}
		case <-tick.C:
			s.rescan()
		}
	}
}

// recordBaseline marks every thread's current messages as announced, so the
// feed starts with what is appended from now on.
func (s *File) recordBaseline() {
	names, _ := s.threadsOrWarn("store: list threads")
	for _, name := range names {
		t := s.state(name)
		t.mu.Lock()
		if snap, err := s.load(name, t); err == nil && snap != nil && snap.err == nil {
			t.announced = max(t.announced, snap.doc.rev)
			s.dropped(t, &snap.doc, snap.doc.msgs)
		}
		t.mu.Unlock()
	}
}

// threadsOrWarn is threadNames for a pass of the watch: a listing that
// fails is logged as what, and ok is false.
func (s *File) threadsOrWarn(what string) (names []string, ok bool) {
	names, err := s.threadNames()
	if err != nil {
		s.log.Warn(what, "err", err)
		return nil, false
	}
	return names, true
}

// rescan pokes every thread, the agent keys and every participants
// record, from one listing of the folder (a second one, a Glob of the
// records, cost as much again: it runs every FileOptions.Rescan, whatever
// the load).
func (s *File) rescan() {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		s.log.Warn("store: rescan", "err", err)
		return
	}
	var records []string
	for _, de := range des {
		if name, ok := threadOf(de); ok {
			s.poke(name)
		} else if name, ok := strings.CutSuffix(de.Name(), ".participants.json"); ok && chatrelay.ValidThread(name) {
			records = append(records, name)
		}
	}
	// The participants records too: a revoke by another process that the
	// watch missed (before it began, or lost in an overflow) must still end
	// the participant's streams. A record with the bytes last announced is
	// not announced again.
	s.pokeAgents() // the agent keys too: a revoke must end its sessions
	for _, name := range records {
		s.pokeParticipants(name)
	}
}

// poke announces what another process appended to thread; and, as a
// participants change, that another process removed a thread this one
// had seen (the sweep: its grants are gone, and a wait on one of its
// interactions looks in the store again).
func (s *File) poke(thread string) {
	t := s.state(thread)
	t.mu.Lock()
	defer t.mu.Unlock()
	snap, err := s.load(thread, t)
	if err == nil && snap == nil && t.announced > 0 {
		t.announced = 0
		s.announceClosed(thread, s.dropped(t, nil, nil)) // another process's sweep removed it
		s.announceParticipants(thread)
		return
	}
	if err != nil || snap == nil || snap.err != nil {
		return
	}
	s.announce(thread, t, snap.doc)
}

// announce hands the changes of d newer than t.announced (new messages and
// changed ones, by rev) to every feed. If retention dropped a message
// changed after t.announced, changes were lost to the feed and the batch
// says Reset. The caller holds t.mu.
func (s *File) announce(thread string, t *threadState, d threadDoc) {
	if d.rev <= t.announced { // the sweep's: it drops, and changes nothing
		s.announceClosed(thread, s.dropped(t, &d, nil))
		return
	}
	var changed []store.Entry
	for _, e := range d.msgs { // at most the retained messages: a scan costs less than the write
		if e.Rev > t.announced {
			changed = append(changed, e)
		}
	}
	closed := s.dropped(t, &d, changed)
	if len(changed) > 1 {
		slices.SortFunc(changed, func(a, b store.Entry) int { return cmp.Compare(a.Rev, b.Rev) })
	}
	b := store.Batch{Thread: thread, Messages: changed, Reset: d.trimmedRev > t.announced && t.announced > 0, Closed: closed}
	t.announced = d.rev
	if len(changed) == 0 && !b.Reset && len(closed) == 0 {
		return
	}
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	for f := range s.feeds {
		f.fn(b)
	}
}

// dropped returns the interactions of t.open that d (nil: the thread was
// removed) no longer holds, closed expired now (store.DroppedEntry), and
// makes d's pending interactions t.open (closed at d's newest change, or
// now if later, as their webhook events): those of t.open d holds still
// pending, and those of changed (d's messages changed since t.open was
// made: a question asked, or all of d's at first). Only retention drops a
// message, so each was dropped while pending: by this process or another,
// on append or in the sweep. The caller holds t.mu.
func (s *File) dropped(t *threadState, d *threadDoc, changed []store.Entry) []store.Entry {
	var closed []store.Entry
	var at int64 // when the drops are closed, once there is one
	open := t.open[:0]
	for _, o := range t.open {
		if d != nil {
			if i, ok := slices.BinarySearchFunc(d.msgs, o.Epoch, func(e store.Entry, epoch int64) int { return cmp.Compare(e.Epoch, epoch) }); ok {
				if asking(d.msgs[i]) {
					open = append(open, d.msgs[i])
				}
				continue
			}
		}
		if at == 0 {
			at = s.now().UnixMilli() // the sweep's time, as its webhook's
			if d != nil {
				at = max(at, d.rev) // an append's epoch, as its webhook's
			}
		}
		if e, ok := store.DroppedEntry(o.Message, at); ok {
			closed = append(closed, e)
		}
	}
	for _, e := range changed {
		if asking(e) && !slices.ContainsFunc(open, func(o store.Entry) bool { return o.Epoch == e.Epoch }) {
			open = append(open, e)
		}
	}
	if len(open) < len(t.open) {
		clear(t.open[len(open):]) // no entry kept alive past its use
	}
	t.open = open
	return closed
}

// asking reports whether e holds an interaction still pending.
func asking(e store.Entry) bool {
	return e.Interaction != nil && e.Interaction.State == chatrelay.Pending
}

// announceClosed hands the feeds the interactions of thread that
// retention dropped while pending (Batch.Closed), if any.
func (s *File) announceClosed(thread string, closed []store.Entry) {
	if len(closed) == 0 {
		return
	}
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	for f := range s.feeds {
		f.fn(store.Batch{Thread: thread, Closed: closed})
	}
}

// pokeParticipants tells the feeds that another process changed the
// thread's participants record (and puts its grants in the index). A
// record with the bytes this process wrote last is its own write, which
// writeGrants announced.
func (s *File) pokeParticipants(thread string) {
	data, err := s.readFile(s.participantsPath(thread))
	if err == nil && s.index.known(thread, maphash.Bytes(docSeed, data)) {
		return
	}
	if grants, err := s.grantsOf(thread, data, err); err == nil {
		s.noteGrants(thread, grants)
	}
	s.announceParticipants(thread)
}

// announceParticipants hands the feeds a batch saying the thread's
// participants record changed.
func (s *File) announceParticipants(thread string) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	for f := range s.feeds {
		f.fn(store.Batch{Thread: thread, Participants: true})
	}
}
