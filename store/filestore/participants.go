package filestore

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// participantsFile is a thread's participants record,
// <data>/chat/<thread>.participants.json (mode 0600):
//
//	{"version":1,"thread":"a1b2c3d4e5f60718","grants":[{…},…]}
type participantsFile struct {
	Version int               `json:"version"`
	Thread  string            `json:"thread"`
	Grants  []chatrelay.Grant `json:"grants"`
}

var errBadParticipants = errors.New("not a participants record")

func parseParticipants(data []byte, thread string) ([]chatrelay.Grant, error) {
	var f participantsFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || dec.More() {
		return nil, fmt.Errorf("%w: %v", errBadParticipants, err)
	}
	if f.Version != 1 || f.Thread != thread {
		return nil, fmt.Errorf("%w: version %d of thread %q", errBadParticipants, f.Version, f.Thread)
	}
	for i, g := range f.Grants {
		if err := chatrelay.CheckGrant(g); err != nil {
			return nil, fmt.Errorf("%w: grant %d %v", errBadParticipants, i, err)
		}
	}
	return f.Grants, nil
}

func (s *File) participantsPath(thread string) string {
	return filepath.Join(s.dir, thread+".participants.json")
}

func (s *File) auditPath(thread string) string {
	return filepath.Join(s.dir, thread+".audit.jsonl")
}

// readGrants reads the thread's grants (none if it has no record).
func (s *File) readGrants(thread string) ([]chatrelay.Grant, error) {
	data, err := s.readFile(s.participantsPath(thread))
	return s.grantsOf(thread, data, err)
}

// grantsOf parses the thread's participants record, data, read with err.
func (s *File) grantsOf(thread string, data []byte, err error) ([]chatrelay.Grant, error) {
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	grants, err := parseParticipants(data, thread)
	if err != nil {
		s.log.Error("participants record does not parse; every share link of the thread is refused", "thread", thread, "err", err)
		return nil, store.ParticipantsUnreadable(err)
	}
	grants, _ = chatrelay.PruneGrants(grants, s.now()) // long-ended grants are gone; the next write drops them from the file
	return grants, nil
}

// writeGrants replaces the thread's record. The caller holds the thread's
// locks.
func (s *File) writeGrants(thread string, grants []chatrelay.Grant) error {
	b, _ := json.Marshal(participantsFile{Version: 1, Thread: thread, Grants: grants})
	b = append(b, '\n')
	s.index.known(thread, maphash.Bytes(docSeed, b)) // before the rename the watch sees
	var f *os.File
	err := s.withFDs(func() (err error) {
		f, _, err = writeFileSync(s.dir, thread+".participants.json", b, s.dsync)
		return err
	})
	if err != nil {
		s.index.forget(thread)
		return s.unavailable(thread, err)
	}
	f.Close()
	s.noteGrants(thread, grants)
	s.announceParticipants(thread)
	return nil
}

// withGrants runs fn on the thread's grants under the thread's locks and
// writes what it returns (if write). A thread with no document is locked
// only if fn writes (a grant a sweep cut short left): a call refused for a
// thread that does not exist, which anyone with any token can make, makes
// no lock file and keeps no state.
func (s *File) withGrants(ctx context.Context, thread string, fn func(grants []chatrelay.Grant, d threadDoc, exists bool) ([]chatrelay.Grant, bool, error)) error {
	if err := checkThread(thread); err != nil {
		return err
	}
	if !s.mayExist(thread) {
		grants, err := s.readGrants(thread)
		if err != nil {
			return err
		}
		if _, write, err := fn(grants, threadDoc{}, false); err != nil || !write {
			return err
		}
	}
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	snap, err := s.load(thread, t)
	if err != nil {
		return err
	}
	t.drop = snap == nil // no document: its lock file goes
	var d threadDoc
	if snap != nil && snap.err == nil {
		d = snap.doc
	}
	grants, err := s.readGrants(thread)
	if err != nil {
		return err
	}
	out, write, err := fn(grants, d, snap != nil && len(d.msgs) > 0)
	if err != nil || !write {
		return err
	}
	return s.writeGrants(thread, out)
}

// Invite implements Participants.
func (s *File) Invite(ctx context.Context, thread string, g chatrelay.Grant) error {
	return s.withGrants(ctx, thread, func(grants []chatrelay.Grant, _ threadDoc, exists bool) ([]chatrelay.Grant, bool, error) {
		if !exists {
			return nil, false, chatrelay.Errorf(chatrelay.NotFound, "this thread has no message yet: post one before inviting")
		}
		g, err := chatrelay.AdmitGrant(grants, g, s.now())
		if err != nil {
			return nil, false, err
		}
		return append(slices.Clone(grants), g), true, nil
	})
}

// Grants implements Participants.
func (s *File) Grants(ctx context.Context, thread string) ([]chatrelay.Grant, error) {
	if err := checkThread(thread); err != nil {
		return nil, err
	}
	grants, err := s.readGrants(thread)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(grants)
	slices.Reverse(out) // newest first
	return out, nil
}

// Grant implements Participants.
func (s *File) Grant(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	grants, err := s.Grants(ctx, thread)
	if err != nil {
		return chatrelay.Grant{}, err
	}
	i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == id })
	if i < 0 {
		return chatrelay.Grant{}, chatrelay.Errorf(chatrelay.NotFound, "no participant %q in this thread", id)
	}
	return grants[i], nil
}

// Revoke implements Participants.
func (s *File) Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	var out chatrelay.Grant
	err := s.withGrants(ctx, thread, func(grants []chatrelay.Grant, _ threadDoc, _ bool) ([]chatrelay.Grant, bool, error) {
		i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == id })
		if i < 0 {
			return nil, false, chatrelay.Errorf(chatrelay.NotFound, "no participant %q in this thread", id)
		}
		if grants[i].RevokedAt != 0 {
			out = grants[i]
			return nil, false, nil
		}
		grants = slices.Clone(grants)
		grants[i].RevokedAt = s.now().UnixMilli()
		out = grants[i]
		return grants, true, nil
	})
	return out, err
}

// MarkUsed implements Participants.
func (s *File) MarkUsed(ctx context.Context, thread, id string) (bool, error) {
	return s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.Used })
}

// NoteExpired implements Participants.
func (s *File) NoteExpired(ctx context.Context, thread, id string) (bool, error) {
	return s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.ExpiryNoted })
}

// markGrant sets the flag of a grant that flag points to, and reports
// whether it was not set before.
func (s *File) markGrant(ctx context.Context, thread, id string, flag func(*chatrelay.Grant) *bool) (bool, error) {
	first := false
	err := s.withGrants(ctx, thread, func(grants []chatrelay.Grant, _ threadDoc, _ bool) ([]chatrelay.Grant, bool, error) {
		i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == id })
		if i < 0 || *flag(&grants[i]) {
			return nil, false, nil
		}
		grants = slices.Clone(grants)
		*flag(&grants[i]), first = true, true
		return grants, true, nil
	})
	return first, err
}

// Resolve implements Participants. An index from the first 16 hex of
// each digest to its thread finds the thread; the thread's record then
// decides, by a constant-time comparison of the whole digest. A digest
// the index does not know makes the index be rebuilt from the records, at
// most once a second (a grant another process just made).
func (s *File) Resolve(ctx context.Context, digest string) (string, chatrelay.Grant, error) {
	unauthorized := chatrelay.UnknownShareLink()
	if len(digest) != 64 {
		return "", chatrelay.Grant{}, unauthorized
	}
	thread, ok := s.index.lookup(digest[:16])
	if !ok && s.index.rebuildDue() {
		s.rebuildIndex()
		thread, ok = s.index.lookup(digest[:16])
	}
	if !ok {
		return "", chatrelay.Grant{}, unauthorized
	}
	grants, err := s.readGrants(thread)
	if err != nil {
		if chatrelay.CodeOf(err) == chatrelay.ParticipantsUnreadable {
			return "", chatrelay.Grant{}, unauthorized // fail closed
		}
		return "", chatrelay.Grant{}, err
	}
	for _, g := range grants {
		if subtle.ConstantTimeCompare([]byte(g.Digest), []byte(digest)) == 1 {
			return thread, g, nil
		}
	}
	return "", chatrelay.Grant{}, unauthorized
}

// grantIndex maps digest prefixes to threads.
type grantIndex struct {
	mu      sync.Mutex // guards m, rebuilt and sums
	m       map[string]string
	rebuilt time.Time
	// sums holds, per thread, the maphash of the participants record this
	// process last wrote or announced: the folder watch's event for a
	// record with those bytes is this process's own write, already
	// announced, and is not read and announced again.
	sums map[string]uint64
}

// known records that the thread's record with sum was announced, and
// reports whether it already was.
func (x *grantIndex) known(thread string, sum uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sums == nil {
		x.sums = make(map[string]uint64)
	}
	if x.sums[thread] == sum {
		return true
	}
	x.sums[thread] = sum
	return false
}

// forget drops the thread's sum: the next record seen is announced.
func (x *grantIndex) forget(thread string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.sums, thread)
}

func (x *grantIndex) lookup(prefix string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.m[prefix]
	return t, ok
}

func (x *grantIndex) rebuildDue() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if time.Since(x.rebuilt) < time.Second {
		return false
	}
	x.rebuilt = time.Now()
	return true
}

// noteGrants puts a thread's grants in the index.
func (s *File) noteGrants(thread string, grants []chatrelay.Grant) {
	s.index.mu.Lock()
	defer s.index.mu.Unlock()
	if s.index.m == nil {
		s.index.m = make(map[string]string)
	}
	for _, g := range grants {
		s.index.m[g.Digest[:16]] = thread
	}
}

// rebuildIndex reads every participants record into the index.
func (s *File) rebuildIndex() {
	paths, _ := filepath.Glob(filepath.Join(s.dir, "*.participants.json"))
	for _, p := range paths {
		thread := strings.TrimSuffix(filepath.Base(p), ".participants.json")
		if !chatrelay.ValidThread(thread) {
			continue
		}
		if grants, err := s.readGrants(thread); err == nil {
			s.noteGrants(thread, grants)
		}
	}
}

// Audit implements Participants: one JSON line appended to the thread's
// audit file (mode 0600); past twice LimitAuditKept lines the file is
// rewritten with the newest LimitAuditKept.
func (s *File) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	if err := checkThread(thread); err != nil {
		return err
	}
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	if t.auditLines == 0 { // the file's lines, once (counting parses nothing)
		data, err := s.readFile(s.auditPath(thread))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s.unavailable(thread, err)
		}
		t.auditLines = bytes.Count(data, []byte{'\n'})
	}
	line, _ := json.Marshal(ev)
	if err := s.appendAuditLine(thread, append(line, '\n')); err != nil {
		return s.unavailable(thread, err)
	}
	t.auditLines++
	if t.auditLines <= 2*chatrelay.LimitAuditKept.Max {
		return nil
	}
	events, err := s.readAudit(thread)
	t.auditLines = len(events)
	if err == nil && len(events) > 2*chatrelay.LimitAuditKept.Max {
		var b []byte
		for _, e := range events[len(events)-chatrelay.LimitAuditKept.Max:] {
			l, _ := json.Marshal(e)
			b = append(append(b, l...), '\n')
		}
		var f *os.File
		err := s.withFDs(func() (err error) { f, _, err = writeFileSync(s.dir, thread+".audit.jsonl", b, s.dsync); return err })
		if err == nil {
			f.Close()
			t.auditLines = chatrelay.LimitAuditKept.Max
		}
	}
	return nil
}

// appendAuditLine appends line (one event and its newline) to the
// thread's audit file, for a caller holding the thread's locks. Only whole
// lines are ever left: a torn tail (the part of a line that a full disk or
// a crash cut) is cut off before the line is written, so that the line
// never joins it, and a line whose write fails is cut off again. The file
// is created if missing; one this call created and could write nothing to
// is removed.
func (s *File) appendAuditLine(thread string, line []byte) error {
	path := s.auditPath(thread)
	created := false
	var f *os.File
	err := s.withFDs(func() (err error) {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			created = err == nil
		}
		return err
	})
	if err != nil {
		return err
	}
	end, err := wholeLinesEnd(f)
	if err == nil {
		_, err = f.WriteAt(line, end)
		if err != nil {
			f.Truncate(end) // if this fails too, the next append cuts the tail
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && created && end == 0 {
		os.Remove(path)
	}
	return err
}

// wholeLinesEnd returns the size of f's whole lines: its size if it ends
// with a newline (or is empty), else the offset after its last newline, to
// which it cuts f (the bytes after it are a torn line).
func wholeLinesEnd(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return 0, nil
	}
	var buf [4096]byte
	if _, err := f.ReadAt(buf[:1], size-1); err != nil {
		return 0, err
	}
	if buf[0] == '\n' {
		return size, nil
	}
	end := int64(0)
	for off := size; off > 0; {
		n := min(off, int64(len(buf)))
		if _, err := f.ReadAt(buf[:n], off-n); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = off - n + int64(i) + 1
			break
		}
		off -= n
	}
	return end, f.Truncate(end)
}

// AuditLog implements Participants.
func (s *File) AuditLog(ctx context.Context, thread string) ([]chatrelay.AuditEvent, error) {
	if err := checkThread(thread); err != nil {
		return nil, err
	}
	events, err := s.readAudit(thread)
	if err != nil {
		return nil, err
	}
	if n := len(events) - chatrelay.LimitAuditKept.Max; n > 0 {
		events = events[n:]
	}
	return events, nil
}

func (s *File) readAudit(thread string) ([]chatrelay.AuditEvent, error) {
	var f *os.File
	err := s.withFDs(func() (err error) { f, err = os.Open(s.auditPath(thread)); return err })
	if errors.Is(err, fs.ErrNotExist) {
		return []chatrelay.AuditEvent{}, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	defer f.Close()
	events, err := parseAudit(f)
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	return events, nil
}

// parseAudit reads the events of an audit file: each whole line (one that
// ends with a newline) that holds an event, whatever its length. A line
// that does not parse is left out, and so is a torn last line (one a
// crash or a full disk cut before its newline), which the next append cuts.
func parseAudit(r io.Reader) ([]chatrelay.AuditEvent, error) {
	events := []chatrelay.AuditEvent{}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return nil, err
		}
		var e chatrelay.AuditEvent
		if json.Unmarshal(line, &e) == nil && e.Event != "" {
			events = append(events, e)
		}
	}
}

var _ store.Participants = (*File)(nil)
