package host

import (
	"bytes"
	"context"
	"io"
	"io/fs"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// AttachmentInput is a file hermes attaches (send, send_card): its name,
// its media type and its bytes (base64 in JSON). Body, when set, is read
// instead of Data (the CLI streams a file from disk).
type AttachmentInput struct {
	Name string    `json:"name"`
	Type string    `json:"type,omitempty"`
	Data []byte    `json:"data"`
	Body io.Reader `json:"-"`
}

// attach uploads the files of a hermes message into thread and returns
// their ids, for the message to name. It refuses more than
// LimitAttachments (TooManyAttachments) before it stores anything, and a
// thread that has no message (NotFound: hermes writes only to threads that
// exist). A file over v.MaxAttachmentBytes (by default LimitAttachmentBytes)
// is AttachmentTooLarge. A file
// uploaded before a later one is refused is deleted by the store within
// the hour (no message names it); checkFiles refuses what it can before
// any is stored. A repeat of a message with its
// client_id stores no file again: it names the files of the message
// stored under that client_id, which the store then answers (or refuses
// with ClientIDConflict if the rest differs). A client_id the message
// could not be stored under (InvalidClientID, or that of a stored message
// with other files: ClientIDConflict) is refused before any file is
// stored too.
func (v *Verbs) attach(ctx context.Context, thread, clientID string, files []AttachmentInput) ([]string, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if err := chatrelay.LimitAttachments.CheckItems(chatrelay.TooManyAttachments, "attachments", len(files)); err != nil {
		return nil, err
	}
	if err := chatrelay.CheckClientID(clientID); err != nil {
		return nil, err // the message would be refused: before any file is stored
	}
	if err := v.checkFiles(files); err != nil {
		return nil, err
	}
	as, ok := attachmentsOf(v.Store)
	if !ok {
		return nil, chatrelay.Errorf(chatrelay.NotFound, "this store keeps no attachments")
	}
	p, err := v.Store.Since(ctx, thread, 0, 1)
	if err != nil {
		return nil, err
	}
	if len(p.Messages) == 0 {
		return nil, chatrelay.Errorf(chatrelay.NotFound, "no thread %s", thread)
	}
	if clientID != "" {
		all, err := v.Store.Changes(ctx, thread, 0, 0)
		if err != nil {
			return nil, err
		}
		for _, e := range all.Messages {
			if e.ClientID != clientID {
				continue
			}
			if !sameNames(e.Attachments, files) { // other files: other ids, a conflict whatever the rest
				return nil, store.Conflict(e)
			}
			return chatrelay.AttachmentIDs(e.Attachments), nil
		}
	}
	ids := make([]string, len(files))
	for i, f := range files {
		body := f.Body
		if body == nil {
			body = bytes.NewReader(f.Data)
		}
		a, err := as.PutAttachment(ctx, thread, store.Upload{Name: f.Name, Type: f.Type, Body: body, Max: v.MaxAttachmentBytes})
		if err != nil {
			return nil, err
		}
		ids[i] = a.ID
	}
	return ids, nil
}

// checkFiles refuses, before any file is stored, what the store would
// refuse of one of files (store.Upload.Check: a name empty once cleaned,
// InvalidAttachment; data, or the CLI's regular file, over
// v.MaxAttachmentBytes, AttachmentTooLarge) and a file with no data
// (InvalidAttachment: the input schema requires it; "" is an empty file),
// so that a refused call stores none of its files. A Body is bounded as
// it is read too (a file that grows meanwhile).
func (v *Verbs) checkFiles(files []AttachmentInput) error {
	for i, f := range files {
		if f.Body == nil && f.Data == nil {
			return chatrelay.Errorf(chatrelay.InvalidAttachment, "attachments[%d] has no data: its bytes in base64 (\"\" for an empty file)", i)
		}
		up := store.Upload{Name: f.Name, Type: f.Type, Max: v.MaxAttachmentBytes}
		if err := up.Check(); err != nil {
			return err
		}
		size := int64(len(f.Data))
		if st, ok := f.Body.(interface{ Stat() (fs.FileInfo, error) }); ok { // the CLI's file
			if fi, err := st.Stat(); err == nil && fi.Mode().IsRegular() {
				size = fi.Size()
			}
		}
		if size > up.Max {
			return store.TooLarge(up.Max)
		}
	}
	return nil
}

// attachmentsOf is the attachments of st (or of the store a
// store.Backend holds).
func attachmentsOf(st store.Store) (store.Attachments, bool) {
	if b, ok := st.(*store.Backend); ok {
		st = b.Store
	}
	as, ok := st.(store.Attachments)
	return as, ok
}

// sameNames reports whether as are files by their names, once cleaned, in
// order: a repeat of the message that stored as.
func sameNames(as []chatrelay.Attachment, files []AttachmentInput) bool {
	if len(as) != len(files) {
		return false
	}
	for i, f := range files {
		if name, err := chatrelay.CleanAttachmentName(f.Name); err != nil || name != as[i].Name {
			return false
		}
	}
	return true
}
