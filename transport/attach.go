package transport

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/store"
)

// Attachments (contract Part 5): POST /api/chat/attachments takes a file's
// bytes as the body (its name in X-Filename, percent-encoded UTF-8; its
// type in Content-Type) and answers its attachment object; GET
// /api/chat/attachments/{id} serves the bytes to the thread's members (a
// ticket too: an <img> cannot send headers). How a file is served is
// decided from its bytes, never from the uploader's word: a PNG, JPEG, GIF
// or WebP image inline with its type, anything else as a download of
// application/octet-stream; always nosniff, a sandbox CSP and private
// caching.

// extendDeadlines gives the request chatrelay.DefaultTransferTime to read
// its body and write its answer: the server's ReadTimeout and
// WriteTimeout (30 s) would cut a 10 MiB file on a slow link (a phone at
// 1 Mbit/s needs 80 s). A client that stalls holds a goroutine and a
// temp file (removed when it fails) at most that long.
func extendDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	at := time.Now().Add(chatrelay.DefaultTransferTime)
	rc.SetReadDeadline(at)
	rc.SetWriteDeadline(at)
}

// attachments is the store's attachments, or NotFound if it keeps none.
func (s *Server) attachments() (store.Attachments, error) {
	if as, ok := s.cfg.Store.(store.Attachments); ok { // (s.store is metered: not the backend)
		return as, nil
	}
	return nil, chatrelay.Errorf(chatrelay.NotFound, "this server's store keeps no attachments")
}

// attachmentAnswer is the 201 answer to an upload.
type attachmentAnswer struct {
	Success    bool                 `json:"success"`
	Attachment chatrelay.Attachment `json:"attachment"`
}

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, who principal) {
	as, err := s.attachments()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	name, err := url.PathUnescape(r.Header.Get("X-Filename"))
	if err != nil || name == "" {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.InvalidAttachment, "X-Filename must name the file (UTF-8, percent-encoded)"))
		return
	}
	max := s.cfg.MaxAttachmentBytes
	if r.ContentLength > max {
		s.writeError(w, r, store.TooLarge(max))
		return
	}
	extendDeadlines(w)
	body := &pacedBody{ctx: r.Context(), r: r.Body}
	a, err := as.PutAttachment(r.Context(), who.thread, store.Upload{Name: name, Type: r.Header.Get("Content-Type"), Body: body, Max: max})
	body.release()
	if err != nil {
		if chatrelay.CodeOf(err) == chatrelay.AttachmentTooLarge {
			w.Header().Set("Connection", "close") // the rest of the body is not read
		}
		s.writeError(w, r, err)
		return
	}
	if who.participant() { // a device uploads as the owner: no audit, nothing redacted
		s.audit(r, who.thread, chatrelay.AuditEvent{Event: chatrelay.AuditUpload, Participant: who.grant.ID})
		a = redactAttachment(a)
	}
	writeJSON(w, http.StatusCreated, attachmentAnswer{Success: true, Attachment: a})
}

// redactAttachment is a as a participant sees it: its name redacted.
func redactAttachment(a chatrelay.Attachment) chatrelay.Attachment {
	m, _ := chatrelay.RedactMessage(chatrelay.Message{Attachments: []chatrelay.Attachment{a}})
	return m.Attachments[0]
}

func (s *Server) handleAttachment(w http.ResponseWriter, r *http.Request, who principal) {
	as, err := s.attachments()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, f, err := as.OpenAttachment(r.Context(), who.thread, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer f.Close()
	extendDeadlines(w)
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		s.writeError(w, r, err)
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.writeError(w, r, err)
		return
	}
	if who.participant() {
		a = redactAttachment(a)
	}
	ctype, inline := chatrelay.ServedType(head[:n])
	disposition := "attachment"
	if inline {
		disposition = "inline"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	if cd := mime.FormatMediaType(disposition, map[string]string{"filename": a.Name}); cd != "" {
		h.Set("Content-Disposition", cd)
	} else {
		h.Set("Content-Disposition", disposition)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("Cache-Control", "private")
	h.Set("ETag", strconv.Quote(a.SHA256))
	rw := &rangeRefusal{ResponseWriter: w}
	http.ServeContent(rw, r, "", time.Time{}, f) // Range, If-Range, HEAD
	if rw.refused {
		// net/http answers a Range it cannot satisfy with a plain-text
		// 416; every error of the API is its JSON, with a code. The
		// Content-Range ("bytes */size") it set stays.
		h.Del("Content-Disposition")
		h.Del("ETag")
		s.writeError(w, r, chatrelay.Errorf(chatrelay.RangeNotSatisfiable, "the Range asks for bytes this file of %d bytes does not have, or does not parse", a.Size))
	}
}

// rangeRefusal passes an attachment's answer through, except a 416 from
// http.ServeContent, which it swallows (status and body) so that the
// handler answers the API's JSON error instead.
type rangeRefusal struct {
	http.ResponseWriter
	refused bool
}

func (rw *rangeRefusal) WriteHeader(status int) {
	if status == http.StatusRequestedRangeNotSatisfiable {
		rw.refused = true
		return
	}
	rw.ResponseWriter.WriteHeader(status)
}

func (rw *rangeRefusal) Write(b []byte) (int, error) {
	if rw.refused {
		return len(b), nil
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (rw *rangeRefusal) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// uploadSlots bound how many uploads take their bytes in at once to one
// fewer than the cores (one at least): a core is left for posts and
// streams however many clients upload. An upload holds a slot from the
// moment a read of its body returns bytes until it asks for more (while
// the store hashes and writes them), never while it waits for the
// network, a store's lock or its final fsync: a slow client holds none.
// Without the bound, 4 clients uploading without a pause took both cores
// of a 2-core server and posts' p99 grew from a few ms to 50 ms and more
// (docs/performance.md).
var uploadSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))

// pacedBody is an upload's body, read under uploadSlots.
type pacedBody struct {
	ctx  context.Context
	r    io.Reader
	held bool
}

func (p *pacedBody) Read(b []byte) (int, error) {
	p.release()
	n, err := p.r.Read(b)
	if n > 0 && err == nil {
		select {
		case uploadSlots <- struct{}{}:
			p.held = true
		case <-p.ctx.Done():
			return 0, p.ctx.Err()
		}
	}
	return n, err
}

// release gives the slot back, if the body holds one.
func (p *pacedBody) release() {
	if p.held {
		p.held = false
		<-uploadSlots
	}
}
