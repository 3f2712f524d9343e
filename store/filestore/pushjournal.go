package filestore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// The push journal (store.Push: a claim won with a document, until it is
// settled; JournaledPushes) is DATA/push-journal.log (0600), appended to
// by the one server of the folder (serve.lock): a line per claim
// journaled and a line per settle of one,
//
//	{"claim":"<id>","at":<epoch ms>,"doc":{…}}
//	{"settle":"<id>"}
//
// Its lines are written with no fsync, off the post's path (the pusher
// claims after the write): a process killed (SIGKILL) leaves what it
// wrote in the page cache, which the next start reads; a machine that
// crashes may lose the last lines (and their pushes). The journal is read
// at its first use, the server's start: what it holds then is what the
// process before it left unsettled, every entry of a dead process. Its
// entries older than the push window and a lease (nothing is still
// sent of them) and the lines that do not parse (a crash's torn last
// line) are dropped, and the live entries are written again (temp and
// rename), as they are once the file has many more lines than live
// entries; once no entry is live (the last one settled) it is
// truncated, so that it keeps no settled change's text. The live entries are the claims this process works on (the
// pusher's queue and watch bounds bound them), and what it took at its
// start until it settles them.

// journalFile is the journal's name in the data folder.
const journalFile = "push-journal.log"

// journalKeep is how old (from its claim) a journal entry is dropped:
// past the window every attempt of its pushes was made.
const journalKeep = chatrelay.DefaultPushWindow + chatrelay.DefaultPushLease

// journalCompact is how many lines the file holds before it is written
// again with its live entries alone (if they are fewer than a quarter).
const journalCompact = 1024

// pushJournal is a data folder's push journal, in this process. Safe for
// concurrent use.
type pushJournal struct {
	path string
	sync bool // fsync its rewrites (not its lines)
	log  *slog.Logger

	mu     sync.Mutex
	loaded bool
	f      *os.File // open for appending; nil until a line is written
	live   map[string]journalEntry
	lines  int  // in the file
	failed bool // the last write failed (logged once, until one succeeds)
}

type journalEntry struct {
	at  int64 // epoch ms of the claim
	doc json.RawMessage
}

// journalLine is a line of the file.
type journalLine struct {
	Claim  string          `json:"claim,omitempty"`
	At     int64           `json:"at,omitempty"`
	Doc    json.RawMessage `json:"doc,omitempty"`
	Settle string          `json:"settle,omitempty"`
}

func newPushJournal(data string, sync bool, log *slog.Logger) *pushJournal {
	return &pushJournal{path: filepath.Join(data, journalFile), sync: sync, log: log}
}

// load reads the file once, under j.mu: see the package's comment.
func (j *pushJournal) load(now time.Time) {
	if j.loaded {
		return
	}
	j.loaded = true
	j.live = make(map[string]journalEntry)
	data, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		j.log.Warn("push journal: read; what a killed server left is not sent", "file", j.path, "err", err)
		return
	}
	bad := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for sc.Scan() {
		var l journalLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || (l.Claim == "") == (l.Settle == "") || (l.Claim != "" && len(l.Doc) == 0) {
			bad++
			continue
		}
		if l.Settle != "" {
			delete(j.live, l.Settle)
			continue
		}
		j.live[l.Claim] = journalEntry{at: l.At, doc: l.Doc}
	}
	oldest := now.Add(-journalKeep).UnixMilli()
	for id, e := range j.live {
		if e.at < oldest {
			delete(j.live, id)
		}
	}
	if bad > 0 {
		j.log.Warn("push journal: lines that do not parse were dropped", "file", j.path, "lines", bad)
	}
	j.rewrite()
}

// rewrite writes the file again with the live entries alone, under j.mu.
func (j *pushJournal) rewrite() {
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
	var b bytes.Buffer
	for id, e := range j.live {
		j.line(&b, journalLine{Claim: id, At: e.at, Doc: e.doc})
	}
	f, _, err := writeFile(filepath.Dir(j.path), filepath.Base(j.path), b.Bytes(), j.sync)
	if err != nil {
		j.fail(err)
		return
	}
	f.Close()
	j.lines = len(j.live)
}

func (j *pushJournal) line(b *bytes.Buffer, l journalLine) {
	js, err := json.Marshal(l)
	if err != nil { // a doc that is not JSON: not journaled
		return
	}
	b.Write(js)
	b.WriteByte('\n')
}

// fail logs a failed write once, until a write succeeds.
func (j *pushJournal) fail(err error) {
	if !j.failed {
		j.log.Warn("push journal: write; a server killed now may lose the pushes it is sending", "file", j.path, "err", err)
	}
	j.failed = true
}

// append writes l to the file, and compacts it if it grew enough.
func (j *pushJournal) append(l journalLine) {
	var b bytes.Buffer
	j.line(&b, l)
	if b.Len() == 0 {
		return
	}
	if j.f == nil {
		f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			j.fail(err)
			return
		}
		j.f = f
	}
	if _, err := j.f.Write(b.Bytes()); err != nil {
		j.fail(fmt.Errorf("append: %w", err))
		return
	}
	j.failed = false
	j.lines++
	if len(j.live) == 0 {
		// Nothing is owed: the file keeps no settled change's document
		// (its message's text) until it is compacted or read again.
		if err := j.f.Truncate(0); err != nil {
			j.fail(fmt.Errorf("truncate: %w", err))
			return
		}
		j.lines = 0
		return
	}
	if j.lines >= journalCompact && j.lines > 4*len(j.live) {
		j.rewrite()
	}
}

// add journals doc under id, claimed at now.
func (j *pushJournal) add(id string, doc []byte, now time.Time) {
	if !json.Valid(doc) {
		return // the transport's documents are JSON; another is not journaled
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.load(now)
	e := journalEntry{at: now.UnixMilli(), doc: bytes.Clone(doc)}
	j.live[id] = e
	j.append(journalLine{Claim: id, At: e.at, Doc: e.doc})
}

// remove drops id's entry, if it has one.
func (j *pushJournal) remove(id string, now time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.load(now)
	if _, ok := j.live[id]; !ok {
		return
	}
	delete(j.live, id)
	j.append(journalLine{Settle: id})
}

// entries returns the live entries.
func (j *pushJournal) entries(now time.Time) []store.JournaledPush {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.load(now)
	out := make([]store.JournaledPush, 0, len(j.live))
	for id, e := range j.live {
		out = append(out, store.JournaledPush{ID: id, Doc: bytes.Clone(e.doc)})
	}
	return out
}

// close closes the file (its lines are written: no flush is owed).
func (j *pushJournal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f != nil {
		j.f.Close()
		j.f = nil
	}
}
