package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The deliverer's side of the webhook outbox (outbox.go has the writer's):
// the destinations' progress, Take, Done and Retry, and compaction.

// outbox is the deliverer's side: the destinations' progress.
type outbox struct {
	s     *File
	mu    sync.Mutex // guards dests
	dests map[string]*destQueue
}

// destQueue is one destination's progress; its mu is held by Take, Done
// and Retry.
type destQueue struct {
	mu      sync.Mutex
	path    string // the queue file
	state   string // the state file
	loaded  bool
	gen     string
	head    int64 // the length of the queue file's header line
	off     int64 // bytes of the queue file read
	base    int64 // every event before it is settled
	pending []*queued
	restore map[string]eventState // the saved attempts of events not read yet
	dirty   bool
	saved   time.Time
	// compacted is when the queue file was last emptied by this process.
	compacted time.Time
}

type queued struct {
	line     queueLine
	off, end int64
	attempts int
	next     time.Time
	leased   bool
	settled  bool
}

// stateFile is the JSON of DATA/webhooks/<destination>.state.
type stateFile struct {
	Gen    string                `json:"gen"`
	Base   int64                 `json:"base"`
	Events map[string]eventState `json:"events,omitempty"`
}

type eventState struct {
	Attempts int   `json:"attempts,omitempty"`
	Next     int64 `json:"next,omitempty"` // ms
	Settled  bool  `json:"settled,omitempty"`
}

var _ store.Outbox = (*outbox)(nil)

// dir is DATA/webhooks: the destinations' queues, states and .gone marks.
func (o *outbox) dir() string { return filepath.Join(filepath.Dir(o.s.dir), "webhooks") }

func (o *outbox) dest(id string) *destQueue {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.dests[id]
	if d == nil {
		dir := o.dir()
		d = &destQueue{path: filepath.Join(dir, id+".queue"), state: filepath.Join(dir, id+".state")}
		o.dests[id] = d
	}
	return d
}

// Take implements store.Outbox.
func (o *outbox) Take(ctx context.Context, dest string, now time.Time, max int) ([]store.Due, error) {
	d := o.dest(dest)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.loaded {
		if err := d.load(); err != nil {
			return nil, err
		}
	}
	if err := d.readMore(o.s); err != nil {
		return nil, err
	}
	d.advance()
	if err := d.compact(o.s); err != nil {
		o.s.log.Warn("webhook queue: compact", "dest", dest, "err", err)
	}
	var out []store.Due
	for _, q := range d.pending {
		if len(out) >= max {
			break
		}
		if q.settled || q.leased || q.next.After(now) {
			continue
		}
		// Confirmed before its first attempt: an event retried was
		// confirmed then, and its change stays stored even once retention
		// has dropped it (the sweep may have removed its thread since).
		ok := q.attempts > 0
		if !ok {
			var err error
			if ok, err = o.s.confirm(ctx, &q.line); err != nil {
				return out, err
			}
		}
		if !ok {
			o.s.log.Warn("webhook event dropped: its change was not stored (a crash between the two writes, or a refused write)", "dest", dest, "event", q.line.ID, "thread", q.line.Thread)
			q.settled, d.dirty = true, true
			continue
		}
		q.leased = true
		out = append(out, store.Due{Event: store.Event{ID: q.line.ID, Type: q.line.Type, Thread: q.line.Thread,
			At: time.UnixMilli(q.line.At).UTC(), Message: q.line.Message, Participant: q.line.Participant}, Attempts: q.attempts}.WithToken(q))
	}
	d.advance()
	if d.dirty && time.Since(d.saved) >= stateSaveEvery {
		if err := d.save(o.s.dsync != nil); err != nil {
			o.s.log.Warn("webhook queue: save state", "dest", dest, "err", err)
		}
	}
	return out, nil
}

// Done implements store.Outbox.
func (o *outbox) Done(ctx context.Context, dest string, due store.Due) error {
	return o.settle(dest, due, func(q *queued) { q.settled = true })
}

// Retry implements store.Outbox.
func (o *outbox) Retry(ctx context.Context, dest string, due store.Due, at time.Time) error {
	return o.settle(dest, due, func(q *queued) { q.attempts, q.next = due.Attempts+1, at })
}

func (o *outbox) settle(dest string, due store.Due, fn func(*queued)) error {
	q, ok := due.Token().(*queued)
	if !ok {
		return errors.New("webhook queue: not an event of this store")
	}
	d := o.dest(dest)
	d.mu.Lock()
	defer d.mu.Unlock()
	q.leased = false
	fn(q)
	d.dirty = true
	return nil
}

// close saves every destination's progress.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.dests {
		d.mu.Lock()
		if d.loaded && d.dirty {
			d.advance()
			d.save(o.s.dsync != nil)
		}
		d.mu.Unlock()
	}
}

// load reads the saved state.
func (d *destQueue) load() error {
	b, err := os.ReadFile(d.state)
	var st stateFile
	if err == nil {
		if json.Unmarshal(b, &st) != nil {
			st = stateFile{} // start over: at least once
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	gen, hlen, err := readHeader(d.path)
	if err != nil {
		return err
	}
	d.gen, d.head, d.base = gen, hlen, hlen
	if gen != "" && st.Gen == gen && st.Base >= hlen {
		d.base = st.Base
	}
	d.off = d.base
	d.loaded = true
	d.pending = nil
	d.restore = st.Events
	if st.Gen != gen {
		d.restore = nil
	}
	return nil
}

// readHeader returns the queue file's generation and the length of its
// header line ("" and 0 for a missing or empty file).
func readHeader(path string) (string, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err == io.EOF {
		return "", 0, nil // no whole header yet
	}
	if err != nil {
		return "", 0, err
	}
	var h queueHeader
	if json.Unmarshal(line, &h) != nil || h.Queue != queueMagic {
		return "", 0, fmt.Errorf("webhook queue %s: not a queue file", path)
	}
	return h.Gen, int64(len(line)), nil
}

// readMore reads the whole lines appended since the last read.
func (d *destQueue) readMore(s *File) error {
	if d.gen == "" { // no file, or no header yet, when loaded
		gen, hlen, err := readHeader(d.path)
		if err != nil || gen == "" {
			return err
		}
		d.gen, d.head, d.base, d.off = gen, hlen, hlen, hlen
	}
	if len(d.pending) >= queueMemory {
		return nil
	}
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(d.off, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReader(f)
	for len(d.pending) < queueMemory {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil // EOF, or a line still being written
		}
		start := d.off
		d.off += int64(len(line))
		var q queued
		if err := json.Unmarshal(line, &q.line); err != nil || q.line.ID == "" {
			s.log.Warn("webhook queue: a torn line is skipped (its change was not stored)", "file", d.path, "offset", start)
			continue
		}
		q.off, q.end = start, d.off
		if st, ok := d.restore[q.line.ID]; ok {
			q.attempts, q.settled = st.Attempts, st.Settled
			if st.Next > 0 {
				q.next = time.UnixMilli(st.Next)
			}
		}
		d.pending = append(d.pending, &q)
	}
	return nil
}

// advance drops the settled events at the head of pending.
func (d *destQueue) advance() {
	i := 0
	for i < len(d.pending) && d.pending[i].settled {
		d.base = d.pending[i].end
		i++
	}
	if i > 0 {
		d.pending = append(d.pending[:0], d.pending[i:]...)
	}
	if len(d.pending) == 0 && d.base < d.off {
		d.base = d.off // torn lines only
	}
}

// compact empties a queue file whose events are all settled, under the
// queue's lock: a new file of a new generation replaces it (renamed over
// it), so a state saved for the old one is never applied to the new one.
// It does so once the file is large, or once compactEvery has passed
// since it last did, so that a settled event's message text stays in no
// file for long (the sweep may have removed its thread), and a queue
// that keeps up with a busy thread is not rewritten at every event.
func (d *destQueue) compact(s *File) error {
	if len(d.pending) > 0 || d.base != d.off || d.off <= d.head ||
		d.off < queueCompactSize && s.now().Sub(d.compacted) < compactEvery {
		return nil
	}
	unlock, err := lockPath(context.Background(), d.path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	fi, err := os.Stat(d.path)
	if err != nil || fi.Size() != d.off {
		return err // appended meanwhile: next time
	}
	hdr := appendHeader(nil)
	f, _, err := writeFile(filepath.Dir(d.path), filepath.Base(d.path), hdr, s.dsync != nil)
	if err != nil {
		return err
	}
	f.Close()
	var h queueHeader
	json.Unmarshal(bytes.TrimSpace(hdr), &h)
	d.gen, d.head, d.base, d.off, d.restore = h.Gen, int64(len(hdr)), int64(len(hdr)), int64(len(hdr)), nil
	d.dirty, d.compacted = true, s.now()
	return d.save(s.dsync != nil)
}

// save writes the progress atomically.
func (d *destQueue) save(sync bool) error {
	st := stateFile{Gen: d.gen, Base: d.base, Events: map[string]eventState{}}
	for _, q := range d.pending {
		if q.settled || q.attempts > 0 {
			st.Events[q.line.ID] = eventState{Attempts: q.attempts, Next: q.next.UnixMilli(), Settled: q.settled}
		}
	}
	b, _ := json.Marshal(st)
	f, _, err := writeFile(filepath.Dir(d.state), filepath.Base(d.state), b, sync)
	if err != nil {
		return err
	}
	d.dirty, d.saved = false, time.Now()
	return f.Close()
}

// confirm reports whether the change of an event is in its thread's
// document: the message (an interaction closed: in the state the event
// says). It reads without a lock first; if the change is not there, it
// looks again under the thread's lock, which a writer between its
// queue's write and its document's holds. A thread with no document whose
// event's message is past the retention age was removed by the sweep, its
// messages expired: the change was stored (one never stored, a crash
// between the two writes, is taken at the next start, long before).
func (s *File) confirm(ctx context.Context, l *queueLine) (bool, error) {
	if len(l.Participant) > 0 {
		return s.confirmGrant(ctx, l)
	}
	d, ok, err := s.read(l.Thread)
	if err == nil && ok && stored(d, l) {
		return true, nil
	}
	var e *chatrelay.Error
	if errors.As(err, &e) && e.Code == chatrelay.ThreadUnreadable {
		return true, nil // it was stored: its file does not parse now
	}
	t, snap, unlock, err := s.lockLoad(ctx, l.Thread)
	if err != nil {
		return false, err
	}
	defer unlock()
	if snap == nil {
		t.drop = true // no document: the lock file goes
		return l.Epoch <= s.now().Add(-s.opt.Retention.Age).UnixMilli(), nil
	}
	return snap.err != nil || stored(snap.doc, l), nil
}

// stored reports whether d holds the change of l.
func stored(d threadDoc, l *queueLine) bool {
	i := sort.Search(len(d.msgs), func(i int) bool { return d.msgs[i].Epoch >= l.Epoch })
	if i == len(d.msgs) || d.msgs[i].Epoch != l.Epoch {
		// Retention dropped it (it was stored), or it never was.
		return l.Epoch <= d.trimmed
	}
	m := d.msgs[i].Message
	var was chatrelay.Message
	if json.Unmarshal(l.Message, &was) != nil || m.ID != was.ID {
		return false
	}
	if l.Type != store.EventInteractionClosed {
		return true
	}
	return m.Interaction != nil && was.Interaction != nil && m.Interaction.State == was.Interaction.State &&
		m.Interaction.AnsweredAt == was.Interaction.AnsweredAt
}

// confirmGrant reports whether the change of a participant's event is in
// its thread's participants record: the grant used (joined), or revoked
// or its expiry noticed (revoked); under the thread's lock if the
// lock-free read does not find it. An unreadable record: it was stored.
// So it was if the thread has no document: a thread with grants has one
// (an invite needs a message, and a crash between the queue's write and
// the record's leaves it), so the sweep removed the thread, its grants
// with it.
func (s *File) confirmGrant(ctx context.Context, l *queueLine) (bool, error) {
	var p chatrelay.Participant
	if json.Unmarshal(l.Participant, &p) != nil {
		return false, nil
	}
	check := func() bool {
		grants, err := s.readGrants(l.Thread)
		if err != nil {
			return true
		}
		i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == p.ID })
		if i < 0 {
			return false
		}
		g := grants[i]
		if l.Type == store.EventParticipantJoined {
			return g.Used
		}
		return g.RevokedAt != 0 || g.ExpiryNoted
	}
	if check() {
		return true, nil
	}
	t, snap, unlock, err := s.lockLoad(ctx, l.Thread)
	if err != nil {
		return false, err
	}
	defer unlock()
	if snap == nil {
		t.drop = true
		return true, nil
	}
	return check(), nil
}

// A destination whose receiver answered 410 Gone is disabled by the file
// DATA/webhooks/<destination>.gone (store.Disabler), so that the server's
// next start keeps it disabled; deleting the file enables it again.

var _ store.Disabler = (*outbox)(nil)

func (o *outbox) gonePath(dest string) (string, error) {
	if !store.ValidDestinationID(dest) {
		return "", fmt.Errorf("webhook: %q is no destination ID", dest)
	}
	return filepath.Join(o.dir(), dest+".gone"), nil
}

// Disable implements store.Disabler: it writes <destination>.gone (when,
// in ms), atomically.
func (o *outbox) Disable(ctx context.Context, dest string) error {
	p, err := o.gonePath(dest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(struct {
		Gone int64 `json:"gone"`
	}{o.s.now().UnixMilli()})
	f, _, err := writeFile(filepath.Dir(p), filepath.Base(p), append(b, '\n'), o.s.dsync != nil)
	if err != nil {
		return fmt.Errorf("webhook: disable %s: %w", dest, err)
	}
	return f.Close()
}

// Disabled implements store.Disabler: whether <destination>.gone exists.
func (o *outbox) Disabled(ctx context.Context, dest string) (bool, error) {
	p, err := o.gonePath(dest)
	if err != nil {
		return false, err
	}
	_, err = os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Enable implements store.Disabler: it removes <destination>.gone.
func (o *outbox) Enable(ctx context.Context, dest string) error {
	p, err := o.gonePath(dest)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("webhook: enable %s: %w", dest, err)
	}
	return nil
}
