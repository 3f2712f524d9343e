package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/chatrelay/chatrelay"
)

// Attachments is the optional capability of a store that keeps
// attachments (contract Part 5): files uploaded into a thread, then named
// by id in a post (NewMessage.Attachments), which Append checks and
// stores in the message. Both backends have it.
//
// An upload is streamed, never held whole in memory, and refused or
// failed, it leaves nothing behind (no file, no key, no count). Identical
// bytes are stored once per thread. An upload no post names is deleted
// after LimitAttachmentUnused; an attachment leaves with its message
// (retention, Sweep), and its bytes when no attachment of the thread
// holds them any more.
type Attachments interface {
	// PutAttachment stores up in thread and returns its attachment
	// object. It returns InvalidAttachment for a name empty once cleaned,
	// AttachmentTooLarge for a body over up.Max bytes or one that would
	// take the thread's stored bytes past LimitThreadAttachments (judged
	// on what up.By may read: Room), TooManyAttachments for one past the
	// uploads no message names yet that up.By may hold (Room),
	// ThreadLimit for an upload that would start a thread beyond the
	// store's limit, and StoreUnavailable if storage cannot take it (a
	// full disk).
	PutAttachment(ctx context.Context, thread string, up Upload) (chatrelay.Attachment, error)

	// OpenAttachment returns the attachment id of thread and its bytes,
	// which the caller closes; NotFound if the thread has no such
	// attachment (another thread's id included). reader is who asks: ""
	// for the owner (its devices, the host), who opens every attachment
	// of the thread, else a participant's id, who opens an attachment a
	// message names and its own uploads, and is answered NotFound, as for
	// an unknown id, for an upload of another (the owner's draft) that no
	// message names yet.
	OpenAttachment(ctx context.Context, thread, id, reader string) (chatrelay.Attachment, io.ReadSeekCloser, error)
}

// NoAttachment is the NotFound an OpenAttachment answers when thread has
// no attachment id.
func NoAttachment(id string) error {
	return chatrelay.Errorf(chatrelay.NotFound, "no attachment %s in this conversation", id)
}

// CheckAttachmentRef is an OpenAttachment's first check: NotFound
// unless thread is a thread's name and id an attachment id, so that a
// malformed one answers as one not stored (NotFound, without the id), and
// no backend builds a path or a key of it.
func CheckAttachmentRef(thread, id string) error {
	if chatrelay.CheckThread(thread) != nil || !chatrelay.AttachmentIDPattern.MatchString(id) {
		// Not echoed: a malformed id is the client's bytes, of any length.
		return chatrelay.Errorf(chatrelay.NotFound, "no such attachment in this conversation: an attachment id is at_ and 12 lowercase hex")
	}
	return nil
}

// Upload is a file to store: its name and media type as the uploader
// sent them, its bytes, and the most bytes it may have.
type Upload struct {
	Name string
	Type string
	Body io.Reader
	Max  int64  // bytes; 0 is LimitAttachmentBytes.Max
	By   string // the uploader: a participant's id, or "" for the owner (its devices, the host)
	// Work, if set, runs each chunk's hashing and writing: Receive calls
	// it once a chunk, with that work, and it returns once the work is
	// done, or an error if it could not run it (the upload's request
	// ended while it waited); the server runs the work under a turn of
	// its background lane, on a low-priority thread. Nil runs it in place.
	Work func(work func()) error
	// After, if set, takes work to run once the upload is answered (the
	// removal of a temp file whose bytes the store held already, or of a
	// refused upload): the caller owns it, runs it under a turn of its
	// background lane, and runs it in place at the latest as it stops
	// (transport's Server.Shutdown), so that the answer waits for no turn.
	// Nil runs it before the store answers, through Work.
	After func(work func())
	// Grant, if set, is the id of the grant (a share link or a device)
	// the upload is made with: the store keeps the upload only if the
	// thread still has that grant, active, when it commits (UploadGrant),
	// so a revoke, an expiry or the thread's removal while the bytes
	// arrived refuses it and keeps nothing.
	Grant string
}

// UploadGrant is the check of an upload's grant at its commit: the
// grant id among grants (the thread's, read under its lock or with the
// record's version) and active at now, else why not (UnknownShareLink for
// one the thread does not have: revoked long ago, or gone with its thread).
func UploadGrant(grants []chatrelay.Grant, id string, now time.Time) error {
	for _, g := range grants {
		if g.ID == id {
			return chatrelay.GrantRefusal(g, now)
		}
	}
	return chatrelay.UnknownShareLink()
}

// Check cleans up's name and type, fills Max, and refuses a bad name
// (InvalidAttachment).
func (up *Upload) Check() error {
	name, err := chatrelay.CleanAttachmentName(up.Name)
	if err != nil {
		return err
	}
	up.Name, up.Type = name, chatrelay.CleanMediaType(up.Type)
	if up.Max <= 0 {
		up.Max = int64(chatrelay.LimitAttachmentBytes.Max)
	}
	return nil
}

// headKept is how much of a file's start Receive reads an image's size
// from (its first chunk holds that much, or the whole file).
const headKept = 64 << 10

// chunkBytes is how much of a body Receive reads before it hashes and
// writes it: a chunk is one piece of work for Upload.Work, and each piece
// handed to another thread costs that hand-off (about 35 µs of CPU on a
// small VM), so a chunk is large enough to make it a small share of the
// chunk's own work (about 150 µs of SHA-256 for 256 KiB). It is also the
// Redis appender's chunk: each chunk is one field written.
const chunkBytes = 256 << 10

// receiveBufs are Receive's chunk buffers, reused from upload to upload:
// an upload allocates none.
var receiveBufs = sync.Pool{New: func() any { b := make([]byte, chunkBytes); return &b }}

// Received is what Receive learned of the bytes it copied.
type Received struct {
	Size          int64
	SHA256        string // lowercase hex
	Width, Height int    // an image's, read from its first bytes (headKept); 0 for other files
}

// Receive copies up's body to dst, a chunk at a time, hashing it on the
// way (each chunk's hashing and writing through up.Work, if set), and
// refuses (AttachmentTooLarge) a body of more than up.Max bytes as soon
// as it reads the byte past it. A failure of dst is
// returned as it is; a failure to read the body, or of up.Work, is
// InvalidAttachment (the upload broke off).
func Receive(dst io.Writer, up Upload) (Received, error) {
	h := sha256.New()
	bufp := receiveBufs.Get().(*[]byte)
	defer receiveBufs.Put(bufp)
	var r Received
	var chunk []byte
	var werr error
	work := func() {
		h.Write(chunk)
		_, werr = dst.Write(chunk)
	}
	for {
		// A chunk, or less: the rest of up.Max and the byte past it, so
		// that a body over the limit is refused as soon as that byte
		// comes, not once a chunk's worth more came (a client that sends
		// it and then waits would hold the upload until its deadline).
		k, rerr := fill(up.Body, (*bufp)[:min(int64(chunkBytes), up.Max-r.Size+1)])
		if k > 0 {
			if r.Size+int64(k) > up.Max {
				return Received{}, TooLarge(up.Max)
			}
			chunk = (*bufp)[:k]
			if r.Size == 0 {
				if w, ht, ok := chatrelay.ImageSize(bytes.NewReader(chunk[:min(k, headKept)])); ok {
					r.Width, r.Height = w, ht
				}
			}
			if up.Work == nil {
				work()
			} else if err := up.Work(work); err != nil {
				return Received{}, brokeOff(err)
			}
			if werr != nil {
				return Received{}, werr
			}
			r.Size += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			var me interface{ Limit() int64 }
			if errors.As(rerr, &me) {
				return Received{}, TooLarge(up.Max)
			}
			return Received{}, brokeOff(rerr)
		}
	}
	r.SHA256 = hex.EncodeToString(h.Sum(nil))
	return r, nil
}

// fill reads r into buf until buf is full or a read fails: the bytes
// read, and the failure (io.EOF at the body's end).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// brokeOff is the refusal of an upload whose body could not be read to
// its end (err).
func brokeOff(err error) error {
	return &chatrelay.Error{Code: chatrelay.InvalidAttachment, Message: "the upload broke off before its end", Err: err}
}

// TooLarge is the refusal of a file over max bytes.
func TooLarge(max int64) error {
	return chatrelay.Errorf(chatrelay.AttachmentTooLarge, "the file is larger than %d bytes", max)
}

// ThreadFull is the refusal of a file that would take the bytes of the
// thread's named files and its uploader's own drafts past
// LimitThreadAttachments.
func ThreadFull() error {
	return chatrelay.Errorf(chatrelay.AttachmentTooLarge, "the files this conversation's messages name and your uploads no message names yet may hold at most %d bytes", chatrelay.LimitThreadAttachments.Max)
}

// TooManyPending is the refusal of the owner's upload past
// LimitAttachmentPending: it holds that many uploads no message names yet
// (its own, its devices' and the host's: participants' drafts count for
// it as nothing).
func TooManyPending() error {
	return chatrelay.Errorf(chatrelay.TooManyAttachments, "at most %d of the owner's uploads no message names yet in this thread: name them in a post, or wait for them to expire", chatrelay.LimitAttachmentPending.Max)
}

// TooManyDrafts is the refusal of a participant's upload past
// LimitParticipantPending: it holds that many uploads no message names
// yet (its own: another's drafts count for it as nothing).
func TooManyDrafts() error {
	return chatrelay.Errorf(chatrelay.TooManyAttachments, "at most %d of your uploads no message names yet: name them in a post, or wait for them to expire", chatrelay.LimitParticipantPending.Max)
}

// DraftsFull is the refusal of a participant's upload that would take
// its uploads no message names past LimitParticipantDraftBytes.
func DraftsFull() error {
	return chatrelay.Errorf(chatrelay.AttachmentTooLarge, "your uploads no message names yet may hold at most %d bytes: name them in a post, or wait for them to expire", chatrelay.LimitParticipantDraftBytes.Max)
}

// Room judges an upload of by (Upload.By) of the bytes sha (size bytes)
// against the uploads recs of a thread still kept (none past its hour),
// of which a message names those used reports. Each uploader is judged on
// its own drafts (the uploads by it no message names) and the attachments
// messages name; another's drafts count for it as nothing. The owner ("":
// its token, its devices, the host) against LimitAttachmentPending drafts
// (TooManyPending), a participant against LimitParticipantPending
// (TooManyDrafts) and its drafts' distinct bytes against
// LimitParticipantDraftBytes (DraftsFull); both on the distinct bytes of
// the named files and their drafts against LimitThreadAttachments
// (ThreadFull), bytes counted once only when one of those holds them:
// bytes only another's draft holds count as new, though stored once
// (they stay the uploader's when that draft goes; and a participant, who
// may not read the draft, learns nothing of it). So a participant's
// drafts never hold the owner's uploads back, nor another's; the thread's
// own totals stay bounded all the same, each uploader's drafts by its own
// limits (docs/api.md, Attachments). pre is the check before the bytes
// are taken in (sha unknown yet): counts alone.
func Room(recs []StoredAttachment, used func(id string) bool, by, sha string, size int64, pre bool) error {
	n := 0
	seen, drafts := map[string]bool{}, map[string]bool{}
	var mine, draftBytes int64
	for _, r := range recs {
		u := used(r.ID)
		if !u && r.By != by {
			continue // another's draft: nothing, for by
		}
		if !u {
			n++
			if !drafts[r.SHA256] {
				drafts[r.SHA256] = true
				draftBytes += r.Size
			}
		}
		if !seen[r.SHA256] {
			seen[r.SHA256] = true
			mine += r.Size
		}
	}
	if by == "" && n >= chatrelay.LimitAttachmentPending.Max {
		return TooManyPending()
	}
	if by != "" && n >= chatrelay.LimitParticipantPending.Max {
		return TooManyDrafts()
	}
	if pre {
		return nil
	}
	if !seen[sha] && mine+size > int64(chatrelay.LimitThreadAttachments.Max) {
		return ThreadFull()
	}
	if by != "" && !drafts[sha] && draftBytes+size > int64(chatrelay.LimitParticipantDraftBytes.Max) {
		return DraftsFull()
	}
	return nil
}

// NewAttachment is the attachment object of up once received: a fresh
// id, and the image's size Receive read from its first bytes.
func NewAttachment(up Upload, r Received) chatrelay.Attachment {
	return chatrelay.Attachment{ID: chatrelay.NewAttachmentID(), Name: up.Name, Type: up.Type, Size: r.Size, SHA256: r.SHA256, Width: r.Width, Height: r.Height}
}

// StoredAttachment is an attachment as a store keeps it: the object,
// when it was uploaded, by whom (Upload.By; a record stored before it was
// kept has none: the owner's), and with which grant (Upload.Grant).
type StoredAttachment struct {
	chatrelay.Attachment
	At    int64  `json:"at"`              // epoch ms of the upload
	By    string `json:"by,omitempty"`    // a participant's id; "" for the owner
	Grant string `json:"grant,omitempty"` // the share link's or device's id it was uploaded with; "" for the owner's token, the host
}

// GrantID is the id of the grant a was uploaded with (a share link's or
// a device's), "" for the owner's token or the host. A record stored
// before Grant was kept has a participant's id in By.
func (a StoredAttachment) GrantID() string {
	if a.Grant != "" {
		return a.Grant
	}
	return a.By
}

// Orphaned reports whether a, an upload no message names, goes at once:
// the grant it was uploaded with has ended at now (revoked, or past its
// expiry) or is gone from grants, the thread's (it ended long ago). Its
// grant can no longer name it in a post, and it would hold a place of
// its uploader's pending uploads (Room) and the thread's stored bytes
// until its hour passed.
func (a StoredAttachment) Orphaned(grants []chatrelay.Grant, now time.Time) bool {
	id := a.GrantID()
	if id == "" {
		return false
	}
	for i := range grants {
		if grants[i].ID == id {
			return grants[i].StateAt(now) != chatrelay.Active
		}
	}
	return true
}

// OpensFor reports whether reader (OpenAttachment's) may open a, which a
// message names if used: the owner ("") every attachment, a participant
// one a message names or its own upload.
func (a StoredAttachment) OpensFor(reader string, used bool) bool {
	return reader == "" || used || a.By == reader
}

// Unused reports whether an upload no message names is old enough at now
// to be deleted (LimitAttachmentUnused).
func (a StoredAttachment) Unused(now time.Time) bool {
	_, ttl := chatrelay.LimitAttachmentUnused.Duration()
	return now.UnixMilli()-a.At >= ttl.Milliseconds()
}

// Attach resolves the ids a post names (checked by Prepare) against a
// thread's uploads: each must be an upload of the thread (known) that no
// message names yet (used). It returns their objects, in the post's order,
// or InvalidAttachment.
func Attach(ids []string, known func(id string) (chatrelay.Attachment, bool), used func(id string) bool) ([]chatrelay.Attachment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]chatrelay.Attachment, len(ids))
	for i, id := range ids {
		a, ok := known(id)
		if !ok || used(id) {
			return nil, chatrelay.UnusableAttachment(id) // the Redis store's words too
		}
		out[i] = a
	}
	return out, nil
}
