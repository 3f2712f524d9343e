package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
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

// extendDeadlines gives the request Config.TransferTime
// (chatrelay.DefaultTransferTime) to read its body and write its answer:
// the server's ReadTimeout and WriteTimeout (30 s) would cut a 10 MiB file
// on a slow link (a phone at 1 Mbit/s needs 80 s). A client that stalls
// holds a goroutine and a temp file (removed when it fails) at most that
// long.
func (s *Server) extendDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	at := time.Now().Add(s.cfg.TransferTime)
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
	if len(r.Header.Values("X-Filename")) > 1 { // as a token sent twice: a proxy may have read the other
		s.writeError(w, r, chatrelay.Errorf(chatrelay.InvalidAttachment, "X-Filename must name the file once"))
		return
	}
	max := s.cfg.MaxAttachmentBytes
	if r.ContentLength > max {
		s.writeError(w, r, store.TooLarge(max))
		return
	}
	if !s.uploads.Enter() {
		s.writeError(w, r, errShuttingDown)
		return
	}
	defer s.uploads.Leave()
	s.extendDeadlines(w)
	// Shutdown's abort cuts the read of an upload still being received
	// (its client stopped sending, or sends too slowly to end in time):
	// the upload fails, leaving nothing, its client is told to send it
	// again (not that it broke off), and the server stops.
	rc := http.NewResponseController(w)
	defer context.AfterFunc(s.abortCtx, func() { rc.SetReadDeadline(time.Now()) })()
	up := store.Upload{Name: name, Type: r.Header.Get("Content-Type"), Body: r.Body, Max: max, Work: uploadWork(r.Context()), After: s.afterUpload}
	if who.grant != nil {
		up.Grant = who.grant.ID // kept only if still active once the bytes are in
	}
	if who.participant() {
		up.By = who.grant.ID
	}
	a, err := as.PutAttachment(r.Context(), who.thread, up)
	if err != nil && s.abortCtx.Err() != nil && chatrelay.CodeOf(err) == chatrelay.InvalidAttachment {
		err = errShuttingDown
	} else if chatrelay.CodeOf(err) == chatrelay.InvalidAttachment && errors.Is(err, os.ErrDeadlineExceeded) {
		// Its body did not arrive within TransferTime (a link that
		// stalled): nothing was kept; the client sends it again. The
		// write deadline passed with the read's: the answer gets its own.
		rc.SetWriteDeadline(time.Now().Add(timeoutAnswerTime))
		err = &chatrelay.Error{Code: chatrelay.RequestTimeout, Retry: time.Second, Err: err,
			Message: "the file did not arrive in time: nothing was kept; send it again"}
	}
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
	var reader string // the owner's: every file; a participant's: its own uploads and those a message names
	if who.participant() {
		reader = who.grant.ID
	}
	a, f, err := as.OpenAttachment(r.Context(), who.thread, r.PathValue("id"), reader)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer f.Close()
	s.extendDeadlines(w)
	// Shutdown's abort cuts the write of a download still under way (its
	// client stopped reading, or reads too slowly to end in time), as it
	// cuts a stream's: the client resumes with a Range, and the server
	// stops within its deadline instead of waiting the transfer's 10 minutes.
	rc := http.NewResponseController(w)
	defer context.AfterFunc(s.abortCtx, func() { rc.SetWriteDeadline(time.Now()) })()
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
	if ir := r.Header.Get("If-Range"); ir != "" && ir != h.Get("ETag") {
		// The file is not the one the client holds a part of: it asked
		// for the whole file then, whatever the Range (RFC 9110, 13.1.5;
		// a date never matches, with no Last-Modified).
		r.Header.Del("Range")
	}
	if rg, ok := bytesRange(r.Header.Get("Range")); !ok {
		r.Header.Del("Range") // a unit it does not know: ignored (RFC 9110, 14.2)
	} else if rg != r.Header.Get("Range") {
		r.Header.Set("Range", rg)
	}
	if a.Size == 0 {
		// An empty file ignores Range: net/http serves a suffix of it
		// ("bytes=-1") as a 206 whose Content-Range ends before it starts
		// ("bytes 0--1/0"), and refuses one that does not parse.
		r.Header.Del("Range")
	}
	rw := &rangeRefusal{ResponseWriter: w}
	if rg, left := withoutEmptySuffixes(r.Header.Get("Range")); !left {
		// Refused by ServeContent after If-Match and If-None-Match
		// (412, 304 come first: RFC 9110, 13.2.2): a start past the end.
		r.Header.Set("Range", fmt.Sprintf("bytes=%d-", a.Size))
	} else if rg != r.Header.Get("Range") {
		r.Header.Set("Range", rg)
	}
	http.ServeContent(rw, r, "", time.Time{}, f) // Range, If-Range, HEAD
	if rw.failed {
		// net/http answers an If-Match the file does not match with a
		// 412 and no body; every error of the API is its JSON, with a
		// code, and carries none of the file's headers.
		h.Del("Content-Disposition")
		// The words name no ETag: a SHA-256 reads as a token to the
		// redaction of a participant's view; the header carries it.
		s.writeError(w, r, chatrelay.Errorf(chatrelay.PreconditionFailed, "If-Match names no version of this file: its ETag header names the one it has"))
		return
	}
	if rw.refused {
		// net/http answers a Range it cannot satisfy with a plain-text
		// 416; every error of the API is its JSON, with a code. The
		// Content-Range is "bytes */size" whatever the refusal: net/http
		// sets it for a Range past the file, not for one that does not parse.
		h.Del("Content-Disposition")
		h.Del("ETag")
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", a.Size))
		s.writeError(w, r, chatrelay.Errorf(chatrelay.RangeNotSatisfiable, "the Range asks for bytes this file of %d bytes does not have, or does not parse", a.Size))
	}
}

// bytesRange is a Range header with its unit written as net/http reads
// it, "bytes=" (a unit is compared without case: RFC 9110, 14.1); ok is
// false for a Range of another unit, which a server must ignore (14.2).
// A header with no unit at all is kept as it is (it does not parse: 416).
func bytesRange(h string) (rg string, ok bool) {
	unit, set, found := strings.Cut(h, "=")
	switch {
	case !found:
		return h, true
	case strings.EqualFold(strings.TrimSpace(unit), "bytes"):
		return "bytes=" + set, true
	}
	return "", false
}

// withoutEmptySuffixes is a Range header without its suffix ranges of no
// byte ("-0"), which satisfy nothing (RFC 9110, 14.1.1) but which
// net/http serves as a 206 whose Content-Range ends before it starts
// ("bytes 10-9/10"). left is false when nothing else is left, or when a
// range does not parse (rangeSpecParses): the Range is not satisfiable.
// A header that is no bytes Range is kept as it is.
func withoutEmptySuffixes(h string) (rg string, left bool) {
	set, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return h, true
	}
	var kept []string
	for spec := range strings.SplitSeq(set, ",") {
		spec = strings.Trim(spec, " \t")
		switch {
		case spec == "": // an empty list element (RFC 9110, 5.6.1)
			continue
		case !rangeSpecParses(spec):
			return "", false
		case strings.TrimLeft(spec, "-0") == "" && strings.HasPrefix(spec, "-"):
			continue // a suffix of no byte
		}
		kept = append(kept, clampPositions(spec))
	}
	if len(kept) == 0 {
		return "", false
	}
	return "bytes=" + strings.Join(kept, ","), true
}

// clampPositions is a range that parses (rangeSpecParses) with each
// position past 2^63-1 written as 2^63-1, which means the same for any
// file: a last-pos or a suffix at least as long as the file is its end
// or the whole file, a first-pos past the end a range no byte satisfies
// (RFC 9110, 14.1.2). net/http reads a position with strconv.ParseInt
// and takes one it cannot hold for a Range that does not parse (416).
func clampPositions(spec string) string {
	first, last, _ := strings.Cut(spec, "-")
	clamp := func(pos string) string {
		if _, err := strconv.ParseInt(pos, 10, 64); pos != "" && err != nil {
			return strconv.FormatInt(math.MaxInt64, 10)
		}
		return pos
	}
	return clamp(first) + "-" + clamp(last)
}

// rangeSpecParses reports whether spec is a range of RFC 9110's grammar:
// "first-last", "first-" or "-suffix", each position digits alone.
// net/http reads a position with strconv, which takes a sign too
// ("bytes=+1-2", "bytes=-+5"): such a Range does not parse (416).
func rangeSpecParses(spec string) bool {
	first, last, ok := strings.Cut(spec, "-")
	digits := func(s string) bool {
		return s != "" && strings.Trim(s, "0123456789") == ""
	}
	switch {
	case !ok:
		return false
	case first == "":
		return digits(last)
	default:
		return digits(first) && (last == "" || digits(last))
	}
}

// rangeRefusal passes an attachment's answer through, except a 416 or a
// 412 from http.ServeContent, which it swallows (status and body) so that
// the handler answers the API's JSON error instead.
type rangeRefusal struct {
	http.ResponseWriter
	refused bool // a 416
	failed  bool // a 412
}

func (rw *rangeRefusal) WriteHeader(status int) {
	switch status {
	case http.StatusRequestedRangeNotSatisfiable:
		rw.refused = true
		return
	case http.StatusPreconditionFailed:
		rw.failed = true
		return
	}
	rw.ResponseWriter.WriteHeader(status)
}

func (rw *rangeRefusal) Write(b []byte) (int, error) {
	if rw.refused || rw.failed {
		return len(b), nil
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (rw *rangeRefusal) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// background is the process's background-work lane (internal/lane):
// pushes (pusher.do) and uploads (uploadWork) take a turn of it for each
// piece of CPU work they do beside the requests, so that together they
// never run on more than one fewer P than GOMAXPROCS (one at least).
// Uploads also run their pieces (a chunk's hashing and writing) on the
// lane's low-priority threads, so that the kernel gives them only the
// cores the requests leave. Without the turns, 4 clients uploading
// without a pause took both cores of a 2-core server and posts' p99 grew
// from a few ms to 50 ms and more; with the turns alone it was still 3 to
// 5 times the p99 without uploads (docs/performance-log.md). A push's piece
// (about 90 µs of encryption) stays on its own goroutine: handing it to
// another thread costs a third as much again, and its measured effect on
// posts is within the noise.
var background = lane.ForCores()

// uploadHold is the longest an upload's chunk holds its turn of the
// lane: a write the disk holds up (the flusher's wait for the span
// before, on a busy disk) or a store's round trip lets the turn go after
// this, for the pushes and the other uploads.
const uploadHold = 5 * time.Millisecond

// afterUpload is an upload's store.Upload.After: work (a temp file's
// removal) runs on a goroutine under a turn of the background lane, so
// that the upload's answer waits for no turn. The goroutine is one of
// s.uploads, which Shutdown waits for; it waits for a turn until
// Shutdown's abort, and then runs the work in place. Once Shutdown began
// (s.uploads closed), the work runs in place at once. A process that
// ends before (Shutdown's deadline, a crash) leaves the temp file to the
// store's sweep.
//
// At most afterMax such pieces wait at once: past that, the upload's
// answer waits for its turn again, as it did before After, so that a
// client repeating a duplicate (an empty one needs no turn for its bytes)
// is held back by its own answers instead of piling up goroutines and
// temp files while the lane is busy.
func (s *Server) afterUpload(work func()) {
	if !s.uploads.Enter() {
		work()
		return
	}
	if s.afters.Add(1) > afterMax {
		s.afters.Add(-1)
		defer s.uploads.Leave()
		if uploadWork(s.abortCtx)(work) != nil {
			work()
		}
		return
	}
	go func() {
		defer s.uploads.Leave()
		defer s.afters.Add(-1)
		if uploadWork(s.abortCtx)(work) != nil {
			work()
		}
	}()
}

// afterMax is how many uploads' after-work (afterUpload) may wait for the
// lane at once.
const afterMax = 16

// uploadWork is an upload's store.Upload.Work: each chunk's hashing and
// writing waits for a turn of the background lane (or for ctx, the
// upload's request, to end) and runs on one of its low-priority threads.
// The body is read outside the turns, by the request's goroutine: an
// upload waiting for a turn holds one chunk read and reads no more, its
// next bytes held back in the kernel's socket buffers, and a client that
// sends slowly holds no turn while the server waits for it.
func uploadWork(ctx context.Context) func(func()) error {
	return func(work func()) error {
		leave, err := background.EnterFor(ctx, uploadHold)
		if err != nil {
			return err
		}
		defer leave()
		background.Run(work)
		return nil
	}
}
