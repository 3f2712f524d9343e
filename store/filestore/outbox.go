package filestore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Webhook events (store.Outbox) in the file store: a queue file per
// destination, DATA/webhooks/<destination>.queue, one JSON line per event
// after a header line that names the file's generation. A writer appends
// a change's events under the thread's lock, and under the queue's own
// lock (<destination>.queue.lock: writers of different threads, in any
// process, append to the same file), and fsyncs them BEFORE it writes the
// document (mutateOnce). So:
//
//   - a crash before the events are synced stores neither the events nor
//     the change (the change was never acknowledged);
//   - a crash between the events and the document leaves events of a
//     change that was not stored: the deliverer confirms every event
//     against the thread before it sends it (confirm), under the thread's
//     lock when the lock-free read does not find it (a writer may be
//     between its two writes), and drops an event whose change is not in
//     the document;
//   - a crash after the document leaves both.
//
// Never an event for a change that was not stored, never a stored change
// without its event. A change refused because its document could not be
// written leaves its events behind, which the confirmation drops alike.
//
// The server alone delivers (it holds the folder, lockServe): it keeps
// its progress in DATA/webhooks/<destination>.state (the generation and
// offset up to which every event is settled, and the attempts of the
// events past it), written atomically at most once a second (and at
// Close): after a crash, events settled since are sent again (at least
// once). Once every event of a queue file is settled and the file has
// grown past queueCompactSize, it is replaced by an empty one of a new
// generation under the queue's lock; a state of another generation
// starts at the new file's first event.

const (
	queueCompactSize = 1 << 20 // a settled queue file larger than this is emptied
	queueMemory      = 10000   // events read ahead into memory per destination
	stateSaveEvery   = time.Second
)

// hookWriter queues the events of a change for every destination.
type hookWriter struct {
	dir   string   // DATA/webhooks
	dests []string // destination IDs
	sync  bool
	mu    sync.Mutex // orders this process's appends (flock is per open file)
}

// queueLine is one event of a queue file.
type queueLine struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Thread  string          `json:"thread"`
	Epoch   int64           `json:"epoch"` // the message's
	At      int64           `json:"at"`    // ms
	Message json.RawMessage `json:"message,omitempty"`
	// Participant is the participant object of a participant's event.
	Participant json.RawMessage `json:"participant,omitempty"`
}

type queueHeader struct {
	Queue string `json:"queue"`
	Gen   string `json:"gen"`
}

const queueMagic = "chatrelay webhook events"

func newHookWriter(data string, dests []string, sync bool) *hookWriter {
	if len(dests) == 0 {
		return nil
	}
	return &hookWriter{dir: filepath.Join(data, "webhooks"), dests: dests, sync: sync}
}

// eventsOf returns the queue lines of the change from old to nd: the
// messages whose rev is past old's newest change.
func eventsOf(thread string, old, nd threadDoc) []byte {
	top := old.rev
	if n := len(old.msgs); n > 0 {
		top = max(top, old.msgs[n-1].Epoch)
	}
	var out []byte
	for i := len(nd.msgs) - 1; i >= 0; i-- {
		m := &nd.msgs[i]
		rev := max(m.Rev, m.Epoch)
		if rev <= top {
			break // messages change in rev order: the rest are older
		}
		var was *chatrelay.Message
		if m.Epoch <= top {
			j := sort.Search(len(old.msgs), func(j int) bool { return old.msgs[j].Epoch >= m.Epoch })
			if j < len(old.msgs) && old.msgs[j].Epoch == m.Epoch {
				was = &old.msgs[j].Message
			} else {
				continue
			}
		}
		typ := store.EventOf(was, &m.Message)
		if typ == "" {
			continue
		}
		b, _ := json.Marshal(queueLine{ID: newEventID(), Type: typ, Thread: thread, Epoch: m.Epoch, At: rev, Message: m.JSON2})
		out = append(append(out, b...), '\n')
	}
	return out
}

// grantEventsOf returns the queue lines of a write of a thread's grants
// from old to nd.
func grantEventsOf(thread string, old, nd []chatrelay.Grant, now time.Time) []byte {
	var out []byte
	for i := range nd {
		g := &nd[i]
		j := slices.IndexFunc(old, func(o chatrelay.Grant) bool { return o.ID == g.ID })
		if j < 0 {
			continue // a new grant: no event
		}
		typ := store.GrantEventOf(&old[j], g)
		if typ == "" {
			continue
		}
		p, _ := json.Marshal(g.Participant(now))
		b, _ := json.Marshal(queueLine{ID: newEventID(), Type: typ, Thread: thread, At: now.UnixMilli(), Participant: p})
		out = append(append(out, b...), '\n')
	}
	return out
}

// newEventID is a fresh webhook-id.
func newEventID() string {
	var b [12]byte
	rand.Read(b[:])
	return "evt_" + hex.EncodeToString(b[:])
}

// queue appends lines (whole lines) to every destination's queue file and
// syncs them. An error means the change must not be stored.
func (h *hookWriter) queue(lines []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return err
	}
	for _, d := range h.dests {
		if err := h.appendTo(d, lines); err != nil {
			return fmt.Errorf("webhook queue %s: %w", d, err)
		}
	}
	return nil
}

func (h *hookWriter) appendTo(dest string, lines []byte) error {
	path := filepath.Join(h.dir, dest+".queue")
	unlock, err := lockPath(context.Background(), path+".lock", chatrelay.DefaultLockTimeout)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600) // read: the last byte
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var buf []byte
	if fi.Size() == 0 {
		buf = appendHeader(nil)
	} else {
		// A writer that died in the middle of a line left it torn: end it,
		// so that the next line is whole (the torn one does not parse and
		// is skipped; its change was not stored).
		var last [1]byte
		if _, err := f.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
			buf = append(buf, '\n')
		}
	}
	buf = append(buf, lines...)
	if _, err := f.Write(buf); err != nil {
		return err
	}
	if h.sync {
		if err := f.Sync(); err != nil {
			return err
		}
		if fi.Size() == 0 {
			return syncDir(h.dir)
		}
	}
	return nil
}

func appendHeader(b []byte) []byte {
	var g [8]byte
	rand.Read(g[:])
	hb, _ := json.Marshal(queueHeader{Queue: queueMagic, Gen: hex.EncodeToString(g[:])})
	return append(append(b, hb...), '\n')
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

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
	off     int64 // bytes of the queue file read
	base    int64 // every event before it is settled
	pending []*queued
	restore map[string]eventState // the saved attempts of events not read yet
	dirty   bool
	saved   time.Time
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

func (o *outbox) dest(id string) *destQueue {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.dests[id]
	if d == nil {
		dir := filepath.Join(filepath.Dir(o.s.dir), "webhooks")
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
		ok, err := o.s.confirm(ctx, &q.line)
		if err != nil {
			return out, err
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
	d.gen, d.base = gen, hlen
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
		d.gen, d.base, d.off = gen, hlen, hlen
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

// compact empties a queue file whose events are all settled once it is
// large, under the queue's lock: a new file of a new generation replaces
// it (renamed over it), so a state saved for the old one is never applied
// to the new one.
func (d *destQueue) compact(s *File) error {
	if len(d.pending) > 0 || d.off < queueCompactSize || d.base != d.off {
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
	d.gen, d.base, d.off, d.restore = h.Gen, int64(len(hdr)), int64(len(hdr)), nil
	d.dirty = true
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
// queue's write and its document's holds.
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
		return false, nil
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
	t.drop = snap == nil
	return check(), nil
}
