package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/chatrelay/chatrelay"
	"github.com/chatrelay/chatrelay/internal/samekey"
	"github.com/chatrelay/chatrelay/store"
)

// The v1 routes (contract Part 1, frozen: post, poll and the retired
// route) and the ticket that opens a stream.

func (s *Server) handleGone(w http.ResponseWriter, r *http.Request) {
	noteRefused(r, chatrelay.Gone)
	// "see" is the contract's frozen value; the words name the mounted path.
	writeJSON(w, http.StatusGone, errorBody{
		Error: "this route is retired; post with " + s.cfg.Prefix + chatrelay.PathPost,
		Code:  chatrelay.Gone, See: chatrelay.PathPost,
	})
}

// threadOf authenticates a request by its X-Chat-Token header. It touches
// nothing on disk. A ticket, which only streams accept, is refused, and so
// is a second X-Chat-Token: which thread it means is a guess (a proxy
// would join the two into one malformed value).
func threadOf(r *http.Request) (string, error) {
	tok := r.Header.Get("X-Chat-Token")
	if !chatrelay.ValidToken(tok) || len(r.Header.Values("X-Chat-Token")) > 1 {
		if tok == "" && query(r).Has("ticket") {
			if fileTicket(param(r, "ticket")) {
				return "", chatrelay.Errorf(chatrelay.InvalidTicket, "this ticket opens one file only; post and poll need X-Chat-Token")
			}
			return "", chatrelay.Errorf(chatrelay.InvalidTicket, "a ticket only opens a stream; post and poll need X-Chat-Token")
		}
		return "", chatrelay.Errorf(chatrelay.Unauthorized, "missing or malformed X-Chat-Token")
	}
	thread := chatrelay.ThreadOf(tok)
	noteThread(r, thread)
	return thread, nil
}

func (s *Server) handleTicket(w http.ResponseWriter, r *http.Request, p principal) {
	if len(s.tickets.key) == 0 {
		s.writeError(w, r, chatrelay.Errorf(chatrelay.NotFound, "this server issues no tickets"))
		return
	}
	file, err := parseTicketBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pid := ""
	if p.grant != nil {
		pid = p.grant.ID
	}
	t, exp := s.tickets.mint(p.thread, pid, file)
	writeJSON(w, http.StatusCreated, ticketAnswer{Success: true, Ticket: t, Thread: p.thread, ExpiresAt: exp, Attachment: file})
}

// parseTicketBody reads a ticket request's body: none (or {}) asks for a
// thread's ticket (Part 2), {"attachment": "at_…"} for a file ticket,
// which opens that one attachment's bytes and nothing else. The id is
// not looked up: a file ticket for an id its thread does not hold opens
// nothing (its download is 404 not_found, as for any such id). Any other
// member is refused (400 invalid_json), so that a misspelled
// "attachment" is never read as asking for the whole thread's ticket.
func parseTicketBody(w http.ResponseWriter, r *http.Request) (string, error) {
	data, err := readBody(w, r)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return "", err
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(data, &raw) != nil || raw == nil {
		return "", chatrelay.Errorf(chatrelay.InvalidJSON, "the body is not a JSON object")
	}
	for member := range raw {
		if member != "attachment" {
			return "", chatrelay.Errorf(chatrelay.InvalidJSON, "the body takes one member only, attachment (an attachment id, for a ticket that opens that one file); it has another")
		}
	}
	a, ok := raw["attachment"]
	if !ok || string(a) == "null" {
		return "", nil
	}
	var id string
	if json.Unmarshal(a, &id) != nil || !chatrelay.AttachmentIDPattern.MatchString(id) {
		return "", chatrelay.Errorf(chatrelay.InvalidAttachment, "attachment must be an attachment id (at_ and 12 lowercase hex)")
	}
	return id, nil
}

// postAnswer is the 201 of a post, fields in the contract's order.
type postAnswer struct {
	Success bool   `json:"success"`
	ID      string `json:"id"`
	Epoch   int64  `json:"epoch"`
	TS      string `json:"ts"`
	Thread  string `json:"thread"`
}

func (s *Server) handlePost(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	data, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := parsePost(data, who)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.post(r.Context(), limitKey(clientIP(r, s.cfg.Trusted)), who, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if e.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writePostAnswer(w, e, thread)
}

// post counts a checked post against the rate windows of the thread and of
// ipKey (limitKey's) and stores it. It is the one write path of browsers
// and participants, over HTTP and over the WebSocket. A post whose
// client_id the thread already holds is answered that message again
// (Entry.Replayed), or 409 client_id_conflict if it is another message,
// stores nothing and counts in no window, even a full one: over a full
// window it gets the answer a retry would get, never 429.
//
// Posts of a thread with the same client_id go one at a time on this
// server (s.repeats): a repeat sent while its first is still being stored
// waits for it and is answered as a repeat, where it would otherwise find
// the window's place the first holds taken and get 429 with a Retry-After
// of up to the whole window, for a message that was stored.
func (s *Server) post(ctx context.Context, ipKey string, who principal, p postBody) (store.Entry, error) {
	thread := who.thread
	if p.ClientID != "" {
		defer s.repeats.Enter(ctx, samekey.Key{thread, p.ClientID})()
	}
	m := store.NewMessage{Author: p.Kind, Text: p.Text, ClientID: p.ClientID, Attachments: p.Attachments}
	if who.participant() { // a device posts as the owner
		g := who.grant
		m.Author, m.AuthorName, m.Participant = g.Author(), g.Name, g.ID
	}
	if la, ok := s.store.(limitedAppender); ok {
		if e, done, err := la.AppendLimited(ctx, s.cfg.Limiter, thread, ipKey, m); done {
			return e, err
		}
	}
	settle, err := s.limiter.Take(ctx, thread, ipKey)
	if err != nil {
		if p.ClientID != "" && chatrelay.CodeOf(err) == chatrelay.RateLimited {
			if e, ok := store.StoredWith(ctx, s.store, thread, m.ClientID); ok {
				return store.ReplayOf(e, m)
			}
		}
		return store.Entry{}, err
	}
	stored := false
	defer func() { settle(stored) }() // a store that panicked stored nothing: its place is not held for ever
	e, err := s.store.Append(ctx, thread, m)
	stored = err == nil && !e.Replayed
	return e, err
}

// limitedAppender is a store that counts a post in the rate windows and
// stores it in one call, with the answers of the limiter's Take and then
// the store's Append as post makes them, nothing counted for a post
// refused or not stored (redisstore.Store: one script, one Redis round
// trip instead of two). done false: it cannot for this limiter or
// message, and did nothing.
type limitedAppender interface {
	AppendLimited(ctx context.Context, lim chatrelay.RateLimiter, thread, ip string, m store.NewMessage) (e store.Entry, done bool, err error)
}

func (s *Server) handlePoll(w http.ResponseWriter, r *http.Request, who principal) {
	thread := who.thread
	since, err := parseSince(param(r, "since"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := viewOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v = who.view(v)
	pg, err := v.read(r.Context(), s.store, thread, since)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	bp := pageBufs.Get().(*[]byte)
	b := appendPage((*bp)[:0], pg, v)
	writeBytes(w, http.StatusOK, b)
	if cap(b) <= 1<<20 { // a rare huge answer is not kept
		*bp = b[:0]
		pageBufs.Put(bp)
	}
}

// pageBufs recycles the buffers poll answers are assembled in: an answer
// is written (net/http copies or sends it) before its handler returns.
var pageBufs = sync.Pool{New: func() any { return new([]byte) }}

// limitFor is the page size of a read from cursor since: without a cursor,
// the newest 50 messages; with one, everything after it.
func limitFor(since int64) int {
	if since == 0 {
		return chatrelay.PollPage
	}
	return 0
}
