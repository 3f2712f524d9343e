package filestore

import (
	"context"
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
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Attachments (contract Part 5), content-addressed per thread:
//
//	<data>/chat/<thread>.files/<sha256 hex>   the bytes, once per thread
//	<data>/chat/<thread>.files/index.json     the thread's uploads
//	<data>/chat/.<thread>.upload.tmp-*        an upload being received
//
// An upload is streamed into its temp file (hashed on the way), fsynced,
// then, under the thread's lock, renamed to its digest's name (or dropped
// if the thread has those bytes already), the folder fsynced, and its
// record added to index.json (written atomically). A message names its
// attachments in the thread document; an upload is "used" when a message
// of the document names it. Under the same lock, the records that no
// message names and that are older than LimitAttachmentUnused are
// dropped, and then the files that no record names (collect). An upload
// is judged on its uploader's own drafts and the uploads messages name
// (store.Room: the owner's on its LimitAttachmentPending uploads no
// message names, a participant's on its LimitParticipantPending; checked
// before the bytes are taken in, and again under the lock), so the index
// holds at most those of each and the uploads its messages name. When a grant
// ends (Revoke, NoteExpired: withGrantsThen), the same collect runs under
// the lock that wrote the grants record, and drops the uploads made with
// a grant that has ended that no message names (Orphaned); an upload of
// that grant committing later is refused (UploadGrant, under the lock).
// A crash
// leaves at most a temp file (swept after an hour) or a file no record
// names (collected): never a record without its file, never a message
// naming a record that is gone (a record a message names is never
// dropped).

var _ store.Attachments = (*File)(nil)

// index is the file <thread>.files/index.json.
type index struct {
	Version     int                      `json:"version"`
	Attachments []store.StoredAttachment `json:"attachments"`
}

const indexVersion = 1

func (s *File) filesDir(thread string) string { return filepath.Join(s.dir, thread+".files") }

// PutAttachment implements store.Attachments.
func (s *File) PutAttachment(ctx context.Context, thread string, up store.Upload) (chatrelay.Attachment, error) {
	if err := chatrelay.CheckThread(thread); err != nil {
		return chatrelay.Attachment{}, err
	}
	if err := up.Check(); err != nil {
		return chatrelay.Attachment{}, err
	}
	if !s.mayExist(thread) && !s.hasFiles(thread) {
		if err := s.roomForThread(ctx, thread); err != nil { // before the bytes are taken in; reserved at the commit
			return chatrelay.Attachment{}, err
		}
	}
	if err := s.roomForUpload(ctx, thread, up.By); err != nil { // before the bytes are taken in; checked again at the commit
		return chatrelay.Attachment{}, err
	}
	tmp, rec, err := s.receive(thread, up)
	if err != nil {
		return chatrelay.Attachment{}, err
	}
	defer func() {
		if tmp != "" {
			dropTemp(up, tmp)
		}
	}()
	a := store.NewAttachment(up, rec)

	d, unlock, err := s.lockDoc(ctx, thread)
	if err != nil {
		return chatrelay.Attachment{}, err
	}
	defer unlock()
	if up.Grant != "" { // still the thread's, and active (a revoke, or the thread's removal, while the bytes arrived)
		grants, err := s.readGrants(thread)
		if err != nil {
			return chatrelay.Attachment{}, err
		}
		if err := store.UploadGrant(grants, up.Grant, s.now()); err != nil {
			return chatrelay.Attachment{}, err
		}
	}
	// The first upload of a thread that has no message takes the thread's
	// place in the thread count (under the thread's lock: the uploads of a
	// thread take turns, so one of them counts it), given back unless it
	// is stored; run before unlock (deferred after it).
	c := creation{s: s, thread: thread, upload: true}
	if !s.mayExist(thread) && !s.hasFiles(thread) {
		if _, c.counted, err = s.reserveThread(ctx, thread, true); err != nil {
			return chatrelay.Attachment{}, err
		}
		defer c.finish(ctx) // (nothing, unless it counted the thread)
	}
	read, err := s.readIndex(thread)
	if err != nil {
		return chatrelay.Attachment{}, err
	}
	now := s.now()
	used := usedIDs(d)
	recs := kept(read, used, now)
	if err := store.Room(recs, func(id string) bool { return used[id] }, up.By, a.SHA256, a.Size, false); err != nil {
		return chatrelay.Attachment{}, err
	}
	held := 0
	for _, r := range recs {
		if r.SHA256 == a.SHA256 {
			held++
		}
	}
	dir := s.filesDir(thread)
	blob := filepath.Join(dir, a.SHA256)
	if held == 0 {
		if err := s.placeBlob(thread, tmp, dir, blob); err != nil {
			return chatrelay.Attachment{}, err
		}
		tmp = ""
	}
	recs = append(recs, store.StoredAttachment{Attachment: a, At: now.UnixMilli(), By: up.By, Grant: up.Grant})
	if err := s.writeIndex(thread, read, recs); err != nil {
		if held == 0 {
			os.Remove(blob)
			os.Remove(dir) // if this upload made it (a folder holding anything stays)
		}
		return chatrelay.Attachment{}, s.unavailable(thread, err)
	}
	c.created = true
	s.removeStray(thread, recs)
	return a, nil
}

// dropTemp removes an upload's temp file that the commit did not place
// (its bytes were held already, or the upload was refused), through
// up.After, after the answer, else through up.Work as its writing was:
// freeing a large file's pages is work in the kernel (about a millisecond
// for 10 MiB on tmpfs) that the thread removing it does, which a post
// should not queue behind, nor the upload's answer wait for a turn for.
// Run in place when both are nil or up.Work refuses (the request ended).
// A temp file a crash leaves is swept (an hour old).
func dropTemp(up store.Upload, tmp string) {
	if up.After != nil {
		up.After(func() { os.Remove(tmp) })
		return
	}
	if up.Work == nil || up.Work(func() { os.Remove(tmp) }) != nil {
		os.Remove(tmp)
	}
}

// roomForUpload refuses (TooManyPending, TooManyDrafts: store.Room) an
// upload of by into a thread that holds the most uploads no message names
// yet that by may hold, before its bytes are taken in (PutAttachment
// checks again under the lock).
func (s *File) roomForUpload(ctx context.Context, thread, by string) error {
	d, unlock, err := s.lockDoc(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	recs, err := s.readIndex(thread)
	if err != nil {
		return err
	}
	used := usedIDs(d)
	return store.Room(kept(recs, used, s.now()), func(id string) bool { return used[id] }, by, "", 0, true)
}

// receive takes an upload's bytes into a temporary file of the chat
// folder, sent to the disk as they come and synced (--fsync always), and
// returns its path: the caller places or removes it. A refused upload
// (too large, cut short) leaves no file.
func (s *File) receive(thread string, up store.Upload) (tmp string, rec store.Received, err error) {
	var tf *os.File
	err = s.withFDs(func() (err error) { tf, tmp, err = createTemp(s.dir, "."+thread+".upload.tmp-"); return err })
	if err != nil {
		return "", rec, s.unavailable(thread, err)
	}
	defer tf.Close()
	var dst io.Writer = tf
	if s.dsync != nil {
		dst = &flusher{f: tf}
	}
	rec, err = store.Receive(dst, up)
	if err == nil && s.dsync != nil {
		err = tf.Sync()
	}
	if err != nil {
		os.Remove(tmp)
		var ce *chatrelay.Error
		if errors.As(err, &ce) {
			return "", rec, err
		}
		return "", rec, s.unavailable(thread, err)
	}
	return tmp, rec, nil
}

// flushEvery is how many bytes of an upload may wait in the page cache
// before the flusher sends them to the disk.
const flushEvery = 256 << 10

// flusher writes an upload to its temp file and sends each flushEvery
// bytes to the disk as they come, waiting for them (writeBack): an upload
// never holds more than flushEvery of dirty pages that its final fsync,
// or a post's fsync in the same journal commit, would have to wait for.
type flusher struct {
	f       *os.File
	n       int64 // bytes written
	flushed int64 // bytes sent to the disk
}

func (w *flusher) Write(b []byte) (int, error) {
	k, err := w.f.Write(b)
	w.n += int64(k)
	if err == nil && w.n-w.flushed >= flushEvery {
		writeBack(w.f.Fd(), w.flushed, w.n-w.flushed) // a hint: the final fsync reports what fails
		w.flushed = w.n
	}
	return k, err
}

// placeBlob renames the received temp file tmp to blob, its digest's name
// in the thread's files folder dir, and syncs the folder: on an error
// nothing is left at blob.
func (s *File) placeBlob(thread, tmp, dir, blob string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return s.unavailable(thread, err)
	}
	if err := os.Rename(tmp, blob); err != nil {
		return s.unavailable(thread, err)
	}
	if err := s.syncDir(dir); err != nil {
		os.Remove(blob)
		os.Remove(dir) // if nothing else is in it
		return s.unavailable(thread, err)
	}
	return nil
}

// roomForThread refuses (ThreadLimit) an upload that would start a thread
// when the store holds the most threads it may, before its bytes are
// taken in: its uploads would hold bytes for a thread the limit refuses.
// (The upload reserves the thread's place at its commit: reserveThread.)
// A thread that exists by now, or that another call of this process is
// creating, has its place.
func (s *File) roomForThread(ctx context.Context, thread string) error {
	s.createMu.Lock() // as reserveThread: no reservation comes between the two looks
	defer s.createMu.Unlock()
	s.creatingMu.Lock()
	_, busy := s.creating[thread]
	s.creatingMu.Unlock()
	if busy {
		return nil
	}
	c, err := s.lockCount(ctx)
	if err != nil {
		return err
	}
	defer c.unlock()
	if _, err := os.Stat(s.path(thread)); !errors.Is(err, fs.ErrNotExist) || s.hasFiles(thread) {
		return nil
	}
	n, err := s.threadCount(c)
	if err != nil {
		return s.unavailable("", err)
	}
	if n >= s.opt.MaxThreads {
		return chatrelay.Errorf(chatrelay.ThreadLimit, "thread limit reached")
	}
	return nil
}

// OpenAttachment implements store.Attachments. It takes no lock: the
// index is replaced atomically, and a file opened stays readable if it is
// collected meanwhile. A participant's reading of another's upload reads
// the thread's document too (does a message name it?).
func (s *File) OpenAttachment(ctx context.Context, thread, id, reader string) (chatrelay.Attachment, io.ReadSeekCloser, error) {
	if err := store.CheckAttachmentRef(thread, id); err != nil {
		return chatrelay.Attachment{}, nil, err
	}
	recs, err := s.readIndex(thread)
	if err != nil {
		return chatrelay.Attachment{}, nil, err
	}
	i := slices.IndexFunc(recs, func(r store.StoredAttachment) bool { return r.ID == id })
	if i < 0 {
		return chatrelay.Attachment{}, nil, store.NoAttachment(id)
	}
	if !recs[i].OpensFor(reader, false) {
		d, _, err := s.read(thread)
		if err != nil {
			return chatrelay.Attachment{}, nil, err
		}
		if !recs[i].OpensFor(reader, names(d, id)) {
			return chatrelay.Attachment{}, nil, store.NoAttachment(id)
		}
	}
	f, err := os.Open(filepath.Join(s.filesDir(thread), recs[i].SHA256))
	if errors.Is(err, fs.ErrNotExist) {
		return chatrelay.Attachment{}, nil, store.NoAttachment(id)
	}
	if err != nil {
		return chatrelay.Attachment{}, nil, s.unavailable(thread, err)
	}
	return recs[i].Attachment, f, nil
}

// attachTo resolves the attachment ids of a post against the thread's
// uploads (under the thread's lock): an upload no message of d names, not
// yet old enough to be deleted, and, for a participant's post (by: its
// id), its own (store.StoredAttachment.OpensFor: another's draft is
// unknown to it).
func (s *File) attachTo(thread string, d threadDoc, ids []string, by string, now time.Time) ([]chatrelay.Attachment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	recs, err := s.readIndex(thread)
	if err != nil {
		return nil, err
	}
	used := usedIDs(d)
	return store.Attach(ids, func(id string) (chatrelay.Attachment, bool) {
		i := slices.IndexFunc(recs, func(r store.StoredAttachment) bool { return r.ID == id })
		if i < 0 || (!used[id] && recs[i].Unused(now)) || !recs[i].OpensFor(by, used[id]) {
			return chatrelay.Attachment{}, false
		}
		return recs[i].Attachment, true
	}, func(id string) bool { return used[id] })
}

// collect drops the uploads of thread that no message names and that are
// old enough, or in gone (their message left), or whose grant has ended
// (store.StoredAttachment.Orphaned), and the files no upload names; a
// thread with none left loses its folder. The caller holds the
// thread's lock; d is its document (nil: it has none).
func (s *File) collect(thread string, d *threadDoc, gone map[string]bool) error {
	recs, err := s.readIndex(thread)
	if err != nil {
		return err
	}
	var doc threadDoc
	if d != nil {
		doc = *d
	}
	if len(recs) == 0 {
		s.removeStray(thread, nil)
		return nil
	}
	used := usedIDs(doc)
	grants, gerr := s.readGrants(thread) // (unreadable: every grant's uploads wait for their hour)
	now := s.now()
	keep := slices.DeleteFunc(kept(recs, used, now), func(r store.StoredAttachment) bool {
		return gone[r.ID] || gerr == nil && !used[r.ID] && r.Orphaned(grants, now)
	})
	if len(keep) != len(recs) {
		if err := s.writeIndex(thread, recs, keep); err != nil {
			return s.unavailable(thread, err)
		}
	}
	s.removeStray(thread, keep)
	return nil
}

// collectLocked takes the thread's lock and collects its attachments.
func (s *File) collectLocked(ctx context.Context, thread string, gone map[string]bool) error {
	d, unlock, err := s.lockDoc(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	used := usedIDs(d)
	for id := range gone {
		if used[id] { // never: an id is on one message
			delete(gone, id)
		}
	}
	return s.collect(thread, &d, gone)
}

// lockDoc takes the thread's lock and reads its document (empty if it
// has none: then the lock file goes at unlock). The caller calls unlock
// when err is nil; on an error the lock is let go of already.
func (s *File) lockDoc(ctx context.Context, thread string) (d threadDoc, unlock func(), err error) {
	t, unlock, err := s.lockState(ctx, thread)
	if err != nil {
		return threadDoc{}, nil, err
	}
	snap, err := s.load(thread, t)
	switch {
	case err != nil:
	case snap == nil:
		t.drop = true
	case snap.err != nil:
		err = unreadable(snap)
	default:
		d = snap.doc
	}
	if err != nil {
		unlock()
		return threadDoc{}, nil, err
	}
	return d, unlock, nil
}

// kept is recs without the uploads that no message names (used: the ids
// the messages name, usedIDs) and that are old enough to go.
func kept(recs []store.StoredAttachment, used map[string]bool, now time.Time) []store.StoredAttachment {
	return slices.DeleteFunc(slices.Clone(recs), func(r store.StoredAttachment) bool { return !used[r.ID] && r.Unused(now) })
}

// usedIDs are the attachments the messages of d name.
func usedIDs(d threadDoc) map[string]bool {
	used := map[string]bool{}
	for _, e := range d.msgs {
		for _, a := range e.Attachments {
			used[a.ID] = true
		}
	}
	return used
}

// names reports whether a message of d names the attachment id.
func names(d threadDoc, id string) bool {
	for _, e := range d.msgs {
		for _, a := range e.Attachments {
			if a.ID == id {
				return true
			}
		}
	}
	return false
}

// removeStray removes the files of thread's folder that no record of recs
// names (collected bytes, or a crash's leftovers), and the folder itself
// if nothing is left in it. Failures are logged: the next collect tries
// again.
func (s *File) removeStray(thread string, recs []store.StoredAttachment) {
	dir := s.filesDir(thread)
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	names := map[string]bool{"index.json": len(recs) > 0}
	for _, r := range recs {
		names[r.SHA256] = true
	}
	left := 0
	for _, de := range des {
		if names[de.Name()] {
			left++
			continue
		}
		if err := os.Remove(filepath.Join(dir, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("attachments: remove", "thread", thread, "err", err)
			left++
		}
	}
	if left == 0 {
		os.Remove(dir)
	}
}

// indexSnap is a thread's attachments index as last parsed or written,
// with the checksum of its bytes: a read of an unchanged index (every
// download reads it, and an upload twice: before its bytes are taken in
// and at its commit; a post naming it once) parses nothing, though it
// reads the file. (Its identity alone could deceive, as a document's can:
// see snapshot.) Never modified.
type indexSnap struct {
	sum  uint64
	recs []store.StoredAttachment
}

// readIndex reads the uploads of thread (none if it has no index). The
// slice is shared: a caller copies it before changing it (append makes
// a copy).
func (s *File) readIndex(thread string) ([]store.StoredAttachment, error) {
	b, err := os.ReadFile(filepath.Join(s.filesDir(thread), "index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, s.unavailable(thread, err)
	}
	t := s.state(thread)
	sum := maphash.Bytes(docSeed, b)
	if c := t.atts.Load(); c != nil && c.sum == sum {
		return c.recs, nil
	}
	recs, err := parseIndex(thread, b)
	if err != nil {
		return nil, err
	}
	t.atts.Store(&indexSnap{sum: sum, recs: slices.Clip(recs)})
	return slices.Clip(recs), nil
}

// parseIndex parses the bytes of thread's index.
func parseIndex(thread string, b []byte) ([]store.StoredAttachment, error) {
	var ix index
	if err := json.Unmarshal(b, &ix); err != nil || ix.Version != indexVersion {
		return nil, &chatrelay.Error{Code: chatrelay.ThreadUnreadable, Message: "this thread's attachments index does not parse; it is kept as it is for an operator to look at",
			Err: fmt.Errorf("%s: version %d: %v", thread, ix.Version, err)}
	}
	for _, r := range ix.Attachments {
		if !chatrelay.AttachmentIDPattern.MatchString(r.ID) || len(r.SHA256) != 64 || strings.Trim(r.SHA256, "0123456789abcdef") != "" {
			return nil, &chatrelay.Error{Code: chatrelay.ThreadUnreadable, Message: "this thread's attachments index does not parse; it is kept as it is for an operator to look at",
				Err: fmt.Errorf("%s: a record without a valid id or digest", thread)}
		}
	}
	return ix.Attachments, nil
}

// writeIndex replaces the index of thread atomically (none is removed),
// whose records were prev (a refused write puts them back:
// replaceRecord).
func (s *File) writeIndex(thread string, prev, recs []store.StoredAttachment) error {
	dir := s.filesDir(thread)
	if len(recs) == 0 {
		if err := os.Remove(filepath.Join(dir, "index.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	b, err := indexRecord(recs)
	if err != nil {
		return err
	}
	var before []byte
	if len(prev) > 0 {
		if before, err = indexRecord(prev); err != nil {
			return err
		}
	}
	var ds *dirSync
	if s.dsync != nil {
		ds = newDirSync(dir)
		defer ds.close()
	}
	err = s.replaceRecord(dir, "index.json", b, before, ds)
	if err == nil { // what was written is what the next read parses
		s.state(thread).atts.Store(&indexSnap{sum: maphash.Bytes(docSeed, b), recs: slices.Clip(slices.Clone(recs))})
	}
	return err
}

// indexRecord is the bytes of an index holding recs.
func indexRecord(recs []store.StoredAttachment) ([]byte, error) {
	b, err := json.Marshal(index{Version: indexVersion, Attachments: recs})
	return append(b, '\n'), err
}

// syncDir fsyncs a folder (unless the store does not fsync).
func (s *File) syncDir(dir string) error {
	if s.dsync == nil {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// uploadThreads lists the threads that have an attachments folder.
func (s *File) uploadThreads() []string {
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "*.files"))
	var out []string
	for _, d := range dirs {
		if name := strings.TrimSuffix(filepath.Base(d), ".files"); chatrelay.ValidThread(name) {
			out = append(out, name)
		}
	}
	return out
}

// sweepUploads removes what uploads killed mid-way left (temp files not
// written to for LimitAttachmentUnused) and collects the attachments of
// every thread that has them.
func (s *File) sweepUploads(ctx context.Context) {
	_, ttl := chatrelay.LimitAttachmentUnused.Duration()
	tmps, _ := filepath.Glob(filepath.Join(s.dir, ".*.upload.tmp-*"))
	for _, tmp := range tmps {
		if fi, err := os.Stat(tmp); err == nil && s.now().Sub(fi.ModTime()) >= ttl {
			os.Remove(tmp)
		}
	}
	for _, thread := range s.uploadThreads() {
		if ctx.Err() != nil {
			return
		}
		if err := s.collectLocked(ctx, thread, nil); err != nil {
			s.log.Warn("sweep: attachments", "thread", thread, "err", err)
		}
	}
}
