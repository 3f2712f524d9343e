package filestore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The thread's log: <data>/chat/<thread>.log holds the messages appended
// since the document (the snapshot) was last written, one v2 message
// object a line, oldest first. It is written only by a store opened with
// FileOptions.AppendLog (off by default: the contract's layout, one
// document that holds the whole thread); every store reads it, and
// compacts it on its next write of the thread, so that processes with
// either setting may share a folder. With the option, a post that only
// appends a message (no retention drop, no other change) writes its line
// with one write(2)
// (O_APPEND), fdatasyncs it, and is acknowledged: the document stays as
// it is. Every other change, and an append that finds the log at its
// bound (logFull), rewrites the document with every message (compaction)
// and then empties the log.
//
// The document of a thread whose log may hold messages is written as
// version 5, which older binaries refuse (they would hide the log's
// messages, then write over them); see docVersion.
//
// Reading: the log is read before the document, so a compaction between
// the two reads hands the reader the log's lines twice (in the new
// document and in the log it read), never not at all. A line whose epoch
// is not past the document's rev is already in the document (a
// compaction the process did not live to empty the log after, or the
// race above) and is skipped. A last line without its newline, or a last
// line that does not parse, was never acknowledged (a writer killed
// mid-write, or a writer still writing it): readers ignore it and the
// next writer cuts it off (under the thread's lock) before it appends. A
// line that does not parse with lines after it is a corrupt thread,
// which is treated as a document that does not parse.

// Bounds of the log: an append that would take it past either compacts
// instead, so that a read never parses more than about a document's
// worth of lines.
const (
	logMaxLines = 64       // lines in the log
	logMinBytes = 16 << 10 // bytes the log may hold whatever the document's size
)

// logState is what a snapshot knows of the log it was read (or written)
// with.
type logState struct {
	ino   uint64 // 0: no log file
	size  int64  // the file's size as read
	valid int64  // the bytes up to the end of its last good line (< size: a torn tail)
	lines int    // its good lines (stale ones included)
}

// torn reports whether the log ends in a line never acknowledged.
func (l logState) torn() bool { return l.valid < l.size }

// full reports whether appending line (without its newline) to the log
// would take it past its bounds, for a document of docSize bytes.
func (l logState) full(line []byte, docSize int64) bool {
	return l.lines >= logMaxLines || l.valid+int64(len(line))+1 > max(docSize, logMinBytes)
}

// logPath is the thread's log.
func (s *File) logPath(thread string) string { return s.dir + "/" + thread + ".log" }

// parseLog parses a log's bytes: the messages of its good lines, oldest
// first, the bytes up to the end of its last good line, and its good
// lines' count. A last line that lacks its newline or does not parse is
// left out (valid ends before it); any other line that does not parse is
// an error.
func parseLog(data []byte) (msgs []store.Entry, valid int64, err error) {
	for off := 0; off < len(data); {
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			return msgs, int64(off), nil // torn: no newline
		}
		line := data[off : off+nl]
		end := off + nl + 1
		m, perr := parseLogLine(line)
		if perr != nil {
			if end == len(data) {
				return msgs, int64(off), nil // torn: the last line
			}
			return nil, 0, fmt.Errorf("%w: log line %d: %v", errBadDocument, len(msgs)+1, perr)
		}
		msgs = append(msgs, store.NewEntry(m))
		off = end
	}
	return msgs, int64(len(data)), nil
}

// parseLogLine decodes and checks one line of a log: one v2 message.
func parseLogLine(line []byte) (chatrelay.Message, error) {
	var m chatrelay.Message
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, err
	}
	if dec.More() {
		return m, fmt.Errorf("data after the message")
	}
	if m.Epoch <= 0 || m.ID == "" || m.Author == "" {
		return m, fmt.Errorf("an incomplete message")
	}
	if m.Rev == 0 {
		m.Rev = m.Epoch
	}
	if m.Rev != m.Epoch {
		return m, fmt.Errorf("a changed message (only new ones are logged)")
	}
	if err := checkStored(m); err != nil {
		return m, err
	}
	return m, nil
}

// withLog returns base (the document) followed by the log's messages
// newer than it. Its msgs are base's when the log adds nothing.
func withLog(base threadDoc, logged []store.Entry) (threadDoc, error) {
	i := 0
	for i < len(logged) && logged[i].Epoch <= base.rev {
		i++ // in the document already
	}
	if i == len(logged) {
		return base, nil
	}
	fresh := logged[i:]
	d := base
	d.msgs = make([]store.Entry, len(base.msgs), len(base.msgs)+len(fresh)+1) // +1: the next append's room
	copy(d.msgs, base.msgs)
	for j, e := range fresh {
		if e.Epoch <= d.rev {
			return threadDoc{}, fmt.Errorf("%w: log line %d is out of order", errBadDocument, i+j+1)
		}
		d.msgs = append(d.msgs, e)
		d.rev = e.Epoch
	}
	return d, nil
}

// readLog reads the thread's log (nothing if it has none). If it finds
// the log known (lines, whole, as a cached snapshot read them), it parses
// nothing and same is true.
func (s *File) readLog(thread string, known logState) (_ logState, _ []store.Entry, same bool, _ error) {
	path := s.logPath(thread)
	fd, err := s.openRead(path)
	if err == syscall.ENOENT {
		return logState{}, nil, false, nil
	}
	if err != nil {
		return logState{}, nil, false, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		return logState{}, nil, false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	ls := logState{ino: st.Ino, size: st.Size}
	if st.Size == 0 {
		return ls, nil, false, nil
	}
	bp := docBufs.Get().(*[]byte)
	defer docBufs.Put(bp)
	data, err := readSized(fd, path, st.Size, (*bp)[:0])
	*bp = data[:0]
	if err != nil {
		return logState{}, nil, false, err
	}
	ls.size = int64(len(data)) // a writer may have appended since the fstat
	if !known.torn() && known.ino == ls.ino && known.size == ls.size {
		return known, nil, true, nil
	}
	msgs, valid, perr := parseLog(data)
	ls.valid, ls.lines = valid, len(msgs)
	return ls, msgs, false, perr
}

// sameLog reports whether the log at path is still ls (its inode and
// size), as the cache checks it.
func sameLog(path string, ls logState) bool {
	ino, size, err := statLog(path)
	return err == nil && ino == ls.ino && size == ls.size
}

// statLog is the log's identity as the cache checks it: its inode and
// size (0, 0 if it has none).
func statLog(path string) (ino uint64, size int64, err error) {
	var st syscall.Stat_t
	err = ignoringEINTR(func() error { return syscall.Stat(path, &st) })
	if err == syscall.ENOENT {
		return 0, 0, nil
	}
	return st.Ino, st.Size, err
}

// appendLog appends line and a newline to the thread's log, whose state
// under the thread's lock is ls, with one write(2), and fdatasyncs it
// (and the folder, if it created the log) unless the store does not
// sync. A torn tail is cut off first. A failed append cuts off what it
// wrote, and removes the log if it made it: nothing is left of a refused
// post. It returns the log's new
// state. The caller holds the thread's locks (t.mu too).
func (s *File) appendLog(t *threadState, thread string, ls logState, line []byte) (logState, error) {
	path := s.logPath(thread)
	if t.logf != nil && (ls.ino == 0 || t.logIno != ls.ino) {
		t.closeLog() // another log now (the thread was removed and made anew)
	}
	created := false
	if t.logf == nil {
		f, st, err := s.openLog(path)
		if err != nil {
			return ls, err
		}
		if ls.ino != 0 && (st.Ino != ls.ino || st.Size < ls.valid) {
			f.Close()
			// Under the thread's lock nothing else writes the log.
			return ls, fmt.Errorf("%s changed under the thread's lock", path)
		}
		if ls.ino == 0 {
			// A new log; or one a crash left before its document was
			// made again (its lines are no thread's: cut off below).
			created = true
			ls = logState{ino: st.Ino, size: st.Size}
		}
		t.logf, t.logIno = f, st.Ino
	}
	fd := int(t.logf.Fd())
	if ls.size != ls.valid {
		if err := ignoringEINTR(func() error { return syscall.Ftruncate(fd, ls.valid) }); err != nil {
			return ls, &fs.PathError{Op: "truncate", Path: path, Err: err}
		}
		ls.size = ls.valid
	}
	bp := docBufs.Get().(*[]byte)
	buf := append(append((*bp)[:0], line...), '\n')
	err := writeAll(fd, path, buf)
	*bp = buf[:0]
	docBufs.Put(bp)
	if err == nil && s.dsync != nil {
		if err = ignoringEINTR(func() error { return syscall.Fdatasync(fd) }); err != nil {
			err = &fs.PathError{Op: "sync", Path: path, Err: err}
		}
	}
	if err == nil && created && s.dsync != nil {
		err = s.dsync.sync() // the log's name: durable before the post is acknowledged
	}
	if err != nil {
		ignoringEINTR(func() error { return syscall.Ftruncate(fd, ls.valid) }) // leave nothing behind
		if created {
			t.closeLog()
			syscall.Unlink(path) // nor the log this post made
		}
		return ls, err
	}
	n := ls.valid + int64(len(line)) + 1
	return logState{ino: ls.ino, size: n, valid: n, lines: ls.lines + 1}, nil
}

// openLog opens (creating, 0600) the log path for appending, with
// syscall.Open (see openLock), and stats it.
func (s *File) openLog(path string) (*os.File, syscall.Stat_t, error) {
	var st syscall.Stat_t
	fd := -1
	err := s.withFDs(func() (err error) {
		return ignoringEINTR(func() (err error) {
			fd, err = syscall.Open(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
			return err
		})
	})
	if err != nil {
		return nil, st, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := ignoringEINTR(func() error { return syscall.Fstat(fd, &st) }); err != nil {
		syscall.Close(fd)
		return nil, st, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), st, nil
}

// closeLog closes the thread's kept log; the caller holds t.mu.
func (t *threadState) closeLog() {
	if t.logf != nil {
		t.logf.Close()
		t.logf = nil
		t.logIno = 0
	}
}

// emptyLog empties the thread's log (a compaction wrote its messages into
// the document): what it returns is the log's state afterwards. If it
// cannot, its lines stay, all of them in the document: a reader skips
// them.
func (s *File) emptyLog(thread string, ls logState) logState {
	if ls.ino == 0 || ls.size == 0 {
		return ls
	}
	if err := ignoringEINTR(func() error { return syscall.Truncate(s.logPath(thread), 0) }); err != nil {
		s.log.Warn("store: empty the thread's log (its lines are in the document)", "thread", thread, "err", err)
		return ls
	}
	return logState{ino: ls.ino}
}
