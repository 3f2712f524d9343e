package transport

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/lane"
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
	body := &laneBody{ctx: r.Context(), r: r.Body}
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

// background is the process's background-work lane (internal/lane):
// pushes (pusher.do) and uploads (laneBody) take a turn of it for each
// piece of CPU work they do beside the requests, so that together they
// never run on more than one fewer P than GOMAXPROCS (one at least): a P
// is left for posts and streams however many pushes are due and however
// many clients upload. Without it, 4 clients uploading without a pause
// took both cores of a 2-core server and posts' p99 grew from a few ms to
// 50 ms and more (docs/performance.md).
var background = lane.ForCores()

// uploadHold is the longest an upload's chunk holds its turn of the
// lane: a write the disk holds up (the flusher's wait for the span
// before, on a busy disk) or a store's round trip lets the turn go after
// this, for the pushes and the other uploads.
const uploadHold = 5 * time.Millisecond

// uploadStall is the longest an upload's read of its body may wait for
// its client under a turn of the lane: past it the turn is let go, and
// the upload reads without a turn (see laneBody).
const uploadStall = time.Millisecond

// laneBody is an upload's body, each chunk of it read, hashed and written
// by the store under a turn of the background lane: at most the lane's
// turns of uploads take their bytes in at once, and the others wait
// without reading, their bytes in the kernel's socket buffers and their
// clients held back by TCP's flow control. An upload holds its turn from
// the read of a chunk until it asks for the next one; it never holds it
// while it waits for a store's lock or its final fsync (the store's work
// after the last read), nor for long while it waits for its client: a
// read that waits longer than uploadStall lets the turn go, and the
// upload's next reads are made without a turn, only the chunks' hashing
// and writing under one (a client that does not keep up sends little a
// second, and costs little), until a read finds a whole chunk waiting
// (its client outpaces the server again).
type laneBody struct {
	ctx   context.Context
	r     io.Reader
	slow  bool   // its client did not keep up: reads are made without a turn
	leave func() // gives back the turn held, if any
}

func (p *laneBody) Read(b []byte) (int, error) {
	p.release()
	if p.slow {
		n, err := p.r.Read(b)
		if n == len(b) {
			p.slow = false
		}
		return n, p.enter(n, err)
	}
	leave, err := background.EnterFor(p.ctx, uploadHold)
	if err != nil {
		return 0, err
	}
	stall := time.AfterFunc(uploadStall, leave)
	n, err := p.r.Read(b)
	if !stall.Stop() { // the read waited for its client: the turn is gone (or going)
		leave()
		p.slow = true
		return n, p.enter(n, err)
	}
	if n > 0 {
		p.leave = leave
	} else {
		leave()
	}
	return n, err
}

// enter takes a turn of the lane for the n bytes a read without one
// returned (with err), and returns err, or the context's error if the
// upload ended while it waited.
func (p *laneBody) enter(n int, err error) error {
	if n == 0 {
		return err
	}
	leave, lerr := background.EnterFor(p.ctx, uploadHold)
	if lerr != nil {
		return lerr
	}
	p.leave = leave
	return err
}

// release gives the turn back, if the body holds one.
func (p *laneBody) release() {
	if p.leave != nil {
		p.leave()
		p.leave = nil
	}
}
