package filestore

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"path/filepath"
	"slices"

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

// writeGrants replaces the thread's record, whose grants were prev (a
// refused write puts them back: replaceRecord). The caller holds the
// thread's locks.
func (s *File) writeGrants(thread string, prev, grants []chatrelay.Grant) error {
	b := grantsRecord(thread, grants)
	s.index.known(thread, maphash.Bytes(docSeed, b)) // before the rename the watch sees
	var before []byte
	if len(prev) > 0 {
		before = grantsRecord(thread, prev)
	}
	if err := s.replaceRecord(s.dir, thread+".participants.json", b, before, s.dsync); err != nil {
		s.index.forget(thread)
		return s.unavailable(thread, err)
	}
	s.noteGrants(thread, grants)
	s.announceParticipants(thread)
	return nil
}

// grantsRecord is the participants record of thread holding grants.
func grantsRecord(thread string, grants []chatrelay.Grant) []byte {
	b, _ := json.Marshal(participantsFile{Version: 1, Thread: thread, Grants: grants})
	return append(b, '\n')
}

// withGrants runs fn on the thread's grants under the thread's locks and
// writes what it returns (if write). A thread with no document is locked
// only if fn writes (a grant a sweep cut short left): a call refused for a
// thread that does not exist, which anyone with any token can make, makes
// no lock file and keeps no state. fn gets unread, the ThreadUnreadable
// error of a document that does not parse (else nil), so that an invite
// says so rather than "no message yet", while a revoke still works.
func (s *File) withGrants(ctx context.Context, thread string, fn func(grants []chatrelay.Grant, unread error, exists bool) ([]chatrelay.Grant, bool, error)) error {
	return s.withGrantsThen(ctx, thread, fn, false)
}

// withGrantsThen is withGrants that, if drafts, then collects the
// thread's attachments under the same lock (collect): the uploads of a
// grant that has ended (revoked, or its expiry noted) that no message
// names go with the write that ends it, or, a grant that had ended
// already (fn writes nothing), at once. A thread whose document does not
// parse is left as it is (which uploads its messages name is unknown).
func (s *File) withGrantsThen(ctx context.Context, thread string, fn func(grants []chatrelay.Grant, unread error, exists bool) ([]chatrelay.Grant, bool, error), drafts bool) error {
	if err := chatrelay.CheckThread(thread); err != nil {
		return err
	}
	if !s.mayExist(thread) {
		grants, err := s.readGrants(thread)
		if err != nil {
			return err
		}
		if _, write, err := fn(grants, nil, false); err != nil || !write {
			return err
		}
	}
	t, snap, unlock, err := s.lockLoad(ctx, thread)
	if err != nil {
		return err
	}
	defer unlock()
	t.drop = snap == nil // no document: its lock file goes
	var d threadDoc
	var unread error
	if snap != nil && snap.err == nil {
		d = snap.doc
	} else if snap != nil {
		unread = unreadable(snap)
	}
	grants, err := s.readGrants(thread)
	if err != nil {
		return err
	}
	out, write, err := fn(grants, unread, snap != nil && len(d.msgs) > 0)
	if err != nil {
		return err
	}
	if write {
		if s.hooks != nil { // the change's webhook events first (outbox.go)
			if lines := grantEventsOf(thread, grants, out, s.now()); len(lines) > 0 {
				if err := s.hooks.queue(lines); err != nil {
					return s.unavailable(thread, err)
				}
			}
		}
		if err := s.writeGrants(thread, grants, out); err != nil {
			return err
		}
	}
	if drafts && unread == nil && s.hasFiles(thread) {
		// The grant has ended (written): a failure to collect is the
		// sweep's to mend, not the revoke's to report.
		var doc *threadDoc
		if snap != nil {
			doc = &d
		}
		if err := s.collect(thread, doc, nil); err != nil {
			s.log.Warn("attachments of an ended grant", "thread", thread, "err", err)
		}
	}
	return nil
}

// Invite implements Participants.
func (s *File) Invite(ctx context.Context, thread string, g chatrelay.Grant) error {
	return s.withGrants(ctx, thread, func(grants []chatrelay.Grant, unread error, exists bool) ([]chatrelay.Grant, bool, error) {
		if unread != nil {
			return nil, false, unread
		}
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
	if err := chatrelay.CheckThread(thread); err != nil {
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
	return store.GrantOf(ctx, s, thread, id)
}

// Revoke implements Participants.
func (s *File) Revoke(ctx context.Context, thread, id string) (chatrelay.Grant, error) {
	var out chatrelay.Grant
	err := s.withGrantsThen(ctx, thread, func(grants []chatrelay.Grant, _ error, _ bool) ([]chatrelay.Grant, bool, error) {
		i, err := chatrelay.GrantIndex(grants, id)
		if err != nil {
			return nil, false, err
		}
		if grants[i].RevokedAt != 0 {
			out = grants[i]
			return nil, false, nil
		}
		grants = slices.Clone(grants)
		grants[i].RevokedAt = s.now().UnixMilli()
		out = grants[i]
		return grants, true, nil
	}, true)
	return out, err
}

// MarkUsed implements Participants.
func (s *File) MarkUsed(ctx context.Context, thread, id string) (bool, error) {
	return s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.Used }, false)
}

// Seen implements Participants.
func (s *File) Seen(ctx context.Context, thread, id string, at int64) (bool, error) {
	first := false
	err := s.withGrants(ctx, thread, func(grants []chatrelay.Grant, _ error, _ bool) ([]chatrelay.Grant, bool, error) {
		first = false // fn may run twice (withGrants' look before the lock): only the last run counts
		i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == id })
		if i < 0 || grants[i].Used && grants[i].LastSeen >= at {
			return nil, false, nil
		}
		grants = slices.Clone(grants)
		first = !grants[i].Used
		grants[i].Used, grants[i].LastSeen = true, max(grants[i].LastSeen, at)
		return grants, true, nil
	})
	return first && err == nil, err
}

// NoteExpired implements Participants.
// The expired grant's uploads that no message names go with the note.
func (s *File) NoteExpired(ctx context.Context, thread, id string) (bool, error) {
	return s.markGrant(ctx, thread, id, func(g *chatrelay.Grant) *bool { return &g.ExpiryNoted }, true)
}

// markGrant sets the flag of a grant that flag points to, and reports
// whether it was not set before; drafts: as withGrantsThen.
func (s *File) markGrant(ctx context.Context, thread, id string, flag func(*chatrelay.Grant) *bool, drafts bool) (bool, error) {
	first := false
	err := s.withGrantsThen(ctx, thread, func(grants []chatrelay.Grant, _ error, _ bool) ([]chatrelay.Grant, bool, error) {
		first = false // fn may run twice (withGrants' look before the lock): only the last run counts
		i := slices.IndexFunc(grants, func(g chatrelay.Grant) bool { return g.ID == id })
		if i < 0 || *flag(&grants[i]) {
			return nil, false, nil
		}
		grants = slices.Clone(grants)
		*flag(&grants[i]), first = true, true
		return grants, true, nil
	}, drafts)
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

var _ store.Participants = (*File)(nil)
