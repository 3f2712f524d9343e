package filestore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// A thread's audit trail, <data>/chat/<thread>.audit.jsonl: append-only,
// one event a line, written under the thread's lock.

func (s *File) auditPath(thread string) string {
	return filepath.Join(s.dir, thread+".audit.jsonl")
}

// Audit implements Participants: one JSON line appended to the thread's
// audit file (mode 0600); past twice LimitAuditKept lines the file is
// rewritten with the events store.KeptAudit keeps (refusals go first), so
// that an append stays one write, amortised. The event of a thread that
// has no message (removed by the sweep while the request that is audited
// ran) is not kept: the thread made again must not find it (as on Redis).
func (s *File) Audit(ctx context.Context, thread string, ev chatrelay.AuditEvent) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	if !s.mayExist(thread) {
		return nil
	}
	t, snap, unlock, err := s.lockLoad(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	if snap == nil || snap.err == nil && len(snap.doc.msgs) == 0 {
		t.drop = snap == nil // no document: its lock file goes
		return nil
	}
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
		kept := store.KeptAudit(events)
		for _, e := range kept {
			l, _ := json.Marshal(e)
			b = append(append(b, l...), '\n')
		}
		var f *os.File
		err := s.withFDs(func() (err error) { f, _, err = writeFileSync(s.dir, thread+".audit.jsonl", b, s.dsync); return err })
		if err == nil {
			f.Close()
			t.auditLines = len(kept)
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
	if err := chatrelay.CheckThread(thread); err != nil {
		return nil, err
	}
	events, err := s.readAudit(thread)
	if err != nil {
		return nil, err
	}
	return store.KeptAudit(events), nil
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
